"""``sim-check --app``: the user's program under a protocol, and the likely cause of a
failed run in the program's terms (``tools/_simcheck_programs.py``), each diagnosis
shown on a program with that bug (``user_programs``)."""
import os

import pytest

import ftactors as ft
from ftactors.tools._simcheck_programs import unregistered_changes, wildcard_receives
from ftactors.tools.programs import resolve
from ftactors.tools.simcheck import program_target, sim_check

HERE = "tests.tools.user_programs"
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _failed(outcomes):
    failed = [o for o in outcomes if not o.ok]
    assert failed, "every run passed: the bug was not found"
    return failed


def test_an_attribute_outside_register_is_named_and_the_fix_is_not_blamed():
    buggy = resolve(os.path.join(EXAMPLES, "poisson_buggy.py:Poisson"), kwargs={"n": 10})
    fixed = resolve(os.path.join(EXAMPLES, "poisson.py:Poisson"), kwargs={"n": 10})
    with pytest.warns(ft.UnsavedStateWarning, match="holds: self.history. After"):
        assert list(unregistered_changes(program_target(buggy, 4).reference[0])) == [
            "self.history"]
    assert unregistered_changes(program_target(fixed, 4).reference[0]) == {}
    with pytest.warns(ft.UnsavedStateWarning, match="holds: self.history. After"):
        failed = _failed(sim_check("ready-flush", 4, 0, program=buggy, ranks=4))
    assert all(any("self.history changes between iterations" in c for c in o.causes)
               for o in failed)


def test_code_before_the_loop_that_reads_restored_state_is_named():
    program = resolve(f"{HERE}:PreLoop")
    failed = _failed(sim_check("ready-flush", 4, 0, program=program, ranks=3))
    causes = [c for o in failed for c in o.causes]
    assert causes and all("computed offset differently" in c for c in causes), causes
    assert not any("started" in c for c in causes)  # a timer differs in every run


def test_wildcard_receives_are_named_when_the_failure_free_answer_is_not_reproducible():
    program = resolve(f"{HERE}:Arrival")
    assert wildcard_receives(program.cls) == ["ANY_SOURCE"]
    with pytest.raises(ValueError) as info:
        program_target(program, 5)
    message = str(info.value)
    assert "two failure-free runs of tests.tools.user_programs:Arrival" in message
    assert "likely cause: the program receives with ANY_SOURCE" in message


def test_module_state_the_loop_changes_is_named_when_the_answer_is_not_reproducible():
    """A module-level list carries over from the first failure-free run to the second,
    so they differ; the ranks reported it (``unsaved_state``) and sim-check names it."""
    with pytest.raises(ValueError) as info, pytest.warns(
            ft.UnsavedStateWarning, match="holds: tests.tools.user_programs.STEPS. After"):
        program_target(resolve(f"{HERE}:ModuleHistory"), 3)
    assert ("likely cause: tests.tools.user_programs.STEPS changes between iterations and "
            "no checkpoint holds it") in str(info.value)


def test_a_rebound_local_that_register_returned_is_named():
    """``x = self.register("x", ...)`` then ``x = x * 0.5 + ...``: the checkpoints all
    save the first ``x``, so runs with a failure differ, and the cause is named."""
    with pytest.warns(ft.UnsavedStateWarning, match="the local 'x' that register returned"):
        failed = _failed(sim_check("standby", 6, 0, program=resolve(f"{HERE}:Rebinds"),
                                   ranks=3))
    assert failed and all(o.causes == ["the local 'x' that register returned (the loop "
                                       "rebinds it, so self.x keeps its first value and so "
                                       "does every checkpoint: assign self.x instead): a "
                                       "restore resumes the loop from that first value"]
                          for o in failed)


def test_a_local_a_restore_could_not_set_is_named():
    """``total = 0.0; self.register("total", total)`` then the loop goes on with
    ``total``: a restore cannot write into a float, and the failed runs name the local
    (issue 40: they failed with no cause named)."""
    program = resolve("tests.programs.register_idiom:Immutables")
    failed = _failed(sim_check("standby", 4, 0, program=program, ranks=3))
    for o in failed:
        assert any("self.total" in c and "the local 'total' still holds" in c
                   for c in o.causes), o.causes


def test_a_local_changed_in_place_is_named_and_a_recomputed_one_is_not():
    failed = _failed(sim_check("ready-flush", 4, 0, program=resolve(f"{HERE}:Cached"),
                               ranks=3))
    for o in failed:
        assert [c.split(" (first")[0] for c in o.causes] == ["acc changes between iterations"]
        assert "acc = self.register('acc', ...), then use self.acc" in o.causes[0]


def test_a_failed_check_of_ftactors_itself_blames_nothing_in_the_program():
    """A right answer under a stack that breaks its own rules (a level passing every
    recovery up): the run fails on the framework's check, and the program is not given
    a likely cause (here its harmless read before the loop would be named)."""
    from ftactors.protocols import ReadyMessageFlush, RSBackup
    from tests.tools.test_simcheck import PassesEverythingUp
    failed = _failed(sim_check("rs+standby+ready-flush", 6, 0,
                               mixins=(RSBackup, PassesEverythingUp, ReadyMessageFlush),
                               program=resolve(f"{HERE}:Unused")))
    assert all("but the cheaper level standby holds them" in o.problem for o in failed)
    assert all(o.ours and o.causes == [] for o in failed)


@pytest.mark.parametrize("stack", ["standby", "rs+standby", "rs+standby+ready-flush",
                                   "groups"])
def test_a_user_shaped_solver_on_an_odd_rank_count_passes(stack):
    """HeatRing on 5 ranks. Seed 39 under rs+standby kills rank 1 at iteration 3,
    before any RS round, and rank 4 as that recovery starts: the RS level goes back to
    the start, which was once failed as "a level that cannot hold the loss"."""
    outcomes = sim_check(stack, 6, 36, program=resolve(f"{HERE}:HeatRing"), ranks=5)
    assert [o.problem for o in outcomes if not o.ok] == []


@pytest.mark.parametrize("stack", ["groups", "hc3i", "standby"])
def test_communicators_split_in_every_iteration_survive_a_partial_rollback(stack):
    """A group or cluster restored while the others go on must name the communicators
    the loop splits as they do: the counts of derived communicators are part of the
    snapshot. Before, the restored ranks' splits took other ids, and their collectives
    waited on contexts nobody else used (half the runs stalled under groups)."""
    outcomes = sim_check(stack, 8, 0, program=resolve(f"{HERE}:SplitEachIteration"),
                         ranks=5)
    assert [o.problem for o in outcomes if not o.ok] == []


@pytest.mark.parametrize("stack", ["standby", "hc3i", "rs+groups", "rs+standby+ready-flush"])
def test_a_cartesian_solver_with_persistent_halos_passes(stack):
    """Grid2D on 6 ranks (a 3 x 2 grid): persistent requests made before the loop and
    restarted after a restore, Probe-sized receives, Scan/Exscan, a convergence break.
    Under the standby stacks it found a round begun twice under one name (a late lazy
    marker, ``flush.DONE_KEPT``): a recovery mixed the two cuts and lost a halo."""
    outcomes = sim_check(stack, 6, 0, program=resolve(f"{HERE}:Grid2D"), ranks=6)
    assert [o.problem for o in outcomes if not o.ok] == []


def test_clcs_kept_while_a_cluster_waits_out_a_recovery_are_not_called_unbounded():
    """Seed 22 kills rank 3 and then rank 0 as that recovery starts; cluster 2 takes no
    CLC for a while, so cluster 0 must keep the four it took since its first receipt
    from cluster 2's current epoch. That was once failed as "kept 4 CLCs (at most 3, the
    number of clusters)" and blamed on ftactors, on a run whose answer was right."""
    (outcome,) = sim_check("hc3i", 1, 22, program=resolve(f"{HERE}:SplitEachIteration"),
                           ranks=5)
    assert outcome.ok, outcome.problem


@pytest.mark.parametrize("stack", ["hc3i", "standby+hc3i", "groups"])
def test_a_synchronous_send_sent_again_to_a_receiver_restored_with_it_completes(stack):
    """A cluster rolled back to a cut where the receiver had the message but the
    sender's safe point was before sending it: the sender's new life sends it again, the
    receiver drops it as a duplicate and must acknowledge it again (half the runs of this
    ring stalled under hc3i)."""
    outcomes = sim_check(stack, 8, 0, program=resolve(f"{HERE}:IssendRing"), ranks=5)
    assert [o.problem for o in outcomes if not o.ok] == []


def test_a_bug_without_a_diagnosis_still_fails_and_blames_nothing():
    """A local rebound to a new value in each iteration is not reported (most are
    recomputed, like a residual): carrying one across iterations fails unexplained."""
    failed = _failed(sim_check("ready-flush", 4, 0, program=resolve(f"{HERE}:Rebound"),
                               ranks=3))
    assert all(o.causes == [] and "differ from the failure-free" in o.problem for o in failed)


def test_a_right_program_passes_every_stack_it_is_run_under():
    program = resolve(f"{HERE}:Counter", [1.0], {"iterations": 8})
    for stack in ("standby", "rs+standby+ready-flush", "groups"):
        outcomes = sim_check(stack, 3, 7, program=program)
        assert [o.problem for o in outcomes if not o.ok] == [], stack


def test_a_stall_is_diagnosed_from_the_ranks_waits_not_from_the_source_text(capsys):
    """A rank restarted alone (``groups``) counts its steps from 0 again and turns on
    after its neighbours finished: the run stalls. The diagnosis names where each rank
    was and what it waited for (a receive, a group's flush round and whom the round has
    not heard from), not the ``ANY_SOURCE`` its code names (one message per iteration:
    the order cannot differ)."""
    program = resolve(f"{HERE}:CountsItsSteps")
    assert wildcard_receives(program.cls) == ["ANY_SOURCE"]
    outcomes = sim_check("groups", 3, 0, program=program, ranks=4)
    stalled = [o for o in outcomes if o.stall]
    assert stalled, [o.problem for o in outcomes]
    for o in stalled:
        assert o.problem.startswith("the run stalled: every live rank waited")
        assert sorted(o.waits) == [0, 1, 2, 3]
        causes = "\n".join(o.causes)
        assert "ANY_SOURCE" not in causes
        assert "waits in a receive from any source, tag 3, communicator w" in causes
        blocked = [r for r, d in o.stall.items() if d["kind"] != "finished"]
        assert any(f"rank {r} (loop 0, iteration" in causes for r in blocked)
        rounds = [(r, d) for r, d in o.stall.items() if d["kind"] == "round"]
        for rank, d in rounds:
            assert "groups flush" in d["what"]
            assert f"not heard from rank(s) {', '.join(map(str, d['ranks']))}" in causes
        assert any("self.counted changes between iterations" in c for c in o.causes)
    seed = stalled[0].seed
    from ftactors.tools import cli
    cli.main(["sim-check", "--app", "tests/tools/user_programs.py:CountsItsSteps",
              "--protocol", "groups", "--ranks", "4", "--runs", "1", "--seed", str(seed)])
    out = capsys.readouterr().out
    assert f"FAILED seed {seed}: the run stalled" in out
    for line in stalled[0].waits.values():
        assert f"\n  {line}\n" in out
    assert "likely cause: the program receives with ANY_SOURCE" not in out


def test_a_wrong_answer_under_partial_restarts_still_names_the_wildcard_receive():
    """Where a wildcard receive can be the cause (a rank restarted alone, whose replay
    needs its first life's order of arrival), the code's ``ANY_SOURCE`` is still named."""
    program = resolve(f"{HERE}:CountsItsSteps")
    wrong = [o for o in sim_check("groups", 6, 0, program=program, ranks=4)
             if not o.ok and not o.stall]
    assert wrong
    assert all(any("receives with ANY_SOURCE" in c for c in o.causes) for o in wrong)
