"""The task farm under a SIGKILL on real Ray (issue 40): a worker's process, or the
master's, is killed in its loop (a chaos kill on Ray is the rank's own process sending
itself SIGKILL) under the headline stacks, whose rounds join ranks that turn at
different paces; the run gives the failure-free results, every task done exactly once.
"""
import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush, RSBackup, StandbyReplacement

from .shapes import Farm
from .test_wildcard_replay import stack
from .wildcards import farm_check

pytestmark = pytest.mark.ray

NTASKS = 24

STACKS = {
    "standby": ((StandbyReplacement,), dict(backup_interval=2, spares=1)),
    "ready-flush": ((ReadyMessageFlush,), dict(checkpoint_interval=3, spares=1)),
    "rs+standby+ready-flush": ((RSBackup, StandbyReplacement, ReadyMessageFlush), dict(
        rs_group_size=2, rs_ranks_per_node=2, rs_block_bytes=512, rs_interval=3,
        backup_interval=2, checkpoint_interval=4, spares=2)),
}

KILLS = {"worker": ft.Kill(rank=2, iteration=3), "master": ft.Kill(rank=0, iteration=20)}


@pytest.fixture(scope="module")
def reference():
    return ft.run(Farm, ranks=4, transport="sim", args=(NTASKS,)).results


@pytest.mark.parametrize("killed", sorted(KILLS))
@pytest.mark.parametrize("name", sorted(STACKS))
def test_a_farm_on_ray_survives_a_sigkill(ray_session, reference, name, killed):
    mixins, options = STACKS[name]
    kill = KILLS[killed]
    result = ft.run(stack(mixins, Farm), ranks=4, transport="ray", args=(NTASKS,),
                    timeout_s=60, chaos=ft.Chaos(kill=[kill]), **options)
    assert result.metrics["kills_fired"], result.metrics["kills_unfired"]
    assert [e.rank for e in result.events_of("failure_detected")] == [kill.rank]
    assert result.events_of("restored"), "no rank was restored"
    assert farm_check(result.results, reference), result.results
