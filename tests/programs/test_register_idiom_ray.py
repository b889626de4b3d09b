"""The register idiom under a SIGKILL from outside on real Ray (issue 40, item 3): the
Jacobi port's rank 1 writes its pid once it is well into its loop, a thread of the
driver kills that process, and the run still gives the failure-free grid and count."""
import asyncio
import os
import signal
import threading

import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from tests.programs.register_idiom import Jacobi, jacobi_reference

pytestmark = pytest.mark.ray


class PacedJacobi(StandbyReplacement, Jacobi):
    """The Jacobi port, paced so that a kill from outside lands inside the loop; rank 1
    tells its pid at iteration ``tell`` of its first life (``self.pidfile``)."""

    backup_interval = 8

    async def main(self, pidfile, tell=60, **kwargs):
        self.pidfile, self.tell = pidfile, tell
        return await super().main(**kwargs)

    async def on_safe_point(self, iteration):
        await super().on_safe_point(iteration)
        if self.rank == 1 and self.incarnation == 0 and iteration == self.tell:
            with open(self.pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.pidfile + ".tmp", self.pidfile)
        await asyncio.sleep(0.01)


def kill_when_told(pidfile: str, stop: threading.Event, killed: list) -> None:
    while not stop.wait(0.002):
        if os.path.exists(pidfile):
            pid = int(open(pidfile).read())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return


def test_jacobi_survives_a_sigkill_under_standby(ray_session, tmp_path):
    iterations, grid = jacobi_reference()
    pidfile = str(tmp_path / "rank1.pid")
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_when_told, args=(pidfile, stop, killed), daemon=True)
    killer.start()
    try:
        r = ft.run(PacedJacobi, 4, transport="ray", spares=1, kwargs={"pidfile": pidfile},
                   timeout_s=120, reuse_processes=False)
    finally:
        stop.set()
        killer.join()
    assert killed, "the kill never came"
    assert [e.rank for e in r.events_of("failure_detected")] == [1]
    assert all(tuple(e.detail["position"]) > (0, 0) for e in r.events_of("restored"))
    assert [x["iterations"] for x in r.results] == [iterations] * 4
    assert np.array_equal(np.vstack([x["grid"] for x in r.results]), grid)
