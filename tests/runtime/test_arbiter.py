"""The run's arbiter (``runtime/_arbiter.py``) step by step, no coordinator, no transport,
no asyncio: each test plays one order of events sim-check found hard (a new host dying
before its round ends, a holder restarted, a failure during a move, deaths at start-up
and after return) and checks the decisions and the state after each step.

Each step test takes the arbiter module as its ``arbiter`` fixture, so that
``test_every_mutant_of_the_rules_is_killed`` can run them all against a mutant of the
module's source (one rule changed, ``MUTANTS``): a mutant that no step test notices is
a rule no test checks."""
from __future__ import annotations

import inspect
import sys
import types
from pathlib import Path

import pytest

from ftactors.base._errors import ProtocolError
from ftactors.runtime import _arbiter


@pytest.fixture
def arbiter():
    return _arbiter


def supervised(arbiter, n: int = 4, recoverable: bool = True):
    """An arbiter whose ``n`` ranks were started and wired and now run."""
    a = arbiter.Arbiter(n, recoverable)
    a.wired()
    for rank in range(n):
        a.started(rank)
    a.supervising()
    return a


def replaced(a, rank: int) -> None:
    """The round (or a move) gives ``rank`` its next incarnation on a new host."""
    a.respawning(rank)
    a.hosted(rank)


# ------------------------------------------------------------------ start-up
def test_a_host_lost_at_start_gets_another_until_the_attempts_run_out(arbiter):
    a = arbiter.Arbiter(3, recoverable=True)
    V = arbiter.Verdict
    assert a.host_died(1, current=True) is V.START_AGAIN  # nothing ran: no failure
    assert not a.pending and a.life(1) is arbiter.Life.STARTING
    assert [a.lost_at_start(1) for _ in range(arbiter.START_ATTEMPTS)] == [1, 2, 3, 4]
    assert a.lost_at_start(2) == 1  # counted per rank
    assert a.host_died(0, current=False) is V.IGNORE  # a host the rank left


def test_start_up_ends_wired_and_supervision_starts_the_ranks(arbiter):
    a = arbiter.Arbiter(2, recoverable=False)
    a.wired()
    assert a.lives == [arbiter.Life.WIRED] * 2 and a.settled() and not a.over()
    for rank in range(2):
        a.started(rank)
    a.supervising()
    assert a.host_died(0, current=True) is arbiter.Verdict.ARBITRATE
    assert a.died(0) is arbiter.Verdict.FAILURE


# -------------------------------------------------------------------- failures
def test_a_death_is_a_failure_once_and_a_repeat_is_ignored(arbiter):
    a = supervised(arbiter)
    V = arbiter.Verdict
    assert a.died(2) is V.FAILURE
    assert a.pending == {2} and a.life(2) is arbiter.Life.FAILED and a.failed_life[2] == 0
    assert a.host_died(2, current=True) is V.ARBITRATE
    assert a.died(2) is V.IGNORE and a.again == set()  # the same life, seen twice
    assert not a.watched(2) and a.watched(1) and not a.settled()


def test_a_round_takes_every_pending_failure_and_ends_with_them_recovered(arbiter):
    a = supervised(arbiter)
    a.died(1)
    a.died(3)
    rnd = a.open_round(job_lost=False)
    assert (rnd.number, rnd.failed, rnd.status) == (0, {1, 3}, arbiter.Status.OPEN)
    replaced(a, 1)
    replaced(a, 3)
    assert a.pending == {1, 3}, "a round's rank stays failed until the round ends"
    assert a.unstarted() == {1, 3} and not a.watched(1)
    a.started(1)
    a.started(3)
    a.round_done()
    assert rnd.status is arbiter.Status.DONE and a.pending == set()
    assert a.settled() and a.watched(1)
    a.died(0)
    assert a.open_round(job_lost=False).number == 1


def test_without_a_policy_or_with_the_job_lost_the_run_gives_up(arbiter):
    a = supervised(arbiter, recoverable=False)
    a.died(2)
    assert a.open_round(job_lost=False) == arbiter.GiveUp([2], job_lost=False)
    b = supervised(arbiter)
    b.died(0)
    b.died(1)
    assert b.open_round(job_lost=True) == arbiter.GiveUp([0, 1], job_lost=True)
    assert b.round is None


def test_a_new_host_dying_before_its_round_ends_stays_failed_past_the_round(arbiter):
    """Rank 1's round gives it a new host, which dies before the round ends: a failure
    of its own (a new life), which the next round recovers."""
    a = supervised(arbiter)
    a.died(1)
    a.open_round(job_lost=False)
    replaced(a, 1)
    a.started(1)
    assert a.died(1) is arbiter.Verdict.FAILURE  # life 1, not the round's life 0
    assert a.again == {1} and a.failed_life[1] == 1
    a.round_done()
    assert a.pending == {1} and a.again == set()
    assert a.open_round(job_lost=False).failed == {1}
    replaced(a, 1)
    a.started(1)
    a.round_done()
    assert a.pending == set()


def test_a_new_host_dying_before_it_starts_is_no_longer_unstarted(arbiter):
    """So ``replace`` gives it another spare instead of taking the dead one as ready."""
    a = supervised(arbiter)
    a.died(2)
    a.open_round(job_lost=False)
    replaced(a, 2)
    assert a.unstarted() == {2}
    a.died(2)
    assert a.unstarted() == set() and a.life(2) is arbiter.Life.FAILED


def test_a_round_cut_short_fails_the_new_failures_and_keeps_its_own_pending(arbiter):
    a = supervised(arbiter, n=5)
    a.died(1)
    a.open_round(job_lost=False)
    replaced(a, 1)
    out = a.round_cut({1, 3}, rescued=False)
    assert [(r, reason) for r, reason, _ in out] == [(3, "failed during recovery")]
    assert a.pending == {1, 3} and a.round.status is arbiter.Status.CUT
    assert a.unstarted() == {1}, "its new host is kept: the next round need not replace it"
    rnd = a.open_round(job_lost=False)
    assert rnd.number == 1 and rnd.failed == {1, 3}


def test_a_round_cut_short_keeps_the_new_hosts_of_its_own_failures(arbiter):
    """Rank 1's new host (not started) is the round's: a cut by rank 3 leaves it for the
    next round, which need not replace it."""
    a = supervised(arbiter, n=5)
    a.died(1)
    a.open_round(job_lost=False)
    replaced(a, 1)
    assert [r for r, _, _ in a.round_cut({3}, rescued=False)] == [3]
    assert a.unstarted() == {1} and a.pending == {1, 3} and a.again == set()


def test_a_holder_restarted_by_a_round_cut_short_holds_nothing(arbiter):
    """The round restarts survivor 3 (the holder of rank 1's copies) on a new actor, then
    rank 2 fails: 3's old life was stopped and its new host holds no state, so it is a
    failure too, unless the levels that keep parts rescued its parts first."""
    for rescued in (False, True):
        a = supervised(arbiter)
        a.died(1)
        a.open_round(job_lost=False)
        a.respawning(3)
        assert a.host_died(3, current=False) is arbiter.Verdict.IGNORE  # its old host
        assert a.host_died(3, current=True) is arbiter.Verdict.IGNORE  # being replaced
        assert not a.watched(3)
        a.hosted(3)
        assert a.pending == {1} and a.watched(3) and not a.settled()
        out = a.round_cut({2}, rescued=rescued)
        expected = [2] if rescued else [2, 3]
        assert [r for r, _, _ in out] == expected
        assert all(v is arbiter.Verdict.FAILURE for _, _, v in out)
        assert a.pending == {1, *expected} and a.again == set()
        assert a.unstarted() == ({3} if rescued else set())


def test_a_rank_failed_again_in_a_round_cut_short_is_pending_once(arbiter):
    a = supervised(arbiter)
    a.died(1)
    a.open_round(job_lost=False)
    replaced(a, 1)
    a.died(1)
    assert a.again == {1}
    a.round_cut({1}, rescued=False)
    assert a.again == set() and a.pending == {1}
    a.open_round(job_lost=False)
    replaced(a, 1)
    a.started(1)
    a.round_done()
    assert a.pending == set()


def test_a_failed_rank_a_round_gives_a_new_life_outside_its_failures_is_recovered(arbiter):
    """Rank 2 fails while round 0 (for rank 1) restarts every rank on new hosts: its old
    life's failure is moot, as the round restores its new one anyway."""
    a = supervised(arbiter)
    a.died(1)
    a.open_round(job_lost=False)
    a.died(2)
    for rank in range(4):
        replaced(a, rank)
    assert a.pending == {1}
    for rank in range(4):
        a.started(rank)
    a.round_done()
    assert a.pending == set() and a.settled()


# ------------------------------------------------------------------------ moves
def test_a_failure_during_a_move(arbiter):
    """A move gives running rank 2 a new host with no round under way: its old host's
    death is no failure; the new host dies as it starts: rank 2 is watched again and
    its failure (said by the mover) is arbitrated."""
    a = supervised(arbiter)
    a.respawning(2)
    assert a.incarnations[2] == 1 and not a.watched(2) and not a.settled()
    assert a.host_died(2, current=True) is arbiter.Verdict.IGNORE
    a.host_lost(2)
    assert a.watched(2) and a.pending == set() and a.unstarted() == set()
    assert a.died(2) is arbiter.Verdict.FAILURE and a.pending == {2}


def test_a_move_of_a_rank_whose_failure_waits_makes_the_failure_moot(arbiter):
    a = supervised(arbiter)
    a.died(1)
    a.open_round(job_lost=False)
    a.round_done()
    a.died(2)
    replaced(a, 2)
    assert a.pending == set() and a.unstarted() == {2}
    assert not a.settled(), "a host not started on yet may still wake its peers"
    a.started(2)
    assert a.settled()


# --------------------------------------------------------------- after return
def test_a_death_after_return_while_others_run_is_a_failure(arbiter):
    a = supervised(arbiter)
    a.returned(0)
    assert a.kept == {0}
    assert a.died(0) is arbiter.Verdict.FAILURE
    assert a.kept == set() and a.pending == {0}


def test_a_death_after_every_rank_returned_is_lost_after_return(arbiter):
    a = supervised(arbiter, n=2)
    a.returned(0)
    a.returned(1)
    assert a.over()
    assert a.died(1) is arbiter.Verdict.LOST_AFTER_RETURN
    assert a.died(1) is arbiter.Verdict.LOST_AFTER_RETURN  # seen twice: said twice
    assert a.life(1) is arbiter.Life.LOST and a.kept == {0, 1} and a.over()


def test_without_a_policy_a_death_after_return_is_lost_after_return(arbiter):
    a = supervised(arbiter, n=3, recoverable=False)
    a.returned(0)
    assert a.died(0) is arbiter.Verdict.LOST_AFTER_RETURN
    assert a.pending == set() and a.kept == {0} and not a.over()
    assert a.died(1) is arbiter.Verdict.FAILURE


def test_a_returned_rank_restarted_keeps_its_result_until_it_runs_again(arbiter):
    a = supervised(arbiter, n=2)
    a.returned(1)
    a.died(0)
    a.open_round(job_lost=False)
    replaced(a, 0)
    replaced(a, 1)  # a global restart
    assert a.kept == {1} and a.unstarted() == {0, 1}
    a.started(0)
    a.started(1)
    assert a.kept == set()
    a.round_done()
    assert not a.over()
    a.returned(0)
    a.returned(1)
    assert a.over()


def test_the_run_is_over_only_with_every_result_and_no_failure(arbiter):
    a = supervised(arbiter, n=2)
    a.returned(0)
    a.returned(1)
    a.died(1)  # (lost after return)
    assert a.over()
    b = supervised(arbiter, n=2)
    b.returned(0)
    b.died(1)
    assert not b.over()


def test_deaths_while_the_run_ends_are_not_arbitrated(arbiter):
    a = supervised(arbiter, n=2)
    a.ending()
    assert a.host_died(0, current=True) is arbiter.Verdict.IGNORE
    assert a.pending == set()


# ------------------------------------------------------------------------ table
def test_an_input_with_no_transition_is_a_protocol_error(arbiter):
    a = supervised(arbiter, n=2)
    with pytest.raises(ProtocolError, match="no transition from running on hosted"):
        a.hosted(0)
    a.respawning(1)
    with pytest.raises(ProtocolError):
        a.started(1)
    with pytest.raises(ProtocolError):
        a.returned(1)
    b = arbiter.Arbiter(1, recoverable=True)
    with pytest.raises(ProtocolError):
        b.started(0)  # not wired yet


def test_every_life_is_reachable_and_every_input_used():
    lives = {life for pair in _arbiter.TRANSITIONS for life in (pair[0],)}
    lives |= set(_arbiter.TRANSITIONS.values())
    assert lives == set(_arbiter.Life)
    assert {inp for _, inp in _arbiter.TRANSITIONS} == set(_arbiter.On)


# ---------------------------------------------------------------------- mutants
MUTANTS = [
    # a repeat of a known failure is not a new one
    ("if self.failed_life.get(rank) == inc:", "if False:"),
    # a round's rank failing again on its new host outlives the round
    ("self.again.add(rank)", "pass"),
    # lost after return: no policy, or every result in hand
    ("(not self.recoverable or len(self.kept) == self.n)", "(not self.recoverable)"),
    ("(not self.recoverable or len(self.kept) == self.n)", "(len(self.kept) == self.n)"),
    # a failure drops the result in hand
    ("        self.failed_life[rank] = inc\n        self.kept.discard(rank)",
     "        self.failed_life[rank] = inc"),
    # a death where nothing ran starts again; one the ending sees is not arbitrated
    ("            return Verdict.START_AGAIN", "            return Verdict.ARBITRATE"),
    ("        return Verdict.ARBITRATE\n", "        return Verdict.IGNORE\n"),
    ("        if self.phase is Phase.ENDING:\n            return Verdict.IGNORE\n", ""),
    # a death of a host the rank left, or is leaving, is nobody's failure
    ("if not current or self.lives[rank] is Life.RESPAWNING:",
     "if self.lives[rank] is Life.RESPAWNING:"),
    ("if not current or self.lives[rank] is Life.RESPAWNING:", "if not current:"),
    # give up: the job lost, or no policy
    ("if job_lost or not self.recoverable:", "if not self.recoverable:"),
    ("if job_lost or not self.recoverable:", "if job_lost:"),
    ("else self.round.number + 1", "else self.round.number"),
    # a round's end: its failures recovered, those failed again still pending
    ("self.pending = (self.pending - rnd.failed) | self.again",
     "self.pending = self.pending - rnd.failed"),
    ("self.pending = (self.pending - rnd.failed) | self.again",
     "self.pending = self.pending | self.again"),
    ("        self.again.clear()\n        rnd.status = Status.DONE",
     "        rnd.status = Status.DONE"),
    # a round cut short: the new failures, then the empty hosts unless rescued
    ("for r in sorted(more - rnd.failed)]", "for r in sorted(more)]"),
    ("        if not rescued:\n", "        if True:\n"),
    ("        if not rescued:\n", "        if rescued:\n"),
    ("if r not in self.pending and r not in more)", "if r not in more)"),
    ("        self.again.clear()\n        rnd.status = Status.CUT",
     "        rnd.status = Status.CUT"),
    # a new host: a failure the latest round does not recover is moot
    ("if self.round is None or rank not in self.round.failed:", "if self.round is None:"),
    ("if self.round is None or rank not in self.round.failed:", "if True:"),
    ("        self.incarnations[rank] += 1\n", ""),
    # pings, the deadlock check, the end of supervision, unstarted ranks
    ("return rank not in self.pending and self.lives[rank] is not Life.RESPAWNING",
     "return self.lives[rank] is not Life.RESPAWNING"),
    ("return rank not in self.pending and self.lives[rank] is not Life.RESPAWNING",
     "return rank not in self.pending"),
    ("and not self.counts[Life.REPLACED]", ""),
    ("\n                and not self.counts[Life.RESPAWNING])", ")"),
    ("if life is Life.REPLACED}", "if life is Life.RESPAWNING}"),
    # a rank run again: its result is in hand only once it returns again
    ("        self._go(rank, On.STARTED)\n        self.kept.discard(rank)",
     "        self._go(rank, On.STARTED)"),
    ("        self.start_losses[rank] += 1\n", ""),
    ("        self.kept.add(rank)\n", ""),
    ("        self.failed_life[rank] = inc\n", ""),
    # the phases: start-up, supervision, the end
    ("        self.phase = Phase.SUPERVISING\n", ""),
    ("        self.phase = Phase.ENDING\n", ""),
    ("            self._go(rank, On.WIRED)\n", "            pass\n"),
    # the count of each life (what ``settled`` reads)
    ("        self.counts[nxt] += 1\n", ""),
    # the table
    ("(L.RESPAWNING, On.HOST_DIED): L.FAILED", "(L.RESPAWNING, On.HOST_DIED): L.REPLACED"),
    ("(L.RESPAWNING, On.HOSTED): L.REPLACED", "(L.RESPAWNING, On.HOSTED): L.RUNNING"),
    ("(L.RETURNED, On.LOST): L.LOST,", "(L.RETURNED, On.LOST): L.FAILED,"),
    ("(L.LOST, On.LOST): L.LOST,", ""),
    ("for life in (L.WIRED, *_LIVE)}", "for life in _LIVE}"),
]
SOURCE = Path(_arbiter.__file__).read_text()
STEPS = [fn for name, fn in sorted(globals().items())
         if name.startswith("test_") and "arbiter" in inspect.signature(fn).parameters]


def mutant(old: str, new: str) -> types.ModuleType:
    """The arbiter module with ``old`` (found once) replaced by ``new``."""
    assert SOURCE.count(old) == 1, f"the mutant's text is not found once: {old!r}"
    name = "ftactors.runtime._arbiter_mutant"
    mod = types.ModuleType(name)
    mod.__package__ = "ftactors.runtime"
    sys.modules[name] = mod  # (dataclasses look their module up)
    try:
        exec(compile(SOURCE.replace(old, new), "<mutant>", "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


@pytest.mark.parametrize("old, new", MUTANTS, ids=[f"m{i}" for i in range(len(MUTANTS))])
def test_every_mutant_of_the_rules_is_killed(old, new):
    mod = mutant(old, new)
    for step in STEPS:
        try:
            step(mod)
        except Exception:  # (AssertionError, ProtocolError, ...): the mutant is seen
            return
    pytest.fail(f"no step test kills the mutant {old!r} -> {new!r}")


def test_a_mutant_that_changes_nothing_survives():
    """The harness itself: a copy of the module made as the mutants are passes every
    step (so a mutant is killed by its change, not by the copying)."""
    mod = mutant("START_ATTEMPTS = 4\n", "START_ATTEMPTS = 4  # unchanged\n")
    for step in STEPS:
        step(mod)
