"""mpi4py's environment calls that solver code uses for timing and reports: ``Wtime``,
``Wtick`` and ``Get_processor_name``; and the calls a port keeps though they do nothing
here: ``Attach_buffer``/``Detach_buffer`` (a buffered send copies the object at once, so
it needs no buffer: ``BSEND_OVERHEAD`` is 0) and ``Pcontrol`` (no profiling layer).

They read the rank's process, not the run: a value differs between runs and after a
restore (a replacement may run on another node), so a program must not let its answer
depend on one (the piecewise-determinism rule of ``ft.Rank``); sim-check names such a
value computed before the loop when a restore computes it differently.
"""
from __future__ import annotations

import contextvars
import socket
import time
from typing import Any

BSEND_OVERHEAD = 0
"""Bytes a buffered send adds to its message in an attached buffer: none here."""

_attached: contextvars.ContextVar = contextvars.ContextVar("ft_bsend_buffer", default=None)
"""The buffer the rank attached (each rank's ``main()`` runs in a context of its own, so
ranks that share a process each have theirs)."""


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


def Attach_buffer(buf: Any) -> None:
    """Attach ``buf`` for buffered sends (MPI_Buffer_attach). Sends never use it here
    (``bsend`` copies at once); ``Detach_buffer`` gives it back.

    Raises:
        RuntimeError: a buffer is attached already (MPI allows one per process).
    """
    if _attached.get() is not None:
        raise RuntimeError("Attach_buffer: a buffer is attached already (Detach_buffer "
                           "first)")
    _attached.set(buf)


def Detach_buffer() -> Any:
    """Detach the buffer ``Attach_buffer`` attached and return it (None if none was)."""
    buf = _attached.get()
    _attached.set(None)
    return buf


def Pcontrol(level: int) -> None:
    """MPI_Pcontrol: tells a profiling layer how much to record; there is none here."""
    if not isinstance(level, int):
        raise TypeError(f"Pcontrol needs an int level, got {type(level).__name__}")
