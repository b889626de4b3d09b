"""StandbyReplacement (NR-MPI): the state machine, and recovery with no job restart."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols.standby.machine import (
    INITIAL, TRANSITIONS, Input, StandbyMachine, State, choose_round, next_backup, partner)

from .programs import FTHeat, Heat1D

# Some tests here give no spare on purpose (a whole job lost, a give-up); the warning is
# tested in tests/runtime/test_notices.py.
pytestmark = pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")

# ------------------------------------------------------------------- state machine


@pytest.mark.parametrize("state, inp, expected", sorted(
    ((s, i, e) for (s, i), e in TRANSITIONS.items()), key=lambda t: t[2][1]),
    ids=lambda v: getattr(v, "value", str(v)))
def test_every_table_2_transition(state, inp, expected):
    m = StandbyMachine()
    m.state = state
    assert m.fire(inp) == (state, expected[0], expected[1])
    assert m.state is expected[0]


def test_table_2_ids_are_the_papers():
    ids = sorted(tid for _, tid in TRANSITIONS.values())
    assert ids == list(range(2, 20))  # 1 is MPI_Init itself: the machine starts in INIT


@pytest.mark.parametrize("state", list(State))
def test_illegal_transitions_are_protocol_errors(state):
    for inp in Input:
        if (state, inp) in TRANSITIONS:
            continue
        m = StandbyMachine()
        m.state = state
        with pytest.raises(ft.ProtocolError, match=f"no transition from {state.value}"):
            m.fire(inp)


def test_absorbing_states():
    for inp in Input:
        assert (State.FINISH, inp) not in TRANSITIONS
        assert (State.ABORT, inp) not in TRANSITIONS


def test_survivor_and_replacement_paths_with_a_failure_during_recovery():
    survivor, spare = StandbyMachine(), StandbyMachine()
    path = [survivor.fire(Input.STARTED)[2], survivor.fire(Input.FAILURE)[2],
            survivor.fire(Input.FAILURE)[2], survivor.fire(Input.CORE_RECOVERED)[2],
            survivor.fire(Input.FAILURE)[2], survivor.fire(Input.CORE_RECOVERED)[2],
            survivor.fire(Input.DATA_RECOVERED)[2], survivor.fire(Input.FINALIZE)[2]]
    assert path == [5, 11, 12, 14, 15, 14, 16, 10]
    path = [spare.fire(Input.FAILURE)[2], spare.fire(Input.PROMOTED)[2],
            spare.fire(Input.FAILURE)[2], spare.fire(Input.FAILURE)[2],
            spare.fire(Input.CORE_RECOVERED)[2], spare.fire(Input.DATA_RECOVERED)[2]]
    assert path == [2, 3, 7, 9, 8, 6]
    assert spare.state is State.RUNNING


def test_set_state_only_running():
    m = StandbyMachine()
    m.state = State.RECOVER
    m.set_state(State.RUNNING)
    assert m.state is State.RUNNING
    with pytest.raises(ft.ProtocolError):
        m.set_state(State.FINISH)

# ------------------------------------------------------------ rounds and partners


def test_partners_form_a_bijection_on_other_ranks():
    for n in (2, 3, 4, 7, 8):
        holders = [partner(r, n) for r in range(n)]
        assert sorted(holders) == list(range(n))
        assert all(h != r for r, h in enumerate(holders))


def test_choose_round_newest_common_to_everyone():
    p = lambda i: (0, i)
    inv = {0: {"own": [p(3), p(6)], "held": {2: [p(3), p(6)]}},
           1: {"own": [p(6), p(9)], "held": {3: [p(6), p(9)]}},
           3: {"own": [p(6), p(9)], "held": {1: [p(6), p(9)]}}}
    assert choose_round(4, {2}, inv) == p(6)


def test_choose_round_initial_when_nobody_backed_up():
    inv = {0: {"own": [], "held": {}}, 1: {"own": [], "held": {}}}
    assert choose_round(3, {2}, inv) is INITIAL


def test_choose_round_both_partners_dead_names_both():
    inv = {1: {"own": [(0, 0)], "held": {3: [(0, 0)]}}, 3: {"own": [(0, 0)], "held": {1: [(0, 0)]}}}
    with pytest.raises(ft.RankFailed) as info:
        choose_round(4, {0, 2}, inv)
    assert info.value.ranks == (0, 2)
    assert "backup partner" in str(info.value)

# ------------------------------------------------------------------- recovery runs


def reference(n=4, **kwargs):
    kwargs.setdefault("iterations", 20)
    return ft.run(Heat1D, ranks=n, transport="local", kwargs=kwargs).results


def assert_same(results, ref):
    for got, want in zip(results, ref):
        assert got["norms"] == want["norms"]          # bit for bit, every iteration
        assert np.array_equal(got["u"], want["u"])


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_one_failure_recovers_bit_identical(transport):
    r = ft.run(FTHeat, ranks=4, spares=1, transport=transport, kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(2, 7)]))
    assert_same(r.results, reference())
    assert r.metrics["failures"] == 1 and r.metrics["recoveries"] == 1
    kinds = [(e.kind, e.rank, e.detail.get("state")) for e in r.events
             if e.kind in ("killed", "failure_detected", "nr_state", "recovery_end")]
    t_kill = next(i for i, k in enumerate(kinds) if k[0] == "killed")
    t_detect = next(i for i, k in enumerate(kinds) if k[0] == "failure_detected")
    after = kinds[t_detect:]
    assert t_kill < t_detect and kinds[t_detect][1] == 2
    assert ("nr_state", 0, "FAILURE") in after
    assert ("nr_state", 2, "REPLACE_RECOVER") in kinds  # the promoted spare
    assert ("nr_state", 2, "RUNNING") in after and ("nr_state", 0, "RUNNING") in after
    line = r.events_of("recovery_line")[0].detail["position"]
    assert line == (0, 6)  # backups every 3 iterations: 0, 3, 6; killed at 7


def test_two_failures_in_one_round_and_a_promoted_spare_failing():
    chaos = ft.Chaos(kill=[(0, 5), (1, 5), ft.Kill(0, iteration=11, incarnation=1)])
    r = ft.run(FTHeat, ranks=4, spares=3, transport="local", kwargs={"iterations": 20},
               chaos=chaos)
    assert_same(r.results, reference())
    replaced = [(e.rank, e.detail["incarnation"]) for e in r.events_of("replaced")]
    assert sorted(replaced) == [(0, 1), (0, 2), (1, 1)]


@pytest.mark.parametrize("phase", ["notified", "repaired"])
def test_failure_during_recovery_starts_a_new_round(phase):
    # 2 is not 1's partner, so both stay recoverable
    chaos = ft.Chaos(kill=[(1, 8), ft.Kill(2, recovery_round=0, recovery_phase=phase)])
    r = ft.run(FTHeat, ranks=4, spares=2, transport="local", kwargs={"iterations": 20},
               chaos=chaos)
    assert_same(r.results, reference())
    assert len(r.events_of("recovery_restart")) == 1
    assert r.metrics["recoveries"] == 1
    states = [e.detail["transition"] for e in r.events_of("nr_state") if e.rank == 0]
    assert states.count(11) == 1  # RUNNING -> FAILURE once ...
    assert 12 in states           # ... then FAILURE -> FAILURE: the second failure mid-recovery
    assert states[-2:] == [16, 10]


def test_failure_before_any_backup_restarts_from_the_beginning():
    class Late(FTHeat):
        protocol_name = "standby"
        backup_interval = 100
    r = ft.run(Late, ranks=4, spares=1, transport="local", kwargs={"iterations": 10},
               chaos=ft.Chaos(kill=[(3, 0)]))
    assert_same(r.results, reference(iterations=10))
    assert r.events_of("recovery_line")[0].detail["position"] is INITIAL


def test_both_partners_dead_in_one_round_is_unrecoverable():
    with pytest.raises(ft.RankFailed) as info:
        ft.run(FTHeat, ranks=4, spares=2, transport="local", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(0, 7), ft.Kill(2, recovery_round=0)]))
    assert info.value.ranks == (0, 2)
    assert "both failed" in str(info.value)


def test_partner_lost_later_is_recoverable_because_restores_resend_copies():
    # rank 0 dies and is replaced; its replacement gets rank 2's copy again on restore,
    # so rank 2 dying afterwards (its partner being the new rank 0) is still recoverable
    r = ft.run(FTHeat, ranks=4, spares=2, transport="local", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(0, 7), (2, 13)]))
    assert_same(r.results, reference())
    assert r.metrics["recoveries"] == 2


def test_no_spare_left_aborts_with_a_clear_error():
    with pytest.raises(ft.RankFailed, match="no spare left"):
        ft.run(FTHeat, ranks=4, spares=1, transport="local", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(1, 4), ft.Kill(1, iteration=9, incarnation=1)]))


def test_kill_schedule_naming_missing_rank_fails_before_start():
    with pytest.raises(ValueError, match="rank 9"):
        ft.run(FTHeat, ranks=4, spares=1, transport="local", chaos=ft.Chaos(kill=[(9, 1)]))


def test_hung_rank_found_by_heartbeats():
    r = ft.run(FTHeat, ranks=4, spares=1, transport="local",
               kwargs={"iterations": 400, "n_local": 2000},
               chaos=ft.Chaos(kill_at=[(1, 0.05)], method="sigstop"),
               heartbeat_interval_s=0.05, heartbeat_timeout_s=0.2)
    assert_same(r.results, reference(iterations=400, n_local=2000))
    assert r.events_of("hang_detected")[0].rank == 1
    assert r.metrics["recoveries"] == 1


def test_backup_interval_in_seconds_agreed_by_rank_0():
    r = ft.run(FTHeat, ranks=3, spares=1, transport="local",
               kwargs={"iterations": 30}, backup_interval_s=0.0001)
    rounds = {}
    for e in r.events_of("backup"):
        rounds.setdefault(e.rank, []).append(e.detail["position"])
    assert rounds[0] == rounds[1] == rounds[2] and len(rounds[0]) >= 3


def test_stable_store_checkpoint_sets_restart_a_lost_job(tmp_path):
    """Backups also go to disk; after the whole job is lost, a new job restarts there."""
    store = str(tmp_path / "ckpts")
    with pytest.raises(ft.RankFailed) as info:  # no spare: the run is lost at iteration 13
        ft.run(FTHeat, ranks=4, transport="local", kwargs={"iterations": 20},
               stable_store=store, chaos=ft.Chaos(kill=[(2, 13)]))
    # backups every 3; round k is sealed at backup k+1, so 12 is written but not sealed
    sealed = [e.detail["position"] for e in info.value.events if e.kind == "stable_checkpoint"]
    assert sealed == [(0, 0), (0, 3), (0, 6), (0, 9)]
    r = ft.run(FTHeat, ranks=4, transport="local", kwargs={"iterations": 20},
               restart_from=store)
    assert_same(r.results, reference())
    assert [e.detail["position"] for e in r.events_of("restored")] == [(0, 9)] * 4


def test_a_recovery_with_no_survivor_restarts_from_the_start_of_the_run(tmp_path):
    """Rank 0 dies and its partner as the recovery starts: no rank is left to tell
    which rounds were backed up, and the two spares are not started, so nothing can be
    asked of them (an AttributeError escaped from ft_rpc_standby_share before, issue
    40): every rank restarts from the coordinator's blank, which for a job resumed with
    restart_from is the set it resumed from, not the program's top."""
    store = str(tmp_path / "ckpts")
    kills = [ft.Kill(0, iteration=11), ft.Kill(1, recovery_round=0, recovery_phase="start")]
    r = ft.run(FTHeat, ranks=2, spares=2, transport="sim", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=kills))
    assert_same(r.results, reference(n=2))
    assert [e.detail["position"] for e in r.events_of("recovery_line")] == [None]
    with pytest.raises(ft.RankFailed):  # no spare: the job is lost at iteration 13
        ft.run(FTHeat, ranks=2, transport="local", kwargs={"iterations": 20},
               stable_store=store, chaos=ft.Chaos(kill=[(1, 13)]))
    r = ft.run(FTHeat, ranks=2, spares=2, transport="sim", kwargs={"iterations": 20},
               restart_from=store, chaos=ft.Chaos(kill=kills))
    assert_same(r.results, reference(n=2))
    assert [e.detail["position"] for e in r.events_of("restored")][-2:] == [(0, 9)] * 2


def test_restart_from_rejects_wrong_rank_count_and_empty_store(tmp_path):
    store = str(tmp_path / "ckpts")
    r = ft.run(FTHeat, ranks=4, transport="local", kwargs={"iterations": 5}, stable_store=store)
    # a run that ends seals its last set before it returns
    assert [e.detail["position"] for e in r.events_of("stable_checkpoint")] == [(0, 0), (0, 3)]
    with pytest.raises(ft.ConfigError, match="taken with 4 ranks, not 3"):
        ft.run(FTHeat, ranks=3, transport="local", restart_from=store)
    with pytest.raises(ft.ConfigError, match="no complete checkpoint"):
        ft.run(FTHeat, ranks=3, transport="local", restart_from=str(tmp_path / "empty"))


def test_corrupted_stable_checkpoint_is_never_loaded(tmp_path):
    from ftactors.base._storage import latest_complete, open_store
    store = str(tmp_path / "ckpts")
    r = ft.run(FTHeat, ranks=4, transport="local", kwargs={"iterations": 5}, stable_store=store)
    part = f"{store}/{latest_complete(open_store(store), f'run-{r.run_id}')}/rank-00001"
    data = bytearray(open(part, "rb").read())
    data[-10] ^= 0xFF
    open(part, "wb").write(bytes(data))
    with pytest.raises(ft.CheckpointCorrupted):
        ft.run(FTHeat, ranks=4, transport="local", kwargs={"iterations": 5}, restart_from=store)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_next_backup_every_k_iterations_or_about_every_s_seconds_or_as_planned():
    from ftactors.protocols.shared.intervals import Pacer
    clock = _Clock()
    pacer = Pacer(clock)
    assert next_backup(10, False, 4, None, pacer) == 14
    assert next_backup(10, False, 0, None, pacer) == 11  # never the same iteration again
    assert next_backup(10, True, 4, None, pacer) == 11   # the plan asks at every iteration
    clock.t = 2.0                                        # 10 iterations in 2 s
    assert next_backup(10, False, 4, 1.0, pacer) == 15   # about 1 s: 5 iterations on
    pacer.mark(10)
    assert next_backup(10, False, 4, 1.0, pacer) == 11   # nothing measured since: look again
