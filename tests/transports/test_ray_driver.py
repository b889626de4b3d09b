"""The embedded Ray from the driver's side, in a Python process of its own (the test
session's Ray was started by its main thread; ``ray_driver_script.py`` runs both parts in
one process): runs from threads that end do not take Ray down, and a planned kill prints
no Ray crash notice while an unplanned death still does."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

HERE = Path(__file__).parent
NOTICE = "A worker died or was killed while executing a task"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """What ``ray_driver_script.py`` printed (stdout, stderr, the text of both)."""
    marker = tmp_path_factory.mktemp("driver") / "marker"
    out = subprocess.run([sys.executable, str(HERE / "ray_driver_script.py"), str(marker)],
                         capture_output=True, text=True, timeout=600)
    assert "PART threads" in out.stdout and "PART deaths" in out.stdout, (
        f"exited with {out.returncode}\n{out.stdout}{out.stderr}")
    return out.stdout, out.stderr, out.stdout + out.stderr


def test_runs_from_threads_that_end_keep_ray_and_the_process_alive(driver):
    stdout, stderr, text = driver
    assert "PART threads 0" in stdout, text
    for line in ("first (thread): ring of 3 ranks gave 15", "first: thread ended",
                 "second (thread): ring of 3 ranks gave 15",
                 "third (main thread): ring of 3 ranks gave 15",
                 "fourth (run_async in a thread's event loop): ring of 3 ranks gave 15",
                 "ALL RUNS FINISHED"):
        assert line in stdout, text
    assert "Failed to connect to GCS" not in stderr


def test_planned_kill_prints_no_ray_notice_an_unplanned_death_does(driver):
    stdout, _, text = driver
    assert "PART deaths 0" in stdout, text
    assert "DROPPED 1" in stdout, text
    pid = next(line.split()[-1] for line in stdout.splitlines()
               if line.startswith("UNPLANNED PID"))
    notices = [line for line in text.splitlines() if NOTICE in line]
    assert len(notices) == 1, text  # the planned kill's notice was dropped
    assert f"Worker PID: {pid} " in notices[0]  # the unplanned death keeps Ray's detail


def test_a_late_kill_report_drops_the_dead_incarnations_notice_not_its_replacements():
    """A rank's report of its planned kill can reach the driver after its replacement
    was promoted (ranks at full speed): the notice to drop is the dead worker's; the
    replacement's, should it die unplanned, must still be printed."""
    from ftactors.base._events import Event
    from ftactors.transports.ray import RayFabric
    from ftactors.transports.ray.driver import DeathNotices
    import ftactors.transports.ray.fabric as ray_transport

    fabric = RayFabric({}, None)
    fabric._rank_worker.update({(1, 0): "dead0", (1, 1): "spare1"})
    reports = []
    fabric.on_report = reports.append
    notices = DeathNotices()
    real, ray_transport.DEATH_NOTICES = ray_transport.DEATH_NOTICES, notices
    try:
        fabric._received(Event(1.0, "killed", 1, {"iteration": 4, "incarnation": 0}))
    finally:
        ray_transport.DEATH_NOTICES = real
    assert notices._expected == {"dead0"} and len(reports) == 1
