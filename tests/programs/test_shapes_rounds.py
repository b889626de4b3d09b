"""Checkpoint rounds on programs whose ranks do not progress in step (issue 40): a rank
joins a round at its safe point, when it blocks on a message that may come only after
the round, or once ``main()`` has returned, so no round waits for a rank that cannot
come (``protocols/shared/joining.py``), under ReadyMessageFlush, StandbyReplacement,
RSBackup and their stacks.

Every run must give the plain run's answer and take part in rounds (else the test would
prove nothing); with a kill, it recovers and still gives that answer."""
from __future__ import annotations

import functools

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
