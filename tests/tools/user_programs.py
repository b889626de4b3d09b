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
