"""Checkpoint rounds on programs whose ranks do not progress in step (issue 40): a rank
joins a round at its safe point, when it blocks on a message that may come only after
the round, or once ``main()`` has returned, so no round waits for a rank that cannot
come (``protocols/shared/joining.py``), under ReadyMessageFlush, StandbyReplacement,
RSBackup and their stacks.

Every run must give the plain run's answer and take part in rounds (else the test would
prove nothing); with a kill, it recovers and still gives that answer."""
from __future__ import annotations

import functools
import os
import time

import pytest

import ftactors as ft
from ftactors.tools.apps_cli import protocol_stack

from . import shapes

SHAPES = {"Farm": (shapes.Farm, 3), "PollingFarm": (shapes.PollingFarm, 3), "Uneven3": (shapes.Uneven, 3),
          "Uneven4": (shapes.Uneven, 4), "UnevenHalo": (shapes.UnevenHalo, 3),
          "Roles": (shapes.Roles, 3), "TwoLoops": (shapes.TwoLoops, 3),
          "BreakFirst": (shapes.BreakFirst, 3)}
INTERVAL = {"Roles": 1}  # rank 2's loop has two iterations
"""Checkpoint interval by shape (default 3)."""


@functools.lru_cache(maxsize=None)
def plain(name: str, transport: str):
    cls, ranks = SHAPES[name]
    return answer(name, ft.run(cls, ranks=ranks, transport=transport, timeout_s=60).results)


def answer(name: str, results: list):
    """What must not change: the farm's master's results and how many tasks the workers
    did in all (which worker did which task depends on timing), every rank's result
    otherwise."""
    return (results[0], sum(results[1:])) if name.endswith("Farm") else results


ROUND_EVENTS = {"ready-flush": "checkpoint_part", "standby": "backup", "rs": "rs_checkpoint"}
"""The event of a rank's part of one of the level's rounds."""
STACKS = ["ready-flush", "standby", "rs", "standby+ready-flush", "rs+ready-flush",
          "rs+standby", "rs+standby+ready-flush"]
ON_LOCAL = ("ready-flush", "standby", "rs", "rs+standby+ready-flush")
"""The stacks run on local too (sim runs them all: virtual time is cheap)."""


def under(stack: str, name: str, transport: str, kills=()):
    cls, ranks = SHAPES[name]
    every = INTERVAL.get(name, 3)
    options = {"ready-flush": {"checkpoint_interval": every},
               "standby": {"backup_interval": max(1, every - 1)},
               "rs": {"rs_interval": every}}
    kw = {k: v for level in stack.split("+") for k, v in options[level].items()}
    return ft.run(protocol_stack(cls, stack), ranks=ranks, transport=transport, timeout_s=60,
                  spares=1, chaos=ft.Chaos(kill=list(kills)) if kills else None, **kw)


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("name", list(SHAPES))
def test_failure_free_rounds_finish_with_the_plain_answer(name, stack, transport):
    if transport == "local" and stack not in ON_LOCAL:
        pytest.skip("the two-level stacks run on sim; local runs each level and all three")
    r = under(stack, name, transport)
    assert answer(name, r.results) == plain(name, transport)
    # every level took rounds (the last may end with the run, before it is complete)
    for level in stack.split("+"):
        assert any(e.kind == ROUND_EVENTS[level] for e in r.events), level


KILLS = {
    # a worker at one of its iterations, the master at one of its own (it turns once
    # per message), the master as main() returns, a worker that has returned already,
    # and (on sim, virtual time) whoever is where at a time: mostly blocked in a receive
    "Farm": [ft.Kill(1, iteration=3), ft.Kill(0, iteration=12), ft.Kill(0, moment="return"),
             ft.Kill(2, moment="finished"), ft.Kill(1, time_s=0.0001)],
    "PollingFarm": [ft.Kill(1, iteration=3), ft.Kill(0, iteration=12),
                    ft.Kill(0, moment="return"), ft.Kill(1, time_s=0.0001)],
    "Uneven3": [ft.Kill(2, iteration=5), ft.Kill(1, moment="finished"),
                ft.Kill(0, moment="return")],
    "Uneven4": [ft.Kill(3, iteration=4), ft.Kill(1, moment="finished")],
    "UnevenHalo": [ft.Kill(1, iteration=6), ft.Kill(0, moment="finished"),
                   ft.Kill(2, iteration=4)],
    "Roles": [ft.Kill(2, iteration=1), ft.Kill(0, moment="finished"),
              ft.Kill(2, moment="return")],
    "TwoLoops": [ft.Kill(2, iteration=4), ft.Kill(1, moment="return"),
                 ft.Kill(0, iteration=2)],
    "BreakFirst": [ft.Kill(2, iteration=4), ft.Kill(1, moment="return"),
                   ft.Kill(0, moment="finished")],
}


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("name,kill", [(n, k) for n, ks in KILLS.items() for k in ks],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_kill_anywhere_recovers_to_the_failure_free_answer(name, kill, stack, transport):
    if transport == "local" and stack not in ON_LOCAL:
        pytest.skip("the two-level stacks run on sim; local runs each level and all three")
    if kill.time_s is not None and transport != "sim":
        pytest.skip("a kill at a time hits the same moment only on virtual time")
    r = under(stack, name, transport, [kill])
    assert answer(name, r.results) == plain(name, transport)
    assert r.metrics["kills_fired"], "the kill did not strike: the test proves nothing"
    if kill.moment != "finished":  # a rank that returned dies: the others may be done
        assert any(e.kind == "recovery_end" for e in r.events)


def sealed_sets(store: str) -> list[tuple]:
    """The positions of the sets in ``store`` (one run's) that have a manifest, after
    checking that each holds every rank's part as sealed (present, with the manifest's
    digest)."""
    from ftactors.base import open_store, storage
    [root] = os.listdir(store)
    st = open_store(store)
    positions = []
    for index in sorted(storage.checkpoint_indices(st, root)):
        prefix = storage.checkpoint_prefix(root, index)
        try:
            manifest = storage.read_manifest(st, prefix)
        except KeyError:
            continue  # written, never sealed
        for part in manifest["parts"]:
            storage.load_part_blob(st, manifest, part)  # raises if missing or not the one sealed
        positions.append(tuple(manifest["meta"]["position"]))
    return positions


@pytest.mark.parametrize("name,kwargs", [("Farm", {"ntasks": 40}), ("Uneven4", {"h": 61})])
def test_standby_stable_sets_of_ranks_out_of_step_are_whole(name, kwargs, tmp_path,
                                                           monkeypatch):
    """Ranks join backup rounds out of step, so a rank's marker of round k+1 may leave
    before its part of round k is written: rank 0 seals a set only once every rank said
    (its marker's value) that it wrote its part. Every set sealed holds every part, and
    a job lost after a kill restarts from the newest to the failure-free answer.

    The other ranks' storage is slower than rank 0's (local: the ranks share this
    process), so their writes of round k are still under way when round k+1's flush
    ends, as on a loaded file system: rank 0 sealed such sets before."""
    from ftactors.protocols.standby import rank as standby_rank
    fast = standby_rank.store_part

    def slow_for_others(store, run, index, rank, blob):
        if rank:
            time.sleep(0.02)
        return fast(store, run, index, rank, blob)

    monkeypatch.setattr(standby_rank, "store_part", slow_for_others)
    cls, ranks = SHAPES[name]
    store = str(tmp_path / "ckpts")
    run = functools.partial(ft.run, protocol_stack(cls, "standby"), ranks=ranks,
                            transport="local", timeout_s=60, kwargs=kwargs, backup_interval=1)
    # no spare: the job is lost, as the warning says at the start
    with pytest.warns(ft.NoSparesWarning), pytest.raises(ft.RankFailed) as info:
        run(stable_store=store, chaos=ft.Chaos(kill=[ft.Kill(1, iteration=12)]))
    sealed = [e.detail["position"] for e in info.value.events if e.kind == "stable_checkpoint"]
    assert sealed, "no set was sealed before the kill: the test proves nothing"
    assert sealed_sets(store) == sorted(sealed)
    with pytest.warns(ft.NoSparesWarning):
        r = run(restart_from=store)
    reference = ft.run(cls, ranks=ranks, transport="local", timeout_s=60, kwargs=kwargs)
    assert answer(name, r.results) == answer(name, reference.results)
    # every rank resumed from its part (ranks out of step: each where it joined)
    assert sorted(e.rank for e in r.events_of("restored")) == list(range(ranks))
    # a run that ends seals its last round, whole, though no later marker proves it
    store = str(tmp_path / "finished")
    with pytest.warns(ft.NoSparesWarning):
        r = run(stable_store=store)
    sealed = sealed_sets(store)
    assert sealed[-1] == max(e.detail["position"] for e in r.events_of("backup"))
