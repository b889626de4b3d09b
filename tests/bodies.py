"""Rank programs exercised by the conformance suite on every transport.

Each class is a complete program; tests run it with ``ft.run`` and check the results.
They live in a module of their own so that the Ray transport can ship them by value.
"""
import pickle

import numpy as np

import ftactors as ft


class Ring(ft.Rank):
    async def main(self, rounds):
        comm, right, left = self.comm, (self.rank + 1) % self.size, (self.rank - 1) % self.size
        token = 0
        for _ in range(rounds):
            if self.rank == 0:
                await comm.send(token + 1, dest=right)
                token = await comm.recv(source=left)
            else:
                token = await comm.recv(source=left)
                await comm.send(token + 1, dest=right)
        return token


class Flood(ft.Rank):
    """Rank 0 sends many messages to rank 1 as fast as it can; order must hold."""

    async def main(self, count):
        if self.rank == 0:
            for i in range(count):
                await self.comm.send(i, dest=1, tag=i % 7)
            reqs = [self.comm.isend(("i", i), dest=1, tag=99) for i in range(count)]
            await ft.waitall(reqs)
            return None
        if self.rank == 1:
            got = [await self.comm.recv(source=0, tag=ft.ANY_TAG) for _ in range(count)]
            more = [await self.comm.irecv(source=0, tag=99).wait() for _ in range(count)]
            return got, [i for _, i in more]
        return None


class TagMatching(ft.Rank):
    async def main(self):
        if self.rank == 0:
            await self.comm.send("A", dest=1, tag=1)
            await self.comm.send("B", dest=1, tag=2)
            await self.comm.send("C", dest=1, tag=1)
            return None
        if self.rank == 1:
            b = await self.comm.recv(source=0, tag=2)
            a = await self.comm.recv(source=0, tag=1)
            c = await self.comm.recv(source=ft.ANY_SOURCE, tag=ft.ANY_TAG)
            return [b, a, c]
        return None


class AnySource(ft.Rank):
    async def main(self):
        if self.rank == 0:
            seen = []
            for _ in range(self.size - 1):
                st = ft.Status()
                obj = await self.comm.recv(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st)
                seen.append((st.source, st.tag, st.count, obj, len(pickle.dumps(obj, protocol=5))))
            return seen
        await self.comm.send({"from": self.rank}, dest=0, tag=10 + self.rank)
        return None


class Probing(ft.Rank):
    async def main(self):
        comm = self.comm
        if self.rank == 1:
            await comm.recv(source=0, tag=0)          # wait until rank 0 has iprobed
            await comm.send(np.arange(5), dest=0, tag=7)
            return None
        if self.rank == 0:
            before = comm.iprobe(source=1, tag=7)
            await comm.send("go", dest=1, tag=0)
            st = ft.Status()
            await comm.probe(source=1, tag=ft.ANY_TAG, status=st)
            st2 = ft.Status()
            still_there = comm.iprobe(source=ft.ANY_SOURCE, tag=7, status=st2)
            value = await comm.recv(source=1, tag=7)
            after = comm.iprobe(source=1, tag=7)
            return before, (st.source, st.tag, st.count), (still_there, st2.source), value.tolist(), after
        return None


class NonBlocking(ft.Rank):
    async def main(self):
        comm = self.comm
        if self.rank == 0:
            req = comm.irecv(source=1, tag=3)
            early = req.test()
            await comm.send("ping", dest=1, tag=1)
            st = ft.Status()
            value = await req.wait(st)
            again = req.test()
            return early, value, (st.source, st.tag), again
        if self.rank == 1:
            await comm.recv(source=0, tag=1)
            await ft.waitall([comm.isend("pong", dest=0, tag=3)])
        return None


class SendRecvShift(ft.Rank):
    async def main(self):
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        st = ft.Status()
        got = await self.comm.sendrecv(self.rank * 100, dest=right, sendtag=5,
                                       source=left, recvtag=5, status=st)
        return got, st.source


ARRAYS = {
    "f64": np.linspace(0, 1, 17).reshape(17, 1),
    "i32": np.arange(24, dtype=np.int32).reshape(2, 3, 4),
    "c128": np.array([1 + 2j, 3 - 4j]),
    "bool": np.array([True, False, True]),
    "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "large": np.arange(2**17, dtype=np.float64),            # 1 MiB: out-of-band
    "large_u8": (np.arange(3 * 2**20) % 251).astype(np.uint8),
}


class Arrays(ft.Rank):
    async def main(self):
        if self.rank == 0:
            for name, arr in ARRAYS.items():
                await self.comm.send(arr, dest=1, tag=1)
            return None
        if self.rank == 1:
            out = {}
            for name in ARRAYS:
                arr = await self.comm.recv(source=0, tag=1)
                out[name] = (arr.dtype.str, arr.shape, arr.flags.writeable, arr.copy())
            return out
        return None


class Collectives(ft.Rank):
    async def main(self):
        comm, r, n = self.comm, self.rank, self.size
        out = {}
        await comm.barrier()
        out["bcast"] = [await comm.bcast({"root": root} if r == root else None, root=root)
                        for root in range(n)]
        big = np.arange(2**16, dtype=np.float64) if r == n - 1 else None
        got = await comm.bcast(big, root=n - 1)
        out["bcast_big"] = (float(got.sum()), got.flags.writeable)
        vec = np.arange(4, dtype=np.int64) + r
        for op in (ft.SUM, ft.PROD, ft.MIN, ft.MAX, ft.LAND, ft.LOR, ft.BAND, ft.BOR):
            out[f"reduce_{op.name}"] = await comm.reduce(vec, op=op, root=n - 1)
            out[f"allreduce_{op.name}"] = await comm.allreduce(vec, op=op)
            out[f"allreduce_num_{op.name}"] = await comm.allreduce(r + 1, op=op)
        out["fold"] = await comm.allreduce(str(r), op=lambda a, b: f"({a}+{b})")
        floats = np.sin(np.arange(8) + r) * 1e3
        total = await comm.allreduce(floats)
        at_root = await comm.reduce(floats, root=0)
        out["reduce_is_allreduce"] = at_root is None or bool(np.array_equal(at_root, total))
        out["gather"] = [await comm.gather(r * r, root=root) for root in range(n)]
        out["scatter"] = await comm.scatter([i * 10 for i in range(n)] if r == 1 % n else None,
                                            root=1 % n)
        out["allgather"] = await comm.allgather(("r", r))
        out["alltoall"] = await comm.alltoall([(r, j) for j in range(n)])
        await comm.barrier()
        return out


class SplitDup(ft.Rank):
    async def main(self):
        comm = self.comm
        sub = await comm.split(color=self.rank % 2, key=-self.rank)
        none = await comm.split(color=ft.UNDEFINED if self.rank == 0 else 0, key=self.rank)
        dup = await comm.dup()
        # same tag on three communicators: no cross-matching
        right = (dup.rank + 1) % dup.size
        await dup.send(("dup", self.rank), dest=right, tag=4)
        await comm.send(("world", self.rank), dest=right, tag=4)
        from_world = await comm.recv(source=ft.ANY_SOURCE, tag=4)
        from_dup = await dup.recv(source=ft.ANY_SOURCE, tag=4)
        total = await sub.allreduce(self.rank)
        members = await sub.allgather(self.rank)
        return {
            "sub": (sub.rank, sub.size, members, total),
            "none": None if none is None else (none.rank, none.size),
            "world": from_world, "dup": from_dup,
        }


class BadInput(ft.Rank):
    """Every misuse raises the documented error inside main; collect the messages."""

    async def main(self):
        import threading
        comm, errors = self.comm, {}

        async def catch(name, coro_or_call):
            try:
                res = coro_or_call()
                if hasattr(res, "__await__"):
                    await res
            except Exception as exc:
                errors[name] = (type(exc).__name__, str(exc))

        await catch("dest", lambda: comm.send(1, dest=self.size))
        await catch("dest_neg", lambda: comm.send(1, dest=-1))
        await catch("source", lambda: comm.recv(source=self.size + 3))
        await catch("tag", lambda: comm.send(1, dest=0, tag=-5))
        await catch("recv_tag", lambda: comm.recv(source=0, tag=-7))
        await catch("pickle", lambda: comm.send(threading.Lock(), dest=0))
        await catch("isend", lambda: comm.isend(1, dest=self.size + 1))
        await catch("root", lambda: comm.bcast(1, root=self.size))
        await catch("scatter", lambda: comm.scatter([1], root=0) if self.rank == 0 else None)
        await catch("color", lambda: comm.split(color=-3))
        return errors


class Raises(ft.Rank):
    async def main(self):
        await self.comm.barrier()
        if self.rank == 2:
            explode_here()
        await self.comm.recv(source=2)  # would wait forever: the run must not hang
        return self.rank


def explode_here():
    raise ValueError("rank two cannot go on")


class Iterating(ft.Rank):
    """A loop with safe points, exchanging with neighbours each iteration."""

    async def main(self, n):
        total = 0
        async for it in self.iterations(n):
            total += await self.comm.allreduce(it)
        return total


class SelfTalk(ft.Rank):
    """Messages a rank sends to itself, as MPI allows: each iteration one received after
    its send, one whose receive was posted before its send, and one received in the next
    iteration, across the safe point. Returns every message in the order received."""

    async def main(self, iterations):
        comm, r = self.comm, self.rank
        self.register("got", [])
        async for it in self.iterations(iterations):
            if it > 0:
                self.got.append(await comm.recv(source=r, tag=3))
            posted = comm.irecv(source=r, tag=2)
            req = comm.isend((r, it, "now"), dest=r, tag=1)
            comm.isend((r, it, "posted"), dest=r, tag=2)
            self.got.append(await comm.recv(source=r, tag=1))
            await req.wait()
            self.got.append(await posted.wait())
            comm.isend((r, it, "next"), dest=r, tag=3)
        self.got.append(await comm.recv(source=r, tag=3))
        return list(self.got)


HALO_COLS = 13_000
"""Columns of ``BigHalos``' grid: a row of float64 is 104 000 bytes, over the 100 KiB from
which buffers travel out-of-band (``LARGE_BUFFER_BYTES``)."""


class BigHalos(ft.Rank):
    """A periodic 1-D split of a 2-D stencil whose halo rows (104 000 bytes each) go
    out-of-band, plus each iteration a mixed message: a dict of small objects and a big
    array (an out-of-band buffer inside a pickled container). Everything received goes
    into the grid, so a lost, stale or doubled message changes the answer; returns the
    grid (registered: it survives failures)."""

    async def main(self, iterations):
        comm, r, n = self.comm, self.rank, self.size
        up, down = (r - 1) % n, (r + 1) % n
        cols = np.arange(HALO_COLS, dtype=np.float64)
        self.register("grid", np.stack([cols * (r + 1) + row for row in range(3)]))
        async for it in self.iterations(iterations):
            g = self.grid
            above = await comm.sendrecv(g[-1], dest=down, sendtag=1, source=up, recvtag=1)
            below = await comm.sendrecv(g[0], dest=up, sendtag=2, source=down, recvtag=2)
            mixed = await comm.sendrecv({"it": it, "from": r, "big": g[1] * 0.5, "tag": "m"},
                                        dest=down, sendtag=3, source=up, recvtag=3)
            assert (mixed["it"], mixed["from"], mixed["tag"]) == (it, up, "m"), mixed
            padded = np.vstack([above, g, below])
            new = (padded[:-2] + padded[1:-1] + padded[2:]) / 3.0
            new[1] += mixed["big"] * 1e-3
            self.grid = new
        return self.grid


def self_talk_result(rank, iterations):
    """What ``SelfTalk`` returns on ``rank``."""
    out = []
    for it in range(iterations):
        if it > 0:
            out.append((rank, it - 1, "next"))
        out += [(rank, it, "now"), (rank, it, "posted")]
    return out + [(rank, iterations - 1, "next")]


class Counting(ft.Protocol):
    """Test mixin: counts every application message in and out, per context."""

    protocol_name = "counting"

    async def on_start(self):
        self._counting = {"sent": 0, "received": 0, "contexts": set()}
        await super().on_start()

    def on_send(self, env):
        self._counting["sent"] += 1
        self._counting["contexts"].add(env.comm)
        return super().on_send(env)

    def on_receive(self, env):
        self._counting["received"] += 1
        return super().on_receive(env)


class Piggyback(ft.Protocol):
    """Test mixin: piggybacks a per-rank counter; receivers check it grows per sender."""

    protocol_name = "piggyback"

    async def on_start(self):
        self._piggyback = {"next": 0, "last": {}, "seen": 0, "out_of_order": 0}
        await super().on_start()

    def on_send(self, env):
        env = super().on_send(env)
        state = self._piggyback
        env.piggyback = dict(env.piggyback or {}, piggyback=state["next"])
        state["next"] += 1
        return env

    def on_receive(self, env):
        state = self._piggyback
        value = env.piggyback["piggyback"]
        if value <= state["last"].get(env.src, -1):
            state["out_of_order"] += 1
        state["last"][env.src] = value
        state["seen"] += 1
        return super().on_receive(env)


class Stacked(Counting, Piggyback, ft.Rank):
    async def main(self):
        comm = self.comm
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        await comm.send(self.rank, dest=right, tag=1)
        await comm.recv(source=left, tag=1)
        total = await comm.allreduce(self.rank)
        everyone = await comm.allgather(self.rank)
        await comm.bcast(np.zeros(2**15) if self.rank == 0 else None, root=0)
        sub = await comm.split(color=self.rank % 2)
        await sub.barrier()
        await comm.barrier()
        return {"counting": self._counting, "piggyback": self._piggyback,
                "total": total, "everyone": everyone, "app_sent": self.ft.sent[:],
                "app_received": self.ft.received[:]}


class Conflicting(ft.Protocol):
    protocol_name = "conflicting"
    conflicts = ("counting",)


class NeedsCounting(ft.Protocol):
    protocol_name = "needs-counting"
    requires = ("counting",)


class Gate(ft.Protocol):
    """Test mixin: holds outgoing messages until main opens the gate, and incoming ones
    until the peer's 'open' control message arrives, then releases them in order."""

    protocol_name = "gate"

    async def on_start(self):
        self._gate = {"out": [], "in": [], "open": False}
        await super().on_start()

    def on_send(self, env):
        env = super().on_send(env)
        self._gate["out"].append(env)
        return None

    def on_receive(self, env):
        env = super().on_receive(env)
        if self._gate["open"]:
            return env
        self._gate["in"].append(env)
        return None

    def on_control(self, env):
        if env.comm != "gate":
            return super().on_control(env)
        self._gate["open"] = True
        for held in self._gate["in"]:
            self.ft.deliver_now(held)
        self._gate["in"].clear()

    def open_gate(self, peer):
        for held in self._gate["out"]:
            self.ft.transmit(held)
        self._gate["out"].clear()
        self.ft.send_control(peer, "gate", "open")


class Gated(Gate, ft.Rank):
    async def main(self):
        if self.rank == 0:
            for i in range(5):
                await self.comm.send(i, dest=1, tag=i % 2)
            held = len(self._gate["out"])
            probe_before = self.comm.iprobe(source=1)
            self.open_gate(1)
            return held, probe_before
        got = [await self.comm.recv(source=0) for _ in range(5)]
        return got, self._gate["open"]
