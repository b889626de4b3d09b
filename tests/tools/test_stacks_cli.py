"""Protocol stacks from the command line and in chaos experiments (issue 17):
``--protocol standby+ready-flush`` for ``run`` and ``chaos``, ``protocol: [rs, standby,
ready-flush]`` in an experiment, refusals that exit 2 naming the reason, and the level of
each recovery in the results, the report and the timeline."""
import asyncio
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import ftactors as ft
from ftactors.tools.chaos import run_experiment
from ftactors.tools.cli import main
from ftactors.tools.experiment import ExperimentError, experiment_from_dict, load_experiment
from ftactors.tools.report_data import timeline_marks
from ftactors.tools.run_metrics import recovery_levels

# The command lines here set what they test, not spares or intervals; the warnings are
# tested in tests/runtime/test_notices.py.
pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"), pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]

ROOT = Path(__file__).resolve().parents[2]
THREE_LEVELS = ["--protocol", "rs+standby+ready-flush", "--ranks", "8", "--spares", "2",
                "--backup-interval", "2", "--rs-interval", "4", "--rs-group-size", "2",
                "--rs-ranks-per-node", "2", "--checkpoint-interval", "6",
                "--checkpoint-storage", "stable"]


def run(capsys, *argv):
    """Exit code, stdout and stderr of ``ftactors run cg`` on local (argparse's usage
    errors exit 2 by SystemExit)."""
    try:
        code = main(["run", "cg", "--transport", "local", *argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------- run
def test_a_two_level_stack_recovers_one_kill_online(capsys, tmp_path):
    path = tmp_path / "run.json"
    code, out, err = run(capsys, "--protocol", "standby+ready-flush", "--ranks", "4",
                         "--spares", "1", "--backup-interval", "2", "--checkpoint-interval",
                         "5", "--checkpoint-storage", "stable", "--checkpoint-dir",
                         str(tmp_path / "stable"), "--kill", "1:6", "--json", str(path))
    assert code == 0, out + err
    assert "protocol standby+ready-flush" in out
    assert "rank 1 killed (chaos) at iteration 6" in out
    assert "recovered by level standby" in out and "cannot recover" not in out
    assert "VERIFICATION SUCCESSFUL" in out
    assert json.loads(path.read_text())["protocol"] == "standby+ready-flush"
    assert list((tmp_path / "stable").iterdir())  # the stable level kept its schedule


def test_three_levels_pass_a_lost_partner_pair_to_the_rs_level(capsys, tmp_path):
    code, out, err = run(capsys, *THREE_LEVELS, "--checkpoint-dir", str(tmp_path / "s"),
                         "--kill", "2:9", "--kill", "6:9")
    assert code == 0, out + err
    assert ("level standby cannot recover [2, 6]: rank 2 and its backup partner 6 both "
            "failed") in out
    assert "recovered by level rs" in out and "VERIFICATION SUCCESSFUL" in out


def test_rs_rounds_in_seconds_from_the_command_line(capsys):
    code, out, err = run(capsys, "--protocol", "rs", "--ranks", "4", "--spares", "1",
                         "--rs-group-size", "2", "--rs-interval-s", "0.01", "--kill", "1:9")
    assert code == 0, out + err
    assert "VERIFICATION SUCCESSFUL" in out


def test_a_failed_group_comes_back_from_partner_copies(capsys):
    code, out, err = run(capsys, "--protocol", "standby+groups", "--ranks", "4", "--spares",
                         "2", "--groups", "fixed:2", "--group-checkpoint-interval", "3",
                         "--kill", "1:7")
    assert code == 0, out + err
    assert "recovered by level standby" in out and "VERIFICATION SUCCESSFUL" in out


def test_a_stack_resumes_a_lost_job_with_restart_from(capsys, tmp_path):
    stable = str(tmp_path / "stable")
    argv = ["--protocol", "standby+ready-flush", "--ranks", "4"]
    code, out, _ = run(capsys, *argv, "--checkpoint-interval", "4", "--checkpoint-storage",
                       "stable", "--checkpoint-dir", stable)
    assert code == 0, out
    code, out, _ = run(capsys, *argv, "--restart-from", stable)
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out, out
    assert f"resumed from {stable}: the set at iteration 12" in out  # sets at 0, 4, 8, 12


@pytest.mark.parametrize("stack, message", [
    ("ready-flush+standby", "protocol stack ready-flush+standby refused: put "
                            "StandbyReplacement before ReadyMessageFlush"),
    ("standby+rs+ready-flush", "(--protocol rs+standby+ready-flush)"),
    ("groups+ready-flush", "both take the consistency role"),
    ("groups+standby", "put StandbyReplacement before GroupCoordination"),
    ("groups+rs", "put RSBackup before GroupCoordination"),
    ("hc3i+standby+rs", "(--protocol rs+standby+hc3i)"),
    ("standby+nope", "unknown protocol 'nope'"),
])
def test_a_refused_stack_exits_2_with_the_reason(capsys, stack, message):
    code, out, err = run(capsys, "--protocol", stack)
    assert code == 2
    assert message in err and "Traceback" not in err and "VERIFICATION" not in out


def test_a_flag_of_a_protocol_outside_the_stack_exits_2(capsys):
    code, _, err = run(capsys, "--protocol", "standby+ready-flush", "--rs-interval", "3",
                       "--clusters", "fixed:2")
    assert code == 2
    assert ("--clusters needs hc3i in --protocol; --rs-interval needs rs in --protocol "
            "(got --protocol standby+ready-flush)") in err


# ----------------------------------------------------------------------- chaos
def test_chaos_flags_take_stacks(tmp_path, capsys):
    code = main(["chaos", "--transport", "sim", "--app", "stencil", "--protocol",
                 "standby,standby+ready-flush", "--spares", "1", "--ranks", "4",
                 "--kill", "1:3", "--out", str(tmp_path / "res")])
    assert code == 0, capsys.readouterr()
    rows = pq.read_table(tmp_path / "res" / "results.parquet").to_pylist()
    assert [(r["protocol"], r["verified"], r["levels"]) for r in rows] == [
        ("standby", True, ""), ("standby+ready-flush", True, "standby")]


def test_chaos_refuses_a_stack_before_anything_runs(tmp_path, capsys):
    assert main(["chaos", "--transport", "sim", "--protocol", "ready-flush+rs",
                 "--out", str(tmp_path / "res")]) == 2
    assert "put RSBackup before ReadyMessageFlush" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()


def test_an_experiment_takes_a_stack_as_a_list_anywhere():
    exp = experiment_from_dict({
        "name": "t", "transport": "sim",
        "matrix": {"app": "stencil", "protocol": [["standby", "ready-flush"], "both"],
                   "ranks": 4, "schedule": "none"},
        "protocols": {"both": {"protocol": ["rs", "ready-flush"], "rs_group_size": 2}},
        "schedules": {"none": {}}})
    assert [(s.protocol, s.stack) for s in exp.runs] == [
        ("standby+ready-flush", ("standby", "ready-flush")), ("both", ("rs", "ready-flush"))]
    with pytest.raises(ExperimentError, match="both take the consistency role"):
        experiment_from_dict({"transport": "sim", "matrix": {
            "app": "stencil", "protocol": [["groups", "hc3i"]], "ranks": 4, "schedule": "x"},
            "schedules": {"x": {}}})


@pytest.fixture(scope="module")
def multilevel(tmp_path_factory):
    """experiments/multilevel.yaml as it stands, on sim instead of Ray."""
    tmp = tmp_path_factory.mktemp("multilevel")
    data = yaml.safe_load((ROOT / "experiments" / "multilevel.yaml").read_text())
    data["transport"] = "sim"
    data["protocols"]["three-levels"]["checkpoint_dir"] = str(tmp / "stable")
    rows = asyncio.run(run_experiment(experiment_from_dict(data), str(tmp / "res"),
                                      echo=lambda line: None))
    return tmp / "res", rows


def test_the_multilevel_experiment_recovers_each_loss_at_its_level(multilevel):
    _, rows = multilevel
    assert load_experiment(str(ROOT / "experiments" / "multilevel.yaml")).transport == "ray"
    assert [(r["schedule"], r["levels"]) for r in rows] == [
        ("single-kill", "standby"), ("partner-pair", "standby>rs"),
        ("group-and-parity", "standby>rs>ready_flush"),
        ("all-ranks", "standby>rs>ready_flush"), ("job-lost", "restart-from")]
    assert all(r["verified"] and r["identical"] for r in rows)
    assert [r["kills"] for r in rows] == [1, 2, 3, 8, 1]  # the job's loss: its first strike
    # the lost job's last stable set (every 6 iterations) was at 12: resumed there
    assert [r["resumed_from"] for r in rows] == ["", "", "", "", "iteration 12"]


def test_the_report_shows_the_level_of_each_recovery(multilevel):
    out, _ = multilevel
    assert main(["report", str(out), "--out", str(out / "report")]) == 0
    page = (out / "report" / "index.html").read_text()
    assert "<th>levels</th>" in page and "standby&gt;rs&gt;ready_flush" in page


def test_timeline_rounds_carry_their_level():
    ev = [{"time": t, "kind": k, "rank": -1, "detail": d} for t, k, d in [
        (1.0, "recovery_start", {"round": 0}), (1.5, "level_exhausted", {"level": "standby"}),
        (2.0, "recovery_level", {"level": "rs"}), (2.5, "recovery_end", {"round": 0}),
        (3.0, "recovery_start", {"round": 1}), (3.5, "recovery_end", {"round": 1})]]
    tl = timeline_marks(ev, 2)
    assert [(s.round, s.level) for s in tl.recoveries] == [(0, "rs"), (1, None)]


def test_recovery_levels_name_what_each_round_tried():
    E = ft.Event
    events = [E(0, "recovery_level", -1, {"level": "standby"}),
              E(1, "level_exhausted", -1, {"level": "standby"}),
              E(2, "level_exhausted", -1, {"level": "rs"}),
              E(3, "recovery_level", -1, {"level": "ready_flush"}),
              E(4, "level_exhausted", -1, {"level": "standby"})]
    assert recovery_levels(events) == ["standby", "standby>rs>ready_flush", "standby>none"]


def test_bench_footprint_takes_stacks(tmp_path, capsys):
    out = tmp_path / "footprint.json"
    assert main(["bench", "footprint", "--quick", "--transport", "local", "--repetitions", "1",
                 "--apps", "cg", "--protocols", "standby+ready-flush", "--json",
                 str(out)]) == 0
    rows = {r["protocol"]: r for r in json.loads(out.read_text())["rows"]}
    stack = rows["standby+ready-flush"]
    assert stack["verified"] and stack["failures"] == 0
    assert stack["checkpoints"] > rows["none"]["checkpoints"] == 0
    assert main(["bench", "footprint", "--quick", "--protocols", "ready-flush+rs"]) == 2
    assert "put RSBackup before ReadyMessageFlush" in capsys.readouterr().err


# ---------------------------------------------------------------------- job kills
def job_kill_experiment(tmp_path, **protocol) -> dict:
    return {"name": "job", "transport": "local",
            "matrix": {"app": "stencil", "protocol": "p", "ranks": 4, "schedule": "lost"},
            "apps": {"stencil": {"iterations": 12}},
            "protocols": {"p": protocol}, "schedules": {"lost": {"job_kill": {"iteration": 11}}}}


def test_a_job_kill_resumes_a_new_job_from_the_lost_ones_stable_sets(tmp_path):
    stable = tmp_path / "stable"
    (stable / "r000").mkdir(parents=True)
    (stable / "r000" / "left-by-an-earlier-experiment").write_text("x")
    data = job_kill_experiment(tmp_path, protocol=["standby", "ready-flush"], spares=1,
                               checkpoint_interval=3, checkpoint_storage="stable",
                               checkpoint_dir=str(stable))
    rows = asyncio.run(run_experiment(experiment_from_dict(data), str(tmp_path / "res"),
                                      echo=lambda line: None))
    [row] = rows
    assert row["verified"] and row["identical"], row["error"]
    assert row["levels"] == "restart-from"
    assert not (stable / "r000" / "left-by-an-earlier-experiment").exists()  # its own folder
    events = pq.read_table(tmp_path / "res" / row["events_path"]).to_pylist()
    kinds = [e["kind"] for e in events]
    lost, resumed = kinds.index("job_lost"), kinds.index("job_resumed")
    assert lost < resumed < kinds.index("restored")
    assert kinds.count("run_start") == 2  # the lost job and the one that resumed it
    # resumed from the newest set the lost job stored (a manifest being written as the
    # job is lost may or may not land: a later one, never an earlier one)
    stored = [json.loads(e["detail"])["position"][1] for e in events[:lost]
              if e["kind"] == "checkpoint"]
    at = json.loads(events[resumed]["detail"])["position"][1]
    assert row["resumed_from"] == f"iteration {at}" and at in (3, 6, 9)
    assert at >= max(stored, default=0)
    assert main(["report", str(tmp_path / "res"), "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<th>resumed_from</th>" in page and f">iteration {at}</td>" in page


@pytest.mark.parametrize("protocol, why", [
    ({"protocol": "standby"}, "standby with these options keeps every state in memory"),
    ({"protocol": "ready-flush", "checkpoint_interval": 3},  # object store only
     "ready-flush with these options keeps every state in memory or the object store")])
def test_a_job_kill_without_stable_storage_is_refused_at_once(tmp_path, protocol, why):
    with pytest.raises(ExperimentError, match=f"job_kill needs stable storage, but {why}"):
        experiment_from_dict(job_kill_experiment(tmp_path, **protocol))


def test_a_job_kill_after_the_end_is_an_error_row_not_a_resume(tmp_path):
    data = job_kill_experiment(tmp_path, protocol="ready-flush", checkpoint_interval=3,
                               checkpoint_storage="stable", checkpoint_dir=str(tmp_path / "s"))
    data["schedules"]["lost"]["job_kill"]["iteration"] = 50
    [row] = asyncio.run(run_experiment(experiment_from_dict(data), str(tmp_path / "res"),
                                       echo=lambda line: None))
    assert row["outcome"] == "error" and "the job ended first" in row["error"]


# ------------------------------------------------------------- auto level intervals
AUTO = ["--level-intervals", "auto", "--level-mtbf-s", "process@standby=0.05",
        "--level-mtbf-s", "pair@rs=0.5", "--level-mtbf-s", "job@ready-flush=5"]


def test_run_plans_every_level_together_and_prints_each_plan(capsys, tmp_path):
    code = main(["run", "cg", "--transport", "sim", "--protocol", "rs+standby+ready-flush",
                 "--ranks", "8", "--spares", "2", "--rs-group-size", "2",
                 "--rs-ranks-per-node", "2", "--checkpoint-storage", "stable",
                 "--checkpoint-dir", str(tmp_path / "stable"), *AUTO, "--kill", "3:7"])
    out = capsys.readouterr().out
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out
    assert "level intervals auto from iteration 2 (first costs measured): standby every" in out
    assert "(after a recovery)" in out and "restart" in out and "measured)" in out


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "standby+ready-flush", "--checkpoint-storage", "stable", *AUTO],
     "'rs' is not a level of this stack"),
    (["--protocol", "groups", "--level-intervals", "auto"],
     "--level-intervals needs standby or ready-flush or rs in --protocol"),
    (["--protocol", "standby", "--level-intervals", "auto", "--level-mtbf-s", "standby:5"],
     r"--level-mtbf-s: takes KEY=VALUE, got 'standby:5'"),
    (["--protocol", "standby", "--level-intervals", "auto", "--level-mtbf-s", "standby=5",
      "--backup-interval", "3"], "drop backup_interval"),
])
def test_run_refuses_bad_auto_flags_with_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and re.search(message, err), err


def test_an_experiment_takes_auto_level_intervals(tmp_path):
    data = {"name": "auto", "transport": "sim",
            "matrix": {"app": "stencil", "protocol": "auto", "ranks": 4, "schedule": "one"},
            "protocols": {"auto": {"protocol": ["standby", "ready-flush"], "spares": 1,
                                   "checkpoint_storage": "stable",
                                   "checkpoint_dir": str(tmp_path / "s"),
                                   "level_intervals": "auto",
                                   "level_mtbf_s": {"standby": 0.01, "ready-flush": 1}}},
            "schedules": {"one": {"kill": [[1, 6]]}}}
    [row] = asyncio.run(run_experiment(experiment_from_dict(data), str(tmp_path / "res"),
                                       echo=lambda line: None))
    assert row["verified"] and row["identical"] and row["interval_unit"] == "auto"
    kinds = [e["kind"] for e in pq.read_table(tmp_path / "res" / row["events_path"]).to_pylist()]
    assert "level_intervals_chosen" in kinds
    data["protocols"]["auto"]["level_mtbf_s"] = {"standby": 0.01}
    with pytest.raises(ExperimentError, match="no failure that level 'ready_flush' is the "
                                              "lowest to recover"):
        experiment_from_dict(data)


def test_the_auto_multilevel_experiment_plans_and_recovers_on_sim(tmp_path):
    data = yaml.safe_load((ROOT / "experiments" / "multilevel-auto.yaml").read_text())
    assert load_experiment(str(ROOT / "experiments" / "multilevel-auto.yaml")).transport == "ray"
    data["transport"] = "sim"
    data["protocols"]["three-levels-auto"]["checkpoint_dir"] = str(tmp_path / "stable")
    rows = asyncio.run(run_experiment(experiment_from_dict(data), str(tmp_path / "res"),
                                      echo=lambda line: None))
    assert [(r["schedule"], r["levels"]) for r in rows] == [
        ("single-kill", "standby"), ("partner-pair", "standby>rs"),
        ("job-lost", "restart-from")]
    assert all(r["verified"] and r["identical"] for r in rows)
    for r in rows:
        kinds = [e["kind"] for e in pq.read_table(tmp_path / "res" / r["events_path"]).to_pylist()]
        assert "level_intervals_chosen" in kinds
    # ready-flush's planned interval is longer than the run: the lost job's only stable
    # set is the measuring one at iteration 1, and the new job, restored past it without
    # a plan, measures again at 2 and plans for itself
    assert rows[2]["resumed_from"] == "iteration 1"
    events = pq.read_table(tmp_path / "res" / rows[2]["events_path"]).to_pylist()
    resumed = [e["kind"] for e in events].index("job_resumed")
    plans = [json.loads(e["detail"]) for e in events[resumed:]
             if e["kind"] == "level_intervals_chosen"]
    assert plans and plans[0]["reason"] == "first costs measured"
    measured = {json.loads(e["detail"])["position"][1] for e in events[resumed:]
                if e["kind"] == "level_cost"}
    assert 2 in measured
