"""Protocol stacks: roles, refusals, and multi-level recovery that escalates from the
cheapest level (partner copies, then Reed-Solomon blocks, then the global set) on
local and sim, with results bit-identical to the failure-free run."""
import pytest

import ftactors as ft
from ftactors.protocols import (DDVPiggyback, GroupCoordination, ReadyMessageFlush, RSBackup,
                                StandbyReplacement)

from .programs import Heat1D
from .test_rs_backup import TOPOLOGY, assert_same, reference

# The lost-job tests give no spare (nothing survives to use one) and resume jobs with
# no interval on purpose; the test of partner copies without a spare asserts the warning.
pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"),
              pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]


class Partner(StandbyReplacement, Heat1D):
    backup_interval = 2


class PartnerStable(StandbyReplacement, ReadyMessageFlush, Heat1D):
    backup_interval = 2


class EncodedStable(RSBackup, ReadyMessageFlush, Heat1D):
    pass


class EncodedPartner(RSBackup, StandbyReplacement, Heat1D):
    backup_interval = 2


class ThreeLevels(RSBackup, StandbyReplacement, ReadyMessageFlush, Heat1D):
    backup_interval = 2


def run(cls, tmp_path, kills, transport="local", **kw):
    options = {**TOPOLOGY, "checkpoint_interval": 5, "checkpoint_storage": "stable",
               "checkpoint_dir": str(tmp_path / "stable"), **kw}
    if not issubclass(cls, ReadyMessageFlush):
        options = {k: v for k, v in options.items() if not k.startswith("checkpoint")}
    if not issubclass(cls, RSBackup):
        options = {k: v for k, v in options.items() if not k.startswith("rs_")}
    spares = options.pop("spares", 3 if issubclass(cls, StandbyReplacement) else 0)
    return ft.run(cls, ranks=8, spares=spares, transport=transport,
                  kwargs={"iterations": 20}, chaos=ft.Chaos(kill=kills), **options)


PAIR = [(2, 11), ft.Kill(6, recovery_round=0)]
"""Partners 2 <-> 6 lost together: 6 dies as the recovery of 2 begins."""


def group_lost(round_no: int) -> list:
    """RS group 0 (ranks 0, 2) and rank 4, which holds one of its parity blocks, lost
    together in recovery round ``round_no``."""
    return [(0, 14), ft.Kill(2, recovery_round=round_no), ft.Kill(4, recovery_round=round_no)]


def levels(r) -> list[str]:
    """The level that recovered each recovery round, in order."""
    return [e.detail["level"] for e in r.events_of("recovery_level")]


def exhausted(r) -> list[str]:
    return [e.detail["level"] for e in r.events_of("level_exhausted")]


# ----------------------------------------------------------------- composition
def test_two_protocols_of_one_role_are_refused_naming_the_role():
    for a, b in [(ReadyMessageFlush, GroupCoordination), (GroupCoordination, DDVPiggyback),
                 (ReadyMessageFlush, DDVPiggyback)]:
        with pytest.raises(TypeError, match="both take the consistency role"):
            type("Bad", (a, b, Heat1D), {})


def test_a_wrong_order_is_refused_naming_the_right_one():
    with pytest.raises(TypeError, match=r"put RSBackup before StandbyReplacement: stack them "
                                        r"as \(RSBackup, StandbyReplacement, ReadyMessageFlush"):
        type("Bad", (StandbyReplacement, RSBackup, ReadyMessageFlush, Heat1D), {})
    with pytest.raises(TypeError, match="put StandbyReplacement before ReadyMessageFlush"):
        type("Bad", (ReadyMessageFlush, StandbyReplacement, Heat1D), {})


# ------------------------------------------------------- one level, then the next
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_partner_copies_recover_one_rank_online(tmp_path, transport):
    r = run(PartnerStable, tmp_path, [(2, 11)], transport)
    assert_same(r.results, reference())
    assert levels(r) == ["standby"] and exhausted(r) == []
    assert r.events_of("checkpoint")  # the stable level kept its own schedule
    assert not r.events_of("rollback")


def test_without_a_spare_partner_copies_recover_in_a_new_actor(tmp_path):
    """Below a costlier level, no spare left is no reason to roll every rank back."""
    with pytest.warns(ft.NoSparesWarning, match="restarts a failed rank in a new actor"):
        r = run(PartnerStable, tmp_path, [(2, 11)], "sim", spares=0)
    assert_same(r.results, reference())
    assert levels(r) == ["standby"] and exhausted(r) == []
    assert [e.detail["warm"] for e in r.events_of("respawned")] == [False]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_lost_partner_pair_escalates_to_the_global_set(tmp_path, transport):
    r = run(PartnerStable, tmp_path, PAIR, transport)
    assert_same(r.results, reference())
    assert exhausted(r) == ["standby"] and levels(r) == ["ready_flush"]
    assert r.events_of("rollback")[0].detail["position"] == (0, 10)


def test_the_stable_level_restarts_a_lost_job(tmp_path):
    run(PartnerStable, tmp_path, [])
    r = ft.run(PartnerStable, ranks=8, spares=1, transport="local", kwargs={"iterations": 20},
               restart_from=str(tmp_path / "stable"))
    assert_same(r.results, reference())
    restored = {e.detail["position"] for e in r.events_of("restored")}
    assert restored == {(0, 15)}  # the last set: safe points are iterations 0-19


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_job_lost_whole_is_not_recovered_and_a_new_job_resumes_it(tmp_path, transport):
    """Chaos(job_lost_at=): every rank dies there and no level is tried (the partner
    copies and the spare would have recovered one rank); a new job resumes from the
    newest stable set the lost one stored (every 5 iterations: at 10 on sim; on local a
    manifest being written as the job is lost may land after its last event)."""
    with pytest.raises(ft.JobLost, match="whole job was lost at iteration 13") as info:
        ft.run(PartnerStable, ranks=8, spares=1, transport=transport,
               kwargs={"iterations": 20}, chaos=ft.Chaos(job_lost_at=13),
               checkpoint_interval=5, checkpoint_storage="stable",
               checkpoint_dir=str(tmp_path / "stable"))
    kinds = [e.kind for e in info.value.events]
    assert "job_lost" in kinds and "recovery_start" not in kinds and "rollback" not in kinds
    r = ft.run(PartnerStable, ranks=8, spares=1, transport=transport,
               kwargs={"iterations": 20}, restart_from=str(tmp_path / "stable"))
    assert_same(r.results, reference())
    [restored] = {e.detail["position"] for e in r.events_of("restored")}
    stored = [e.detail["position"] for e in info.value.events if e.kind == "checkpoint"]
    assert restored >= max(stored, default=(0, 0))  # under load a manifest may lag
    assert transport == "local" or restored == (0, 10)


def test_a_job_loss_must_name_an_iteration():
    with pytest.raises(ValueError, match="job_lost_at must be an iteration >= 0"):
        ft.Chaos(job_lost_at=-1)


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_encoded_blocks_recover_a_partner_pair(tmp_path, transport):
    r = run(ThreeLevels, tmp_path, PAIR, transport)
    assert_same(r.results, reference())
    assert exhausted(r) == ["standby"] and levels(r) == ["rs"]
    assert {rank for e in r.events_of("rs_decoded") for rank in e.detail["ranks"]} == {2, 6}


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_three_levels_escalate_one_by_one(tmp_path, transport):
    # one rank: partner copy; then a whole RS group with its parity holder: the global set
    r = run(ThreeLevels, tmp_path, [(5, 4), *group_lost(1)], transport)
    assert_same(r.results, reference())
    assert levels(r) == ["standby", "ready_flush"]
    assert exhausted(r) == ["standby", "rs"]
    stats = r.metrics
    assert stats["recoveries"] == 2


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_encoded_blocks_then_the_global_set(tmp_path, transport):
    r = run(EncodedStable, tmp_path, [(3, 8), *group_lost(1)], transport)
    assert_same(r.results, reference())
    assert levels(r) == ["rs", "ready_flush"] and exhausted(r) == ["rs"]


def test_a_loss_beyond_every_level_names_what_each_level_lacked(tmp_path):
    with pytest.raises(ft.RankFailed) as info:
        run(EncodedPartner, tmp_path, [(0, 14), (2, 14), (4, 14)])
    message = str(info.value)
    assert "standby: rank 0 and its backup partner 4 both failed" in message
    assert "rs: RSBackup cannot rebuild group(s) 0" in message
    assert info.value.ranks == (0, 2, 4)
