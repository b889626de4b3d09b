"""Step tests of joining rounds out of step (``protocols/shared/joining.py``: ``Joins``),
one rank's machine fed by flush machines (``FlushRounds``) with no transport: which
messages it holds, which go into a part as late, when it must join at once, and that
the levels of a stack share one hold (a message held for one level's round is pre-cut
for another level's round joined meanwhile)."""
from dataclasses import dataclass

from ftactors.engine._constants import ANY_SOURCE
from ftactors.protocols.shared.flush import FlushRounds
from ftactors.protocols.shared.joining import Joins, Part


@dataclass
class Env:
    src: int
    n: int


class Rank:
    """Rank 0 of 3 with the given levels, each with its own flush machine."""

    def __init__(self, *levels: str):
        self.joins = Joins(0)
        self.flush = {name: FlushRounds(0) for name in levels}
        for name in levels:
            self.joins.add_level(name, lambda name=name: self.flush[name])

    def marker(self, level: str, src: int, rid) -> None:
        self.flush[level].take(src, "marker", (rid, None), 0)

    def begun(self, level: str, rid) -> None:
        self.flush[level].take(1, "flush_begin", rid, 0)

    def join(self, level: str, rid) -> tuple[dict, list, Part]:
        unreceived, late = self.joins.cut(level, rid)
        part = Part({}, {}, None, 0.0, list(late))
        self.joins.join(level, rid, part)
        self.flush[level].start(rid, range(3), [1, 2])
        return unreceived, late, part


def test_a_message_after_its_senders_marker_is_held_until_the_round_is_joined():
    rank = Rank("standby")
    assert not rank.joins.arrive(Env(1, 0))  # no round: delivered
    rank.marker("standby", 1, "R")
    assert rank.joins.arrive(Env(1, 1))       # sent after rank 1's part: held
    assert rank.joins.arrive(Env(1, 2))
    assert not rank.joins.arrive(Env(2, 0))  # rank 2 has not joined: pre-cut, delivered
    unreceived, late, _ = rank.join("standby", "R")
    assert unreceived == {1: 2} and late == []  # not in the part: post-cut
    assert [e.n for e in rank.joins.release()] == [1, 2]  # in order
    assert rank.joins.held == []


def test_messages_after_the_join_and_before_the_senders_marker_are_late():
    rank = Rank("standby")
    rank.begun("standby", "R")
    _, _, part = rank.join("standby", "R")
    assert not rank.joins.arrive(Env(2, 5))  # in transit at the cut
    rank.marker("standby", 2, "R")
    assert not rank.joins.arrive(Env(2, 6))  # after rank 2's marker: not the part's
    assert [e.n for e in part.late] == [5]


def test_a_message_to_self_is_never_held_nor_late():
    rank = Rank("standby")
    _, _, part = rank.join("standby", "R")
    assert not rank.joins.arrive(Env(0, 1))
    assert part.late == []


def test_behind_a_held_message_the_same_senders_messages_wait_in_order():
    rank = Rank("a", "b")
    rank.marker("a", 1, "A")
    assert rank.joins.arrive(Env(1, 1))
    rank.join("a", "A")
    rank.marker("b", 1, "B")  # now rank 1 is marked in another level's round
    assert rank.joins.arrive(Env(1, 2))
    assert rank.joins.release() == []  # round B holds rank 1's messages back, both
    rank.join("b", "B")
    assert [e.n for e in rank.joins.release()] == [1, 2]


def test_a_message_held_for_one_levels_round_is_late_for_the_other_levels_round():
    """Rank 1 joined level a's round, sent m, then joined level b's round: m is post-cut
    for a (held) and pre-cut for b, so b's part must hold it though it is not queued."""
    rank = Rank("a", "b")
    rank.marker("a", 1, "A")
    assert rank.joins.arrive(Env(1, 7))  # held for round A
    rank.marker("b", 1, "B")
    unreceived, late, _ = rank.join("b", "B")
    assert unreceived == {1: 1} and [e.n for e in late] == [7]
    unreceived, late, _ = rank.join("a", "A")
    assert unreceived == {1: 1} and late == []


def test_when_a_rank_must_join_at_once():
    rank = Rank("standby")
    silent = {1: False, 2: False}.__getitem__
    assert not rank.joins.must_join_now([], silent)
    rank.begun("standby", "R")
    assert not rank.joins.must_join_now([1], silent)  # rank 1 sends before it joins
    assert rank.joins.must_join_now([ANY_SOURCE], silent)
    assert rank.joins.must_join_now([2], {1: False, 2: True}.__getitem__)  # no channel
    rank.marker("standby", 1, "R")
    assert rank.joins.must_join_now([1], silent)  # rank 1 joined: it may wait for us
    rank.joins.parked = 1
    assert rank.joins.must_join_now([], silent)


def test_unjoined_lists_only_the_levels_checkpoint_rounds_not_joined():
    rank = Rank("ready")
    rank.joins.add_level("ready", lambda: rank.flush["ready"], lambda rid: rid[0] == "ckpt")
    rank.marker("ready", 1, ("move", 1))
    rank.marker("ready", 1, ("ckpt", (0, 3)))
    assert rank.joins.unjoined("ready") == [("ckpt", (0, 3))]
    rank.join("ready", ("ckpt", (0, 3)))
    assert rank.joins.unjoined("ready") == []


def test_a_groups_round_cuts_only_its_members_and_a_wait_outside_them_joins_at_once():
    """A group's round (members 0 and 1 of 3): rank 2 never sends a marker of it, so a
    message from rank 2 is neither held nor late, and a rank blocked on rank 2 joins at
    once (rank 2 may wait for a member parked in the round)."""
    rank = Rank()
    rank.flush["groups"] = FlushRounds(0)
    rank.joins.add_level("groups", lambda: rank.flush["groups"], members=lambda rid: (0, 1))
    silent = {1: False, 2: False}.__getitem__
    rank.begun("groups", "G")
    assert not rank.joins.must_join_now([1], silent)  # a member: its marker will come
    assert rank.joins.must_join_now([2], silent)
    unreceived, late = rank.joins.cut("groups", "G")
    part = Part({}, {}, None, 0.0, list(late))
    rank.joins.join("groups", "G", part)
    rank.flush["groups"].start("G", (0, 1), [1, 2])
    assert not rank.joins.arrive(Env(2, 0)) and not rank.joins.arrive(Env(1, 0))
    assert [e.src for e in part.late] == [1]  # rank 1's was in transit at its cut
