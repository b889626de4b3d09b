"""Stacks whose levels keep another protocol's checkpoint parts: StandbyReplacement under
GroupCoordination (a failed group comes back on spares, from partner copies) and under
DDVPiggyback, on local and sim; results bit-identical to the failure-free run."""
import warnings

import pytest

import ftactors as ft
from ftactors.protocols import DDVPiggyback, GroupCoordination, StandbyReplacement
from ftactors.protocols.hc3i.storm import ForcedCheckpointStorm

from .programs import Flood, Heat1D
from .test_rs_backup import assert_same, reference

# Spares are beside the point of these refusals and levels; the warning is tested in
# tests/runtime/test_notices.py.
pytestmark = pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")


class GroupsOnSpares(StandbyReplacement, GroupCoordination, Heat1D):
    pass


class ClustersOnSpares(StandbyReplacement, DDVPiggyback, Heat1D):
    pass


GROUPS = {"groups": "fixed:2", "group_checkpoint_interval": 4}
"""Groups [0, 1], [2, 3], [4, 5], [6, 7]: the copies of group 1's parts are in group 2
(rank 2's with rank 4, rank 3's with rank 5)."""
CLUSTERS = {"clusters": "fixed:2"}


def run(cls, kills, transport, options, spares=3):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForcedCheckpointStorm)  # Heat1D's ring crosses
        return ft.run(cls, ranks=8, spares=spares, transport=transport,
                      kwargs={"iterations": 20}, chaos=ft.Chaos(kill=kills), **options)


def sources(r) -> dict[int, str]:
    """Where each restored part came from, in the run's last recovery."""
    return {int(k): v for k, v in r.events_of("part_sources")[-1].detail["sources"].items()}


def levels(r) -> list[str]:
    return [e.detail["level"] for e in r.events_of("recovery_level")]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_failed_group_comes_back_on_spares_from_partner_copies(transport):
    r = run(GroupsOnSpares, [(2, 11)], transport, GROUPS)
    assert_same(r.results, reference())
    assert sources(r) == {2: "standby", 3: "standby"} and levels(r) == ["standby"]
    assert r.events_of("group_rollback")[0].detail["positions"] == {1: (0, 8)}
    respawned = r.events_of("respawned")
    assert len(respawned) == 2 and all(e.detail["warm"] for e in respawned)
    assert not r.events_of("backup")  # no global rounds of standby's own


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_part_whose_copy_died_with_its_holder_comes_from_the_object_store(transport):
    # rank 4 holds rank 2's copies and dies as the recovery of 2 starts: groups 1 and 2
    # restart; 2's part from the coordinator's copy, the others' from partner copies
    r = run(GroupsOnSpares, [(2, 11), ft.Kill(4, recovery_round=0)], transport, GROUPS)
    assert_same(r.results, reference())
    assert sources(r) == {2: "groups", 3: "standby", 4: "standby", 5: "standby"}
    assert levels(r) == ["groups"]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_restarted_holder_keeps_its_copies_again(transport):
    """Group 2 restarts from (0, 8) after rank 4 dies: ranks 4 and 5 held the copies of
    group 1's parts, and those went with their processes. The coordinator gives them the
    copies again, so when rank 2 dies before group 1's next part, group 1 still restarts
    from partner copies (before, from the coordinator's copies: on the failed rank's node,
    gone with a node loss)."""
    r = run(GroupsOnSpares, [(4, 9), (2, 11)], transport, GROUPS)
    assert_same(r.results, reference())
    rounds = [e.kind for e in r.events if e.kind in ("recovery_end", "killed")]
    assert rounds == ["killed", "recovery_end", "killed", "recovery_end"]  # one at a time
    assert [e.detail["positions"] for e in r.events_of("group_rollback")] == [
        {2: (0, 8)}, {1: (0, 8)}]  # group 1's part of (0, 8): made before group 2 restarted
    assert r.events_of("part_copies_restored")[0].detail["holders"] == {2: 4, 3: 5}
    assert sources(r) == {2: "standby", 3: "standby"} and levels(r) == ["standby", "standby"]


def test_restarted_clusters_keep_their_copies_again():
    r = run(ClustersOnSpares, [(4, 9), (2, 11)], "local", CLUSTERS)
    assert_same(r.results, reference())
    restored = [e.detail for e in r.events_of("part_copies_restored")]
    assert restored and all(d["holders"] and not d["failed"] for d in restored)
    assert set(sources(r).values()) == {"standby"}


def test_one_group_keeps_its_copies_inside_itself():
    """With a single group every rank restarts; the copies are pulled from the live
    holders before any of them is stopped."""
    r = run(GroupsOnSpares, [(1, 11)], "sim", {**GROUPS, "groups": "one"}, spares=8)
    assert_same(r.results, reference())
    # rank 1 holds the copies of 5, which holds those of 1
    assert sources(r) == {**{x: "standby" for x in range(8)}, 5: "groups"}


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_clusters_restore_a_failed_ranks_part_from_its_partner_copy(transport):
    r = run(ClustersOnSpares, [(2, 11)], transport, CLUSTERS)
    assert_same(r.results, reference())
    assert sources(r)[2] == "standby"
    assert r.events_of("hc3i_rollback")


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_clusters_fall_back_to_the_object_store_for_a_lost_pair(transport):
    r = run(ClustersOnSpares, [(2, 11), ft.Kill(4, recovery_round=0)], transport, CLUSTERS)
    assert_same(r.results, reference())
    assert sources(r)[2] == "hc3i" and levels(r) == ["hc3i"]


@pytest.mark.parametrize("option", ["backup_interval", "backup_interval_s", "stable_store"])
def test_standby_own_round_options_are_refused_when_it_keeps_parts(option):
    with pytest.raises(ft.ConfigError, match=f"{option} set StandbyReplacement's own rounds"
                                             ".*keeps copies of GroupCoordination's"):
        ft.run(GroupsOnSpares, ranks=4, transport="local", kwargs={"iterations": 2},
               **GROUPS, **{option: 2})


def test_backup_is_refused_when_standby_keeps_parts():
    class Explicit(StandbyReplacement, GroupCoordination, Heat1D):
        async def main(self, n_local=8, iterations=2):
            async for _ in self.iterations(iterations):
                await self.backup()

    with pytest.raises(ft.RankError, match="backup\\(\\) takes a global round"):
        ft.run(Explicit, ranks=2, transport="local", **GROUPS)


@pytest.mark.filterwarnings("ignore::ftactors.protocols.ForcedCheckpointStorm")  # Flood: every step
def test_a_cluster_respawned_by_a_round_cut_short_restarts_too():
    """The cascade respawns cluster after cluster; the third spare dies as it is
    promoted, cutting the round short with ranks on new hosts that never started. The
    next round restarts their clusters too (it asked them for their DDVs: they had no
    protocol state at all)."""
    from ftactors.tools.simcheck import ITERATIONS, PER_PEER, setups
    setup = setups()["standby+hc3i"]
    cls = type("StandbyHc3iFlood", (*setup.mixins, Flood), {})
    kwargs = {"iterations": ITERATIONS, "per_peer": PER_PEER}
    r = ft.run(cls, setup.ranks, transport="sim", seed=114, spares=setup.spares, kwargs=kwargs,
               chaos=ft.Chaos(kill=[ft.Kill(5, iteration=6), ft.Kill(spare=2, moment="promoted")]),
               sim_jitter_s=2e-5, **setup.options)
    assert r.events_of("recovery_restart")
    assert r.results == ft.run(Flood, setup.ranks, transport="sim", kwargs=kwargs).results
