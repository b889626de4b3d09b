"""The run's central instance: starts the ranks, watches them, ends the run.

The coordinator is transport-agnostic: it drives a *fabric* (``transports``) that knows
how to start a rank host, call it, and kill it. It turns what it observes into the run's
outcome: every rank's return value, a ``RankError`` carrying the original traceback when
a ``main()`` raises, ``RankFailed`` when a rank dies and nothing in the stack recovers
it. Whatever happens, every host it started is stopped before it returns or raises.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ._chaos import Kill
from ._errors import RankError, RankFailed
from ._events import Event, EventLog, merge
from ._host import RankSpec

COLLECT_TIMEOUT_S = 5.0


class RankDied(Exception):
    """Raised by a fabric when a rank's host is gone (process death, kill)."""

    def __init__(self, rank: int, reason: str = ""):
        super().__init__(rank, reason)
        self.rank = rank
        self.reason = reason


@dataclass
class RunResult:
    """What ``ft.run`` returns.

    Attributes:
        results: ``main()``'s return value per rank.
        events: the run's timeline (``ft.Event`` records, in time order).
        metrics: counters and timings (wall time, messages, duplicates dropped, ...).
    """

    results: list
    events: list[Event] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, in time order."""
        return [ev for ev in self.events if ev.kind == kind]


class Coordinator:
    """Runs one job on one fabric."""

    def __init__(self, fabric, rank_cls: type, ranks: int, args: tuple, kwargs: dict, *,
                 kills: list[Kill], trace: bool, options: dict):
        self.fabric = fabric
        self.rank_cls = rank_cls
        self.n = ranks
        self.args = args
        self.kwargs = kwargs
        self.kills = kills
        self.trace = trace
        self.options = options
        self.progress = options.pop("progress", None)
        self.progress_interval_s = float(options.pop("progress_interval_s", 1.0))
        self.events = EventLog(fabric.clock)
        self.handles: list[Any] = []
        self.collected: list[dict] = []

    def spec(self, rank: int, epoch: int = 0) -> RankSpec:
        its = tuple(k.iteration for k in self.kills
                    if k.rank == rank and k.iteration is not None and k.incarnation == epoch)
        return RankSpec(self.rank_cls, rank, self.n, epoch, self.trace, self.options, its)

    async def run(self) -> RunResult:
        fabric = self.fabric
        await fabric.start(self.n)
        t0 = fabric.clock()
        try:
            self.handles = list(await asyncio.gather(
                *(fabric.spawn(self.spec(r)) for r in range(self.n))))
            await fabric.wire(self.handles)
            self.events.record("run_start", ranks=self.n, transport=fabric.name)
            results = await self._supervise()
            self.events.record("run_end")
            await self._collect()
        finally:
            await fabric.shutdown()
        return self._result(results, fabric.clock() - t0)

    async def _supervise(self) -> list:
        fabric = self.fabric
        tasks = {asyncio.ensure_future(fabric.run(h, self.args, self.kwargs)): r
                 for r, h in enumerate(self.handles)}
        timers = [asyncio.ensure_future(self._kill_later(k)) for k in self.kills
                  if k.time_s is not None and k.incarnation == 0]
        if self.progress is not None:
            timers.append(asyncio.ensure_future(self._report_progress()))
        results: list = [None] * self.n
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=tasks.get):
                    rank = tasks[task]
                    try:
                        outcome = task.result()
                    except RankDied as died:
                        self.events.record("failure", rank=rank, reason=died.reason)
                        await self._collect()
                        raise RankFailed([rank], died.reason or "its process died") from None
                    if not outcome["ok"]:
                        await self._collect()
                        raise RankError(rank, outcome["error"], outcome["traceback"])
                    results[rank] = outcome["value"]
        finally:
            for t in sorted(pending, key=tasks.get) + timers:  # sets iterate by address
                t.cancel()
        return results

    async def _kill_later(self, kill: Kill) -> None:
        await self.fabric.sleep(kill.time_s)
        self.events.record("kill", rank=kill.rank, at_s=kill.time_s)
        await self.fabric.kill(self.handles[kill.rank], self.options.get("kill_method", "sigkill"))

    async def _report_progress(self) -> None:
        """Poll every rank's safe-point position and hand them to the progress callback."""
        while True:
            await self.fabric.sleep(self.progress_interval_s)
            positions = await asyncio.gather(
                *(self.fabric.progress(h) for h in self.handles), return_exceptions=True)
            self.progress([None if isinstance(p, BaseException) else p for p in positions])

    async def _collect(self) -> None:
        """Gather events, traces and counters from every live host (best effort)."""
        async def one(h):
            try:
                return await asyncio.wait_for(self.fabric.collect(h), COLLECT_TIMEOUT_S)
            except (RankDied, asyncio.TimeoutError):
                return None
        got = await asyncio.gather(*(one(h) for h in self.handles))
        self.collected.extend(c for c in got if c is not None)

    def _result(self, results: list, wall_s: float) -> RunResult:
        logs = [self.events.drain()] + [c["events"] for c in self.collected]
        stats = [c["stats"] for c in self.collected]
        metrics: dict[str, Any] = {"wall_s": wall_s, "ranks": self.n, "transport": self.fabric.name}
        for key in ("sent", "received", "duplicates_dropped", "stale_dropped", "channel_duplicates"):
            metrics[key] = sum(s[key] for s in stats)
        result = RunResult(results, merge(logs), metrics)
        result.trace_rows = [c["trace"] for c in self.collected if c["trace"] is not None]
        return result


def wall_clock() -> float:
    return time.time()
