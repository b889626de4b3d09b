"""``NothingRegisteredWarning`` says "you forgot to register", never "you had nothing to
register": it fires for a rank restored with nothing registered only when a loop of its
program carries state from one iteration to the next (``runtime/_carried_state``)."""
import warnings

import pytest

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.runtime._carried_state import loops_carry_state

from ..programs import shapes


class Farm(shapes.Farm):
    """The task farm whose workers keep nothing from one task to the next."""

    async def work(self, st):
        async for _ in self.iterations(10**9):
            if not await self.turn(st):
                break
        return None


class CountingFarm(shapes.Farm):
    """The same farm, but each worker counts its tasks in a local it returns: that count
    is state its loop carries, and nothing saves it."""

    async def work(self, st):
        done = 0
        async for _ in self.iterations(10**9):
            if not await self.turn(st):
                break
            done += 1
        return done


class SbFarm(StandbyReplacement, Farm):
    backup_interval = 2


class SbCountingFarm(StandbyReplacement, CountingFarm):
    backup_interval = 2


def _run(cls, transport):
    return ft.run(cls, ranks=3, spares=1, transport=transport, timeout_s=60,
                  chaos=ft.Chaos(kill=[ft.Kill(1, iteration=4)]))


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_worker_with_nothing_to_keep_is_not_told_to_register(transport):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.FaultToleranceWarning)
        r = _run(SbFarm, transport)
    assert 1 in r.metrics["restored_unregistered"]  # restored past its loop's top
    assert r.results[0] == [(t, t * t) for t in range(20)]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_worker_whose_loop_counts_in_a_local_is_told(transport):
    with pytest.warns(ft.NothingRegisteredWarning) as record:
        r = _run(SbCountingFarm, transport)
    told = [str(w.message) for w in record]
    assert any(t.startswith("rank 1 was restored to iteration") for t in told), told
    assert 1 in r.metrics["restored_unregistered"]


class Carried:
    """Loops that carry state (``loops_carry_state`` True) and loops that do not."""

    class ReadBeforeAssigned(ft.Rank):
        async def main(self):
            total = 0
            async for i in self.iterations(5):
                total = total + i
            return total

    class ReadOnALaterIteration(ft.Rank):
        async def main(self):
            async for i in self.iterations(5):
                if i > 0:
                    print(x)  # noqa: F821 (set by the iteration before)
                x = i

    class ReadAfterTheLoop(ft.Rank):  # OSU's t_start
        async def main(self):
            async for i in self.iterations(5):
                if i == 2:
                    t_start = ft.Wtime()
            return ft.Wtime() - t_start

    class GrowsAList(ft.Rank):
        async def main(self):
            seen = []
            async for i in self.iterations(5):
                seen.append(i)
            return seen

    class WritesAnArrayMadeBefore(ft.Rank):
        async def main(self, u):
            async for _ in self.iterations(5):
                u[1:-1] = (u[:-2] + u[2:]) / 2
            return u

    class SetsAnAttributeInAMethod(ft.Rank):
        def bump(self):
            self.n += 1

        async def main(self):
            self.n = 0
            async for _ in self.iterations(5):
                self.bump()
            return self.n

    class LoopBoundFirst(ft.Rank):  # cannot tell: assumed to
        async def main(self):
            loop = self.iterations(5)
            async for _ in loop:
                pass


class NotCarried:
    class AssignedOnEveryPath(ft.Rank):
        async def main(self):
            async for i in self.iterations(5):
                if i == 0:
                    x = 1
                else:
                    x = 2
                print(x + 1)

    class ReceivesIntoABuffer(ft.Rank):
        async def main(self):
            buf = bytearray(8)
            async for _ in self.iterations(5):
                try:
                    v = await self.comm.recv(source=0)
                except ValueError:
                    v = 0
                await self.comm.Recv(buf, source=0)
                print(v, buf)


@pytest.mark.parametrize("cls", [c for c in vars(Carried).values() if isinstance(c, type)]
                         + [CountingFarm], ids=lambda c: c.__name__)
def test_loops_that_carry_state(cls):
    assert loops_carry_state(cls)


@pytest.mark.parametrize("cls", [c for c in vars(NotCarried).values() if isinstance(c, type)]
                         + [Farm], ids=lambda c: c.__name__)
def test_loops_that_carry_none(cls):
    assert not loops_carry_state(cls)
