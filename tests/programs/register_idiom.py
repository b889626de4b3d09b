"""The register-then-use-the-local idiom: ``A = ...; self.register("A", A)`` and the loop
goes on with the local ``A``, its views and persistent requests made on its buffers, as
a port of an mpi4py program does. After a restore the checkpoint's state must be in
that very object (issue 40, item 3)."""
import array
import collections

import numpy as np

import ftactors as ft


class Jacobi(ft.Rank):
    """Jacobi iteration for Laplace's equation on an ``n`` x ``n`` grid split in rows,
    halos exchanged with persistent requests on views of the registered grid (as the
    mpi4py tutorial's port does), until the largest update is below ``tol``."""

    async def main(self, n=24, tol=1e-3, max_iterations=600):
        comm, rank, size = self.comm, self.rank, self.size
        rows = n // size + (rank < n % size)
        A = np.zeros((rows + 2, n))
        if rank == 0:
            A[0, :] = 1.0  # the hot edge: the top row of the whole grid
        self.register("A", A)
        up = rank - 1 if rank > 0 else ft.PROC_NULL
        down = rank + 1 if rank < size - 1 else ft.PROC_NULL
        requests = [comm.Send_init(A[1], up, tag=1), comm.Recv_init(A[0], up, tag=2),
                    comm.Send_init(A[-2], down, tag=2), comm.Recv_init(A[-1], down, tag=1)]
        new = np.empty((rows, n - 2))
        done = max_iterations
        async for it in self.iterations(max_iterations):
            ft.Prequest.Startall(requests)
            await ft.Prequest.Waitall(requests)
            new[:] = 0.25 * (A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
            change = float(np.abs(new - A[1:-1, 1:-1]).max())
            A[1:-1, 1:-1] = new
            if await comm.allreduce(change, op=ft.MAX) < tol:
                done = it + 1
                break
        return {"iterations": done, "grid": A[1:-1].copy()}


def jacobi_reference(n=24, tol=1e-3, max_iterations=600):
    """The whole grid and the iteration count, in plain numpy."""
    A = np.zeros((n + 2, n))
    A[0, :] = 1.0
    for it in range(max_iterations):
        new = 0.25 * (A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
        change = float(np.abs(new - A[1:-1, 1:-1]).max())
        A[1:-1, 1:-1] = new
        if change < tol:
            return it + 1, A[1:-1]
    return max_iterations, A[1:-1]


class MatVec(ft.Rank):
    """Repeated products with a shift matrix split in row blocks: each step gathers the
    whole vector into a registered buffer (``Allgather``) and multiplies; the unit vector
    moves one index per step."""

    async def main(self, m=8, steps=20):
        comm, rank, size = self.comm, self.rank, self.size
        n = m * size
        shift = np.eye(n, k=-1)[rank * m:(rank + 1) * m]  # my rows of the shift matrix
        x = np.zeros(m)
        if rank == 0:
            x[0] = 1.0
        whole = np.zeros(n)
        self.register("x", x)
        self.register("whole", whole)
        async for _ in self.iterations(steps):
            await comm.Allgather(x, whole)
            x[:] = shift @ whole
        await comm.Allgather(x, whole)
        return whole.copy()


class Containers(ft.Rank):
    """Every mutable container kind registered and then used through its local: a list,
    a dict, a set, a deque, a bytearray, an ``array.array``, a Fortran-order array and a
    view of a larger array (the loop writes through its base); a ring exchange each
    iteration feeds them."""

    async def main(self, steps=16):
        comm, rank, size = self.comm, self.rank, self.size
        history = []
        counts = {}
        seen = set()
        window = collections.deque(maxlen=3)
        log = bytearray()
        sums = array.array("d")
        grid = np.asfortranarray(np.arange(12.0).reshape(3, 4) + rank)
        padded = np.zeros(8)
        inner = padded[2:6]
        for name, value in [("history", history), ("counts", counts), ("seen", seen),
                            ("window", window), ("log", log), ("sums", sums),
                            ("grid", grid), ("inner", inner)]:
            self.register(name, value)
        async for i in self.iterations(steps):
            got = await comm.sendrecv(float(grid.sum() + padded.sum()), dest=(rank + 1) % size,
                                      source=(rank - 1) % size)
            history.append(got)
            counts[i % 3] = counts.get(i % 3, 0) + 1
            seen.add(int(got) % 7)
            window.append(got)
            log += bytes([int(got) % 256])
            sums.append(sum(window))
            grid[:, i % 4] += got * 1e-3
            padded[2 + i % 4] += got * 1e-2  # through the base: the view sees it
        return {"history": history, "counts": counts, "seen": sorted(seen),
                "window": list(window), "log": bytes(log), "sums": list(sums),
                "grid": grid.copy(), "padded": padded.copy(),
                "fortran": grid.flags.f_contiguous and inner.base is padded}


def containers_reference(size, steps=16):
    """``Containers``' results on ``size`` ranks, in plain Python and numpy."""
    state = []
    for rank in range(size):
        state.append({"history": [], "counts": {}, "seen": set(),
                      "window": collections.deque(maxlen=3), "log": bytearray(),
                      "sums": [], "grid": np.asfortranarray(np.arange(12.0).reshape(3, 4) + rank),
                      "padded": np.zeros(8)})
    for i in range(steps):
        sent = [float(s["grid"].sum() + s["padded"].sum()) for s in state]
        for rank, s in enumerate(state):
            got = sent[(rank - 1) % size]
            s["history"].append(got)
            s["counts"][i % 3] = s["counts"].get(i % 3, 0) + 1
            s["seen"].add(int(got) % 7)
            s["window"].append(got)
            s["log"] += bytes([int(got) % 256])
            s["sums"].append(sum(s["window"]))
            s["grid"][:, i % 4] += got * 1e-3
            s["padded"][2 + i % 4] += got * 1e-2
    return [{**s, "seen": sorted(s["seen"]), "window": list(s["window"]),
             "log": bytes(s["log"]), "fortran": True} for s in state]


class Immutables(ft.Rank):
    """A float and a tuple registered and then rebound through their locals, with the
    attribute kept up to date (right in a first life; after a restore the locals are
    what the code before the loop set, which no restore can write into)."""

    async def main(self, steps=12):
        comm, rank, size = self.comm, self.rank, self.size
        total = 0.0
        self.register("total", total)
        extremes = (0.0, 0.0)
        self.register("extremes", extremes)
        async for i in self.iterations(steps):
            got = await comm.sendrecv(total + rank + i, dest=(rank + 1) % size,
                                      source=(rank - 1) % size)
            total += got
            extremes = (min(extremes[0], -got), max(extremes[1], got))
            self.total, self.extremes = total, extremes
        return {"total": total, "extremes": extremes}


class Growing(ft.Rank):
    """A registered array the loop replaces by a longer one (``np.append``) and keeps
    using through its local: a restore cannot write the checkpoint's longer array into
    the program's first one."""

    async def main(self, steps=10):
        comm, rank, size = self.comm, self.rank, self.size
        seen = np.zeros(0)
        self.register("seen", seen)
        async for i in self.iterations(steps):
            got = await comm.sendrecv(float(rank + i), dest=(rank + 1) % size,
                                      source=(rank - 1) % size)
            seen = np.append(seen, got)
            self.seen = seen
        return seen


class TimedLoop(ft.Rank):
    """OSU's timing idiom: the loop starts its clock at ``i == skip`` and the code
    after the loop reads it."""

    async def main(self, skip=3, loop=12):
        comm, rank = self.comm, self.rank
        buf = np.zeros(4)
        async for i in self.iterations(skip + loop):
            if i == skip:
                t_start = ft.Wtime()
            if rank == 0:
                await comm.Send(buf, 1, 1)
                await comm.Recv(buf, 1, 1)
            else:
                await comm.Recv(buf, 0, 1)
                await comm.Send(buf, 0, 1)
        return ft.Wtime() - t_start
