"""Busy-polling: a rank whose event loop has nothing to do polls before it sleeps.

A process that blocks in ``epoll_wait`` and is woken by its peer's write takes tens of
microseconds on this kind of machine before it runs again, more than the rest of a small
message's round trip (``docs/benchmarks/transport.md``, "Busy-polling, measured"); MPI
libraries poll for the same reason. So while a rank's loop would block, it asks its selector again without
blocking, giving the core to any other runnable process between two polls
(``sched_yield``), for up to ``poll_spin_us``; only then does it block. A wait longer
than that costs the rank that much CPU once; ranks that share cores with each other get
their turns through the yields.

It works on the loop's selector (asyncio's selector event loop, what Ray's actor loop is
unless uvloop is installed: then ``Spin.start`` says it cannot, and the loop is left as
it is).
"""
from __future__ import annotations

import asyncio
import os
import time


class Spin:
    """Polling before blocking on one event loop, between ``start`` and ``stop``."""

    def __init__(self):
        self._selector = None  # the one whose ``select`` polls, between start and stop
        self.caught = 0  # waits that polling ended (the loop did not have to block)

    def start(self, loop: asyncio.AbstractEventLoop, seconds: float) -> bool:
        """Poll ``loop`` for up to ``seconds`` before each block (another ``start``
        replaces the time); False when the loop has no selector to poll (uvloop)."""
        self.stop()
        selector = getattr(loop, "_selector", None)
        if seconds <= 0 or selector is None or not hasattr(selector, "select"):
            return False
        inner = selector.select
        clock, pause = time.perf_counter, os.sched_yield

        def select(timeout=None):
            ready = inner(0)
            if ready or (timeout is not None and timeout <= 0):
                return ready
            wait = seconds if timeout is None else min(seconds, timeout)
            deadline = clock() + wait
            while clock() < deadline:
                pause()
                ready = inner(0)
                if ready:
                    self.caught += 1
                    return ready
            return inner(None if timeout is None else timeout - wait)

        selector.select = select  # shadows the class's method on this selector only
        self._selector = selector
        return True

    def stop(self) -> None:
        """Block at once again, as the loop did before ``start``."""
        if self._selector is not None:
            del self._selector.select
            self._selector = None
