"""ReadyMessageFlush's part hand-off: a rank goes on once its holder rank has a copy of its
part, before the coordinator has taken (and confirmed) it, and a failure between the two
restores from the checkpoint just taken (the holder's copy) or, with the holder lost too,
from the previous complete one; never from nothing. Local and sim transports: the coordinator's
takes are held back by a patched ``LocalFabric.call_kept`` (the sim's too) until an
event happens, so the order is forced, not timed."""
import asyncio

import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush
from ftactors.runtime._coordinator import RankDied
from ftactors.transports.local import LocalFabric

from .programs import FLOOD, Flood, positions

BOUND_S = 5.0
"""How long a held-back take waits for what it waits for (with the hand-off of old, the
rank never goes on, and the take must give up to end the run)."""


class Order:
    """What happened, in order, across the ranks of one local run (one process)."""

    log: list = []
    changed: asyncio.Event | None = None

    @classmethod
    def reset(cls) -> None:
        cls.log = []
        cls.changed = None

    @classmethod
    def note(cls, *what) -> None:
        cls.log.append(what)
        cls._event().set()

    @classmethod
    def _event(cls) -> asyncio.Event:
        if cls.changed is None:
            cls.changed = asyncio.Event()
        return cls.changed

    @classmethod
    async def until(cls, test) -> bool:
        """Wait until ``test()`` holds (False: not within ``BOUND_S``)."""
        async def wait():
            while not test():
                cls._event().clear()
                await cls._event().wait()
        try:
            await asyncio.wait_for(wait(), BOUND_S)
            return True
        except asyncio.TimeoutError:
            return False


class Logged(ReadyMessageFlush, Flood):
    """Notes each rank's passing of every safe point and every confirmation it hears."""

    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        Order.note("passed", self.rank, self.ft.position)

    def ft_rpc_ready_part_kept(self, position) -> None:
        Order.note("kept", self.rank, tuple(position))
        super().ft_rpc_ready_part_kept(position)


@pytest.fixture
def order(monkeypatch):
    Order.reset()
    yield Order
    Order.reset()


def hold_takes(monkeypatch, until):
    """Patch the coordinator's takes: the take of part ``position`` from ``host`` waits
    until ``until(fabric, host, position)`` (a coroutine) lets it go (False: it fails as
    a take from a dead rank's process does)."""
    real = LocalFabric.call_kept

    async def held(self, host, name, *args):
        if not await until(self, host, tuple(args[-1])):
            raise RankDied(host.spec.rank, "its actor died")
        return await real(self, host, name, *args)
    monkeypatch.setattr(LocalFabric, "call_kept", held)


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_rank_goes_on_before_the_coordinator_confirms_its_part(monkeypatch, order,
                                                                  transport):
    """Each take of a rank's part is held back until that rank has passed the part's
    position: the rank's main task goes on first, and the confirmation it hears later
    still completes the checkpoint."""
    async def after_passing(fabric, host, position):
        return await Order.until(lambda: ("passed", host.spec.rank, position) in Order.log)
    hold_takes(monkeypatch, after_passing)
    r = ft.run(Logged, 5, transport=transport, kwargs=FLOOD, checkpoint_interval=4,
               timeout_s=30)
    for rank in range(5):
        for position in [(0, 4), (0, 8)]:
            assert order.log.index(("passed", rank, position)) < \
                order.log.index(("kept", rank, position)), (rank, position)
    assert positions(r, "checkpoint") == [(0, 4), (0, 8)]
    copied = [e for e in r.events_of("checkpoint_copied")
              if tuple(e.detail["position"]) == (0, 4)]
    assert sorted((e.rank, e.detail["holder"]) for e in copied) == \
        [(0, 2), (1, 3), (2, 4), (3, 0), (4, 1)]


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("holder_lost", [False, True], ids=["rank", "rank-and-holder"])
def test_kills_between_going_on_and_the_confirmation(monkeypatch, order, flood_reference,
                                                     holder_lost, transport):
    """Rank 2 goes on past (0, 8) and dies at 9 before the coordinator took its part (the
    take fails as the rank's process is gone). Its holder (rank 4) still has the copy: the
    restart uses (0, 8). With the holder lost too (its takes fail as well), (0, 8) lacks
    rank 2's part and the restart uses (0, 4), the last complete checkpoint. Either way
    the answer is the failure-free run's."""
    lost = {2, 4} if holder_lost else {2}

    async def lost_with(fabric, host, position):
        if host.spec.rank not in lost or host.spec.incarnation > 0 or position != (0, 8):
            return True
        try:  # on Ray, the answer of a take lives in the rank's process
            await asyncio.wait_for(fabric.watch(host), BOUND_S)
        except asyncio.TimeoutError:
            pass
        return False
    hold_takes(monkeypatch, lost_with)
    r = ft.run(Logged, 5, transport=transport, kwargs=FLOOD, checkpoint_interval=4,
               chaos=ft.Chaos(kill=[(rank, 9) for rank in sorted(lost)]), timeout_s=30)
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]
    assert ("passed", 2, (0, 8)) in order.log  # it went on, then died
    if holder_lost:
        assert positions(r, "rollback") == [(0, 4)]
        assert r.events_of("checkpoint_salvaged") == []
    else:
        assert positions(r, "rollback") == [(0, 8)]
        salvaged = r.events_of("checkpoint_salvaged")
        assert [(tuple(e.detail["position"]), e.detail["from_holders"]) for e in salvaged] \
            == [((0, 8), [2])]
