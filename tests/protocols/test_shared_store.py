"""Runs that share one checkpoint directory (a user's ``/shared/ckpt``): each run recovers
from its own sets only, and ``restart_from`` resumes a lost job only from a set of the same
program, rank count, arguments and stack, saying what differs otherwise (issue 24, item 2).

The first run of each test leaves complete sets in the directory; the second, of another
program or with other arguments (or the same), loses a rank before it stored a set of its
own: it must restart from the start of the run, never from the first run's sets.
"""
import numpy as np
import pytest

import ftactors as ft
from ftactors.base import _storage
from ftactors.protocols import ReadyMessageFlush, RSBackup, StandbyReplacement
from ftactors.runtime._checkpoints import part_name, position_index

from .programs import Heat1D
from .test_rs_backup import TOPOLOGY

# These runs lose whole jobs or checkpoint on request: spares and intervals are beside
# the point; the warnings are tested in tests/runtime/test_notices.py.
pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning"), pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")]


class RFHeat(ReadyMessageFlush, Heat1D):
    pass


class RFOther(ReadyMessageFlush, Heat1D):
    phase = 1.0


class RSRFHeat(RSBackup, ReadyMessageFlush, Heat1D):
    pass


class RSRFOther(RSBackup, ReadyMessageFlush, Heat1D):
    phase = 1.0


class RSHeat(RSBackup, Heat1D):
    pass


class RSOther(RSBackup, Heat1D):
    phase = 1.0


class SBHeat(StandbyReplacement, Heat1D):
    backup_interval = 3


class SBOther(StandbyReplacement, Heat1D):
    backup_interval = 3
    phase = 1.0


HEAT = {"iterations": 20}
OTHER_ARGS = {"iterations": 20, "n_local": 32}
VARIANTS = {"same program": (0, HEAT), "other arguments": (0, OTHER_ARGS),
            "other program": (1, HEAT)}
"""The second run: (index of the class in a test's pair, its kwargs)."""


def reference(cls, ranks, kwargs):
    """The failure-free answer of ``cls``'s program (its phase) with ``kwargs``."""
    bare = type("Bare", (Heat1D,), {"phase": cls.phase})
    return ft.run(bare, ranks, transport="local", kwargs=kwargs).results


def assert_same(results, ref):
    for got, want in zip(results, ref):
        assert got["norms"] == want["norms"]
        assert np.array_equal(got["u"], want["u"])


def stable(store, **kw):
    return {"checkpoint_interval": 4, "checkpoint_storage": "stable", "checkpoint_dir": store,
            **kw}


# ------------------------------------------------- recovery inside a run: own sets only
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_ready_flush_rolls_back_to_its_own_sets_only(tmp_path, transport, variant):
    store = str(tmp_path / "ckpt")
    ft.run(RFHeat, 4, transport=transport, kwargs=HEAT, **stable(store))  # sets at 12, 16
    which, kwargs = VARIANTS[variant]
    cls = (RFHeat, RFOther)[which]
    r = ft.run(cls, 4, transport=transport, kwargs=kwargs, chaos=ft.Chaos(kill=[(1, 3)]),
               **stable(store))
    assert [e.detail["position"] for e in r.events_of("rollback")] == [None]
    assert {e.detail["position"] for e in r.events_of("restored")} == {None}
    assert_same(r.results, reference(cls, 4, kwargs))


@pytest.mark.parametrize("variant", ["same program", "other arguments"])
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_rs_and_ready_flush_three_runs_share_a_directory(tmp_path, transport, variant):
    """The issue's case: RSBackup + ReadyMessageFlush, three runs of one directory, the
    third killed before its first encoded round and its first global set."""
    store = str(tmp_path / "ckpt")
    opts = {**TOPOLOGY, **stable(store)}
    for _ in range(2):
        ft.run(RSRFHeat, 8, transport=transport, kwargs=HEAT, **opts)
    _, kwargs = VARIANTS[variant]
    r = ft.run(RSRFHeat, 8, transport=transport, kwargs=kwargs,
               chaos=ft.Chaos(kill=[(1, 2)]), **opts)
    assert [e.detail["position"] for e in r.events_of("rollback")] == [None]
    assert_same(r.results, reference(RSRFHeat, 8, kwargs))


@pytest.mark.parametrize("variant", ["other arguments", "other program"])
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_rs_stable_fallback_takes_its_own_set(tmp_path, transport, variant):
    """Every rank lost (beyond the code's reach): the run falls back to its own newest
    stable set, not to a newer one another run left in the directory."""
    store = str(tmp_path / "rs")
    opts = {**TOPOLOGY, "rs_ranks_per_node": 1, "rs_stable_store": store}
    ft.run(RSHeat, 4, transport=transport, kwargs=HEAT, **opts)  # sets at 15 and 18
    which, kwargs = VARIANTS[variant]
    cls = (RSHeat, RSOther)[which]
    kills = [(0, 10)] + [ft.Kill(k, recovery_round=0) for k in (1, 2, 3)]
    r = ft.run(cls, 4, transport=transport, kwargs=kwargs, chaos=ft.Chaos(kill=kills), **opts)
    rec = r.events_of("rs_recovery")[-1].detail
    sealed = [e.detail["position"] for e in r.events_of("stable_checkpoint")]
    assert rec["source"] == "stable" and rec["position"] in sealed
    assert rec["position"] <= (0, 10)
    assert_same(r.results, reference(cls, 4, kwargs))


# ------------------------------------------------------- restart_from: matching sets
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_standby_stable_stores_of_two_runs_resume_each_its_own(tmp_path, transport):
    """Two runs (other arguments) write their backup rounds to one directory; the second
    is lost; ``restart_from`` resumes each from its own newest set."""
    store = str(tmp_path / "ckpts")
    ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, stable_store=store)  # last: 18
    with pytest.raises(ft.RankFailed):  # no spare: lost at 13, its newest sealed set: 9
        ft.run(SBHeat, 4, transport=transport, kwargs=OTHER_ARGS, stable_store=store,
               chaos=ft.Chaos(kill=[(2, 13)]))
    r = ft.run(SBHeat, 4, transport=transport, kwargs=OTHER_ARGS, restart_from=store)
    assert {e.detail["position"] for e in r.events_of("restored")} == {(0, 9)}
    assert_same(r.results, reference(SBHeat, 4, OTHER_ARGS))
    r = ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, restart_from=store)
    assert {e.detail["position"] for e in r.events_of("restored")} == {(0, 18)}
    assert_same(r.results, reference(SBHeat, 4, HEAT))


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_restart_from_a_foreign_set_is_refused_naming_the_difference(tmp_path, transport):
    store = str(tmp_path / "ckpts")
    ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, stable_store=store)
    for cls, ranks, kwargs, why in [(SBHeat, 4, OTHER_ARGS, "args differ"),
                                    (SBOther, 4, HEAT, "program differs"),
                                    (SBHeat, 3, HEAT, "ranks 4 vs 3"),
                                    (RFHeat, 4, HEAT, "stack differs")]:
        with pytest.raises(ft.ConfigError, match=why) as info:
            ft.run(cls, ranks, transport=transport, kwargs=kwargs, restart_from=store)
        assert "restart_from_any" in str(info.value)  # the way out is named
    with pytest.raises(ft.ConfigError, match="ranks 4 vs 3"):  # no override restores that
        ft.run(SBHeat, 3, transport=transport, kwargs=HEAT, restart_from=store,
               restart_from_any=True)


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_restart_from_any_resumes_a_deliberately_changed_job(tmp_path, transport):
    """A job resumed on purpose with more iterations: the override takes the set."""
    store = str(tmp_path / "ckpts")
    ft.run(SBHeat, 4, transport=transport, kwargs={"iterations": 14}, stable_store=store)
    r = ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, restart_from=store,
               restart_from_any=True)
    assert {e.detail["position"] for e in r.events_of("restored")} == {(0, 12)}
    assert_same(r.results, reference(SBHeat, 4, HEAT))


def _legacy_set(store_uri: str, ranks: int, position: tuple) -> None:
    """A set as ftactors wrote it before runs had an identity: ``ckpt-N`` at the root,
    a manifest with the position only. Its parts: the start of the run."""
    from ftactors.engine._endpoint import blank_snapshot
    store = _storage.open_store(store_uri)
    index = position_index(position)
    prefix = _storage.checkpoint_prefix("", index)
    for rank in range(ranks):
        store.put_bytes(f"{prefix}/{part_name(rank)}", blank_snapshot(rank, ranks))
    _storage.write_manifest(store, prefix, {part_name(r): f"{prefix}/{part_name(r)}"
                                            for r in range(ranks)},
                            {"position": list(position), "ranks": ranks})


def test_a_set_without_identity_is_refused_unless_overridden(tmp_path):
    store = str(tmp_path / "old")
    _legacy_set(store, 4, (0, 6))
    with pytest.raises(ft.ConfigError, match="no run identity"):
        ft.run(SBHeat, 4, transport="local", kwargs=HEAT, restart_from=store)
    r = ft.run(SBHeat, 4, transport="local", kwargs=HEAT, restart_from=store,
               restart_from_any=True)
    assert r.events_of("restored")  # the blank parts: the run starts over
    assert_same(r.results, reference(SBHeat, 4, HEAT))


def test_restart_from_any_is_checked():
    with pytest.raises(ft.ConfigError, match="restart_from_any must be True or False"):
        ft.run(SBHeat, 4, transport="local", kwargs=HEAT, restart_from_any="yes")
    with pytest.raises(ft.ConfigError, match="restart_from_any=True needs restart_from"):
        ft.run(SBHeat, 4, transport="local", kwargs=HEAT, restart_from_any=True)


# ------------------------------------- a restore never goes past the recovery line
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_snapshot_ahead_of_the_recovery_line_is_refused(tmp_path, transport):
    """A manifest that says (0, 9) over parts taken at (0, 18) (damaged or doctored
    storage: its position and its recovery line, which a restore is checked against):
    every rank refuses its part, it does not resume at 18."""
    store = str(tmp_path / "ckpts")
    r = ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, stable_store=store)
    fs = _storage.open_store(store)
    newest = _storage.latest_complete(fs, f"run-{r.run_id}")
    manifest = _storage.read_manifest(fs, newest)
    assert tuple(manifest["meta"]["position"]) == (0, 18)
    manifest["meta"]["position"] = [0, 9]
    if "line" in manifest["meta"]:
        manifest["meta"]["line"] = [0, 9]
    fs.put(f"{newest}/{_storage.MANIFEST_NAME}", manifest)
    with pytest.raises(ft.RankError, match=r"ahead of the recovery line chosen, \(0, 9\)"):
        ft.run(SBHeat, 4, transport=transport, kwargs=HEAT, restart_from=store)


class Planter(RFHeat):
    """Rank 0 plants an earlier run's newest set in this run's own folder, under this
    run's identity, at iteration 2: the set looks like the run's own, but the run never
    got that far."""

    planted_from = None  # the earlier run's store and set prefix, set by the test

    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        if self.rank == 0 and iteration == 2:
            from ftactors.runtime._checkpoints import seal_set, store_part
            uri, prefix = self.planted_from
            fs = _storage.open_store(uri)
            manifest = _storage.read_manifest(fs, prefix)
            index = position_index(tuple(manifest["meta"]["position"]))
            for rank in range(self.size):
                blob = _storage.load_part_blob(fs, manifest, part_name(rank))
                store_part(fs, self.run_identity, index, rank, blob)
            seal_set(fs, self.run_identity, index, self.size, manifest["meta"])


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_set_ahead_of_the_runs_own_progress_is_refused(tmp_path, transport):
    store = str(tmp_path / "ckpt")
    first = ft.run(RFHeat, 4, transport=transport, kwargs=HEAT, **stable(store))
    Planter.planted_from = (store, _storage.latest_complete(_storage.open_store(store),
                                                            f"run-{first.run_id}"))
    with pytest.raises(ft.ProtocolError, match=r"refused to restore .* at position \(0, 16\)"):
        ft.run(Planter, 4, transport=transport, kwargs=HEAT, chaos=ft.Chaos(kill=[(1, 3)]),
               **stable(store))


def test_on_ray_each_run_writes_and_restores_its_own_sets(tmp_path, ray_session):
    """The ranks are processes: each writes its parts to its run's folder (the identity
    travels with the rank's spec), and a second run with other arguments rolls back to
    its start, not to the first run's sets."""
    store = str(tmp_path / "ckpt")
    first = ft.run(RFHeat, 2, transport="ray", kwargs=HEAT, **stable(store))
    r = ft.run(RFHeat, 2, transport="ray", kwargs=OTHER_ARGS, chaos=ft.Chaos(kill=[(1, 3)]),
               **stable(store))
    assert [e.detail["position"] for e in r.events_of("rollback")] == [None]
    assert_same(r.results, reference(RFHeat, 2, OTHER_ARGS))
    folders = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert folders == sorted([f"run-{first.run_id}", f"run-{r.run_id}"])


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_resumed_job_falls_back_to_the_set_it_resumed_from(tmp_path, transport):
    """A resumed job has no set of its own until its first checkpoint: a failure before
    it goes back to the set it resumed from (its start), not to the top of the program."""
    store = str(tmp_path / "ckpt")
    short = {"iterations": 14}
    ft.run(RFHeat, 4, transport=transport, kwargs=short, **stable(store))  # sets at 8, 12
    r = ft.run(RFHeat, 4, transport=transport, kwargs=short, restart_from=store,
               chaos=ft.Chaos(kill=[(2, 13)]), **stable(store))
    assert len(r.events_of("rollback")) == 1
    assert {tuple(e.detail["position"]) for e in r.events_of("restored")} == {(0, 12)}
    assert_same(r.results, reference(RFHeat, 4, short))
