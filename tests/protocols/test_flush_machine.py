"""Step tests of the ready-message flush (CoCheck section 4, ``protocols/shared/flush.py``:
``FlushRounds``), several ranks' machines with no transport: the test carries every
application message and every flush message on FIFO channels, in an order drawn from a
seed, and ranks go on sending after they joined a round (a fast peer computes on).
After a round, every rank's cut must hold exactly what each peer sent it before that
peer joined: CoCheck's consistent cut."""
import random

import pytest

from ftactors.base._errors import ProtocolError
from ftactors.protocols.shared.flush import FlushRounds, Send


class World:
    """``n`` ranks, their flush machines and FIFO channels (application messages are
    ``("app", k)``, flush messages ``(op, data)``)."""

    def __init__(self, n: int, seed: int = 0):
        self.n = n
        self.rng = random.Random(seed)
        self.machines = [FlushRounds(r) for r in range(n)]
        self.channels = {(a, b): [] for a in range(n) for b in range(n) if a != b}
        self.sent = [[0] * n for _ in range(n)]       # [src][dst] application messages
        self.received = [[0] * n for _ in range(n)]   # [dst][src]
        self.at_start = {}                             # (round, rank) -> its sent row then
        self.markers = 0

    def app(self, src: int, dst: int) -> None:
        self.sent[src][dst] += 1
        self.channels[(src, dst)].append(("app", self.sent[src][dst]))

    def perform(self, src: int, effects: list[Send]) -> None:
        for e in effects:
            for dst in e.to:
                assert dst != src, "a rank sends itself no flush message"
                self.markers += e.op == "marker"
                self.channels[(src, dst)].append((e.op, e.data))

    def start(self, rank: int, round_id, members, data=None, also=(), announce=False) -> None:
        self.at_start[(round_id, rank)] = list(self.sent[rank])
        sent_to = [p for p in range(self.n) if self.sent[rank][p]]
        self.perform(rank, self.machines[rank].start(round_id, members, sent_to, data, also,
                                                     announce=announce))

    def step(self) -> bool:
        """Deliver the head of one non-empty channel (drawn); False: all empty."""
        busy = [c for c, q in self.channels.items() if q]
        if not busy:
            return False
        src, dst = self.rng.choice(busy)
        op, data = self.channels[(src, dst)].pop(0)
        if op == "app":
            self.received[dst][src] += 1
        else:
            self.perform(dst, self.machines[dst].take(src, op, data, self.received[dst][src]))
        return True

    def complete(self, rank: int, round_id):
        return self.machines[rank].complete(
            round_id, [p for p in range(self.n) if self.received[rank][p]])


def run_round(world: World, members, talk, data=lambda r: None, also=lambda r: (),
              chatter: int = 3):
    """Ranks exchange ``talk`` (pairs) before the round; each member joins in a drawn
    order between deliveries, and every rank keeps sending along ``talk`` after joining.
    Returns each member's (values, cut) once complete."""
    for src, dst in talk:
        world.app(src, dst)
    waiting, done = list(members), {}
    world.rng.shuffle(waiting)
    joined = set()
    while len(done) < len(members):
        if waiting and world.rng.random() < 0.5:
            r = waiting.pop()
            world.start(r, "R", members, data(r), also(r))
            joined.add(r)
        elif world.rng.random() < 0.3 and chatter:
            src, dst = world.rng.choice(talk)
            world.app(src, dst)  # after its join or before, as a real rank computes on
            chatter -= 1
        elif not world.step() and not waiting:
            raise AssertionError(f"stuck: complete {sorted(done)}, channels empty")
        for r in joined - set(done):
            got = world.complete(r, "R")
            if got is not None:
                done[r] = got
    return done


RING = [(r, (r + 1) % 5) for r in range(5)] + [((r + 1) % 5, r) for r in range(5)]


@pytest.mark.parametrize("seed", range(40))
def test_every_cut_holds_exactly_what_was_sent_before_the_senders_marker(seed):
    world = World(5, seed)
    done = run_round(world, range(5), RING, data=lambda r: 7 if r == 0 else None)
    for q, (values, cut, *_) in done.items():
        assert values == {0: 7}
        for p in range(5):
            if p != q:
                assert cut.get(p, 0) == world.at_start[("R", p)][q], (p, q, cut)


def test_markers_go_only_on_channels_that_carried_messages_and_to_also():
    world = World(6)
    talk = [(0, 1), (1, 0), (2, 3)]
    done = run_round(world, range(6), talk, also=lambda r: (5,) if r == 4 else (),
                     chatter=0)
    assert world.markers == 4  # 0->1, 1->0, 2->3, and 4->5 (its "also")
    assert done[3][1] == {2: 1}  # rank 3 waited for rank 2's marker only
    assert done[5][1] == {4: 0}  # 4's marker came with nothing before it


def test_a_member_that_sent_nothing_before_joining_is_cut_at_zero():
    """Rank 1 sends to 0 only after joining: its marker never goes to 0, and 0 must
    leave out what 1 sent after it (the cut says 0)."""
    world = World(3)
    world.start(1, "R", range(3))  # rank 1 first, having sent nothing
    world.app(1, 0)                 # then computes on and sends
    while world.step():
        pass
    for r in (0, 2):
        world.start(r, "R", range(3))
    while world.step():
        pass
    values, cut, *_ = world.complete(0, "R")
    assert world.received[0][1] == 1 and cut[1] == 0


def test_a_group_round_waits_for_its_members_only():
    world = World(4)
    for src, dst in [(0, 1), (2, 1), (1, 0), (0, 3)]:
        world.app(src, dst)
    for r in (0, 1):
        world.start(r, "G", [0, 1])
    while world.step():
        pass
    assert world.markers == 2  # 0->1 and 1->0; none to 3, which 0 talks to but is not in it
    for r in (0, 1):
        values, cut, *_ = world.complete(r, "G")
        assert 2 not in cut  # rank 2 is not in the round: its messages are the logs'


def test_every_member_agrees_on_the_values():
    world = World(4, 3)
    done = run_round(world, range(4), RING[:0] + [(0, 1), (1, 2), (2, 3), (3, 0)],
                     data=lambda r: r * 10 if r % 2 else None)
    assert {k: v for k, (v, *_) in done.items()} == {r: {1: 10, 3: 30} for r in range(4)}


def test_waiting_for_a_round_not_started_is_an_error():
    with pytest.raises(ProtocolError, match="before it was started"):
        FlushRounds(0).complete("R", [])


def test_a_migrations_markers_are_waited_for_by_name():
    m = FlushRounds(2)
    assert m.markers_from("move", [0, 1]) is None
    m.take(0, "marker", ("move", "a"), 5)
    assert m.markers_from("move", [0, 1]) is None
    m.take(1, "marker", ("move", "b"), 0)
    assert m.markers_from("move", [0, 1]) == {0: "a", 1: "b"}
    assert "move" not in m.rounds  # over


def test_an_unknown_flush_message_is_an_error():
    with pytest.raises(ProtocolError, match="unknown flush message 'nope'"):
        FlushRounds(0).take(1, "nope", None, 0)


def test_the_root_tells_the_members_no_marker_reached_that_a_round_began():
    """Markers go only on channels in use: a member no joiner ever sent to learns of the
    round from the root (``flush_begin``), once per round, except those the first
    joiner marked."""
    world = World(4)
    world.app(1, 2)
    world.start(1, "R", range(4), announce=True)  # rank 1 marks rank 2; the root is 0
    while world.step():
        pass
    for r in (0, 2, 3):  # rank 3: from the root's flush_begin only
        assert "R" in world.machines[r].rounds and world.machines[r].rounds["R"].members is None
    assert world.markers == 1
    for r in (2, 3, 0):
        world.start(r, "R", range(4), announce=True)
    while world.step():
        pass
    assert all(world.complete(r, "R") is not None for r in range(4))


def test_a_lazy_marker_precedes_the_first_message_on_an_unmarked_channel_uncounted():
    """Rank 1 joins having sent rank 0 nothing, then sends to it: a marker goes first
    (so rank 0 knows the message is post-cut), but the root's count does not include
    it, and a second send needs none."""
    m1, m0 = FlushRounds(1), FlushRounds(0)
    effects = m1.start("R", range(2), sent_to=[], announce=True)
    assert [e.op for e in effects] == ["flush_count"]
    lazy = m1.before_send(0)
    assert [(e.to, e.op, e.data) for e in lazy] == [((0,), "marker", ("R", None, False))]
    assert m1.before_send(0) == []
    m0.take(1, "marker", lazy[0].data, 0)
    assert 1 in m0.rounds["R"].markers and m0.rounds["R"].counted == 0
    go = (m0.start("R", range(2), sent_to=[], announce=True)
          + m0.take(1, "flush_count", effects[0].data, 0))
    go = [e for e in go if e.op == "flush_go"]
    assert go[0].to == (1,) and go[0].data[1] == 0  # rank 1 waits for no marker
    assert m0.complete("R", [1]) is not None  # rank 0 waits for no counted marker
    m1.take(0, "flush_go", go[0].data, 0)
    assert m1.before_send(0) == []  # every member joined: no more lazy markers


def test_a_lazy_marker_that_comes_after_the_round_is_over_does_not_begin_it_again():
    """Rank 1 sends rank 0 its first message after joining, before the root's count has
    reached it: a lazy marker goes first. Rank 0 (the root) completed the round already
    (the lazy marker is not in its count): the marker is dropped, and the round is not
    begun again under the same name (it would be joined and checkpointed twice)."""
    m1, m0 = FlushRounds(1), FlushRounds(0)
    count = m1.start("R", range(2), sent_to=[], announce=True)
    go = m0.start("R", range(2), sent_to=[], announce=True) + m0.take(1, "flush_count",
                                                                     count[0].data, 0)
    assert m0.complete("R", []) is not None and "R" not in m0.rounds
    lazy = m1.before_send(0)
    assert [e.op for e in lazy] == ["marker"]
    assert m0.take(1, "marker", lazy[0].data, 0) == []
    assert "R" not in m0.rounds  # not a round to join again
    m1.take(0, "flush_go", [e for e in go if e.op == "flush_go"][0].data, 0)
    assert m1.complete("R", []) is not None


def test_a_round_over_is_remembered_only_for_the_last_few():
    """The record of rounds over is bounded (``DONE_KEPT``): a long run keeps no
    growing set."""
    from ftactors.protocols.shared.flush import DONE_KEPT
    m0 = FlushRounds(0)
    for k in range(DONE_KEPT + 5):
        m0.start(k, range(1), sent_to=[])
        assert m0.complete(k, []) is not None
    assert list(m0.done) == list(range(5, DONE_KEPT + 5))


def test_a_round_begun_again_under_its_name_completes_again():
    """ReadyMessageFlush's coordinator may place a position twice: every participant
    begins the round of that name again once it is over here, some before others. A
    counted marker of it that reaches a rank before that rank begins it again is taken
    (only a lazy one of a round over is dropped), and the round completes again."""
    world = World(3)
    for _ in range(2):
        world.app(1, 0)
        world.app(2, 1)
        world.start(1, "R", range(3), announce=True)
        while world.step():  # rank 1's marker reaches rank 0 before rank 0 begins
            pass
        for r in (0, 2):
            world.start(r, "R", range(3), announce=True)
        while world.step():
            pass
        assert all(world.complete(r, "R") is not None for r in range(3))
