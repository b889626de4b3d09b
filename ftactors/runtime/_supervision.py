"""Supervision: the ranks' ``main()`` calls and the loop that waits on them until every
result is in hand (docs/architecture/recovery.md, "The coordinator").

Each call says itself when it ended (``_run_ended``); the loop takes the outcomes: a
value is the rank's result, an exception in ``main()`` ends the run with ``RankError``,
a dead host is a failure (``Coordinator.fail``). While failures are pending the loop
hands them to the coordinator's recovery rounds; a deadlock the watch finds
(``_deadlock``) ends the run. The watches (the deadlock watch, heartbeats, progress
reports) and the policy's service run beside it, from the ranks' first start to the
loop's end. A call dropped by a restore or a respawn (``drop_runs``) is no longer the
run's: its outcome is never taken."""
from __future__ import annotations

import asyncio
import functools
from typing import Any

from ._deadlock import in_background
from ._deaths import RankDied
from ..base import Deadlock, RankError
from ..engine import RankVector


class Supervisor:
    """The ranks' ``main()`` calls; ``c`` is the ``Coordinator`` (its fabric, handles,
    arbiter, watches, policy, and its recovery rounds)."""

    def __init__(self, c):
        self.c = c
        self.runs: dict[int, asyncio.Task] = {}  # rank -> its main() call under way
        self.ended: set[int] = set()  # ranks whose current main() call ended, not taken
        self.results: list = [None] * c.n
        self.wake = asyncio.Event()  # something for the loop: a call ended, a failure, ...
        self.deadlock: Deadlock | None = None  # found by the watch: ends the run
        self.calls = 0  # requests to ranks under way (``asking``): they may wake a rank

    # -------------------------------------------------------------- main() calls
    def start_rank(self, rank: int, restore: Any = None) -> None:
        """Run (or run again, from ``restore``) rank ``rank``'s ``main()``. The outcome of
        a run of it that ended and was not taken yet (it finished during a recovery round)
        belongs to the execution the restore abandons: it is dropped."""
        c = self.c
        self.drop_runs({rank})
        task = asyncio.ensure_future(
            c.fabric.run(c.handles[rank], c.config.args, c.config.kwargs, restore))
        self.runs[rank] = task
        task.add_done_callback(functools.partial(self._run_ended, rank))
        c.arbiter.started(rank)
        self.wake.set()

    def _run_ended(self, rank: int, task: asyncio.Task) -> None:
        """A ``main()`` call ended: if it is still the rank's run, the supervisor takes it.
        (Each call says so itself: waiting on all of them at once would cost every rank's
        end a pass over every rank.)"""
        if self.runs.get(rank) is task:
            self.ended.add(rank)
            self.wake.set()

    def drop_runs(self, ranks: set[int]) -> None:
        """Forget the ``main()`` calls of ``ranks`` (stopped if under way): their outcome,
        taken or not, is not the run's."""
        for rank in sorted(ranks):
            task = self.runs.pop(rank, None)
            if task is not None:
                self.ended.discard(rank)
                task.add_done_callback(_consume)  # nobody waits for its outcome
                task.cancel()

    def running(self, rank: int) -> bool:
        """Whether rank ``rank``'s ``main()`` call is still under way (not finished, even
        if the coordinator has not taken its outcome yet)."""
        task = self.runs.get(rank)
        return task is not None and not task.done()

    async def asking(self, request) -> Any:
        """Await ``request`` to a rank (a fabric call): while one is under way no rank is
        deadlocked, as its arrival may wake one (``steady``)."""
        self.calls += 1
        try:
            return await request
        finally:
            self.calls -= 1

    # ----------------------------------------------------------------- the loop
    async def supervise(self) -> list:
        """Start every rank and the watches, take the outcomes until every result is in
        hand; returns the results."""
        c = self.c
        for rank in range(c.n):
            self.start_rank(rank, None if c.config.restore is None else
                            {"snapshot": c.config.restore[rank], "peer_epochs": RankVector(c.n),
                             "line": c.config.start})
        self._start_watching()
        try:
            while not c.arbiter.over():
                if c.arbiter.pending:
                    await c._recover()
                    continue
                if self.deadlock is not None:
                    await c.harvest.collect()
                    raise self.deadlock
                if not self.ended:
                    self.wake.clear()
                    await self.wake.wait()
                    if self.deadlock is not None:
                        continue
                await self._take_ended()
        finally:
            self._stop()
        return self.results

    def _start_watching(self) -> None:
        """The watches (their timers wake no rank: ``_deadlock``) and the policy's
        service run from now on; a death is a failure from now on."""
        c = self.c
        watching = [c.watch.service()]
        if c.heartbeats.interval_s:
            watching.append(c.heartbeats.service())
        if c.reporter is not None:
            watching.append(c.reporter.service(c.fabric, c.handles))
        for w in watching:
            c.helper(in_background(w))
        service = getattr(c.policy, "service", None)
        if service is not None:
            c.helper(service())
        c.fabric.on_quiet(self._quiet)
        c.arbiter.supervising()

    async def _take_ended(self) -> None:
        """Take the outcome of every call that ended; an error in ``main()`` ends the run.
        Chaos may strike a rank whose result was taken (``moment="finished"``)."""
        c = self.c
        ended, self.ended = sorted(self.ended), set()
        for rank in ended:
            if rank not in self.runs:
                continue  # dropped meanwhile: its outcome is not the run's
            error = self._take(rank)
            if error is not None:
                await c.harvest.collect()
                raise error
            if rank in c.arbiter.kept:
                await c.reached_moment(rank, "finished")

    def _take(self, rank: int) -> RankError | None:
        """Take the outcome of a rank's run (ended); returns the error that ends the run,
        if any."""
        task = self.runs.pop(rank)
        if task.cancelled():
            return None
        try:
            outcome = task.result()
        except RankDied as died:
            self.c.fail(rank, died.reason or "its process died")
            return None
        if not outcome["ok"]:
            return RankError(rank, outcome["error"], outcome["traceback"])
        self.results[rank] = outcome["value"]
        self.c.arbiter.returned(rank)
        return None

    def _stop(self) -> None:
        """Supervision is over: a death from now on is not arbitrated, the calls still
        under way and the background work stop."""
        c = self.c
        c.arbiter.ending()
        c.fabric.on_quiet(None)
        for _, task in sorted(self.runs.items()):
            task.cancel()  # a rank that dies after the run ended (a lost job's) is moot:
            task.add_done_callback(_consume)  # its death is nobody's to take
        c.stop_helpers()

    # ---------------------------------------------------------------- deadlocks
    def steady(self) -> bool:
        """Whether nothing of the coordinator's can wake a rank now: no failure being
        recovered and no rank between hosts (``Arbiter.settled``), no request to a rank
        under way, every rank running or finished (``_deadlock``)."""
        arbiter = self.c.arbiter
        return (arbiter.settled() and not self.calls and not self.ended
                and len(self.runs) + len(arbiter.kept) == self.c.n)  # (never both)

    def finished(self) -> set[int]:
        """The ranks whose results are in hand (read only)."""
        return self.c.arbiter.kept

    def _quiet(self) -> None:
        """The fabric has nothing pending but the coordinator's watching (sim): read the
        ranks now, in this process."""
        if self.deadlock is None and self.steady():
            self.c.watch.quiet_check()

    def deadlocked(self, error: Deadlock) -> None:
        """The watch found the run deadlocked: the loop ends the run with ``error``."""
        if self.deadlock is None:
            self.c.events.record("deadlock", waits=error.waits)
            self.deadlock = error
            self.wake.set()


def _consume(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()
