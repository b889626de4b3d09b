"""HC3I's member machine (``protocols/hc3i/member.py``) step by step: the members of two
clusters, each a ``ClcMember``, with a harness that numbers and carries their messages
and acknowledgements and drives the two-phase commit, with no transport, no asyncio and
no coordinator (microseconds). The whole-run tests are in ``test_ddv_piggyback.py``."""
from __future__ import annotations

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack
from ftactors.protocols.hc3i.machine import UNACKED, ClcRound
from ftactors.protocols.hc3i.member import (AT_COMMIT, CUT, DELIVER, DEPEND, FORCE, HELD,
                                            LATE, ClcMember, Log)
from ftactors.protocols.shared.units import Groups

GROUPS = Groups(((0, 1), (2, 3)), 4)  # cluster 0: ranks 0 and 1; cluster 1: ranks 2 and 3


class Pair:
    """Two clusters' members. Each message is numbered per channel as the core does and
    goes only when the test carries it (``receive``); what a member hands on is recorded
    in ``delivered``, and an acknowledgement reaches the sender's log at once."""

    def __init__(self, log_bytes_max: float | None = None):
        self.m = {r: ClcMember(r, GROUPS, log_bytes_max=log_bytes_max) for r in range(4)}
        self.sent = {r: [0] * 4 for r in range(4)}
        self.received = {r: [0] * 4 for r in range(4)}
        self.delivered: dict[int, list] = {r: [] for r in range(4)}
        self.acks: list[tuple] = []  # (receiver, sender, app_seq, SN) as "got" carries them
        self.forced: list[int] = []  # ranks that started a forced CLC
        self.can_snapshot = True

    def send(self, src: int, dst: int) -> Envelope | None:
        """``src`` sends to ``dst``: the envelope on the wire (None: held for a commit)."""
        seq = self.sent[src][dst]
        self.sent[src][dst] += 1
        env = Envelope(APP, src, dst, "world", 0, seq, pack((src, seq)))
        carried, _, _ = self.m[src].outgoing(env)
        if carried is AT_COMMIT:
            return None
        if carried is not None:
            env.piggyback = {"hc3i": carried}
        return env

    def receive(self, env: Envelope) -> int:
        m = self.m[env.dst]
        carried = env.piggyback.get("hc3i") if env.piggyback else None
        if m.cluster_of[env.src] == m.me:
            what = m.from_member(env, carried, self.sent[env.dst])
            if what in (DELIVER, LATE):
                self._deliver(env)
            return what
        what, ack, j, _ = m.from_outside(env, carried, lambda: self.can_snapshot)
        if ack is not None:
            self.acks.append((env.dst, env.src, env.app_seq, ack))
            self.m[env.src].log.acked(env.dst, env.app_seq, ack)
        if what in (DELIVER, DEPEND):
            self._deliver(env)
        elif what is FORCE:  # the round starts at once (the test finishes it)
            self.forced.append(env.dst)
            self.start(env.dst, forced_by=j)
        return what

    def _deliver(self, env: Envelope) -> None:
        self.received[env.dst][env.src] += 1
        self.delivered[env.dst].append((env.src, env.app_seq))

    # ------------------------------------------------ the 2PC, step by step
    def start(self, rank: int, forced_by: int | None = None) -> ClcRound:
        r = self.m[rank].initiate(forced_by)
        self.m[rank].cut(r.sn, self.sent[rank])
        r.told = True
        return r

    def join(self, rank: int, r: ClcRound) -> None:
        joined, _, _ = self.m[rank].requested(r.initiator, r.sn)
        assert joined is not None
        self.m[rank].cut(r.sn, self.sent[rank])
        joined.told = True

    def tell(self, r: ClcRound) -> None:
        """Every member's cut reaches the initiator, which tells each what to await."""
        members = GROUPS.members(r.initiator)
        lead = self.m[r.initiator].round
        for q in members:
            expect = lead.cut_in(q, self.m[q].cuts.get(r.sn, {}), members)
        for q in members:
            self.m[q].expected(r.sn, expect[q])

    def part(self, rank: int) -> bool:
        """Whether ``rank`` takes its part now (what it held till then is delivered)."""
        m = self.m[rank]
        r = m.part_due(self.received[rank])
        if r is None:
            return False
        for env in m.part_taken(r):
            self._deliver(env)
        return True

    def commit(self, r: ClcRound) -> list[Envelope]:
        """Every acknowledgement in, every member commits: returns what they send then
        to other clusters (the test carries it); what they held is handled."""
        members = GROUPS.members(r.initiator)
        lead = self.m[r.initiator].round
        for q in members:
            mine = self.m[q].round
            lead.ack_in(q, mine.ddv, mine.forced_by, len(members))
        ddv, _ = lead.commit_ddv(self.m[r.initiator].me)
        out = []
        for q in members:
            intra, held_out = self.m[q].committed(r.sn, ddv)
            self._end(q, intra)
            out += [self._stamped(e) for e in held_out]
        return out

    def _end(self, rank: int, intra: list[Envelope]) -> None:
        for env in intra:
            self._deliver(env)
        while (env := self.m[rank].next_outside()) is not None:
            self.receive(env)

    @staticmethod
    def _stamped(entry) -> Envelope:
        e = entry.env
        return Envelope(APP, e.src, e.dst, e.comm, e.tag, e.app_seq, e.payload,
                        piggyback={"hc3i": entry.sn})

    def clc(self, rank: int) -> list[Envelope]:
        """A whole unforced CLC of ``rank``'s cluster, initiated by ``rank``."""
        return self.finish(self.start(rank))

    def finish(self, r: ClcRound) -> list[Envelope]:
        """The rest of round ``r``, with no message in transit inside the cluster."""
        rank = r.initiator
        for q in GROUPS.members(rank):
            if q != rank:
                self.join(q, r)
        self.tell(r)
        for q in GROUPS.members(rank):
            assert self.part(q)
        return self.commit(r)


def acks_of(log: Log, dst: int) -> list:
    return [e.ack for _, e in sorted(log.entries.get(dst, {}).items())]


# ------------------------------------------------------------ forcing (Alg. 6)
def test_a_newer_sn_forces_a_clc_before_delivery_and_the_same_sn_does_not():
    p = Pair()
    m1 = p.send(0, 2)                     # Figure 5's m1: SN 1, cluster 1 has seen 0
    assert m1.piggyback == {"hc3i": 1}
    assert p.receive(m1) == FORCE
    assert p.delivered[2] == [] and p.forced == [2]
    assert p.acks == [(2, 0, 0, 2)]       # acknowledged with the SN of the CLC to come
    assert p.m[2].ddv == [1, 1]
    p.finish(p.m[2].round)
    assert p.m[2].ddv == [1, 2] and p.m[3].ddv == [1, 2]
    assert p.delivered[2] == [(0, 0)]     # after the commit, by the CLC it forced
    assert p.receive(p.send(0, 2)) == DELIVER  # m2: SN 1 = the DDV's entry, no CLC
    assert p.acks[-1] == (2, 0, 1, 2) and p.forced == [2]


def test_a_cluster_that_cannot_checkpoint_keeps_a_forcing_message_as_a_dependency():
    p = Pair()
    p.can_snapshot = False                # rank 2 has left its loop
    assert p.receive(p.send(0, 2)) == DEPEND
    assert p.delivered[2] == [(0, 0)] and p.acks == [(2, 0, 0, 1)]
    assert p.m[2].ddv == [1, 1] and p.forced == []  # the current DDV holds it


# ----------------------------------------------- the cut and holding (Alg. 2-4)
def test_messages_from_another_cluster_during_a_clc_wait_for_the_commit_in_order():
    p = Pair()
    r = p.start(0)                        # cluster 0 starts CLC 2
    for _ in range(2):
        assert p.receive(p.send(2, 0)) == HELD
    assert p.acks == [] and p.delivered[0] == []
    p.join(1, r)
    p.tell(r)
    assert p.part(0) and p.part(1)
    assert p.m[0].unreceived() == {2: 2}  # not counted as received in the part
    p.commit(r)
    # handled at the commit: the first one's SN 1 is news to cluster 0, so it forces
    # CLC 3 and both wait for it, in order
    assert p.acks == [(0, 2, 0, 3)] and p.forced == [0] and p.delivered[0] == []
    p.finish(p.m[0].round)
    assert p.delivered[0] == [(2, 0), (2, 1)] and p.m[0].sn == 3


def test_a_message_to_another_cluster_after_the_cut_leaves_at_the_commit_with_the_new_sn():
    p = Pair()
    r = p.start(0)
    assert p.send(0, 2) is None           # after rank 0's cut: held
    assert acks_of(p.m[0].log, 2) == [UNACKED]  # logged already
    assert p.m[0].log.resend({1: 1}, False) == []  # it has not left: nothing to send again
    p.join(1, r)
    p.tell(r)
    assert p.part(0) and p.part(1)
    (out,) = p.commit(r)
    assert out.piggyback == {"hc3i": 2} and out.app_seq == 0
    assert p.receive(out) == FORCE        # cluster 1 sees it comes after CLC 2


def test_a_message_sent_after_its_senders_cut_is_held_and_cuts_its_receiver():
    p = Pair()
    r = p.start(0)                        # the request has not reached rank 1 yet
    a = p.send(0, 1)
    assert a.piggyback == {"hc3i": 2}     # tagged with the CLC of rank 0's cut
    assert p.receive(a) == CUT            # the first news of CLC 2 at rank 1: it cuts
    assert p.m[1].cut_sn == 2 and p.m[1].cuts[2] == {}
    assert p.receive(p.send(0, 1)) == HELD  # a second one: held, no second cut
    assert p.m[1].unreceived() == {0: 2} and p.delivered[1] == []
    p.join(1, r)                          # the request arrives: rank 1 has cut already
    p.tell(r)
    assert p.part(1)                      # rank 0 sent nothing before its cut
    assert p.delivered[1] == [(0, 0), (0, 1)]  # after the part, not in it
    assert p.part(0)
    p.commit(r)
    assert p.send(0, 1).piggyback is None  # committed: untagged again


def test_a_message_sent_before_its_senders_cut_arriving_after_this_ones_is_awaited():
    p = Pair()
    m = p.send(1, 0)                      # in transit across rank 0's cut
    r = p.start(0)
    p.join(1, r)
    p.tell(r)                             # rank 1 sent 1 message to rank 0 before its cut
    assert p.part(1)
    assert not p.part(0)                  # rank 0's part waits for it
    assert p.receive(m) == LATE           # delivered, and sealed into the part
    assert p.part(0)
    assert p.commit(r) == [] and p.m[0].sn == p.m[1].sn == 2


def test_messages_from_a_sender_with_held_ones_stay_behind_them():
    p = Pair()
    p.start(0)
    a = p.send(0, 1)
    assert p.receive(a) == CUT
    p.m[0].aborted()                      # rank 0's cluster can no longer checkpoint
    b = p.send(0, 1)
    assert b.piggyback is None
    assert p.receive(b) == HELD           # behind a, though untagged
    intra, out = p.m[1].aborted()
    assert [e.app_seq for e in intra] == [0, 1] and out == []


def test_a_request_for_the_clc_after_the_next_waits_for_the_commit():
    p = Pair()
    r = p.start(1)
    assert p.m[0].requested(1, 3) == (None, False, False)  # ahead of CLC 2's commit: kept
    p.join(0, r)
    assert p.m[0].requested(1, 2) == (None, False, False)  # the same request again
    p.tell(r)
    assert p.part(0) and p.part(1)
    p.commit(r)
    assert p.m[0].committed(2, [9, 9]) is None and p.m[0].ddv == [2, 0]  # again: moot
    assert p.m[0].requested(1, 2) == (None, False, False)  # committed: moot
    joined = p.m[0].early_round()
    assert (joined.sn, joined.initiator, p.m[0].round) == (3, 1, joined)


# ------------------------------------------ logs and acknowledgements (Alg. 5, 7)
def sends_acked(p: Pair) -> None:
    """Rank 0 sends 4 messages to rank 2: acknowledged with SNs 2, 2, 3, and never."""
    assert p.receive(p.send(0, 2)) == FORCE
    p.finish(p.m[2].round)                # cluster 1: CLC 2
    assert p.receive(p.send(0, 2)) == DELIVER
    p.clc(3)                              # cluster 1: unforced CLC 3
    assert p.receive(p.send(0, 2)) == DELIVER
    p.send(0, 2)                          # in transit
    assert acks_of(p.m[0].log, 2) == [2, 2, 3, UNACKED]


def test_a_rollback_sends_again_what_was_delivered_after_the_target_or_never_acked():
    p = Pair()
    sends_acked(p)
    again = p.m[0].recovered({1: 3}, None)    # cluster 1 back to CLC 3
    assert [e.env.app_seq for e in again] == [2, 3]
    assert acks_of(p.m[0].log, 2) == [2, 2, UNACKED, UNACKED]  # the new receipt acks them
    assert p.m[0].ddv == [1, 0]               # rank 0 did not roll back
    again = p.m[0].recovered({1: 2}, None)    # deeper: CLC 2
    assert [e.env.app_seq for e in again] == [0, 1, 2, 3]


def test_a_rolled_back_rank_sends_again_what_it_never_saw_acknowledged():
    p = Pair()
    sends_acked(p)
    p.m[0].ddv[1] = 3                         # as if it had received from cluster 1
    saved = p.m[0].state(sn=2)                # its part of a CLC 2 (log included)
    assert (saved["sn"], saved["ddv"]) == (2, [2, 3])  # as after the commit
    back = ClcMember(0, GROUPS)
    back.restore(saved)
    assert (back.sn, back.cut_sn, back.part_sn, back.ddv) == (2, 2, 2, [2, 3])
    again = back.recovered({0: 2}, [2, 4])    # only its own cluster rolled back
    assert [e.env.app_seq for e in again] == [3]
    assert back.ddv == [2, 4]  # merged with the commit's (another member's entry was newer)


def test_a_collection_trims_what_was_acknowledged_below_the_receivers_smallest_sn():
    p = Pair()
    sends_acked(p)
    log = p.m[0].log
    full = log.bytes
    assert log.collect([1, 3]) == (4, 2)      # a recovery line can still undo SN >= 3
    assert acks_of(log, 2) == [3, UNACKED]
    assert log.bytes == full // 2             # equal-sized payloads
    assert log.collect([1, 3]) == (2, 2)


def test_a_log_past_its_maximum_asks_for_one_collection_at_a_time():
    p = Pair(log_bytes_max=1)
    m = p.m[0]
    env = Envelope(APP, 0, 2, "world", 0, 0, pack(0))
    assert m.outgoing(env) == (1, env.payload.nbytes, True)
    env2 = Envelope(APP, 0, 2, "world", 0, 1, pack(0))
    assert m.outgoing(env2)[2] is False       # asked already
    assert p.m[1].outgoing(Envelope(APP, 1, 0, "world", 0, 0, pack(0)))[1:] == (0, False)
    m.log.collect([1, 1])                     # nothing acked: nothing trimmed, still full
    assert m.outgoing(Envelope(APP, 0, 2, "world", 0, 2, pack(0)))[2] is True


def test_duplicate_late_and_stale_acknowledgements():
    p = Pair()
    sends_acked(p)
    log = p.m[0].log
    log.acked(2, 0, 2)                        # a duplicate: the same SN
    assert acks_of(log, 2) == [2, 2, 3, UNACKED]
    log.collect([1, 3])
    log.acked(2, 0, 5)                        # for an entry trimmed since: nothing comes back
    assert sorted(log.entries[2]) == [2, 3]
    # a forced message whose CLC is aborted: acked with the next SN, then delivered under
    # the current one; the later acknowledgement is the one a rollback must go by
    q = Pair()
    assert q.receive(q.send(0, 2)) == FORCE
    q.m[3].aborted()
    intra, _ = q.m[2].aborted()
    q._end(2, intra)
    assert q.delivered[2] == [(0, 0)] and q.acks == [(2, 0, 0, 2), (2, 0, 0, 1)]
    assert acks_of(q.m[0].log, 2) == [1]
    assert [e.env.app_seq for e in q.m[0].recovered({1: 1}, None)] == [0]
