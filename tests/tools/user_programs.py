"""Small user programs for the programs-by-reference tests, each with one property (or
one fault-tolerance bug) that a test names it for."""
import numpy as np

import ftactors as ft


class Counter(ft.Rank):
    """``main(start, step=1, iterations=6)``: a registered sum; right under any protocol."""

    async def main(self, start, step=1, iterations=6):
        self.register("total", float(start))
        async for i in self.iterations(iterations):
            self.total = await self.comm.allreduce(self.total * 0.5 + step + i)
        return self.total


class Verified(Counter):
    """Counter with a verify hook that wants every rank to agree and a total above 0
    (a wrong answer as an AssertionError)."""

    @staticmethod
    def verify(results, reference):
        assert len(set(results)) == 1, f"ranks disagree: {results}"
        return results[0] > 0


class MethodVerify(Counter):
    """A verify hook written as a plain method: refused (it has no rank to run on)."""

    def verify(self, results, reference):
        return True


class Noisy(ft.Rank):
    """Returns a timing: never bit-identical, right by ``close``."""

    async def main(self):
        import time
        return {"value": 1.0, "time": time.perf_counter()}


def close(results, reference):
    """``--check`` for Noisy: the values, not the timings."""
    return [r["value"] for r in results] == [r["value"] for r in reference]


class PreLoop(ft.Rank):
    """Bug: the code before the loop computes ``offset`` from registered state, which a
    restore changes."""

    async def main(self, iterations=12):
        import time
        started = time.perf_counter()  # differs in every run: not the cause
        self.register("total", 0.0)
        offset = self.total + 1.0
        async for i in self.iterations(iterations):
            self.total = await self.comm.allreduce(self.total * 0.5 + offset + i)
        return self.total if started else None


class Unused(ft.Rank):
    """Right, though the code before the loop reads registered state (into ``seen``,
    which a restore changes): nothing after the loop uses it."""

    async def main(self, iterations=12):
        self.register("total", 0.0)
        seen = self.total + 1.0
        async for i in self.iterations(iterations):
            self.total = await self.comm.allreduce(self.total * 0.5 + i)
        return self.total if seen else None


class SplitEachIteration(ft.Rank):
    """Right: a communicator split anew in every iteration (a different split each
    time), and an allreduce on it."""

    async def main(self, iterations=10):
        comm, n, r = self.comm, self.size, self.rank
        self.register("acc", 0.0)
        async for it in self.iterations(iterations):
            sub = await comm.split(color=(r + it) % 2, key=(r * 7 + it) % n)
            self.acc += await sub.allreduce(float(self.acc + r + it))
        return self.acc


class IssendRing(ft.Rank):
    """Right: every rank ``issend``s to its right neighbour, then receives from its left
    one (a blocking receive), in every iteration."""

    async def main(self, iterations=14):
        comm, n, r = self.comm, self.size, self.rank
        self.register("acc", 0.0)
        async for it in self.iterations(iterations):
            req = comm.issend(float(it * r), dest=(r + 1) % n, tag=9)
            self.acc += await comm.recv(source=(r - 1) % n, tag=9)
            await req.wait()
        return self.acc


class Arrival(ft.Rank):
    """Bug: rank 0 keeps the order messages arrive in (``ANY_SOURCE``)."""

    async def main(self, iterations=4):
        self.register("order", [])
        async for i in self.iterations(iterations):
            if self.rank == 0:
                for _ in range(self.size - 1):
                    self.order.append(await self.comm.recv(source=ft.ANY_SOURCE, tag=i))
            else:
                await self.comm.send(self.rank, dest=0, tag=i)
            await self.comm.barrier()
        return list(self.order)


class Cached(ft.Rank):
    """Bug: a local array, changed in place in every iteration, is not registered."""

    async def main(self, iterations=8):
        acc = np.zeros(3)
        async for i in self.iterations(iterations):
            acc += await self.comm.allreduce(float(i))
        return acc.tolist()


class Rebound(ft.Rank):
    """Bug: a local number carried across iterations (rebound each time), not registered,
    next to a recomputed one (``step``) that is fine."""

    async def main(self, iterations=8):
        count, step = 0.0, 0.0
        async for i in self.iterations(iterations):
            step = await self.comm.allreduce(float(i))
            count = count + step
        return count


def not_a_rank():
    """Not a program."""


def _rows_of(rank, size, n):
    """HeatRing's rows ``first .. last-1`` of ``rank``."""
    return rank * n // size, (rank + 1) * n // size


async def _halo(cart, u, left, right):
    """Fill HeatRing's halo rows of ``u`` from the neighbours on the ring."""
    top, bottom = np.empty(u.shape[1]), np.empty(u.shape[1])
    reqs = [cart.Irecv(top, source=left, tag=7), cart.Irecv(bottom, source=right, tag=8),
            cart.Isend(np.ascontiguousarray(u[-2]), dest=right, tag=7),
            cart.Isend(np.ascontiguousarray(u[1]), dest=left, tag=8)]
    await ft.waitall(reqs)
    u[0], u[-1] = top, bottom


class HeatRing(ft.Rank):
    """Right, and shaped like a user's solver rather than the project's apps: explicit
    heat diffusion on a periodic ring of row blocks (``Create_cart`` + ``Shift``), halos by
    the buffer API (``Sendrecv`` before the loop, ``Irecv``/``Isend`` in it), collectives
    before the loop (a bcast of parameters, an allgather of block sizes, a ``split``), a
    ``MAX`` ``Allreduce`` convergence break, an allreduce on the sub-communicator every
    iteration and a gather after the loop; odd rank counts give unequal blocks."""

    async def main(self, n=23, cols=64, steps=30, tol=1e-12):
        comm = self.comm
        params = await comm.bcast({"alpha": 0.2, "seed": 11} if self.rank == 0 else None, root=0)
        first, last = _rows_of(self.rank, self.size, n)
        sizes = await comm.allgather(last - first)
        assert sum(sizes) == n
        parity = await comm.split(color=self.rank % 2, key=-self.rank)
        cart = await comm.Create_cart([self.size], periods=[True])
        left, right = cart.Shift(0, 1)
        rng = np.random.default_rng(params["seed"] + first)
        self.register("u", None if self.restored else np.vstack(
            [np.zeros(cols), rng.random((last - first, cols)), np.zeros(cols)]))
        self.register("hist", [])
        # before the loop: a halo exchange by Sendrecv (runs again after a restore)
        top = np.empty(cols)
        await cart.Sendrecv(np.ascontiguousarray(self.u[-2]), dest=right, sendtag=3,
                            recvbuf=top, source=left, recvtag=3)
        self.u[0] = top
        async for it in self.iterations(steps):
            await _halo(cart, self.u, left, right)
            u = self.u
            new = u[1:-1] + params["alpha"] * (u[:-2] + u[2:] + np.roll(u[1:-1], 1, axis=1)
                                               + np.roll(u[1:-1], -1, axis=1) - 4 * u[1:-1])
            change = np.array([float(np.abs(new - u[1:-1]).max())])
            u[1:-1] = new
            worst = np.empty(1)
            await comm.Allreduce(change, worst, op=ft.MAX)
            part = await parity.allreduce(float(u[1:-1].sum()))
            self.hist.append((float(worst[0]), part))
            if worst[0] < tol:
                break
        sums = await comm.gather(float(self.u[1:-1].sum()), root=0)
        total = await comm.bcast(sum(sums) if self.rank == 0 else None, root=0)
        return {"total": total, "hist": list(self.hist), "rows": sizes}


class Grid2D(ft.Rank):
    """Right: a user's 2-D Jacobi on a Cartesian grid (dims from the rank count, odd ones
    too), halos by persistent requests built before the loop and restarted each
    iteration (Startall/Waitall), prefix sums by Scan/Exscan, a Reduce_scatter_block of
    per-rank counters, a message of varying length sized by Probe + Get_count (which
    found that a probe counted the pickle, not the entries), a convergence break, and a
    Reduce to root after the loop."""

    async def main(self, n=12, steps=25, tol=1e-9):
        comm = self.comm
        size = self.size
        px = max(d for d in range(1, size + 1) if size % d == 0 and d * d <= size)
        cart = await comm.Create_cart([size // px, px], periods=[False, False])
        (up, down), (left, right) = cart.Shift(0, 1), cart.Shift(1, 1)
        r = cart.Get_rank()
        self.register("u", None if self.restored else
                      np.random.default_rng(r).random((n + 2, n + 2)))
        self.register("trace", [])
        # persistent halo requests on fixed buffers, made before the loop
        sbuf = {k: np.empty(n) for k in ("u", "d", "l", "r")}
        rbuf = {k: np.zeros(n) for k in ("u", "d", "l", "r")}
        reqs = [cart.Send_init(sbuf["u"], up, 1), cart.Recv_init(rbuf["d"], down, 1),
                cart.Send_init(sbuf["d"], down, 2), cart.Recv_init(rbuf["u"], up, 2),
                cart.Send_init(sbuf["l"], left, 3), cart.Recv_init(rbuf["r"], right, 3),
                cart.Send_init(sbuf["r"], right, 4), cart.Recv_init(rbuf["l"], left, 4)]
        async for it in self.iterations(steps):
            u = self.u
            sbuf["u"][:] = u[1, 1:-1]; sbuf["d"][:] = u[-2, 1:-1]
            sbuf["l"][:] = u[1:-1, 1]; sbuf["r"][:] = u[1:-1, -2]
            ft.Prequest.Startall(reqs)
            await ft.Prequest.Waitall(reqs)
            if up != ft.PROC_NULL: u[0, 1:-1] = rbuf["u"]
            if down != ft.PROC_NULL: u[-1, 1:-1] = rbuf["d"]
            if left != ft.PROC_NULL: u[1:-1, 0] = rbuf["l"]
            if right != ft.PROC_NULL: u[1:-1, -1] = rbuf["r"]
            new = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
            delta = float(np.abs(new - u[1:-1, 1:-1]).max())
            u[1:-1, 1:-1] = new
            # prefix sums of a per-rank count, as a user numbers rows across ranks
            mine = np.array([it + r], dtype=np.int64)
            inc, exc = np.zeros(1, np.int64), np.zeros(1, np.int64)
            await cart.Scan(mine, inc)
            await cart.Exscan(mine, exc)
            counts = np.arange(size, dtype=np.int64) * (it + 1) + r
            got = np.zeros(1, np.int64)
            await cart.Reduce_scatter_block(counts, got)
            # a message whose length the receiver learns by probing
            payload = np.full(1 + (it + r) % 5, float(r))
            dest, src = (r + 1) % size, (r - 1) % size
            sreq = cart.Isend(payload, dest=dest, tag=9)
            st = ft.Status()
            await cart.Probe(source=src, tag=9, status=st)
            buf = np.empty(st.Get_count(ft.DOUBLE))
            await cart.Recv(buf, source=src, tag=9)
            await sreq.Wait()
            worst = await cart.allreduce(delta, op=ft.MAX)
            self.trace.append((worst, int(inc[0]), int(exc[0]) if r else 0, int(got[0]),
                               len(buf), float(buf.sum())))
            if worst < tol:
                break
        for q in reqs:
            q.Free()
        total = await cart.reduce(float(self.u[1:-1, 1:-1].sum()), op=ft.SUM, root=0)
        total = await cart.bcast(total, root=0)
        return {"total": total, "trace": list(self.trace)}


STEPS = []  # ModuleHistory's log of its step sizes, outside any rank


class ModuleHistory(ft.Rank):
    """Bug: the loop keeps its step history in a module-level list, which no checkpoint
    holds and which carries over from one run to the next in the same process."""

    async def main(self, iterations=6):
        self.register("x", 1.0)
        async for _ in self.iterations(iterations):
            STEPS.append(0.5 ** len(STEPS))
            self.x += await self.comm.allreduce(STEPS[-1])
        return self.x


class Rebinds(ft.Rank):
    """Bug: the loop rebinds the local that ``register`` returned, so ``self.x`` keeps its
    first value and every checkpoint saves that."""

    async def main(self, iterations=8):
        x = self.register("x", np.zeros(4) + self.rank)
        async for _ in self.iterations(iterations):
            x = x * 0.5 + await self.comm.allreduce(float(x.sum()))
        return x.tolist()


class CountsItsSteps(ft.Rank):
    """Bug: the loop ends when an attribute the loop counts up, and no checkpoint holds,
    reaches ``steps``; a rank restarted alone (GroupCoordination) counts from 0 again at
    its checkpoint and turns on after its neighbours finished, waiting in its ring
    receive for a message a finished rank never sends. The receive is a wildcard
    (``ANY_SOURCE``, one message per iteration: the order cannot differ), which is not
    the cause."""

    async def main(self, steps=8):
        comm, n, r = self.comm, self.size, self.rank
        self.register("acc", 0.0)
        self.counted = 0
        async for it in self.iterations(10 * steps):
            await comm.send(float(it + r), dest=(r + 1) % n, tag=3)
            self.acc += await comm.recv(source=ft.ANY_SOURCE, tag=3)
            self.counted += 1
            if self.counted == steps:
                break
        return self.acc
