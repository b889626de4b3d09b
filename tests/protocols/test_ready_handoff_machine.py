"""ReadyMessageFlush's hand-off machine (``protocols/ready_flush/handoff.py``) step by step:
the ranks' machines joined by a harness that carries their control messages in order per
channel and plays the coordinator (its takes and confirmations), with no transport, no
asyncio (microseconds). Each test forces one order of the races the whole-run tests in
``test_ready_flush_handoff.py`` provoke; after every step the harness checks the
invariant: a rank past a checkpoint does not hold the only copy of its part.
``machine.salvage`` then says what a recovery restores from what the survivors hold."""
from __future__ import annotations

from collections import deque

import pytest

from ftactors.protocols.ready_flush.handoff import KEEP_COPIES, GoOn, HandOff, Send, holder
from ftactors.protocols.ready_flush.machine import salvage

N = 4  # rank r's holder is (r + 2) % 4: ranks 1 and 3 hold for each other
P1, P2, P3 = (0, 4), (0, 8), (0, 12)


class Pair:
    """``N`` ranks' hand-off machines, their control channels (FIFO, carried one message
    at a time by the test) and the coordinator's parts."""

    def __init__(self, n: int = N):
        self.n = n
        self.m = {r: HandOff(r, n) for r in range(n)}
        self.wire: dict[tuple[int, int], deque] = {}
        self.went_on: dict[int, list[tuple]] = {r: [] for r in range(n)}
        self.saved: dict[int, set[tuple]] = {r: set() for r in range(n)}
        self.taken: dict[tuple, set[int]] = {}  # position -> ranks the coordinator holds
        self.dead: set[int] = set()

    def _do(self, rank: int, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, GoOn):
                assert effect.position not in self.went_on[rank], "went on twice"
                self.went_on[rank].append(effect.position)
            else:
                assert isinstance(effect, Send)
                self.wire.setdefault((rank, effect.to), deque()).append(effect)
        self.check()

    def save(self, rank: int, position: tuple) -> None:
        self.saved[rank].add(position)
        self._do(rank, self.m[rank].saved(position, f"part {rank}@{position}"))

    def deliver(self, src: int, dst: int) -> Send:
        """The oldest message on the channel ``src -> dst`` arrives."""
        msg = self.wire[(src, dst)].popleft()
        if dst in self.dead:
            return msg
        m = self.m[dst]
        if msg.op == "copy":
            position, blob = msg.data
            self._do(dst, m.copy_received(src, position, blob))
        elif msg.op == "copied":
            self._do(dst, m.copied(msg.data))
        else:
            self._do(dst, m.dropped(src, msg.data))
        return msg

    def deliver_all(self) -> None:
        while any(self.wire.values()):
            for (src, dst), q in list(self.wire.items()):
                if q:
                    self.deliver(src, dst)

    def take(self, rank: int, position: tuple) -> None:
        """The coordinator takes the part (its answer arrived)."""
        self.taken.setdefault(position, set()).add(rank)

    def confirm(self, rank: int, position: tuple) -> None:
        """The coordinator tells the rank it holds the part."""
        assert rank in self.taken.get(position, ())
        if rank not in self.dead:
            self._do(rank, self.m[rank].kept(position))

    def kill(self, *ranks: int) -> None:
        self.dead |= set(ranks)
        for (src, dst), q in self.wire.items():
            if src in ranks:
                q.clear()  # what it had not sent is lost with it

    def check(self) -> None:
        """A rank past a checkpoint never holds the only copy of its part: the
        coordinator or its holder has it (for the newest one it went past)."""
        for r, went in self.went_on.items():
            if went:
                pos = went[-1]
                h = holder(r, self.n)
                assert r in self.taken.get(pos, ()) or (
                    h is not None and (r, pos) in self.m[h].copies), (r, pos)

    def salvage(self, latest: tuple | None) -> tuple | None:
        """What a recovery now completes (``machine.salvage``) from the live ranks."""
        live = [r for r in range(self.n) if r not in self.dead]
        own = {r: {p for p in self.saved[r] if r not in self.taken.get(p, ())} for r in live}
        copies = {r: set(self.m[r].held()) for r in live}
        return salvage(self.n, own, copies, self.taken, latest,
                       lambda r, n: holder(r, n))


def checkpoint(h: Pair, position: tuple, confirmed: bool = True) -> None:
    """Every rank saves its part, the copies and acknowledgements travel, and (with
    ``confirmed``) the coordinator takes and confirms every part."""
    for r in range(h.n):
        h.save(r, position)
    h.deliver_all()
    if confirmed:
        for r in range(h.n):
            h.take(r, position)
            h.confirm(r, position)
        h.deliver_all()


def test_a_rank_goes_on_once_its_holder_has_the_copy_before_any_confirmation():
    h = Pair()
    h.save(1, P1)
    assert h.went_on[1] == []                      # the copy is on its way
    assert h.deliver(1, 3) == Send(3, "copy", (P1, "part 1@(0, 4)"))
    assert h.went_on[1] == []                      # the holder's answer is on its way
    assert h.deliver(3, 1) == Send(1, "copied", P1)
    assert h.went_on[1] == [P1]                    # before the coordinator took the part
    h.take(1, P1)
    h.confirm(1, P1)
    assert h.deliver(1, 3) == Send(3, "drop", P1)
    assert h.m[3].held() == []                     # the copy is no longer needed


def test_the_confirmation_lets_a_rank_go_on_when_its_holder_has_not_answered():
    h = Pair()
    h.save(1, P1)
    h.take(1, P1)
    h.confirm(1, P1)                               # before the holder heard of the copy
    assert h.went_on[1] == [P1]
    h.deliver_all()                                # copy, drop (in order), then copied
    assert h.went_on[1] == [P1] and h.m[3].held() == []


def test_a_rank_whose_holder_died_goes_on_at_the_confirmation():
    h = Pair()
    h.kill(3)
    h.save(1, P1)
    h.deliver_all()
    assert h.went_on[1] == []                      # the only copy is its own
    h.take(1, P1)
    h.confirm(1, P1)
    assert h.went_on[1] == [P1]


def test_one_rank_has_no_holder_and_goes_on_at_the_confirmation():
    h = Pair(n=1)
    h.save(0, P1)
    assert h.wire == {} and h.went_on[0] == []
    h.take(0, P1)
    h.confirm(0, P1)
    assert h.went_on[0] == [P1]


def test_a_rank_killed_between_going_on_and_the_confirmation_restarts_from_its_copy():
    h = Pair()
    checkpoint(h, P1)
    checkpoint(h, P2, confirmed=False)             # every rank went on past P2
    assert all(h.went_on[r] == [P1, P2] for r in range(N))
    for r in (0, 2, 3):
        h.take(r, P2)                              # rank 1's take is under way ...
    h.kill(1)                                      # ... and its answer dies with it
    assert h.salvage(latest=P1) == (P2, {1: 3})    # rank 3 holds rank 1's copy


def test_a_rank_and_its_holder_killed_restart_from_the_last_complete_checkpoint():
    h = Pair()
    checkpoint(h, P1)
    checkpoint(h, P2, confirmed=False)
    for r in (0, 2):
        h.take(r, P2)
    h.kill(1, 3)                                   # rank 1's copy was at rank 3
    assert h.salvage(latest=P1) is None            # P1 stays the one to restore


def test_a_rank_killed_before_its_holder_answered_never_went_on():
    h = Pair()
    checkpoint(h, P1)
    h.save(1, P2)
    h.deliver(1, 3)                                # the holder has the copy ...
    h.kill(1)                                      # ... the rank died before the answer
    assert h.went_on[1] == [P1]
    for r in (0, 2, 3):
        h.save(r, P2)
    h.deliver_all()
    for r in (0, 2, 3):
        h.take(r, P2)
    assert h.salvage(latest=P1) == (P2, {1: 3})    # its copy still completes P2


def test_a_confirmation_that_arrives_twice_is_heard_once():
    h = Pair()
    h.save(1, P1)
    h.deliver_all()
    h.take(1, P1)
    h.confirm(1, P1)
    h.confirm(1, P1)                               # a second confirmation: nothing
    assert h.went_on[1] == [P1]
    assert list(h.wire[(1, 3)]) == [Send(3, "drop", P1)]


def test_an_acknowledgement_after_the_confirmation_is_heard_once():
    h = Pair()
    h.save(1, P1)
    h.take(1, P1)
    h.confirm(1, P1)
    h.deliver(1, 3)                                # the copy
    h.deliver(3, 1)                                # its acknowledgement, late
    assert h.went_on[1] == [P1]


def test_a_holder_keeps_the_newest_copies_of_a_rank_whatever_their_order():
    h = HandOff(3, N)
    assert h.copy_received(1, P3, "c") == [Send(1, "copied", P3)]
    assert h.copy_received(1, P2, "b") == [Send(1, "copied", P2)]
    assert h.copy_received(1, P1, "a") == []       # older than both: neither kept nor
    assert sorted(h.held()) == [(1, P2), (1, P3)]  # acknowledged, the newer stay


def test_a_holder_keeps_at_most_the_newest_copies_of_a_rank_never_confirmed():
    h = Pair()
    for pos in (P1, P2, P3):                       # the confirmations are lost
        h.save(1, pos)
        h.deliver_all()
    assert h.went_on[1] == [P1, P2, P3]
    assert sorted(h.m[3].held()) == [(1, p) for p in (P1, P2, P3)][-KEEP_COPIES:]


def test_a_drop_forgets_that_copy_only():
    h = Pair()
    for pos in (P1, P2):
        h.save(1, pos)
        h.deliver_all()
    h.save(3, P2)
    h.deliver_all()                                # rank 1 holds rank 3's copy
    h.take(1, P1)
    h.confirm(1, P1)
    h.deliver_all()
    assert h.m[3].held() == [(1, P2)]
    assert h.m[1].held() == [(3, P2)]


def test_a_rolled_back_rank_forgets_the_hand_offs_of_the_execution_left():
    h = Pair()
    h.save(1, P1)
    h.deliver(1, 3)                                # rank 3 holds the copy
    h.m[1].restored()
    h.m[3].restored()
    h.deliver_all()                                # the old acknowledgement arrives late
    h.take(1, P1)
    h.confirm(1, P1)                               # and a confirmation of the old take
    assert h.went_on[1] == [] and h.wire[(1, 3)] == deque() and h.m[3].held() == []


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_every_rank_copies_to_another_rank(n):
    assert sorted(holder(r, n) for r in range(n)) == list(range(n))
    assert all(holder(r, n) != r for r in range(n))
