"""A run that looks tested but is not says so (issue 24, item 4): unfired chaos kills,
a rank restored with nothing registered, a protocol that never checkpoints, a spares
role with no spares. Each is a ``ft.FaultToleranceWarning`` and is kept in the result."""
import random
import warnings

import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush, StandbyReplacement

from .. import bodies as b
from ..programs.wildcards import ProbeAny, consistent


class Converging(ft.Rank):
    """A loop of ``n`` iterations left by a convergence ``break`` after iteration 3."""

    async def main(self, n=10):
        self.register("x", 0)
        async for it in self.iterations(n):
            self.x += await self.comm.allreduce(it)
            if it == 3:
                break
        return self.x


class Summing(ft.Rank):
    """``Iterating`` with its sum registered."""

    async def main(self, n):
        self.register("total", 0)
        async for it in self.iterations(n):
            self.total += await self.comm.allreduce(it)
        return self.total


class NoLoop(ft.Rank):
    """Straight-line code: no ``iterations()`` loop, so no safe point."""

    async def main(self):
        return await self.comm.allreduce(self.rank)


class SbConverging(StandbyReplacement, Converging):
    backup_interval = 1


class SbNoLoop(StandbyReplacement, NoLoop):
    pass


class SbIterating(StandbyReplacement, b.Iterating):
    """``Iterating`` keeps its sum in a local variable: it registers nothing."""
    backup_interval = 2


class SbRfSumming(StandbyReplacement, ReadyMessageFlush, Summing):
    backup_interval = 2


class RfIterating(ReadyMessageFlush, b.Iterating):
    pass


class RfSumming(ReadyMessageFlush, Summing):
    pass


def _told(record, category) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, category)]


def test_kills_that_never_fire_are_told_and_counted(transport):
    """Past the loop's end, after a convergence break, and aimed at an incarnation that
    a first kill already took: the run verifies, but says it did not survive them."""
    plan = ft.Chaos(kill=[(1, 2), (1, 3), (2, 6), (0, 20)])
    with pytest.warns(ft.KillNotFiredWarning) as record:
        r = ft.run(SbConverging, ranks=3, spares=1, transport=transport, timeout_s=120,
                   chaos=plan)
    assert r.results == [3 * (0 + 1 + 2 + 3)] * 3  # the kill that fired was survived
    m = r.metrics
    assert m["kills_planned"] == [{"rank": 1, "iteration": i} for i in (2, 3)] + [
        {"rank": 2, "iteration": 6}, {"rank": 0, "iteration": 20}]
    assert m["kills_fired"] == [{"rank": 1, "iteration": 2}]
    assert [(k["kill"], k["why"]) for k in m["kills_unfired"]] == [
        ({"rank": 1, "iteration": 3},
         "incarnation 0 of rank 1 died before it reached iteration 3"),
        ({"rank": 2, "iteration": 6},
         "rank 2 (incarnation 0) never reached iteration 6 of an iterations() loop (its "
         "loops ended or were left first, or main() has none)"),
        ({"rank": 0, "iteration": 20},
         "rank 0 (incarnation 0) never reached iteration 20 of an iterations() loop (its "
         "loops ended or were left first, or main() has none)")]
    (told,) = _told(record, ft.KillNotFiredWarning)
    assert told.startswith("3 of 4 planned kill(s) never fired")
    assert "Kill(rank=2, iteration=6): rank 2 (incarnation 0) never reached" in told


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_kills_for_a_life_that_never_comes_or_a_time_after_the_end(transport):
    plan = ft.Chaos(kill=[ft.Kill(1, iteration=2, incarnation=1),
                          ft.Kill(2, recovery_round=0)], kill_at=[(0, 900.0)])
    with pytest.warns(ft.KillNotFiredWarning):
        r = ft.run(SbConverging, ranks=3, spares=1, transport=transport, chaos=plan)
    assert r.metrics["kills_fired"] == []
    assert [k["why"] for k in r.metrics["kills_unfired"]] == [
        "rank 1 never had incarnation 1 (its last was 0)",
        "the run had no recovery round 0 (0 round(s))",
        f"the run ended first (its ranks ran "
        f"{r.events_of('run_end')[0].time - r.events_of('run_start')[0].time:.3g} s; the "
        f"kill was due 900 s in)"]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_kill_of_a_life_a_global_restart_replaced_never_fires(transport):
    """ReadyMessageFlush restarts every rank in a new actor: a second kill aimed at the
    first life of another rank finds it gone."""
    with pytest.warns(ft.KillNotFiredWarning):
        r = ft.run(RfSumming, ranks=3, args=(8,), transport=transport,
                   checkpoint_interval=2, chaos=ft.Chaos(kill=[(1, 3), (2, 6)]))
    assert r.results == [3 * sum(range(8))] * 3
    assert r.metrics["kills_unfired"] == [{
        "kill": {"rank": 2, "iteration": 6},
        "why": "incarnation 0 of rank 2 was replaced by a recovery (as incarnation 1) "
               "before it reached iteration 6"}]


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_program_without_a_loop_is_told_it_had_no_safe_point(transport):
    with pytest.warns(ft.FaultToleranceWarning) as record:
        r = ft.run(SbNoLoop, ranks=3, spares=1, transport=transport,
                   chaos=ft.Chaos(kill=[(1, 0)]))
    assert r.results == [3, 3, 3]
    assert [k["kill"] for k in r.metrics["kills_unfired"]] == [{"rank": 1, "iteration": 0}]
    (no_ckpt,) = _told(record, ft.NoCheckpointWarning)
    assert no_ckpt.startswith("no rank offered a safe point (main() has no `async for i in "
                              "self.iterations(n)` loop): StandbyReplacement checkpoint(s) "
                              "only there")
    assert r.metrics["safe_points"] is False


def test_a_rank_restored_with_nothing_registered_is_named(transport):
    """``Iterating`` sums in a local variable: restored at iteration 4 it goes on from 0,
    and the answer is silently wrong; the run must say which rank lost its state."""
    with pytest.warns(ft.NothingRegisteredWarning) as record:
        r = ft.run(SbIterating, ranks=3, spares=1, args=(8,), transport=transport,
                   timeout_s=120, chaos=ft.Chaos(kill=[(1, 5)]))
    told = _told(record, ft.NothingRegisteredWarning)
    assert any(t.startswith("rank 1 was restored to iteration 4 of loop 0 with nothing "
                            "registered (self.register)") for t in told)
    assert r.metrics["restored_unregistered"] == [0, 1, 2]  # survivors roll back too
    assert {e.rank for e in r.events_of("restored_unregistered")} == {0, 1, 2}


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_rank_report_warned_of_as_an_error_ends_the_run_with_it(transport):
    """A driver that makes warnings errors: the warning a rank's report raises (in the
    coordinator's report handler, not the driver's code) ends the run as that error once
    the run is over, on every transport; it once left the run waiting forever."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ft.NothingRegisteredWarning, match="rank 1 was restored to "
                           "iteration 4 of loop 0 with nothing registered"):
            ft.run(SbIterating, ranks=3, spares=1, args=(8,), transport=transport,
                   timeout_s=60, chaos=ft.Chaos(kill=[(1, 5)]))


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_restore_to_the_top_of_the_first_loop_lost_nothing(transport):
    """Restored to iteration 0 of the first loop, a program that registers nothing
    starts that loop as it first did: nothing to tell."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.FaultToleranceWarning)
        r = ft.run(SbIterating, ranks=3, spares=1, args=(8,), transport=transport,
                   backup_interval=100, chaos=ft.Chaos(kill=[(1, 5)]))
    assert [tuple(e.detail["position"]) for e in r.events_of("restored")] == [(0, 0)] * 3
    assert r.results == [3 * sum(range(8))] * 3 and r.metrics["restored_unregistered"] == []


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_ready_flush_with_no_interval_is_told_at_the_start(transport):
    with pytest.warns(ft.NoCheckpointWarning, match="ReadyMessageFlush has no checkpoint "
                      "interval: .* set checkpoint_interval=K"):
        ft.run(RfIterating, ranks=2, args=(4,), transport=transport)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.FaultToleranceWarning)
        ft.run(RfIterating, ranks=2, args=(4,), transport=transport, checkpoint_interval=2)
        ft.run(RfIterating, ranks=2, args=(4,), transport=transport, checkpoint_interval_s=1)


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_standby_alone_without_spares_says_the_first_failure_ends_the_run(transport):
    with pytest.warns(ft.NoSparesWarning, match="StandbyReplacement with spares=0 has no "
                      "standby rank to promote: the first failure ends the run with "
                      "ft.RankFailed; set spares=k"):
        with pytest.raises(ft.RankFailed, match="no spare left"):  # as it said
            ft.run(SbConverging, ranks=3, transport=transport, chaos=ft.Chaos(kill=[(1, 2)]))


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_standby_below_a_level_without_spares_says_a_new_actor_takes_over(transport):
    with pytest.warns(ft.NoSparesWarning, match="StandbyReplacement with spares=0: "
                      "StandbyReplacement restarts a failed rank in a new actor"):
        r = ft.run(SbRfSumming, ranks=3, args=(8,), transport=transport,
                   checkpoint_interval=4, chaos=ft.Chaos(kill=[(1, 5)]))
    assert [(e.rank, e.detail["warm"]) for e in r.events_of("respawned")] == [(1, False)]
    assert r.results == [3 * sum(range(8))] * 3


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_run_that_tests_what_it_plans_is_quiet(transport):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.FaultToleranceWarning)
        r = ft.run(SbConverging, ranks=3, spares=2, transport=transport,
                   chaos=ft.Chaos(kill=[(1, 2), ft.Kill(1, iteration=3, incarnation=1)]))
    assert r.metrics["kills_fired"] == r.metrics["kills_planned"]
    assert r.metrics["kills_unfired"] == [] and r.metrics["restored_unregistered"] == []
    assert r.metrics["safe_points"] is True


class _Gather(ft.Rank):
    """Rank 0 takes one message from every other rank in arrival order (ANY_SOURCE)."""

    async def main(self):
        if self.rank:
            await self.comm.send(self.rank, dest=0)
            return 0
        return sum([await self.comm.recv(source=ft.ANY_SOURCE) for _ in range(self.size - 1)])


@pytest.mark.parametrize("protocol", ["groups", "hc3i"])
def test_wildcard_receives_under_a_partial_restart_are_replayed_and_need_no_notice(protocol):
    """A master/worker program taking results from ANY_SOURCE, restarted by
    GroupCoordination, stalled or returned a wrong sum in 20 of 40 sim-check runs, and a
    warning said so before the run. Restarted ranks now take their wildcard receives in
    their first life's order (``engine/_determinants``; DDVPiggyback's recovery line needs
    no order): no notice, and a probing receiver killed at iterations across its loop
    agrees with what its senders hold (more in tests/programs/test_wildcard_replay.py)."""
    from ftactors.tools.simcheck import setups
    setup = setups()[protocol]
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        wild = type("Gather", (*setup.mixins, _Gather), {})
        assert ft.run(wild, ranks=4, transport="local", **setup.options).results[0] == 6
    # (the program has no loop: groups, which checkpoint at safe points only, say at the
    # end that nothing was)
    assert [str(w.message) for w in told if "ANY_SOURCE" in str(w.message)] == []
    assert {w.category for w in told} <= {ft.NoCheckpointWarning}
    probing = type("Probing", (*setup.mixins, ProbeAny), {})
    # (ranks that turn at different paces checkpoint in groups of their own, or not)
    options = {"groups": {"groups": "single", "group_checkpoint_interval": 3},
               "hc3i": {"clusters": "fixed:2", "clc_interval_s": 0.002}}[protocol]
    for it in range(1, 18, 3):
        r = ft.run(probing, ranks=4, transport="sim", seed=it, **options,
                   chaos=ft.Chaos(kill=[ft.Kill(3, iteration=it)]))
        assert r.metrics["kills_fired"]
        assert consistent(r.results[3], {s: r.results[s] for s in range(3)}), it


class Drawing(ft.Rank):
    """A Monte Carlo loop: ``how`` says where its samples come from (a generator seeded
    before the loop, kept in a local or an attribute, registered or not; numpy's or the
    random module's global one; a generator made anew in every iteration)."""

    async def main(self, how, n=8):
        rng = np.random.default_rng(17 + self.rank)
        if how == "registered":
            rng = self.register("rng", rng)
        elif how == "attribute":
            self.rng, rng = rng, None
        scratch = np.empty(4)  # a receive buffer: changes in place, rewritten before read
        self.register("total", 0.0)
        async for it in self.iterations(n):
            if how == "numpy global":
                x = float(np.random.rand())
            elif how == "random global":
                x = random.random()
            elif how == "fresh":
                x = float(np.random.default_rng(it).random())
            else:
                x = float((self.rng if how == "attribute" else rng).random())
            await self.comm.Allreduce(np.full(4, x), scratch)
            self.total += float(scratch[0])
        return self.total


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("how, named", [
    ("local", "local 'rng'"), ("attribute", "self.rng"),
    ("numpy global", "numpy's global random generator"),
    ("random global", "the random module's")])
def test_a_loop_that_draws_from_an_unregistered_generator_is_told(transport, how, named):
    """Its draws after a restore are not those that followed the checkpoint: a run with a
    failure silently gives another answer. Told once, however many ranks draw."""
    with pytest.warns(ft.UnsavedStateWarning) as record:
        r = ft.run(Drawing, ranks=3, args=(how,), transport=transport)
    (told,) = _told(record, ft.UnsavedStateWarning)
    assert "changes state that no checkpoint holds: " + named in told
    assert "rng = self.register('rng'" in told
    assert len(r.events_of("unsaved_state")) == 3  # each rank reported it


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("how", ["registered", "fresh"])
def test_a_registered_or_fresh_generator_is_not_told(transport, how):
    """A registered generator is checkpointed (and a kill gives the failure-free answer);
    one made anew each iteration carries nothing; the scratch buffer is not a generator."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.UnsavedStateWarning)
        clean = ft.run(Drawing, ranks=3, args=(how,), transport=transport).results
        r = ft.run(SbDrawing, ranks=3, spares=1, args=(how,), transport=transport,
                   chaos=ft.Chaos(kill=[(1, 5)]))
    assert r.metrics["recoveries"] == 1 and r.results == clean
    assert r.events_of("unsaved_state") == []


class SbDrawing(StandbyReplacement, Drawing):
    pass


@pytest.mark.ray
def test_unsaved_state_is_told_on_ray(ray_session):
    """On Ray every rank is a process: its global generators and its module's variables
    are its own."""
    with pytest.warns(ft.UnsavedStateWarning) as record:
        ft.run(Drawing, ranks=2, args=("numpy global",), transport="ray")
    assert "numpy's global random generator" in _told(record, ft.UnsavedStateWarning)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.UnsavedStateWarning)
        ft.run(Drawing, ranks=2, args=("registered",), transport="ray")
    with pytest.warns(ft.UnsavedStateWarning) as record:  # the module's, in a Ray worker
        ft.run(Logging, ranks=2, args=("module",), transport="ray")
    assert f"{__name__}.HISTORY" in _told(record, ft.UnsavedStateWarning)[0]


HISTORY = []  # a module-level log that Logging's loop appends to
FIELD = np.zeros(1000)  # a module-level array that Logging's loop changes in place


class Logging(ft.Rank):
    """Keeps part of its loop's history outside ``register``: in a variable of its module,
    in a class attribute (one dict shared by every rank of the process), in an attribute
    or in a local list that grows."""

    cache = {}
    LIMIT = 100  # a class constant: read, never changed

    async def main(self, how, n=6):
        self.register("total", 0)
        self.log, seen = [], []
        async for it in self.iterations(min(n, self.LIMIT)):
            v = await self.comm.allreduce(it + self.rank)
            if how == "module":
                HISTORY.append(v)
            elif how == "array":
                FIELD[it] += v
            elif how == "class":
                self.cache["calls"] = self.cache.get("calls", 0) + 1
            elif how == "attribute":
                self.log = self.log + [v]
            elif how == "local":
                seen.append(v)
            else:
                seen[:] = [v]  # a scratch list, refilled: does not grow
            self.total += v
        return self.total


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("how, named", [("module", f"{__name__}.HISTORY"),
                                        ("array", f"{__name__}.FIELD"),
                                        ("class", "Logging.cache"), ("attribute", "self.log"),
                                        ("local", "local 'seen'")])
def test_a_loop_that_changes_module_or_class_state_is_told(transport, how, named):
    with pytest.warns(ft.UnsavedStateWarning) as record:
        ft.run(Logging, ranks=2, args=(how,), transport=transport)
    (told,) = _told(record, ft.UnsavedStateWarning)
    assert f"changes state that no checkpoint holds: {named}. After a restore" in told


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_module_and_class_state_that_the_loop_only_reads_is_not_told(transport):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.UnsavedStateWarning)
        r = ft.run(Logging, ranks=2, args=("neither",), transport=transport)
    assert r.events_of("unsaved_state") == []


def test_big_arrays_are_not_read_for_the_unsaved_state_watch():
    """A big read-only matrix or table of the program's module is not read at every
    rank's start (two passes over it); a small one is."""
    from ftactors.runtime._unsaved_state import DIGEST_MAX_BYTES, DIGEST_MAX_ITEMS, _digest
    assert _digest(np.zeros(DIGEST_MAX_BYTES // 8 + 1)) is None
    assert _digest(dict.fromkeys(range(DIGEST_MAX_ITEMS + 1))) is None
    assert _digest(np.zeros(8)) != _digest(np.ones(8))


class Rebinding(ft.Rank):
    """``how``: the loop rebinds the local ``register`` returned, so the registered
    attribute keeps its first value (the bug), or updates it in place, or assigns the
    attribute (both right)."""

    async def main(self, how, n=6):
        x = self.register("x", np.zeros(3) + self.rank)
        total = self.register("total", 0.0)
        count = 0  # an int like the registered total's first value: not taken for it
        async for _ in self.iterations(n):
            v = await self.comm.allreduce(float(x.sum()))
            if how == "rebind":
                x = x * 0.5 + v
                total += v
            elif how == "in place":
                x *= 0.5
                x += v
                self.total += v
            else:
                self.x = x = x * 0.5 + v
                self.total = total = total + v
            count += 1
        return x.tolist(), self.total, count


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_loop_that_rebinds_what_register_returned_is_told(transport):
    """Every checkpoint would save the first value: a failure gives another answer."""
    with pytest.warns(ft.UnsavedStateWarning) as record:
        ft.run(Rebinding, ranks=2, args=("rebind",), transport=transport)
    (told,) = _told(record, ft.UnsavedStateWarning)
    assert ("the local 'total' that register returned (the loop rebinds it, so self.total "
            "keeps its first value" in told and "the local 'x' that register returned" in told)
    assert "count" not in told


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("how", ["in place", "assigned"])
def test_a_loop_that_updates_the_registered_state_is_not_told(transport, how):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.UnsavedStateWarning)
        r = ft.run(Rebinding, ranks=2, args=(how,), transport=transport)
    assert r.events_of("unsaved_state") == []
