"""ReadyMessageFlush's part hand-off in whole runs: a rank goes on once its holder rank has
a copy of its part, before the coordinator has taken (and confirmed) it, and a failure
between the two restores from the checkpoint just taken (the holder's copy) or, with the
holder lost too, from the previous complete one; never from nothing. Local and sim
transports: the ranks' answers to the coordinator's takes wait for an event of the run
(``Logged.ft_rpc_ready_part``, the protocol's own request) or never come, as when the
answer is lost with the rank's process, so the order is forced, not timed. Each order
is stepped without a transport in ``test_ready_handoff_machine.py``."""
import asyncio

import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush

from .programs import FLOOD, Flood, positions

BOUND_S = 5.0
"""How long a held-back answer waits for what it waits for (had the rank waited for the
confirmation, it would never pass the position, and the answer must give up to end the
run)."""


class Order:
    """What happened, in order, across the ranks of one local run (one process)."""

    log: list = []
    changed: asyncio.Event | None = None
    answer = None  # async (rank, position) -> whether the answer to a take is sent

    @classmethod
    def reset(cls) -> None:
        cls.log = []
        cls.changed = None
        cls.answer = None

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
    """Notes each rank's passing of every safe point, every copy its holder keeps and
    every confirmation it hears; its answer to the coordinator's take of a part waits
    for ``Order.answer`` (the test's rule: True, it is sent; False, it never is)."""

    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        Order.note("passed", self.rank, self.ft.position)

    async def ft_rpc_ready_part(self, position) -> bytes:
        blob = super().ft_rpc_ready_part(position)
        if not await Order.answer(self.rank, tuple(position)):
            await asyncio.get_running_loop().create_future()  # lost with the process
        return blob

    def ft_rpc_ready_part_kept(self, position) -> None:
        Order.note("kept", self.rank, tuple(position))
        super().ft_rpc_ready_part_kept(position)

    def on_control(self, env) -> None:
        super().on_control(env)
        op, data = self.ft.control_data(env)
        if op == "copy":
            Order.note("held", env.src, tuple(data[0]))


@pytest.fixture
def order():
    Order.reset()
    yield Order
    Order.reset()


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_rank_goes_on_before_the_coordinator_confirms_its_part(order, transport):
    """Each rank's answer to the take of its part is held back until that rank has passed
    the part's position: the rank's main task goes on first, once its holder has the
    copy, and the confirmation it hears later still completes the checkpoint."""
    async def after_passing(rank, position):
        await Order.until(lambda: ("passed", rank, position) in Order.log)
        return True
    order.answer = after_passing
    r = ft.run(Logged, 5, transport=transport, kwargs=FLOOD, checkpoint_interval=4,
               timeout_s=30)
    for rank in range(5):
        for position in [(0, 4), (0, 8)]:
            assert order.log.index(("held", rank, position)) < \
                order.log.index(("passed", rank, position)) < \
                order.log.index(("kept", rank, position)), (rank, position)
    assert positions(r, "checkpoint") == [(0, 4), (0, 8)]
    copied = [e for e in r.events_of("checkpoint_copied")
              if tuple(e.detail["position"]) == (0, 4)]
    assert sorted((e.rank, e.detail["holder"]) for e in copied) == \
        [(0, 2), (1, 3), (2, 4), (3, 0), (4, 1)]


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("holder_lost", [False, True], ids=["rank", "rank-and-holder"])
def test_kills_between_going_on_and_the_confirmation(order, flood_reference, holder_lost,
                                                     transport):
    """Rank 2 goes on past (0, 8) and dies at 9 before the coordinator took its part (its
    answer never comes: on Ray, it is lost with the rank's process). Its holder (rank 4)
    still has the copy: the restart uses (0, 8). With the holder lost too (its answer at
    (0, 8) never comes either), (0, 8) lacks rank 2's part and the restart uses (0, 4),
    the last complete checkpoint. Either way the answer is the failure-free run's."""
    lost = {2, 4} if holder_lost else {2}
    unanswered = {(rank, (0, 8)) for rank in lost}

    async def lost_with_the_rank(rank, position):
        if (rank, position) not in unanswered:
            return True
        unanswered.discard((rank, position))  # its next incarnation's answer is sent
        return False
    order.answer = lost_with_the_rank
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
