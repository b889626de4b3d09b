"""SIGKILLs from outside the framework on real Ray (issue 24, item 1): a thread of the
driver finds this run's rank-actor processes by their titles (a rank or a spare, being
started, wired, solving, returning or idle) and kills one at a random moment, including
the first second after the first actor started. Every trial must give the failure-free
answer. (``ftactors bench deaths`` measures the same on CG W, 12 trials per protocol.)"""
import json
import random

import pytest

import ftactors as ft
from ftactors.apps.cg import CG
from benchmarks.deaths import delays, protocols, trial
from ftactors.tools.cli import main

pytestmark = pytest.mark.ray

LENGTH_S = 6.0  # about a failure-free CG S run on 4 Ray ranks here, start-up included


@pytest.fixture(scope="module")
def cg_reference():
    return [x["zetas"] for x in ft.run(CG, 4, transport="local",
                                       kwargs={"problem_class": "S"}).results]


@pytest.mark.parametrize("name", [p for p in protocols() if p != "ready-flush"])
def test_a_sigkill_from_outside_at_any_moment_gives_the_failure_free_answer(
        ray_session, cg_reference, name):
    mixins, options, spares = protocols()[name]
    cls = type("".join(m.__name__ for m in mixins) + "CG", (*mixins, CG), {})
    seed = sorted(protocols()).index(name)
    rng = random.Random(seed)
    # one trial per stack (the suite's budget; the bench makes 12): in the first second
    # for every other stack, anywhere in the run for the others
    for delay in delays(2, LENGTH_S, seed)[seed % 2:][:1]:
        tried = []
        while len(tried) < 3:  # a run faster than LENGTH_S can end before a late kill
            tried.append(delay)
            outcome, hit = trial(cls, 4, delay, rng, kwargs={"problem_class": "S"},
                                 spares=spares, timeout_s=180, **options)
            if hit is not None:
                break
            delay /= 2  # sooner, still after the start-up
        assert hit is not None, f"{name}: every run ended before its kill, at {tried} s"
        assert not isinstance(outcome, Exception), (
            f"{name}: SIGKILL {delay:.2f} s after the first actor ({hit}) ended the run "
            f"with {type(outcome).__module__}.{type(outcome).__name__}: {outcome}")
        assert [x["zetas"] for x in outcome.results] == cg_reference, (name, delay, hit)


def test_bench_deaths_quick_json(ray_session, tmp_path, capsys):
    """ReadyMessageFlush through ``ftactors bench deaths`` (its smoke test too)."""
    out = tmp_path / "deaths.json"
    code = main(["bench", "deaths", "--class", "S", "--trials", "1", "--protocols",
                 "ready-flush", "--length-s", str(LENGTH_S), "--json", str(out)])
    assert code == 0, capsys.readouterr().out
    got = json.loads(out.read_text())["protocols"]["ready-flush"]
    assert got["verified"] == got["trials"] == 1
