"""Deterministic virtual-time asyncio event loop for the ``sim`` transport.

Theory of operation
-------------------
The ``sim`` transport models thousands of MPI ranks as asyncio tasks whose
messages are delayed by ``call_later``/``sleep`` calls that stand for network
latency.  Those delays are *modelled*, not experienced: waiting for them in
wall time would make a simulated hour take an hour.  :class:`VirtualClockLoop`
therefore keeps its own clock, ``time()``, which starts at ``0.0`` and changes
in exactly one place: when the loop has nothing ready to run, it sets the
clock to the deadline of the earliest pending timer ("autojump", as in trio's
``MockClock(autojump_threshold=0)``) and runs that timer.  Computation takes
zero virtual time; only scheduled delays make the clock move, so
``await asyncio.sleep(3600)`` returns at once with ``loop.time() == 3600.0``.

Determinism follows from three facts.  (1) The clock is a pure function of
the timers the program scheduled, never of the wall clock.  (2) The ready
queue is FIFO, exactly as in the stock loop.  (3) Timers due at the same
virtual time run in the order they were scheduled: asyncio's heap orders
``TimerHandle`` objects by deadline only, and equal deadlines come out of a
binary heap in an order that is reproducible but not FIFO, so the heap holds
``(when, seq, handle)`` entries, where the sequence number given by
:meth:`VirtualClockLoop.call_at` breaks ties (tuples of a float and an int
compare in C; a Python ``__lt__`` on the handles cost a call per comparison,
about log2(timers pending) of them per timer, which grew with the rank count).  The stock loop also polls the selector on every iteration and fires
whichever timers wall time has reached, which lets real time decide the
interleaving; this loop polls only when idle and fires a timer only once the
virtual clock has reached it.  A program that is itself deterministic (seeded
``random``, no iteration over sets of tasks or other id-hashed objects, no
wall-clock reads) therefore produces the same callback order on every run.

When nothing is ready, no timer is pending, and no thread is working for the
loop, nothing can ever happen again: the loop raises :class:`SimDeadlock`
(naming the stuck tasks) instead of blocking forever, which is what a lost
message or a mismatched send/receive looks like in a simulation. Timers made
where the ``background`` context variable is true (a run's watching: heartbeats,
progress reports, its time limit) wake nobody the simulation is about: they are
kept in a heap of their own, and whenever nothing but they is pending the loop
calls ``on_quiet`` first (ftactors' coordinator then looks for a deadlock among
its ranks, ``runtime/_deadlock``), so such a run ends at that virtual moment,
not when the watching's last timer would fire.

Why ``SelectorEventLoop``
-------------------------
The loop subclasses :class:`asyncio.SelectorEventLoop` rather than the bare
``BaseEventLoop`` because the selector machinery supplies the self-pipe that
``call_soon_threadsafe`` writes to.  That is what lets ``run_in_executor`` /
``asyncio.to_thread`` and ``shutdown_default_executor`` work, and it keeps
every other public loop method available.  Only ``_run_once`` (one loop
iteration) is replaced, together with ``time``, ``call_at`` and the two
executor entry points that must be counted.

What is not simulated
---------------------
* CPU time: a callback that computes for a wall-clock minute takes no virtual
  time.  Model costs with explicit ``sleep``/``call_later`` calls.
* Threads: work handed to ``run_in_executor``/``to_thread`` is waited for in
  real time while the virtual clock stands still, so it takes zero virtual time
  and timers cannot overtake it.  The moment at which its result arrives
  relative to other *ready* callbacks depends on the OS scheduler, so it is
  not deterministic.  Other cross-thread input (``call_soon_threadsafe`` or
  ``run_coroutine_threadsafe`` from an unrelated thread) is not waited for; if
  the simulation depends on it alone, it ends in :class:`SimDeadlock`.
* Real I/O: sockets, pipes and subprocesses are polled without blocking
  whenever the loop is idle, but are never waited for and never move the
  clock.  A simulation that can only progress through real I/O ends in
  :class:`SimDeadlock`.  Use the Ray transport for real networking.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import itertools
import logging
import time
from typing import Any, Callable, Coroutine, TypeVar, Union

__all__ = ["SimDeadlock", "VirtualClockLoop", "run_virtual"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Same thresholds as asyncio.base_events: rebuild the timer heap once more
# than half of more than 100 timers are cancelled (typical of wait_for
# timeouts that did not fire).
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5

POLL_STEP_S = 1e-6
"""Virtual time that passes during the first iteration of nothing but polls; it doubles
with every such iteration in a row (``polled_in_vain``)."""

# The cyclic garbage collector's thresholds while a simulation runs (see run_virtual):
# a collection of the youngest generation every 100,000 net allocations instead of 700.
_SIM_GC_THRESHOLDS = (100_000, 50, 100)

# How many stuck tasks a SimDeadlock message lists, and how much of each.
_DEADLOCK_TASKS_SHOWN = 10
_DEADLOCK_REPR_CHARS = 240


class SimDeadlock(RuntimeError):
    """The simulation can never make progress.

    Raised out of ``run_until_complete``/``run_virtual`` when the loop has no
    ready callbacks, no pending timers and no executor work in flight, yet the
    awaited future is not done.
    """


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock jumps to the next timer whenever idle.

    See the module docstring for the theory of operation.  The loop is an
    ordinary ``SelectorEventLoop`` in every respect except time: ``time()``
    is virtual and starts at 0.0, idle periods cost no wall time, same-time
    timers run in scheduling order, and a loop that can never progress raises
    :class:`SimDeadlock` instead of hanging.
    """

    def __init__(self) -> None:
        self._vtime = 0.0
        self._timer_seq = itertools.count()
        # Executor jobs (and executor shutdowns) whose completion will arrive
        # through call_soon_threadsafe; the clock stands still until they do.
        self._threads_in_flight = 0
        self.timers_fired = 0  # timers run at their virtual time: the simulated events
        self.callbacks_run = 0  # every callback run (task steps included): the work
        self.froze = False  # settle() moved objects out of the collector's passes
        self.paused_collector = False  # build() turned the collector off until settle()
        self._polled = False  # the callback running now polled and found nothing
        self._pollers = 0  # callbacks of the last iteration, when each of them did so
        self._poll_streak = 0  # iterations of nothing but polls in a row
        self.background = None  # a ContextVar: true where timers wake nobody (``quiet``)
        self._background: list = []  # their heap, apart: (when, seq, handle)
        self.on_quiet: Callable[[], None] | None = None  # told when only they are pending
        super().__init__()

    def polled_in_vain(self) -> None:
        """A program's nonblocking check found nothing (``iprobe``, ``test``).

        Messages arrive by timers here, so a loop that polls until one comes (``while
        not comm.iprobe(...): await asyncio.sleep(0)``, a pattern of MPI programs)
        would otherwise run at one instant for ever: the loop never idle, the clock
        never moving, no timeout firing. So after an iteration in which every callback
        run was such a poll (nothing else happened, no timer fired), with no more
        callbacks ready than those pollers' next turns, time passes as they poll:
        ``POLL_STEP_S``, doubled for every such iteration in a row, never past the
        earliest timer, and not while a thread works for the loop (the clock stands
        still for executor work, see the module docstring: pollers then spin in real
        time). An arrival comes after a few polls; a wait that only a timeout ends
        reaches it in a few dozen; and a program that polls once and goes on (a last
        ``iprobe`` before ``main()`` returns) moves the clock by a microsecond, not to
        its run's timeout."""
        self._polled = True

    def build(self) -> None:
        """The objects made from now until ``settle`` live until the run ends (a
        simulation's start-up building every rank): the cyclic collector is off
        meanwhile, as its passes would find nothing to free in them (at 16,384 ranks
        its collections during the start-up walked millions of them)."""
        if gc.isenabled():
            gc.disable()
            self.paused_collector = True

    def settle(self) -> None:
        """Take every object alive now out of the cyclic collector's passes until the
        run ends (``gc.freeze``): a simulation's start-up builds every rank's state,
        which lives until the end, and each older-generation pass of the collector
        would otherwise walk it again (their cost per event grew with the rank count).
        ``run_virtual`` gives the objects back (``gc.unfreeze``) when the run ends, so
        what became cyclic garbage meanwhile is collected then. Does nothing when
        objects were frozen before the run began (their owner would lose its freeze).
        """
        if self.froze or not gc.get_freeze_count():
            gc.freeze()
            self.froze = True
        if self.paused_collector:
            gc.enable()
            self.paused_collector = False

    def time(self) -> float:
        """Return the virtual time in seconds (0.0 when the loop is created)."""
        return self._vtime

    def call_at(self, when, callback, *args, context=None):
        """Schedule ``callback`` at virtual time ``when``.

        Same contract as ``BaseEventLoop.call_at`` (``call_later`` delegates
        here), but the heap entry carries a sequence number so that timers with
        equal deadlines fire in the order they were scheduled.
        """
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        if self.background is not None and self.background.get():
            timer = _BackgroundTimer(when, callback, args, self, context)
            heap = self._background
        else:
            timer = asyncio.TimerHandle(when, callback, args, self, context)
            heap = self._scheduled
        if timer._source_traceback:
            del timer._source_traceback[-1]
        heapq.heappush(heap, (when, next(self._timer_seq), timer))
        timer._scheduled = True
        return timer

    def _timer_handle_cancelled(self, handle) -> None:
        """A background timer's cancel is not counted against the main heap (whose
        rebuild that count decides)."""
        if type(handle) is not _BackgroundTimer:
            super()._timer_handle_cancelled(handle)

    def run_in_executor(self, executor, func, *args):
        """Run ``func`` in a thread; virtual time stands still until it ends.

        Counting the job keeps the loop from jumping past pending timers (or
        declaring a deadlock) while the only progress is happening in another
        thread.  Cancelling the returned future stops the wait, not the thread.
        """
        future = super().run_in_executor(executor, func, *args)
        self._threads_in_flight += 1
        future.add_done_callback(self._thread_finished)
        return future

    def _thread_finished(self, _future: asyncio.Future) -> None:
        self._threads_in_flight -= 1

    async def shutdown_default_executor(self, *args, **kwargs):
        """Shut down the default executor, counted like an executor job.

        The stock implementation joins the executor in a helper thread that
        reports back with ``call_soon_threadsafe`` and sets no timer, which
        would otherwise look like a deadlock.
        """
        self._threads_in_flight += 1
        try:
            await super().shutdown_default_executor(*args, **kwargs)
        finally:
            self._threads_in_flight -= 1

    def _run_once(self) -> None:
        """Run one iteration: maybe advance the clock, then run ready callbacks.

        Mirrors ``BaseEventLoop._run_once`` with four differences: the
        selector is consulted only when nothing is ready (see ``_idle``),
        timers are due when ``when <= time()`` exactly (no clock-resolution
        slack, which would misbehave at large virtual times), the clock also
        moves after an iteration of nothing but polls (``polled_in_vain``), and slow
        callbacks are measured in wall time in debug mode.
        """
        self._drop_cancelled()
        ready = self._ready
        if not ready and not self._stopping:
            self._idle()
        elif (len(ready) <= self._pollers and not self._threads_in_flight
              and self._next_timer() > self._vtime):  # only pollers, to poll again
            step = POLL_STEP_S * 2.0 ** min(self._poll_streak, 60)
            self._vtime = min(self._next_timer(), self._vtime + step)
        self._take_due()
        self._run_ready()

    def _drop_cancelled(self) -> None:
        """Take cancelled timers off the heads of both heaps (and, once they are more
        than the stock loop's share of the timer heap, out of all of it)."""
        scheduled = self._scheduled
        sched_count = len(scheduled)
        if (sched_count > _MIN_SCHEDULED_TIMER_HANDLES
                and self._timer_cancelled_count / sched_count
                > _MIN_CANCELLED_TIMER_HANDLES_FRACTION):
            live = []
            for entry in scheduled:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    live.append(entry)
            heapq.heapify(live)
            self._scheduled = live
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][2]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(scheduled)[2]._scheduled = False
        background = self._background
        while background and background[0][2]._cancelled:
            heapq.heappop(background)[2]._scheduled = False

    def _take_due(self) -> None:
        """Move every timer due at the current virtual time to the ready queue."""
        scheduled, background, ready = self._scheduled, self._background, self._ready
        now = self._vtime
        while scheduled and scheduled[0][0] <= now:
            handle = heapq.heappop(scheduled)[2]
            handle._scheduled = False
            ready.append(handle)
            self.timers_fired += 1
        while background and background[0][0] <= now:
            handle = heapq.heappop(background)[2]
            handle._scheduled = False
            ready.append(handle)
        self.callbacks_run += len(ready)

    def _run_ready(self) -> None:
        """Run only what is ready now (callbacks scheduled by these run in the next
        iteration, as in the stock loop), counting the iteration's pollers."""
        popleft, debug = self._ready.popleft, self._debug
        ntodo, polled = len(self._ready), 0
        for _ in range(ntodo):
            handle = popleft()
            if handle._cancelled:
                continue
            if debug:
                self._run_timed(handle)
            else:
                handle._run()
            if self._polled:
                self._polled, polled = False, polled + 1
        self._pollers = polled if polled == ntodo else 0
        self._poll_streak = self._poll_streak + 1 if self._pollers else 0

    def _run_timed(self, handle) -> None:
        """Debug mode: run ``handle``, warning when it took long in wall time."""
        try:
            self._current_handle = handle
            t0 = time.perf_counter()
            handle._run()
            dt = time.perf_counter() - t0
            if dt >= self.slow_callback_duration:
                logger.warning("Executing %r took %.3f wall seconds", handle, dt)
        finally:
            self._current_handle = None

    def _idle(self) -> None:
        """Find the next thing to do when no callback is ready.

        In order: take any I/O or thread wake-up that has already arrived;
        wait in real time for executor work in flight; jump the clock to the
        earliest timer; otherwise raise :class:`SimDeadlock`.  The selector is
        polled only when something besides the self-pipe is registered: a
        thread's ``call_soon_threadsafe`` lands in the ready queue itself (its
        byte on the self-pipe only wakes a blocked ``select``, and is read by
        the next one), and a poll is a system call per simulated event.
        """
        if len(self._selector.get_map()) > 1:
            event_list = self._selector.select(0)
            if event_list:
                self._process_events(event_list)
                return
        if self._ready:  # appended by another thread since the check above
            return
        if self._threads_in_flight:
            self._process_events(self._selector.select(None))
            return
        scheduled, background = self._scheduled, self._background
        if not scheduled and self.on_quiet is not None:
            self.on_quiet()  # nothing pending but the background: may find a deadlock
            if self._ready:
                return
        if scheduled:
            when = scheduled[0][0]
            if background and background[0][0] < when:
                when = background[0][0]
        elif background:
            when = background[0][0]
        else:
            raise SimDeadlock(self._deadlock_message())
        if when > self._vtime:
            self._vtime = when

    def _next_timer(self) -> float:
        """When the earliest pending timer is due (infinity: none)."""
        heads = [heap[0][0] for heap in (self._scheduled, self._background) if heap]
        return min(heads) if heads else float("inf")

    def _deadlock_message(self) -> str:
        """Describe the stuck state: virtual time and the pending tasks."""
        tasks = sorted(asyncio.all_tasks(self), key=lambda t: t.get_name())
        lines = [
            f"simulation deadlocked at virtual time {self._vtime!r}: nothing "
            f"is ready, no timer is pending, {len(tasks)} task(s) wait forever"
        ]
        for task in tasks[:_DEADLOCK_TASKS_SHOWN]:
            text = repr(task)
            if len(text) > _DEADLOCK_REPR_CHARS:
                text = text[:_DEADLOCK_REPR_CHARS - 3] + "..."
            lines.append(f"  {text}")
        if len(tasks) > _DEADLOCK_TASKS_SHOWN:
            lines.append(f"  ... and {len(tasks) - _DEADLOCK_TASKS_SHOWN} more")
        return "\n".join(lines)


class _BackgroundTimer(asyncio.TimerHandle):
    """A timer made where ``VirtualClockLoop.background`` is true: kept in a heap of its
    own, so the loop sees at once when nothing else is pending (``on_quiet``)."""

    __slots__ = ()


def run_virtual(
    main: Union[Coroutine[Any, Any, _T], Callable[[], Coroutine[Any, Any, _T]]],
    *,
    debug: bool = False,
) -> _T:
    """Run a coroutine to completion on a fresh :class:`VirtualClockLoop`.

    Like ``asyncio.run``: cancels leftover tasks, shuts down async generators
    and the default executor, closes the loop and returns the coroutine's
    result.  ``main`` may be a coroutine or a zero-argument callable returning
    one; the callable form suits ``await asyncio.to_thread(run_virtual,
    factory)``, where the coroutine should be created in the worker thread.
    The loop is not installed as the thread's current event loop, so a loop
    belonging to the calling thread (or any other) is left untouched.

    Raises :class:`SimDeadlock` if the simulation can never finish, and
    ``RuntimeError`` if called from a thread whose event loop is running.
    """
    if asyncio._get_running_loop() is not None:
        raise RuntimeError(
            "run_virtual() cannot be called from a running event loop; "
            "use 'await asyncio.to_thread(run_virtual, factory)'")
    coro = main() if callable(main) else main
    if not asyncio.iscoroutine(coro):
        raise TypeError(f"run_virtual() needs a coroutine, got {coro!r}")
    loop = VirtualClockLoop()
    thresholds = gc.get_threshold()
    # A simulation keeps every rank's state alive at once and allocates a few objects
    # per event: at the stock thresholds the cyclic collector's passes over that live set
    # grew with the rank count per message (bench sim, 16,384 ranks: 24.5k msgs/s, 36 s
    # with start-up; with these, 33.3k and 22 s; with the collector off, 32.9k and 20 s).
    # Collections are rarer, not off; the stock thresholds come back when the run ends.
    if thresholds[0]:  # (0: the collector is off, and stays off)
        gc.set_threshold(*(max(mine, stock)
                           for mine, stock in zip(_SIM_GC_THRESHOLDS, thresholds)))
    try:
        loop.set_debug(debug)
        return loop.run_until_complete(coro)
    finally:
        gc.set_threshold(*thresholds)
        if loop.froze:
            gc.unfreeze()
        if loop.paused_collector:  # the run ended before its start-up did
            gc.enable()
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_all_tasks(loop: VirtualClockLoop) -> None:
    """Cancel leftover tasks and let them unwind, as ``asyncio.run`` does."""
    to_cancel = asyncio.all_tasks(loop)
    if not to_cancel:
        return
    for task in to_cancel:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*to_cancel, return_exceptions=True))
    for task in to_cancel:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception during run_virtual() shutdown",
                "exception": task.exception(),
                "task": task,
            })
