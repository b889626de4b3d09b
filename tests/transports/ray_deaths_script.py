"""Runs in a Python process of its own (``ray_driver_script.py``, after
``ray_threads_script``; see test_ray_driver.py): one StandbyReplacement run on the
embedded Ray in which chaos kills rank 1 at iteration 3 (planned) and rank 2 kills its
own process at iteration 6 (unplanned: the framework did not ask for it). Waits until
Ray's notice of the planned death was dropped and that of the unplanned one printed, then
prints ``DROPPED n`` and ``UNPLANNED PID p`` (the pid the printed notice must name)."""
import os
import signal
import sys
import threading

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.transports.ray.driver import DEATH_NOTICES

NOTICE = "A worker died or was killed while executing a task"


class Tee:
    """sys.stdout that also tells when Ray's death notice went through it."""

    def __init__(self, out):
        self.out, self.seen = out, threading.Event()

    def write(self, text):
        if NOTICE in text:
            self.seen.set()
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


class Crashy(StandbyReplacement, ft.Rank):
    backup_interval = 2

    async def main(self, marker, iterations=10):
        self.register("acc", 0)
        async for it in self.iterations(iterations):
            if self.rank == 2 and it == 6 and first_time(marker):
                os.kill(os.getpid(), signal.SIGKILL)  # a crash, as far as anyone knows
            self.acc += await self.comm.allreduce(it)
        return self.acc


def first_time(marker: str) -> bool:
    """True for the first caller only (the first incarnation of rank 2), which leaves
    its pid in ``marker``."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def main(marker: str) -> int:
    sys.stdout = tee = Tee(sys.stdout)
    r = ft.run(Crashy, ranks=3, spares=2, args=(marker,), chaos=ft.Chaos(kill=[(1, 3)]),
               timeout_s=180)
    assert r.results == [135] * 3, r.results  # sum over 3 ranks of 0..9
    assert r.metrics["recoveries"] == 2, r.metrics
    assert DEATH_NOTICES.wait_dropped(1, 120), "Ray's notice of the planned kill never came"
    assert tee.seen.wait(120), "Ray's notice of the unplanned death was not printed"
    with open(marker) as f:
        print(f"UNPLANNED PID {f.read()}", flush=True)
    print(f"DROPPED {DEATH_NOTICES.dropped}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
