"""``ftactors run cg|hpl|stencil|coupled`` and ``ftactors bench apps``: exit codes 0 / 1 / 2,
the verification line, the JSON record."""
import dataclasses
import json
import re
import subprocess
import sys

import pytest

from ftactors.tools import cli
from ftactors.apps import _npb_cg as npb

# The command lines here set what they test, not spares or intervals; the warnings are
# tested in tests/runtime/test_notices.py.
pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"), pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]


def run(capsys, *argv):
    code = cli.main(["run", *argv, "--transport", "local"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, expect", [
    (["cg", "--class", "s", "--ranks", "2"], "Zeta is"),
    (["hpl", "--n", "120", "--nb", "16", "--p", "2", "--q", "2", "--ranks", "4"], "PASSED"),
    (["stencil", "--ny", "20", "--nx", "30", "--iterations", "5", "--ranks", "3"], "reference"),
    (["coupled", "--ny", "20", "--nx", "30", "--iterations", "9", "--couple-every", "3",
      "--ranks", "3"], "coupled every 3"),
])
def test_apps_verify_and_write_json(capsys, tmp_path, argv, expect):
    path = tmp_path / "run.json"
    code, out, _ = run(capsys, *argv, "--json", str(path))
    assert code == 0, out
    assert expect in out
    assert out.rstrip().splitlines()[-2].strip() == "VERIFICATION SUCCESSFUL"  # then "wrote"
    record = json.loads(path.read_text())
    assert record["verified"] is True and record["app"] == argv[0]
    assert record["transport"] == "local" and record["metrics"]["wall_s"] > 0


def test_cg_prints_the_npb_iteration_table(capsys):
    code, out, _ = run(capsys, "cg", "--ranks", "2")
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "iteration" in line and "zeta" in line)
    rows = [line.split() for line in lines[head + 1:head + 16]]
    assert [int(r[0]) for r in rows] == list(range(1, 16))
    assert abs(float(rows[0][2]) - 9.9986441579140) < 1e-12  # NPB's own first zeta
    assert code == 0


def test_failed_verification_exits_1(capsys, monkeypatch):
    wrong = dataclasses.replace(npb.CG_CLASSES["S"], zeta_verify=8.6)
    monkeypatch.setitem(npb.CG_CLASSES, "S", wrong)
    code, out, _ = run(capsys, "cg", "--class", "S", "--ranks", "2")
    assert code == 1
    assert "VERIFICATION FAILED" in out and "official 8.6" in out


@pytest.mark.parametrize("argv, message", [
    (["cg", "--class", "Q"], "unknown class 'Q'"),
    (["hpl", "--p", "3", "--q", "2", "--ranks", "4"], "p x q = 3 x 2"),
    (["hpl", "--n", "10", "--nb", "20", "--ranks", "1"], "n (10) must be >= nb (20)"),
    (["stencil", "--ny", "0"], "--ny and --nx must be >= 1"),
    (["stencil", "--ny", "2", "--nx", "2", "--ranks", "5"], "cannot be split"),
    (["coupled", "--ranks", "1"], "at least 2 ranks"),
    (["coupled", "--nx", "8", "--nx-left", "8", "--ranks", "2"], "nx_left must be 1 .. 7"),
])
def test_bad_options_exit_2_with_a_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "VERIFICATION" not in out


def test_entry_point_exit_code():
    done = subprocess.run([sys.executable, "-m", "ftactors", "run", "hpl", "--n", "8",
                           "--nb", "16", "--transport", "local"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "n (8) must be >= nb (16)" in done.stderr


def test_bench_apps_quick_json(capsys, tmp_path):
    path = tmp_path / "bench.json"
    code = cli.main(["bench", "apps", "--quick", "--transport", "local", "--ranks", "1,2",
                     "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "wall/numpy" in out
    data = json.loads(path.read_text())
    assert data["benchmark"] == "apps" and data["quick"] is True and data["all_verified"]
    got = {(r["app"], r["ranks"]) for r in data["runs"]}
    assert got == {(a, n) for a in ("cg", "hpl", "stencil", "coupled") for n in (1, 2)
                   if (a, n) != ("coupled", 1)}
    for r in data["runs"]:
        assert r["wall_ratio"] > 0 and r["app_ratio"] > 0 and r["verified"]
        assert r["numpy_total_s"] >= r["numpy_compute_s"] > 0
    assert set(data["baselines"]) == {"cg", "hpl", "stencil", "coupled"}


@pytest.mark.parametrize("argv", [["--apps", "cg,nope"], ["--ranks", "0"], ["--hpl-n", "10", "--hpl-nb", "20"],
                                  ["--cg-class", "Q"]])
def test_bench_apps_bad_options_exit_2(capsys, argv):
    assert cli.main(["bench", "apps", "--transport", "local", *argv]) == 2
    assert "ftactors bench apps:" in capsys.readouterr().err


def test_ready_flush_checkpoints_restart_from_disk_and_migrate(capsys, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    code, out, _ = run(capsys, "cg", "--ranks", "3", "--protocol", "ready-flush",
                       "--checkpoint-interval", "5", "--checkpoint-storage", "stable",
                       "--checkpoint-dir", ckpt, "--kill", "1:7")
    assert code == 0 and "restarting every rank from the checkpoint at iteration 5" in out
    [folder] = (tmp_path / "ckpt").iterdir()  # the run's own folder
    assert folder.name.startswith("run-")
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-000006", "ckpt-000011"]
    code, out, _ = run(capsys, "cg", "--ranks", "3", "--protocol", "ready-flush",
                       "--restart-from", ckpt, "--json", str(tmp_path / "r.json"))
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out
    assert json.loads((tmp_path / "r.json").read_text())["verified"]
    code, _, err = run(capsys, "cg", "--ranks", "3", "--protocol", "ready-flush",
                       "--class", "W", "--restart-from", ckpt)  # another job: refused
    assert code == 2 and "args differ" in err and "restart_from_any" in err
    code, out, _ = run(capsys, "cg", "--ranks", "3", "--protocol", "ready-flush",
                       "--migrate", "2@0.02")
    assert code == 0 and "rank 2 moved" in out


def test_auto_checkpoint_interval_from_the_command_line(capsys):
    """``--checkpoint-interval auto --mtbf-s S`` on sim (virtual time, so the same run every
    time): checkpoints come at Daly's intervals, the kill rolls back to one of them."""
    code = cli.main(["run", "cg", "--ranks", "3", "--transport", "sim", "--protocol",
                     "ready-flush", "--checkpoint-interval", "auto", "--mtbf-s", "0.01",
                     "--kill", "1:7"])
    out = capsys.readouterr().out
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out, out
    assert "restarting every rank from the checkpoint at iteration 6" in out
    measured = re.search(r"checkpoint interval auto: (\d+) checkpoint\(s\) measured.*"
                         r"for MTBF 0.01s", out)
    assert measured and int(measured.group(1)) > 1, out


def test_checkpoint_interval_is_k_or_auto(capsys):
    code, _, err = run(capsys, "cg", "--protocol", "ready-flush", "--checkpoint-interval",
                       "often")
    assert code == 2 and "checkpoint_interval must be an int >= 1 or 'auto', got 'often'" in err


def test_group_checkpoints_restart_one_group(capsys):
    code, out, _ = run(capsys, "stencil", "--ranks", "4", "--protocol", "groups",
                       "--groups", "fixed:2", "--group-checkpoint-interval", "4",
                       "--kill", "3:6")
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out
    assert "restarting ranks [2, 3] only: group 1 (iteration 4)" in out
    assert "logged message(s) resent" in out


def test_cluster_checkpoints_roll_back_dependent_clusters_only(capsys):
    code, out, _ = run(capsys, "coupled", "--ranks", "4", "--ny", "20", "--nx", "30",
                       "--iterations", "30", "--couple-every", "5", "--protocol", "hc3i",
                       "--clusters", "fixed:2", "--clc-interval-s", "0.05", "--kill", "3:17")
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out, out
    assert "cluster 1 (failed) back to its CLC" in out


@pytest.mark.parametrize("argv, message", [
    (["--clusters", "fixed:2"], "--clusters needs hc3i in --protocol (got --protocol none)"),
    (["--protocol", "hc3i", "--clc-interval-s", "0"], "clc_interval_s"),
    (["--groups", "one"], "--groups needs groups in --protocol"),
    (["--protocol", "groups", "--group-checkpoint-interval", "0"], "group_checkpoint_interval"),
    (["--checkpoint-interval", "3"], "--checkpoint-interval needs ready-flush in --protocol"),
    (["--protocol", "ready-flush", "--migrate", "x"], "RANK@SECONDS"),
    (["--protocol", "ready-flush", "--checkpoint-interval", "0"], "checkpoint_interval"),
    (["--protocol", "ready-flush", "--checkpoint-interval", "auto"], "needs mtbf_s"),
    (["--protocol", "ready-flush", "--mtbf-s", "60"], "only used with"),
    (["--mtbf-s", "60"], "--mtbf-s needs ready-flush in --protocol"),
])
def test_bad_checkpoint_flags_exit_2(capsys, argv, message):
    code, out, err = run(capsys, "cg", "--ranks", "2", *argv)
    assert code == 2 and message in err
