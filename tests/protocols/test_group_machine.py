"""GroupCoordination's machine (``protocols/groups/machine.py``) step by step: members
driven by a harness that numbers and carries their messages, with no transport, no
asyncio and no coordinator (microseconds). The whole-run tests are in
``test_group_coordination.py``."""
from __future__ import annotations

import pytest

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack
from ftactors.protocols.groups.machine import PARTS_AHEAD_MAX, GroupMember
from ftactors.protocols.shared.units import Groups

GROUPS = Groups(((0, 2), (1,)), 3)  # rank 1 alone: 0 <-> 1 crosses groups, 0 <-> 2 does not


class Harness:
    """Members 0, 1 and 2, each message numbered per channel as the core does; what a
    member sends is delivered at once unless the test takes it off the wire."""

    def __init__(self, interval: int | None = 2):
        self.m = {r: GroupMember(r, GROUPS, interval) for r in range(3)}
        self.sent = {r: [0, 0, 0] for r in range(3)}
        self.received = {r: [0, 0, 0] for r in range(3)}
        self.caught_up: list[int] = []

    def send(self, src: int, dst: int, obj=None, deliver: bool = True) -> Envelope | None:
        seq = self.sent[src][dst]
        self.sent[src][dst] += 1
        env = Envelope(APP, src, dst, "world", 0, seq, pack(obj if obj is not None else seq))
        go, rr, _, _ = self.m[src].outgoing(env)
        if not go:
            return None
        if rr is not None:
            env.piggyback = {"groups": rr}
        if deliver:
            self.deliver(env)
        return env

    def deliver(self, env: Envelope) -> None:
        me = self.received[env.dst]
        if env.app_seq != me[env.src]:
            return  # a duplicate or an early message: the core drops or holds it
        me[env.src] += 1
        rr = env.piggyback.get("groups") if env.piggyback else None
        if self.m[env.dst].incoming(env.src, rr, me):
            self.caught_up.append(env.dst)

    def checkpoint(self, rank: int, position: tuple) -> None:
        self.m[rank].checkpointed(position, [(x, n) for x, n in enumerate(self.received[rank])
                                             if n])


def logged(member: GroupMember, dst: int) -> list[int]:
    return sorted(member.log.get(dst, {}))


def test_only_messages_that_cross_groups_are_logged():
    h = Harness()
    h.send(0, 1)
    h.send(0, 2)
    h.send(0, 1)
    assert logged(h.m[0], 1) == [0, 1] and logged(h.m[0], 2) == []
    assert h.m[0].logged == [2, sum(e.payload.nbytes for e in h.m[0].log[1].values())]


def test_a_committed_checkpoint_lets_the_sender_drop_what_it_holds_once():
    h = Harness()
    for _ in range(3):
        h.send(0, 1)
    h.checkpoint(1, (0, 4))          # rank 1's part holds messages 0..2 from rank 0
    h.send(0, 1)                      # message 3: after the cut
    h.send(1, 0)                      # not committed yet: no RR travels
    assert logged(h.m[0], 1) == [0, 1, 2, 3]
    assert h.m[1].committed((0, 4)) is True
    env = h.send(1, 0)
    assert env.piggyback == {"groups": 3}
    assert logged(h.m[0], 1) == [3] and h.m[0].collected == 3
    assert h.send(1, 0).piggyback is None  # owed once, sent once


def test_an_older_uncommitted_rr_is_dropped_by_a_newer_commit():
    h = Harness()
    h.send(0, 1)
    h.checkpoint(1, (0, 2))
    h.send(0, 1)
    h.checkpoint(1, (0, 4))
    h.m[1].committed((0, 4))
    assert h.m[1].rr == {} and h.m[1].piggyback == {0: 2}


def test_a_member_is_held_back_past_parts_ahead_max_until_a_set_completes():
    h = Harness()
    for i in range(PARTS_AHEAD_MAX):
        assert not h.m[1].held_back()
        h.checkpoint(1, (0, 2 * (i + 1)))
    assert h.m[1].held_back()
    assert h.m[1].committed((0, 2)) is True   # the oldest completes: one part ahead less
    assert not h.m[1].held_back() and h.m[1].ahead == [(0, 4), (0, 6)]
    assert h.m[1].committed((0, 2)) is False  # the same news again moves nothing


@pytest.mark.parametrize("iteration, position, last, due", [
    (0, (0, 0), None, False), (1, (0, 1), None, False), (2, (0, 2), None, True),
    (4, (0, 4), (0, 4), False),  # re-entered at the same position after a restore
    (4, (1, 4), (0, 4), True)])
def test_a_group_checkpoints_every_interval_once_per_position(iteration, position, last, due):
    m = GroupMember(1, GROUPS, 2)
    m.last = last
    assert m.due(iteration, position) is due
    assert GroupMember(1, GROUPS, None).due(iteration, position) is False


def test_a_restarted_peer_gets_from_the_log_what_its_part_lacks_up_to_the_fence():
    h = Harness()
    for _ in range(5):
        h.send(0, 1)
    # rank 1 restarts from a part that held 2 messages from rank 0; 5 were sent
    h.m[0].fence({1: 1}, {1: 2}, h.sent[0])
    h.send(0, 1, deliver=False)      # message 5: after the fence, goes by running on
    envs, upto = h.m[0].resend({1: 2}, h.sent[0])
    assert [e.app_seq for e in envs] == [2, 3, 4] and upto == {1: 5}
    assert all(e.piggyback is None for e in envs)
    assert h.m[0].resend({2: 0}, h.sent[0]) == ([], {})  # a same-group peer: no log


def test_a_restarted_member_skips_what_its_peer_holds_and_says_when_it_is_past_it():
    m = GroupMember(1, GROUPS, 2)
    m.last = (0, 4)
    m.restored({0: 3}, sent=[1, 0, 0])   # its part sent 1 to rank 0, which holds 3
    assert m.skip == {0: 3} and m.complete == (0, 4) and m.fenced == {0: 1, 2: 0}
    results = [m.outgoing(Envelope(APP, 1, 0, "world", 0, seq, pack(seq)))
               for seq in (1, 2, 3)]
    assert [(send, over) for send, _, over, _ in results] == [
        (False, False), (False, False), (True, True)]
    assert m.skipped == 2
    assert sorted(m.log[0]) == [1, 2, 3]  # skipped messages are logged all the same


def test_a_fence_replaces_an_older_skip_and_forgets_expected_resends():
    m = GroupMember(0, GROUPS, 2)
    m.skip = {1: 9}
    m.expect = {1: 4}
    m.fence({1: 3}, {1: 2}, sent=[0, 5, 0])  # rank 1 rolled back to holding 2 of 5
    assert m.skip == {} and m.fenced == {1: 5} and m.expect == {}
    m.fence({1: 4}, {1: 5}, sent=[0, 5, 0])  # it holds all this rank sent: nothing to skip
    assert m.skip == {}
    m.fence({1: 5}, {1: 7}, sent=[0, 5, 0])  # it holds more than this rank sent again
    assert m.skip == {1: 7}


def test_a_restarted_member_catches_up_when_the_last_resend_arrives():
    h = Harness()
    assert h.m[1].expect_resends({0: 2}, h.received[1]) is False
    h.send(0, 1)
    assert h.caught_up == []
    h.send(0, 1)
    assert h.caught_up == [1] and h.m[1].expect is None
    assert GroupMember(1, GROUPS, 2).expect_resends({0: 0}, [0, 0, 0]) is True


def test_the_state_a_snapshot_keeps_comes_back():
    h = Harness()
    h.send(0, 1)
    h.m[0].last = (0, 2)
    h.m[0].piggyback = {1: 1}
    copy = GroupMember(0, GROUPS, 2)
    copy.restore(h.m[0].state())
    assert (sorted(copy.log[1]), copy.last, copy.piggyback) == ([0], (0, 2), {1: 1})
    copy.log[1].clear()
    assert logged(h.m[0], 1) == [0]  # the snapshot's log is its own


def test_a_part_taken_off_a_safe_point_fences_and_skips_at_what_it_had_sent():
    """Rank 0's part was taken "now": its base had sent rank 1 two messages, the part
    four (``sent_at_cut``); rank 1 holds one. The re-execution does not send messages
    2 and 3 again (``Endpoint.send_app``), so the resend from the restored log covers
    1..3: none lost, none sent twice."""
    h = Harness()
    for _ in range(4):
        h.send(0, 1, deliver=False)
    state = h.m[0].state()            # the part: its log holds 0..3
    m = GroupMember(0, GROUPS, 2)
    m.restore(state)
    m.restored({1: 1}, sent=[0, 2, 0], sent_at_cut=[0, 4, 0])
    assert m.fenced == {1: 4, 2: 0} and m.skip == {}
    envs, upto = m.resend({1: 1}, [0, 2, 0])
    assert [e.app_seq for e in envs] == [1, 2, 3] and upto == {1: 4}
    # a peer that holds more than the part had sent is skipped up to what it holds
    m.restored({1: 6}, sent=[0, 2, 0], sent_at_cut=[0, 4, 0])
    assert m.skip == {1: 6} and m.fenced[1] == 4
    # at a safe point (no sent_at_cut) the fence is the base's count, as before
    m.restored({1: 1}, sent=[0, 2, 0])
    assert m.fenced == {1: 2, 2: 0}
