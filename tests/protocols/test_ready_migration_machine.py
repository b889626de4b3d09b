"""ReadyMessageFlush's migration machine (``protocols/ready_flush/migration.py``) step by
step: the moving rank's machine and its partners' joined by a harness that carries their
application messages and ready messages (RMs) in order per channel, plays the endpoint
(holding, the cut at each channel's RM) and the coordinator's phases, with no transport
and no asyncio. The whole-run migrations are in ``test_ready_flush.py``. After a move
the harness checks CoCheck's guarantee: every message sent to the mover reaches it
once, in its snapshot or from what was kept for its new incarnation, and its own last
messages arrived before the new incarnation exists."""
from __future__ import annotations

from collections import deque

import pytest

from ftactors.base._errors import ProtocolError
from ftactors.protocols.ready_flush.migration import (Hold, Marker, Move, Phase, Release,
                                                      Stopped, WaitMarkers)

MP = 0
MOVE = 7
NEW_EPOCH = 1


class World:
    """Ranks 0 (the mover) to ``n - 1``: their machines, channels, and what each got."""

    def __init__(self, n: int = 3):
        self.n = n
        self.m = {r: Move(r) for r in range(n)}
        self.wire: dict[tuple[int, int], deque] = {
            (s, d): deque() for s in range(n) for d in range(n) if s != d}
        self.sent: dict[int, set[int]] = {r: set() for r in range(n)}
        self.holding: set[int] = set()
        self.kept: dict[int, list] = {r: [] for r in range(n)}
        self.got: dict[int, list] = {r: [] for r in range(n)}   # before the RM of the channel
        self.rm: dict[int, set[int]] = {r: set() for r in range(n)}  # RMs each received
        self.waits: dict[int, set[int]] = {}  # rank -> RMs it waits for
        self.answer = None
        self.snapshot: list | None = None     # what the mover's new incarnation starts with
        self.new: list = []                   # what reached the new incarnation after it
        self.lost: list = []
        self.epoch: dict[int, int] = {}       # rank -> the mover's incarnation it knows

    # ------------------------------------------------------------------ wires
    def send(self, src: int, dst: int, msg: str) -> None:
        """An application message."""
        self.sent[src].add(dst)
        if src in self.holding and dst == MP:
            self.kept[src].append(msg)
        else:
            self.wire[(src, dst)].append(("app", msg))

    def deliver(self, src: int, dst: int) -> None:
        kind, what = self.wire[(src, dst)].popleft()
        if kind == "rm":
            self.rm[dst].add(src)
        elif self.snapshot is not None and MP in (src, dst):
            self.lost.append(what)  # its old location is gone, and its old life stale
        elif src in self.rm[dst] and dst == MP:
            self.lost.append(what)  # after the channel's RM: not in the snapshot
        else:
            self.got[dst].append(what)

    def deliver_all(self) -> None:
        for key, q in self.wire.items():
            while q:
                self.deliver(*key)

    def until_waited(self, rank: int) -> None:
        """Deliver to ``rank`` one message at a time until the RMs it waits for arrived
        (what else is on its channels stays there)."""
        while not self.waits.get(rank, set()) <= self.rm[rank]:
            ready = [s for s in range(self.n) if s != rank and self.wire[(s, rank)]]
            assert ready, f"rank {rank} waits for RMs that never come"
            self.deliver(ready[0], rank)

    def do(self, rank: int, effects: list) -> None:
        for e in effects:
            if isinstance(e, Marker):
                assert e.move == MOVE
                if rank in self.holding and e.to == MP:
                    self.kept[rank].append(("rm", None))  # held like any envelope
                else:
                    self.wire[(rank, e.to)].append(("rm", e.move))
            elif isinstance(e, Hold):
                assert e.rank == MP
                self.holding.add(rank)
            elif isinstance(e, WaitMarkers):
                self.waits[rank] = set(e.ranks)
            elif isinstance(e, Release):
                self.holding.discard(rank)
                if e.epoch is not None:
                    self.epoch[rank] = e.epoch
                for msg in self.kept[rank]:
                    (self.new if e.epoch is not None else self.got[MP]).append(msg)
                self.kept[rank] = []
            else:
                assert isinstance(e, Stopped)
                self.answer = e.where

    # ------------------------------------------------------------ coordinator
    def migrate(self, deliver_between: bool = True) -> None:
        """The coordinator's phases (``ReadyFlushCoordinator._move``)."""
        mp = self.m[MP]
        self.do(MP, mp.stop_asked(MOVE))
        self.do(MP, mp.at_safe_point((0, 5), self.sent[MP] | {MP}))
        out = self.answer["out"]
        senders = []
        for r in range(1, self.n):
            sent, effects = self.m[r].notice(MOVE, MP, MP in self.sent[r], r in out)
            self.do(r, effects)
            self.until_waited(r)  # the notice returns once its RM wait is over
            if sent:
                senders.append(r)
        if deliver_between:
            self.send(1, MP, "after the notice")  # kept for the new incarnation
        self.do(MP, mp.hand_over(senders))
        self.until_waited(MP)
        self.snapshot = list(self.got[MP])  # the new incarnation starts from it
        for r in range(1, self.n):
            self.do(r, self.m[r].done(MOVE, MP, NEW_EPOCH))
        self.deliver_all()


def traffic(w: World) -> None:
    """Messages on the channels 1 -> 0, 0 -> 2, 2 -> 0 and 2 -> 1, none delivered yet."""
    w.send(1, MP, "1a")
    w.send(MP, 2, "0a")
    w.send(2, MP, "2a")
    w.send(2, 1, "2b")


def test_every_message_for_the_mover_reaches_it_once_and_its_own_arrive_first():
    w = World()
    traffic(w)
    w.migrate()
    assert sorted(w.snapshot) == ["1a", "2a"]       # in transit at the stop: in the snapshot
    assert w.new == ["after the notice"]            # kept, then sent to the new incarnation
    assert w.lost == []
    assert "0a" in w.got[2]                         # the old incarnation's, before the new
    assert w.epoch == {1: NEW_EPOCH, 2: NEW_EPOCH}
    assert w.m[MP].phase is Phase.MOVED
    assert all(w.m[r].phase is Phase.RUNNING for r in (1, 2))


def test_the_mover_sends_an_rm_to_the_ranks_it_sent_to_and_says_which():
    w = World(n=4)
    w.send(MP, 3, "0a")
    effects = w.m[MP].stop_asked(MOVE) + w.m[MP].at_safe_point((0, 5), {MP, 3})
    assert effects == [Marker(3, MOVE), Stopped({"position": (0, 5), "out": [3]})]


def test_a_rank_that_sent_to_the_mover_sends_its_rm_before_it_holds():
    sent, effects = Move(1).notice(MOVE, MP, sent_to_mover=True, mover_sent_here=False)
    assert sent and effects == [Marker(MP, MOVE), Hold(MP)]


def test_a_rank_that_never_sent_to_the_mover_sends_no_rm_but_holds():
    sent, effects = Move(1).notice(MOVE, MP, sent_to_mover=False, mover_sent_here=True)
    assert not sent and effects == [Hold(MP), WaitMarkers(MOVE, (MP,))]


def test_a_rank_the_mover_never_sent_to_does_not_wait_for_it():
    w = World()
    w.send(1, MP, "1a")
    w.migrate()
    assert w.waits.get(1) is None and w.lost == [] and w.snapshot == ["1a"]


def test_a_move_whose_mover_sent_nothing_and_got_nothing_needs_no_rm():
    w = World()
    w.migrate(deliver_between=False)
    assert w.snapshot == [] and w.new == [] and w.lost == []
    assert all(not q for q in w.wire.values())


def test_a_move_asked_after_main_returned_is_refused_at_once():
    m = Move(MP)
    assert m.finished() == []
    assert m.stop_asked(MOVE) == [Stopped(None)]
    assert m.phase is Phase.RUNNING


def test_a_move_whose_mover_returns_before_its_safe_point_is_refused():
    m = Move(MP)
    assert m.stop_asked(MOVE) == []
    assert m.stopping
    assert m.finished() == [Stopped(None)]
    assert not m.stopping


def test_a_rank_whose_main_returned_still_keeps_and_releases_for_the_mover():
    m = Move(1)
    m.finished()
    _, effects = m.notice(MOVE, MP, True, False)
    assert Hold(MP) in effects
    assert m.done(MOVE, MP, NEW_EPOCH) == [Release(MP, NEW_EPOCH)]


@pytest.mark.parametrize("steps", [
    lambda m: m.at_safe_point((0, 1), ()),            # not asked to stop
    lambda m: m.hand_over(()),                        # not stopped
    lambda m: m.done(MOVE, MP, 1),                    # no move under way
    lambda m: (m.notice(MOVE, MP, True, True), m.notice(MOVE + 1, 2, True, True)),
    lambda m: (m.notice(MOVE, MP, True, True), m.done(MOVE + 1, MP, 1)),
    lambda m: (m.notice(MOVE, MP, True, True), m.done(MOVE, 2, 1)),
    lambda m: m.notice(MOVE, 1, True, True),          # its own move, as another rank
], ids=["safe-point", "hand-over", "done", "two-moves", "other-move", "other-mover",
        "own-notice"])
def test_an_event_out_of_order_is_a_protocol_error(steps):
    with pytest.raises(ProtocolError):
        steps(Move(1))


def test_a_rollback_forgets_the_move_under_way():
    m = Move(1)
    m.notice(MOVE, MP, True, True)
    m.restored()
    assert m.phase is Phase.RUNNING
    with pytest.raises(ProtocolError):
        m.done(MOVE, MP, 1)
