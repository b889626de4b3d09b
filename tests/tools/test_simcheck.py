"""``ftactors sim-check``: seeded sim runs with random failures, for every protocol; a
deliberately broken protocol is caught, and its seed replays the same failure."""
import pytest

from ftactors.tools import cli
from ftactors.protocols import GroupCoordination
from ftactors.tools.simcheck import schedule, setups, sim_check


@pytest.mark.parametrize("name", sorted(setups()))
def test_every_protocol_passes_its_seeded_runs(name):
    outcomes = sim_check(name, 25, 1000)
    assert [o.seed for o in outcomes if not o.ok] == []
    assert sum(not o.gave_up for o in outcomes) >= 20  # most runs really recover


class DropsOneLoggedMessage(GroupCoordination):
    """Broken on purpose: the first message it resends from its log after a restart is
    lost."""

    def ft_rpc_group_resend(self, received):
        log = self._gc.log
        for rank, since in received.items():
            entries = log.get(int(rank), {})
            seq = min((s for s in entries if s >= since), default=None)
            if seq is not None:
                del entries[seq]
                break
        return super().ft_rpc_group_resend(received)


def test_a_protocol_that_drops_a_logged_message_is_caught_with_its_seed():
    outcomes = sim_check("groups", 12, 0, mixin=DropsOneLoggedMessage)
    failed = [o for o in outcomes if not o.ok]
    assert failed, "the broken protocol passed every run"
    again = sim_check("groups", 1, failed[0].seed, mixin=DropsOneLoggedMessage)[0]
    assert (again.ok, again.problem) == (False, failed[0].problem)
    assert again.kills == failed[0].kills == schedule(failed[0].seed, 6)


def test_schedules_are_seeded_and_cover_checkpoints_and_recovery():
    plans = [schedule(seed, 6) for seed in range(200)]
    assert plans == [schedule(seed, 6) for seed in range(200)]
    assert any(k.recovery_round == 0 for p in plans for k in p)
    assert any(k.iteration is not None and k.iteration % 3 == 0 for p in plans for k in p)
    assert {len([k for k in p if k.iteration is not None]) for p in plans} == {1, 2, 3}


def test_cli(capsys):
    assert cli.main(["sim-check", "--protocol", "ready-flush", "--runs", "3"]) == 0
    assert "sim-check ready-flush: 3 of 3 runs passed" in capsys.readouterr().out
    assert cli.main(["sim-check", "--protocol", "groups", "--runs", "0"]) == 2
