"""Ranks that run parts ahead of their group's newest complete set (GroupCoordination
reports a part and goes on; the coordinator completes the set only once it holds every
member's part): the levels keep every copy from that set on, so the set a recovery
restores comes from the cheapest level, and a member is held back once it is
``PARTS_AHEAD_MAX`` parts ahead. On Ray at full speed ranks were seen 4 parts ahead; here
the coordinator completes group 1's sets late on purpose (sim: virtual time, so the runs
are the same every time)."""
import pytest

import ftactors as ft
from ftactors.protocols import GroupCoordination, RSBackup, StandbyReplacement
from ftactors.protocols.groups.coordinator import GroupRecovery
from ftactors.protocols.groups.machine import PARTS_AHEAD_MAX

from .programs import Heat1D
from .test_rs_backup import assert_same, reference

pytestmark = pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")

LATE_S = 0.0005
"""How late group 1's sets complete (virtual seconds on sim): about 8 iterations of
Heat1D on 8 ranks, i.e. 4 group checkpoints at an interval of 2."""


class LateGroupSets(GroupRecovery):
    """Completes group 1's sets ``LATE_S`` after the coordinator holds rank 3's part (a
    busy driver)."""

    async def _kept(self, ck, rank, handle):
        if ck.group == 1 and rank == 3:
            await self.c.sleep(LATE_S)
        await super()._kept(ck, rank, handle)


class LateGroups(GroupCoordination):
    protocol_name = "groups"  # refines GroupCoordination: its recovery completes late
    recovery_policy = LateGroupSets


class Copies(StandbyReplacement, LateGroups, Heat1D):
    pass


class Blocks(RSBackup, LateGroups, Heat1D):
    pass


class CopiesAndBlocks(RSBackup, StandbyReplacement, LateGroups, Heat1D):
    pass


GROUPS = {"groups": "fixed:2", "group_checkpoint_interval": 2}
"""Groups {0, 1}, {2, 3}, {4, 5}, {6, 7}: group 1's copies and parity are in group 2."""


def run(cls, kills=()):
    r = ft.run(cls, ranks=8, spares=2, transport="sim", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=list(kills)), **GROUPS)
    assert_same(r.results, reference())
    return r


@pytest.mark.parametrize("cls, level", [(Copies, "standby"), (Blocks, "rs"),
                                        (CopiesAndBlocks, "standby")])
def test_a_set_completed_parts_ago_comes_from_the_cheapest_level(cls, level):
    """Rank 2 dies in iteration 15 while group 1's newest complete set is parts behind
    the ranks. Before, holders kept the newest 3 parts by number: group 1 rolled back to
    (0, 6) with parts reported up to (0, 14), 4 ahead, and both parts came from the
    driver's copy (level 'groups'); where that copy's node is gone, nothing served.
    Now the group restarts from the newest set both members reported (its parts are
    at the level though the coordinator has not taken them all), and it had run
    ``PARTS_AHEAD_MAX`` parts past its complete set, as far as it may."""
    r = run(cls, [(2, 15)])
    sources = r.events_of("part_sources")[0].detail["sources"]
    assert {int(x): s for x, s in sources.items()} == {2: level, 3: level}
    assert [e.detail["level"] for e in r.events_of("recovery_level")] == [level]
    rollback = r.events_of("group_rollback")[0].detail
    killed = r.events_of("killed")[0].time
    reported = [{tuple(e.detail["position"]) for e in r.events_of("group_checkpoint_part")
                 if e.rank == rank and e.time <= killed} for rank in (2, 3)]
    complete = max(tuple(e.detail["position"]) for e in r.events_of("group_checkpoint")
                   if e.detail["group"] == 1 and e.time <= killed)
    assert rollback["positions"][1] == max(reported[0] & reported[1]) > complete
    assert rollback["from_levels"] == [1]
    assert len({p for p in reported[1] if p > complete}) == PARTS_AHEAD_MAX


NEVER_S = 1.0
"""Later than the run: group 1's sets never complete (a driver whose takes from the
node's ranks were still on their way when the node went)."""


class NeverGroupSets(GroupRecovery):
    async def _kept(self, ck, rank, handle):
        if ck.group == 1:
            await self.c.sleep(NEVER_S)
        await super()._kept(ck, rank, handle)


class NeverGroups(GroupCoordination):
    protocol_name = "groups"
    recovery_policy = NeverGroupSets


class NeverCopies(StandbyReplacement, NeverGroups, Heat1D):
    pass


class NeverAlone(NeverGroups, Heat1D):
    pass


def test_a_rank_lost_before_the_driver_took_its_parts_restarts_from_the_copies():
    """Rank 2 dies in iteration 7 before the coordinator has taken any of group 1's
    parts (seen on Ray under load, with the node of ranks 2 and 3 removed: the takes are
    calls into the node's processes, 0.5 s and more). Both members had reported their
    parts at iterations 2, 4 and 6, and the partner copies were in group 2: the group
    restarts from (0, 6), its parts from the copies. Before, it restarted from the start
    of the run, named as the groups level, though nothing was lost."""
    r = run(NeverCopies, [(2, 7)])
    rollback = r.events_of("group_rollback")[0].detail
    assert rollback["positions"] == {1: (0, 6)} and rollback["from_levels"] == [1]
    sources = r.events_of("part_sources")[0].detail["sources"]
    assert {int(x): s for x, s in sources.items()} == {2: "standby", 3: "standby"}
    assert [e.detail["level"] for e in r.events_of("recovery_level")] == ["standby"]


def test_without_levels_a_set_the_driver_never_took_is_not_a_restart_line():
    """The same loss with GroupCoordination alone: nothing else holds the reported
    parts, so the group restarts from the start, as before."""
    r = run(NeverAlone, [(2, 7)])
    rollback = r.events_of("group_rollback")[0].detail
    assert rollback["positions"] == {1: None} and rollback["from_levels"] == []


def test_a_member_is_held_back_until_a_set_completes():
    """No failure: rank 3 never reports a part more than ``PARTS_AHEAD_MAX`` past group
    1's newest complete set (so its holders keep at most one more copy than that), and
    the run ends with the failure-free answer and every set of group 1 complete."""
    r = run(Copies)
    done = sorted((e.time, tuple(e.detail["position"])) for e in r.events_of("group_checkpoint")
                  if e.detail["group"] == 1)
    reported = sorted((e.time, tuple(e.detail["position"]))
                      for e in r.events_of("group_checkpoint_part") if e.rank == 3)
    for t, pos in reported:
        complete = max((p for at, p in done if at < t), default=(0, 0))
        assert len([p for _, p in reported if complete < p <= pos]) <= PARTS_AHEAD_MAX, pos
    assert [p for _, p in done] == [(0, i) for i in range(2, 20, 2)]
