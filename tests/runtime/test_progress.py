"""Progress of a long run (``runtime/_progress``): ``ft.run(progress=True)`` shows
iterations, checkpoints, failures and recoveries on stderr as they happen, a function gets
``ft.Progress`` records, and nothing is shown when not asked for; ``ftactors run`` and
``ftactors chaos`` show it on a terminal or with ``--progress``. Real runs on local."""
import asyncio
import io

import pytest

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.runtime._progress import Printer, Progress
from ftactors.tools.chaos import RunsLine, run_experiment
from ftactors.tools.cli import main
from ftactors.tools.experiment import experiment_from_dict


class Paced(ft.Rank):
    """Iterations that take a little real time, so a run lasts several reports."""

    async def main(self, n):
        self.register("x", 0)
        async for _ in self.iterations(n):
            await self.comm.allreduce(1)
            await asyncio.sleep(0.005)  # work, not synchronisation
            self.x += 1
        return self.x


class Backed(StandbyReplacement, Paced):
    backup_interval = 3


def run(progress, **kw):
    return ft.run(Backed, 4, args=(30,), transport="local", spares=1, progress=progress,
                  progress_interval_s=0.02, chaos=ft.Chaos(kill=[(1, 10)]), **kw)


def test_progress_true_shows_checkpoints_failures_and_recoveries_on_stderr(capsys):
    assert run(True).results == [30] * 4
    out, err = capsys.readouterr()
    assert out == ""
    assert "rank 1 failure detected" in err and "recovery round 0 done" in err
    last = err.strip().splitlines()[-1]
    assert "done: " in last and "(backup " in last and "1 failure(s), 1 recover(ies)" in last
    assert "\r" not in err  # not a terminal: lines, not a line redrawn


def test_a_progress_function_gets_each_report_as_it_happens():
    reports: list[Progress] = []
    run(reports.append)
    assert reports[-1].done and not any(p.done for p in reports[:-1])
    assert [p.failures for p in reports] == sorted(p.failures for p in reports)
    assert reports[-1].failures == 1 and reports[-1].recoveries == 1
    detected = next(p for p in reports if p.failures)
    assert any("failure detected" in line for line in detected.news)
    # the report made as the failure was seen counts the backups taken before it
    assert detected.checkpoints.get("backup", 0) >= 3
    assert all(len(p.positions) == 4 for p in reports[:-1])


def test_nothing_is_shown_when_not_asked_for(capsys):
    run(False)
    assert capsys.readouterr() == ("", "")


def test_on_a_terminal_one_line_is_redrawn_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    show = Printer(out)
    show(Progress(1.5, ((0, 3), (0, 4)), {"backup": 1}))
    show(Progress(2.9, ((0, 5), (0, 5)), {"backup": 2}, 1, 0, ("rank 1 failure detected",)))
    show(Progress(3.2, ((0, 9), (0, 9)), {"backup": 3}, 1, 1, (), done=True))
    show(Progress(0.0123, (), {}, 0, 0, ()))  # sim: virtual times are small
    text = out.getvalue()
    assert text.startswith("\r\033[K[    1.5s] iteration 3..4 (loop 0); 1 checkpoint(s)")
    assert "\r\033[K[    2.9s] rank 1 failure detected\n" in text
    assert ("done: iteration 9 (loop 0); 3 checkpoint(s) (backup 3); "
            "1 failure(s), 1 recover(ies)\n") in text
    assert text.endswith("\r\033[K[ 0.0123s] starting; 0 checkpoint(s); 0 failure(s), "
                         "0 recover(ies)")


@pytest.mark.parametrize("flag, shown", [([], False), (["--progress"], True)])
def test_ftactors_run_shows_progress_on_a_terminal_or_when_asked(capsys, flag, shown):
    code = main(["run", "stencil", "--transport", "local", "--ranks", "4", "--protocol",
                 "standby", "--spares", "1", "--backup-interval", "2", "--kill", "1:5",
                 "--progress-interval-s", "0.01", *flag])
    out, err = capsys.readouterr()
    assert code == 0 and "VERIFICATION SUCCESSFUL" in out
    assert ("failure detected" in err and "done: " in err) == shown
    if not shown:
        assert err == ""


def test_chaos_shows_the_runs_done_and_verified(tmp_path):
    exp = experiment_from_dict({
        "transport": "local",
        "matrix": {"app": "stencil", "protocol": "standby", "ranks": 4,
                   "schedule": "one", "seed": [0, 1]},
        "apps": {"stencil": {"ny": 24, "nx": 24, "iterations": 12}},
        "protocols": {"standby": {"spares": 1, "backup_interval": 2}},
        "schedules": {"one": {"kill": [[1, 5]]}}})
    out = io.StringIO()
    rows = asyncio.run(run_experiment(exp, str(tmp_path / "res"), echo=lambda line: None,
                                      progress=RunsLine(out)))
    assert [r["verified"] for r in rows] == [True, True]
    lines = out.getvalue().splitlines()
    assert lines[-1] == "[2 run(s) done, 2 verified]"
    assert "[1 run(s) done, 1 verified]" in lines
    assert any(line.startswith("  r000: rank 1 failure detected") for line in lines)


def test_ftactors_chaos_with_progress_and_option_flags(capsys, tmp_path):
    code = main(["chaos", "--app", "stencil", "--protocol", "standby", "--spares", "1",
                 "--ranks", "4", "--kill", "1:5", "--seeds", "0,1", "--transport", "local",
                 "--backup-interval", "2", "--out", str(tmp_path / "res"), "--progress"])
    out, err = capsys.readouterr()
    assert code == 0 and "2 of 2 run(s) verified" in out
    assert "[1 run(s) done, 1 verified]\n" in err and "[2 run(s) done, 2 verified]\n" in err
    assert "  r001: rank 1 failure detected" in err
    import yaml
    source = yaml.safe_load((tmp_path / "res" / "experiment.yaml").read_text())
    assert source["protocols"]["standby"] == {"spares": 1, "backup_interval": 2}
