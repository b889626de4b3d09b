"""The ftactors command: every subcommand has --help and a smoke test that runs it on a
small real input (SMOKE says where); the demo runs end to end; traces can be plotted."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import ftactors as ft
from ftactors.tools.cli import build_parser, main

from .. import bodies as b

# The quick benches run stacks without spares on purpose (they measure levels); the
# warning is tested in tests/runtime/test_notices.py.
pytestmark = pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning")

TESTS = next(p for p in Path(__file__).resolve().parents if p.name == "tests")

SMOKE = {  # subcommand -> the test (anywhere under tests/) that runs it on a small real input
    "run": "test_apps_verify_and_write_json",
    "demo": "test_demo_end_to_end",
    "bench apps": "test_bench_apps_quick_json",
    "bench checkpoint": "test_checkpoint_bench_json",
    "bench erasure": "test_erasure_bench_json",
    "bench groups": "test_groups_bench_json",
    "bench hc3i": "test_hc3i_bench_json",
    "bench migrate": "test_every_run_verifies_against_the_failure_free_reference",
    "bench osu": "test_osu_bench_runs_every_way_at_the_smallest_sizes",
    "bench profile": "test_profile_bench_measures_both_ways_on_both_shapes",
    "bench nodes": "test_the_node_is_survived_by_the_expected_level_with_the_failure_free_answer",
    "bench recovery": "test_bench_recovery_quick",
    "bench rs": "test_rs_bench_json",
    "bench sim": "test_sim_bench_json",
    "bench transport": "test_transport_bench_json",
    "bench solver": "test_solver_bench_json",
    "bench kernel": "test_kernel_bench_json",
    "bench collectives": "test_collectives_bench_json",
    "bench footprint": "test_footprint_bench_json",
    "bench levels": "test_bench_levels_quick",
    "bench parts": "test_bench_parts_quick",
    "bench deaths": "test_bench_deaths_quick_json",
    "chaos": "test_flags_make_a_one_schedule_experiment",
    "report": "test_cli_writes_to_out_and_caps_timelines",
    "advise": "test_cli",
    "trace": "test_trace_plot",
    "groups": "test_cli_suggest_prints_and_writes_a_loadable_definition",
    "sim-check": "test_cli",
    "submit": "test_submit_to_a_bad_address_exits_2",
    "options": "test_an_option_added_by_a_subclass_is_found_everywhere",
}


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every command the parser takes, as "bench sim" for a bench's own subcommand."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _subcommands(sub, f"{prefix}{name} ") if name == "bench" else set()
                found |= nested or {prefix + name}
    return found


def test_every_subcommand_has_a_smoke_test():
    assert _subcommands(build_parser()) == set(SMOKE)
    sources = "".join(path.read_text() for path in TESTS.rglob("test_*.py"))
    for test in SMOKE.values():
        assert f"def {test}(" in sources, test


def _ftactors() -> list[str]:
    """The installed ``ftactors`` command next to this Python, else ``python -m ftactors``."""
    script = Path(sys.executable).with_name("ftactors")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ftactors"]


@pytest.mark.ray
def test_demo_end_to_end():
    """The README's first command: CG on the embedded Ray (its own process), two ranks
    killed, two spares promoted, NPB's verification passes, and no Ray crash notice for
    the planned kills."""
    done = subprocess.run([*_ftactors(), "demo"], capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "VERIFICATION SUCCESSFUL" in done.stdout, text
    assert "rank 1 killed (chaos) at iteration 4" in done.stdout, text
    assert "rank 3 killed (chaos) at iteration 10" in done.stdout, text
    assert "spare promoted to rank 1" in done.stdout, text
    assert "spare promoted to rank 3" in done.stdout, text
    assert "A worker died or was killed" not in text


def test_bench_recovery_quick(tmp_path, capsys):
    out = tmp_path / "recovery.json"
    assert main(["bench", "recovery", "--quick", "--transport", "local", "--intervals", "2",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["problem_class"], data["ranks"], data["transport"]) == ("S", 4, "local")
    assert set(data["overhead"]["ratio"]) == {"2"} and data["overhead"]["ratio"]["2"] > 0
    for side in ("online", "global_restart"):
        assert data[side]["lost_iterations"] >= 0 and data[side]["detection_to_running_s"] >= 0
    assert "detection to RUNNING" in capsys.readouterr().out


def test_bench_levels_quick(tmp_path, capsys):
    out = tmp_path / "levels.json"
    assert main(["bench", "levels", "--quick", "--transport", "local", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["problem_class"], data["ranks"], data["transport"]) == ("S", 4, "local")
    assert data["overhead"]["ratio"] > 0
    rec = data["recoveries"]
    assert (rec["partner"]["level"], rec["rs"]["level"], rec["global_restart"]["level"]) == (
        "standby", "rs", "ready_flush")
    assert rec["rs"]["passed_over"] == ["standby"]
    assert "global restart / online recovery" in capsys.readouterr().out


def test_bench_parts_quick(tmp_path, capsys):
    out = tmp_path / "parts.json"
    assert main(["bench", "parts", "--quick", "--transport", "local", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["ratios"]) == {"groups alone", "partner copies", "RS blocks"}
    assert data["ratios"]["groups alone"] == 1.0 and data["groups"] == "fixed:2"
    rec = data["recoveries"]
    # 4 ranks in groups (0, 1), (2, 3): rank 1's copies are with rank 3
    assert rec["partner copies"]["sources"] == "2 standby"
    assert rec["partner copies"]["level"] == "standby"
    assert (rec["RS blocks"]["sources"], rec["RS blocks"]["level"]) == ("2 rs", "rs")
    assert rec["copy holder lost too"]["sources"] == "2 groups, 2 standby"
    assert rec["object store (groups alone)"]["sources"] == "object store"
    assert "vs groups alone" in capsys.readouterr().out


def test_submit_to_a_bad_address_exits_2(tmp_path, capsys):
    experiment = tmp_path / "tiny.yaml"
    experiment.write_text(yaml.safe_dump({
        "name": "tiny", "transport": "ray", "timeout_s": 60,
        "matrix": {"app": ["cg"], "protocol": ["standby"], "ranks": [2],
                   "schedule": ["kill-one"], "seed": [0]},
        "apps": {"cg": {"problem_class": "S"}},
        "protocols": {"standby": {"spares": 1}},
        "schedules": {"kill-one": {"kill": [[1, 4]]}}}))
    # port 9 (discard) has no dashboard: the job API is unreachable, nothing is shipped
    assert main(["submit", str(experiment), "--address", "http://127.0.0.1:9",
                 "--out", str(tmp_path / "results")]) == 2
    assert "cannot reach the Ray dashboard at http://127.0.0.1:9" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("argv", [[], ["run"], ["run", "cg"], ["demo"], ["bench"],
                                  ["bench", "transport"], ["bench", "recovery"], ["trace"],
                                  ["trace", "plot"]])
def test_help_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv + ["--help"])
    assert info.value.code == 0
    assert "usage: ftactors" in capsys.readouterr().out


def test_trace_plot(tmp_path, capsys):
    trace, png = tmp_path / "run.parquet", tmp_path / "run.png"
    ft.run(b.Stacked, ranks=3, transport="local", trace=str(trace))
    assert main(["trace", "plot", str(trace), "-o", str(png)]) == 0
    assert png.stat().st_size > 5000 and "wrote" in capsys.readouterr().out


def test_trace_plot_bad_file_exit_2(tmp_path, capsys):
    assert main(["trace", "plot", str(tmp_path / "missing.parquet")]) == 2
    assert "missing.parquet" in capsys.readouterr().err


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``ftactors options | head -1`` where ``head`` has gone: writes to the pipe fail
    (its reading end is closed before the command starts); the command ends with
    SIGPIPE's status and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "ftactors", "options"], stdout=write_end,
                              stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    err = proc.stderr.decode()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
