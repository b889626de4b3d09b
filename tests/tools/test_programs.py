"""Programs by reference (``tools/programs.py``): the user's class under ``ftactors
run``, chaos experiments and sim-check, judged by its check or bit for bit against its
failure-free run; and the example of docs/chaos.md (``examples/``) run by all three."""
import argparse
import json
import os
import shlex

import numpy as np
import pyarrow.parquet as pq
import pytest

import ftactors as ft
from ftactors.tools import cli
from ftactors.tools.experiment import ExperimentError, experiment_from_dict, load_experiment
from ftactors.tools.programs import (add_program_arguments, literal, parse_kwargs,
                                     program_from_args, resolve, same_bits)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
HERE = "tests.tools.user_programs"
BUGGY_HISTORY = "holds: self.history. After"
"""What examples/poisson_buggy.py is told before its run (its bug: self.history)."""


@pytest.fixture
def in_root(monkeypatch):
    """Commands run from the repository's root, as the docs' do."""
    monkeypatch.chdir(ROOT)


# ------------------------------------------------------------------------ resolver
def test_a_file_and_a_module_reference_resolve_to_the_class():
    by_file = resolve(os.path.join(EXAMPLES, "poisson.py") + ":Poisson", (), {"n": 8})
    assert by_file.cls.__name__ == "Poisson" and by_file.kwargs == {"n": 8}
    assert by_file.check is None and "bit for bit" in by_file.checked_by
    by_module = resolve(f"{HERE}:Counter", [1.0])
    assert by_module.cls.__module__ == HERE and by_module.args == (1.0,)
    assert resolve(f"{HERE}:Verified", [1.0]).checked_by == "Verified.verify"
    assert resolve(f"{HERE}:Noisy", check=f"{HERE}:close").checked_by == f"--check {HERE}:close"
    assert resolve("cg").module.__name__ == "ftactors.apps.cg"


@pytest.mark.parametrize("ref, kw, message", [
    ("no/such/file.py:X", {}, "no file 'no/such/file.py'"),
    (f"{HERE}:Nope", {}, "has no 'Nope' (its ft.Rank classes: Arrival, Cached, Counter, CountsItsSteps, Grid2D, HeatRing, IssendRing, MethodVerify"),
    (f"{HERE}:not_a_rank", {}, "'not_a_rank' is not an ft.Rank subclass"),
    ("no_such_package.mod:X", {}, "no module 'no_such_package.mod'"),
    ("cgx", {}, "unknown app 'cgx': one of cg, hpl, stencil, coupled, or a program as"),
    ("cg", {"check": f"{HERE}:close"}, "cg is a shipped app: it verifies itself"),
    ("stencil", {"kwargs": {"colour": 1}}, "stencil: main() does not take these arguments"),
    (f"{HERE}:Counter", {}, "main() does not take these arguments (missing a required"),
    (f"{HERE}:MethodVerify", {"args": [1]}, "verify must be a staticmethod or classmethod"),
    (f"{HERE}:Noisy", {"check": f"{HERE}:missing"}, f"check '{HERE}:missing'"),
])
def test_bad_references_are_named(ref, kw, message):
    with pytest.raises(ValueError, match=None) as info:
        resolve(ref, **kw)
    assert message in str(info.value)


def test_kwargs_and_args_read_python_literals():
    assert parse_kwargs(["n=64", "tol=1e-6", "name=red black", "xs=[1, 2]"]) == {
        "n": 64, "tol": 1e-6, "name": "red black", "xs": [1, 2]}
    for bad in ("n64", "=3", "1n=2"):
        with pytest.raises(ValueError, match="--kwarg takes KEY=VALUE"):
            parse_kwargs([bad])
    program = resolve(f"{HERE}:Counter", [2.5, "3"], {"iterations": "it's a name"},
                      check=f"{HERE}:close")
    parser = argparse.ArgumentParser()
    add_program_arguments(parser)
    args = parser.parse_args(shlex.split(" ".join(program.argv())))  # as a shell reads it
    again = program_from_args(program.name, args)  # the replay command's program
    assert (again.args, again.kwargs, again.check_name) == (
        (2.5, "3"), {"iterations": "it's a name"}, f"--check {HERE}:close")
    assert literal("1e-6") == 1e-6 and literal("red") == "red"


def test_same_bits_is_bit_for_bit():
    a = {"x": np.arange(3.0), "y": [1.0, (2, "z")]}
    assert same_bits(a, {"x": np.arange(3.0), "y": [1.0, (2, "z")]})
    assert not same_bits(a, {"x": np.arange(3.0) + 1e-16 * 0 + np.array([0, 0, 4e-16]),
                             "y": [1.0, (2, "z")]})
    assert not same_bits(np.arange(3.0), np.arange(3.0).astype(np.float32))
    assert not same_bits(0.0, -0.0) and same_bits(float("nan"), float("nan"))
    assert not same_bits([1, 2], (1, 2)) and not same_bits(1, 1.0)


def test_the_check_judges_the_answer():
    verified = resolve(f"{HERE}:Verified", [1.0])
    assert verified.judge((True, [2.0, 2.0]), [2.0, 2.0]).ok
    wrong = verified.judge((True, [2.0, 3.0]), [2.0, 2.0])
    assert not wrong.ok and "ranks disagree" in wrong.why
    noisy = resolve(f"{HERE}:Noisy", check=f"{HERE}:close")
    verdict = noisy.judge((True, [{"value": 1.0, "time": 2}]), [{"value": 1.0, "time": 1}])
    assert verdict.ok and not verdict.identical
    plain = resolve(f"{HERE}:Counter", [1.0])
    assert not plain.judge((True, [1.0]), [1.0 + 2 ** -52]).ok


# ----------------------------------------------------------------------- run
def test_run_a_program_file_with_kills_against_its_failure_free_run(capsys, in_root):
    argv = ["run", "examples/poisson.py:Poisson", "--transport", "sim", "--ranks", "4",
            "--protocol", "standby", "--spares", "1", "--kill", "1:7", "--kwarg", "n=12"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "examples/poisson.py:Poisson: 4 ranks on sim, protocol standby, n=12" in out
    assert "VERIFICATION SUCCESSFUL (bit-identical)" in out
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main(["run", "examples/poisson_buggy.py:Poisson", *argv[2:]]) == 1
    assert "VERIFICATION FAILED: the results differ" in capsys.readouterr().out


def test_run_a_module_reference_with_args_and_its_verify_hook(capsys, tmp_path):
    argv = ["run", f"{HERE}:Verified", "--transport", "local", "--ranks", "3", "--arg", "2",
            "--kwarg", "step=-50", "--json", str(tmp_path / "r.json")]
    assert cli.main(argv) == 1  # the total goes below 0: verify says no
    assert "VERIFICATION FAILED: Verified.verify said the answer is wrong" in (
        capsys.readouterr().out)
    assert cli.main([*argv[:9], "step=1"]) == 0
    assert "checked by Verified.verify (no failure in this run" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "examples/nope.py:Poisson"], "no file 'examples/nope.py'"),
    (["run", "examples/poisson.py:Poisson", "--kwarg", "n"], "--kwarg takes KEY=VALUE"),
    (["run", "examples/poisson.py:Poisson", "--check", "examples/poisson.py:nothing"],
     "has no 'nothing'"),
])
def test_bad_program_options_exit_2(capsys, in_root, argv, message):
    assert cli.main([*argv, "--transport", "sim"]) == 2
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------------- chaos
def test_the_example_experiment_runs_and_verifies_every_cell(capsys, in_root, tmp_path):
    out = tmp_path / "chaos"
    assert cli.main(["chaos", "examples/poisson.yaml", "--out", str(out)]) == 0
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == 6 and {r["app"] for r in rows} == {"poisson"}
    assert all(r["verified"] and r["identical"] and r["kills"] >= 1 for r in rows)
    assert "chaos poisson: 6 of 6 run(s) verified" in capsys.readouterr().out


def test_a_buggy_program_is_not_verified_and_named_as_written(capsys, in_root, tmp_path):
    argv = ["chaos", "--app", "examples/poisson_buggy.py:Poisson", "--protocol", "standby",
            "--spares", "1", "--ranks", "3", "--kill", "1:6", "--transport", "sim",
            "--kwarg", "n=10", "--out", str(tmp_path / "c")]
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main(argv) == 1
    row = pq.read_table(tmp_path / "c" / "results.parquet").to_pylist()[0]
    assert row["app"] == "examples/poisson_buggy.py:Poisson"
    assert row["outcome"] == "wrong" and "differ from the failure-free run" in row["error"]
    assert "NOT VERIFIED r000" in capsys.readouterr().out


def test_experiment_program_entries_are_checked(in_root):
    base = {"transport": "sim", "matrix": {"app": ["p"], "protocol": ["none"], "ranks": [2],
                                           "schedule": ["s"]}, "schedules": {"s": {}}}
    for apps, message in [
        ({"p": {"program": "examples/poisson.py:Poisson", "kwargs": {"m": 1}}},
         "main() does not take these arguments (got an unexpected keyword argument 'm')"),
        ({"p": {"program": "examples/poisson.py:Poisson", "args": "x"}}, "args must be a list"),
        ({"p": {"program": "examples/poisson.py:Poisson", "colour": 1}}, "unknown key(s) colour"),
        ({"p": {"program": "cg"}}, "apps.p.program must be a program"),
        ({}, "unknown app 'p'; known: cg, hpl, stencil, coupled, or a program as"),
    ]:
        with pytest.raises(ExperimentError) as info:
            experiment_from_dict({**base, "apps": apps})
        assert message in str(info.value), (apps, str(info.value))
    exp = load_experiment("examples/poisson.yaml")
    assert exp.runs[0].program.name == "poisson" and exp.runs[0].app_kwargs["n"] == 16


# ----------------------------------------------------------------------- sim-check
def test_sim_check_finds_the_bug_in_the_buggy_example_and_passes_the_fix(capsys, in_root):
    buggy = ["sim-check", "--app", "examples/poisson_buggy.py:Poisson", "--protocol",
             "standby", "--runs", "6", "--kwarg", "n=12"]
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main(buggy) == 1
    out = capsys.readouterr().out
    assert ("replay: ftactors sim-check --app examples/poisson_buggy.py:Poisson "
            "--kwarg=n=12 --protocol standby --runs 1 --seed") in out
    assert "likely cause: self.history changes between iterations" in out
    seed = out.split("FAILED seed ")[1].split(":")[0]
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main([*buggy[:5], "--runs", "1", "--seed", seed, "--kwarg", "n=12"]) == 1
    assert f"FAILED seed {seed}" in capsys.readouterr().out  # the replay fails again
    fixed = ["sim-check", "--app", "examples/poisson.py:Poisson", "--protocol", "standby",
             "--runs", "6", "--kwarg", "n=12"]
    assert cli.main(fixed) == 0
    assert "sim-check examples/poisson.py:Poisson x standby: 6 of 6 runs passed" in (
        capsys.readouterr().out)


@pytest.mark.ray
def test_run_a_program_file_on_ray(capsys, in_root, ray_session):
    """Ray workers cannot import the example's modules: both go by value."""
    argv = ["run", "examples/poisson_buggy.py:Poisson", "--transport", "ray", "--ranks", "2",
            "--kwarg", "n=8", "--timeout", "120"]
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main(argv) == 0
    assert "VERIFICATION SUCCESSFUL (bit-identical)" in capsys.readouterr().out



# footprint's standby runs keep no spares: nothing is killed (its docstring)
@pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")
def test_bench_footprint_takes_a_program(capsys, in_root, tmp_path):
    out = tmp_path / "footprint.json"
    argv = ["bench", "footprint", "--transport", "sim", "--repetitions", "1", "--protocols",
            "standby", "--apps", "examples/poisson.py:Poisson", "--kwarg", "n=10",
            "--json", str(out)]
    assert cli.main(argv) == 0
    rows = {r["protocol"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["standby"]["app"] == "examples/poisson.py:Poisson"
    assert rows["standby"]["verified"] and rows["standby"]["checkpoints"] > 0
    argv[argv.index("examples/poisson.py:Poisson")] = "examples/poisson_buggy.py:Poisson"
    with pytest.warns(ft.UnsavedStateWarning, match=BUGGY_HISTORY):
        assert cli.main(argv) == 0  # nothing is killed: the bug does not show (but is told)
    assert cli.main([*argv[:-2], "--kwarg", "m=1"]) == 2
    assert "main() does not take these arguments" in capsys.readouterr().err
