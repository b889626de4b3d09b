"""Every public failure path ends in the failure-free answer or in a public error
(issue 40, item 4): for each of the 15 stacks, on sim with a few ranks, a rank killed
in its loop and then another (or its replacement) at every phase of the recovery round
that the stack announces, in the next round too, and kills at every moment of a rank's
and a spare's life. Each run ends right or in ``ft.RankFailed``, ``ft.ConfigError`` or
``ft.RankError`` naming no internal error; never an AttributeError, KeyError,
AssertionError, TimeoutError, ... (an AttributeError escaped from
``ft_rpc_standby_share`` when a rank and its partner were both lost with two spares,
and a survivor paused while a restore was installed ran on and hung the run)."""
import warnings

import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups
from tests.protocols.programs import Heat1D

ARGS = {"n_local": 4, "iterations": 10}
INTERNAL = ("AttributeError", "KeyError", "AssertionError", "TypeError", "IndexError",
            "ValueError", "RuntimeError", "TimeoutError", "NameError", "UnboundLocalError")
"""Exception types that name a bug of the framework when a rank reports them for a
program that has none."""


def outcome(cls, ranks, setup, kills) -> str:
    """'right', a public error's name, or what went wrong."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = ft.run(cls, ranks, transport="sim", spares=min(setup.spares, 2), kwargs=ARGS,
                       chaos=ft.Chaos(kill=kills), timeout_s=30, **setup.options)
    except (ft.RankFailed, ft.ConfigError) as exc:
        return type(exc).__name__
    except ft.RankError as exc:
        return f"RankError: {exc}" if any(k in str(exc) for k in INTERNAL) else "RankError"
    except Exception as exc:  # noqa: BLE001 - what escaped is the finding
        return f"{type(exc).__name__}: {exc}"
    return "right" if norms(r) == reference(ranks) else f"wrong answer, events {r.events}"


def norms(result):
    return [x["norms"] for x in result.results]


_REFERENCE = {}


def reference(ranks):
    if ranks not in _REFERENCE:
        _REFERENCE[ranks] = norms(ft.run(Heat1D, ranks, transport="sim", kwargs=ARGS))
    return _REFERENCE[ranks]


def plans(ranks: int, phases: list[str], spares: int) -> list[list[ft.Kill]]:
    """Rank 0 dies in its loop, then a second rank (rank 0's replacement, its partner,
    another) at each phase of round 0, and a third at the same phase of round 1; kills
    at each moment of a rank's life, and of a spare's."""
    first = ft.Kill(0, iteration=5)
    out = []
    for phase in phases:
        for second in sorted({0, 1, ranks // 2}):
            out.append([first, ft.Kill(second, recovery_round=0, recovery_phase=phase)])
        out.append([first, ft.Kill(1, recovery_round=0, recovery_phase=phase),
                    ft.Kill(0, recovery_round=1, recovery_phase=phase)])
    out += [[ft.Kill(1, moment=m), ft.Kill(0, iteration=6)]
            for m in ("start", "wire", "return", "finished")]
    if spares:
        out += [[ft.Kill(spare=0, moment=m), ft.Kill(1, iteration=4)]
                for m in ("starting", "idle", "promoted")]
    return out


@pytest.mark.parametrize("stack", sorted(setups()))
def test_every_failure_path_ends_right_or_in_a_public_error(stack):
    setup = setups()[stack]
    ranks = 4 if setup.ranks >= 8 else 3  # RS's groups of 2 on nodes of 2 need 4
    cls = type("Heat", (*setup.mixins, Heat1D), {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        once = ft.run(cls, ranks, transport="sim", spares=min(setup.spares, 2), kwargs=ARGS,
                      chaos=ft.Chaos(kill=[ft.Kill(0, iteration=5)]), **setup.options)
    assert norms(once) == reference(ranks)
    phases = list(dict.fromkeys(e.detail["phase"] for e in once.events_of("recovery_phase")))
    assert phases[0] == "start"
    runs = [(ranks, kills) for kills in plans(ranks, phases, setup.spares)]
    if ranks == 3:  # two ranks: a rank and its partner lost leave no survivor
        runs += [(2, [ft.Kill(0, iteration=5), ft.Kill(1, recovery_round=0,
                                                        recovery_phase=phase)])
                 for phase in phases]
    bad = []
    for n, kills in runs:
        got = outcome(cls, n, setup, kills)
        if got not in ("right", "RankFailed", "ConfigError", "RankError"):
            bad.append((n, kills, got[:600]))
    assert not bad, "\n".join(f"{n} ranks, {k}: {g}" for n, k, g in bad)
