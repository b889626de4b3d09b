"""Checkpoint rounds at an agreed position on programs whose ranks do not progress in
step (issue 40): a rank joins a round at its safe point, when it blocks on a message
that may come only after the round, or once ``main()`` has returned, so no round waits
for a rank that cannot come (protocols/ready_flush/rank.py, "Ranks in any shape").

Every run must give the plain run's answer and take part in rounds (else the test would
prove nothing); with a kill, it rolls back and still gives that answer."""
from __future__ import annotations

import functools

import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush

from . import shapes

SHAPES = {"Farm": (shapes.Farm, 3), "Uneven3": (shapes.Uneven, 3),
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
    """What must not change: the farm's master's results (which worker did which task
    depends on timing), every rank's result otherwise."""
    return results[0] if name == "Farm" else results


def under_ready_flush(name: str, transport: str, kills=()):
    cls, ranks = SHAPES[name]
    stack = type(f"Ready{cls.__name__}", (ReadyMessageFlush, cls), {})
    return ft.run(stack, ranks=ranks, transport=transport, timeout_s=60, spares=1,
                  checkpoint_interval=INTERVAL.get(name, 3),
                  chaos=ft.Chaos(kill=list(kills)) if kills else None)


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_failure_free_rounds_finish_with_the_plain_answer(name, transport):
    r = under_ready_flush(name, transport)
    assert answer(name, r.results) == plain(name, transport)
    # rounds were taken (the last may end with the run, before its set is complete)
    assert any(e.kind == "checkpoint_part" for e in r.events)


KILLS = {
    # a worker at one of its iterations, the master at one of its own (it turns once
    # per message), the master as main() returns, a worker that has returned already,
    # and (on sim, virtual time) whoever is where at a time: mostly blocked in a receive
    "Farm": [ft.Kill(1, iteration=3), ft.Kill(0, iteration=12), ft.Kill(0, moment="return"),
             ft.Kill(2, moment="finished"), ft.Kill(1, time_s=0.0001)],
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
@pytest.mark.parametrize("name,kill", [(n, k) for n, ks in KILLS.items() for k in ks],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_kill_anywhere_restarts_to_the_failure_free_answer(name, kill, transport):
    if kill.time_s is not None and transport != "sim":
        pytest.skip("a kill at a time hits the same moment only on virtual time")
    r = under_ready_flush(name, transport, [kill])
    assert answer(name, r.results) == plain(name, transport)
    assert r.metrics["kills_fired"], "the kill did not strike: the test proves nothing"
    if kill.moment != "finished":  # a rank that returned dies: the others may be done
        assert any(e.kind == "rollback" for e in r.events)
