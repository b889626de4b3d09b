"""User-shaped programs whose ranks do not progress in step (issue 40): a task farm, loops
of different lengths, ranks with different roles, two loops, a loop one rank leaves first.
Each returns something that tells a wrong execution from a right one."""
from __future__ import annotations

import asyncio

import numpy as np

import ftactors as ft

READY, START, DONE, EXIT = 0, 1, 2, 3


class Farm(ft.Rank):
    """The classic task-pull farm: the master loops over ``recv(ANY_SOURCE, ANY_TAG)``
    and answers; each worker loops ``send READY / recv task / send DONE`` until told to
    exit. The master turns once per message, a worker once per task. The answer is the
    master's collected results (which worker did which task depends on timing)."""

    async def main(self, ntasks=20):
        comm = self.comm
        st = ft.Status()
        if self.rank:
            done = await self.work(st)
            await comm.send(None, dest=0, tag=EXIT)
            return done
        self.register("results", {})
        self.register("next", 0)
        self.register("closed", 0)
        async for _ in self.iterations(10**9):
            if self.closed == self.size - 1:
                break
            data = await self.take(st)
            src, tag = st.Get_source(), st.Get_tag()
            if tag == READY:
                if self.next < ntasks:
                    await comm.send(self.next, dest=src, tag=START)
                    self.next += 1
                else:
                    await comm.send(None, dest=src, tag=EXIT)
            elif tag == DONE:
                self.results[data[0]] = data[1]
            else:
                self.closed += 1
        return sorted(self.results.items())

    async def work(self, st) -> int:
        """A worker's loop, one turn per task; the number of tasks it did."""
        self.register("done", 0)
        async for _ in self.iterations(10**9):
            if not await self.turn(st):
                break
            self.done += 1
        return self.done

    async def turn(self, st) -> bool:
        """A worker's turn: READY, then a task done (True) or told to exit (False)."""
        await self.comm.send(None, dest=0, tag=READY)
        task = await self.task(st)
        if st.Get_tag() != START:
            return False
        await self.comm.send((task, task * task), dest=0, tag=DONE)
        return True

    async def take(self, st):
        """The master's next message, from any worker, with any tag (into ``st``)."""
        return await self.comm.recv(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st)

    async def task(self, st):
        """A worker's next message from the master (a task, or EXIT)."""
        return await self.comm.recv(source=0, tag=ft.ANY_TAG, status=st)


class PollingFarm(Farm):
    """The farm with ranks that poll instead of blocking: the master loops over
    ``iprobe(ANY_SOURCE, ANY_TAG)``, each worker over its task request's ``test()``,
    yielding between polls. A rank that polls never blocks in a receive, so a
    checkpoint round must take its state at a failed poll, as at a blocked receive
    (``Endpoint.polled``): it never reaches its next safe point before the message it
    polls for comes, and that message may come only after the round."""

    async def take(self, st):
        while not self.comm.iprobe(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st):
            await asyncio.sleep(0)
        return await self.comm.recv(source=st.Get_source(), tag=st.Get_tag(), status=st)

    async def task(self, st):
        req = self.comm.irecv(source=0, tag=ft.ANY_TAG)
        while True:
            done, task = req.test(st)
            if done:
                return task
            await asyncio.sleep(0)


class Uneven(ft.Rank):
    """Mandelbrot's split: ``h // size + (h % size > rank)`` rows, so some ranks run one
    iteration fewer; a gather at the end."""

    async def main(self, h=21):
        n = h // self.size + (h % self.size > self.rank)
        self.register("acc", 0.0)
        async for i in self.iterations(n):
            self.acc += (self.rank * 100 + i) ** 0.5
        return await self.comm.gather(self.acc, root=0)


class UnevenHalo(ft.Rank):
    """Loops of 6 and 7 iterations (odd ranks run one more) with an allreduce in the
    first six."""

    async def main(self):
        n = 6 + (self.rank % 2)
        self.register("x", float(self.rank))
        async for i in self.iterations(n):
            if i < 6:
                self.x = self.x * 0.5 + await self.comm.allreduce(self.x) * 0.01
            else:
                self.x = self.x + 1
        return self.x


class Roles(ft.Rank):
    """mpi4py's ex-2.29: ranks 0 and 1 send once and have no loop; rank 2 loops over
    ``Probe(ANY_SOURCE)`` and ``Recv``."""

    async def main(self):
        comm = self.comm
        if self.rank in (0, 1):
            await comm.send(np.full(4, self.rank, dtype="i"), dest=2)
            return None
        if self.rank != 2:
            return None
        self.register("got", [])
        st = ft.Status()
        async for _ in self.iterations(2):
            await comm.Probe(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st)
            buf = np.empty(st.Get_count(ft.INT), dtype="i")
            await comm.Recv(buf, source=st.Get_source(), tag=st.Get_tag())
            self.got.append(int(buf[0]))
        return sorted(self.got)


class TwoLoops(ft.Rank):
    """Two loops with a broadcast between them."""

    async def main(self):
        comm = self.comm
        self.register("a", 0.0)
        async for i in self.iterations(4):
            self.a = await comm.allreduce(self.a + self.rank + i)
        self.register("b", await comm.bcast(self.a, root=0))
        async for i in self.iterations(5):
            self.b = await comm.allreduce(self.b * 0.5 + i)
        return self.b


class BreakFirst(ft.Rank):
    """Rank 0 leaves the loop on its own condition; the others learn it by a message."""

    async def main(self):
        comm, r, n = self.comm, self.rank, self.size
        self.register("x", float(r))
        async for i in self.iterations(100):
            if r == 0:
                stop = i >= 7
                for d in range(1, n):
                    await comm.send(stop, dest=d, tag=5)
                if stop:
                    break
            elif await comm.recv(source=0, tag=5):
                break
            self.x += 1.0
        return self.x


def farm_check(results, reference) -> bool:
    """sim-check's judge of a Farm or PollingFarm run (``--check tests.programs.shapes:farm_check``):
    the master's collected results, and every task done exactly once (the workers'
    counts add up to the tasks); which worker did which task depends on timing."""
    return results[0] == reference[0] and sum(results[1:]) == sum(reference[1:])
