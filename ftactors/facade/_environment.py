"""mpi4py's environment calls that solver code uses for timing and reports: ``Wtime``,
``Wtick`` and ``Get_processor_name``.

They read the rank's process, not the run: a value differs between runs and after a
restore (a replacement may run on another node), so a program must not let its answer
depend on one (the piecewise-determinism rule of ``ft.Rank``); sim-check names such a
value computed before the loop when a restore computes it differently.
"""
from __future__ import annotations

import socket
import time


def Wtime() -> float:
    """Seconds on this process's monotonic high-resolution clock (MPI_Wtime: only
    differences mean something)."""
    return time.perf_counter()


def Wtick() -> float:
    """The resolution of ``Wtime`` in seconds."""
    return time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    """The name of the host this rank runs on now."""
    return socket.gethostname()
