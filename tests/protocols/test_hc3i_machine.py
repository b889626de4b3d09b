"""HC3I's two-phase commit of a CLC (``protocols/hc3i/machine.ClcRound``, Algorithms 3-4)
step by step: each member's view of the round, driven by hand with no transport. The
dependency rules' tests and the whole-run tests are in ``test_ddv_piggyback.py``."""
from __future__ import annotations

from ftactors.protocols.hc3i.machine import ClcRound

MEMBERS = [0, 1, 2]  # one cluster (cluster index 1 of 3 in the DDVs below)


def test_the_smallest_initiator_wins_and_hears_again_what_the_other_was_told():
    r = ClcRound(sn=5, initiator=2)
    r.told = True
    assert r.requested_by(1) == (True, False)  # the cut again, to rank 1
    assert r.initiator == 1
    assert r.requested_by(2) == (False, False)  # a larger one changes nothing
    r.acked = True
    assert r.requested_by(0) == (True, True)
    assert (r.initiator, r.cuts, r.acks) == (0, {}, {})


def test_a_round_being_committed_keeps_its_initiator():
    r = ClcRound(sn=5, initiator=1)
    r.told = r.acked = True
    assert r.ack_in(1, [0, 5, 0], None, size=1) is True
    assert r.requested_by(0) == (False, False) and r.initiator == 1
    assert not r.led_by(1, 5)  # it takes no more answers


def test_an_initiator_leads_only_its_own_round():
    r = ClcRound(sn=5, initiator=1)
    assert r.led_by(1, 5) and not r.led_by(0, 5) and not r.led_by(1, 6)


def test_every_cut_in_tells_each_member_what_to_receive_before_its_part():
    r = ClcRound(sn=5, initiator=0)
    assert r.cut_in(0, {1: 3}, MEMBERS) is None       # rank 0 sent 3 to rank 1
    assert r.cut_in(2, {0: 1, 1: 2}, MEMBERS) is None
    assert r.cut_in(1, {}, MEMBERS) == {0: {2: 1}, 1: {0: 3, 2: 2}, 2: {}}


def test_the_last_acknowledgement_commits_with_the_merged_ddv_and_its_causes():
    r = ClcRound(sn=5, initiator=0)
    assert r.ack_in(0, [2, 4, 0], None, size=3) is False
    assert r.ack_in(2, [0, 4, 7], 2, size=3) is False
    assert r.ack_in(1, [3, 4, 1], 0, size=3) is True and r.committing
    assert r.commit_ddv(me=1) == ([3, 5, 7], [0, 2])  # its own entry is the new SN


def test_an_unforced_round_commits_with_no_cause():
    r = ClcRound(sn=2, initiator=0)
    for m in MEMBERS:
        r.ack_in(m, [1, 1, 0], None, size=3)
    assert r.commit_ddv(me=1) == ([1, 2, 0], [])
