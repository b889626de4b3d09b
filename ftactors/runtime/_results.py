"""What a run gathers from its hosts and hands back: each rank's events, traces and
counters (``Harvest``, best effort: a dead host gives nothing), and the ``RunResult``
made of them with the coordinator's own timeline and the run's metrics.

A recovery round ends by gathering the events so far (``collect_events``), so a rank
that dies later does not take its history along; the run's end gathers once more, and
the result's timeline merges the coordinator's events with every rank's."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ._deaths import RankDied
from ..base import Event, merge

COLLECT_TIMEOUT_S = 5.0
STATS = ("sent", "received", "duplicates_dropped", "resends_suppressed", "stale_dropped",
         "channel_duplicates", "logged_bytes")
"""The counters of each rank's endpoint that a run's metrics sum."""


@dataclass
class RunResult:
    """What ``ft.run`` returns.

    Attributes:
        results: ``main()``'s return value per rank.
        events: the run's timeline (``ft.Event`` records, in time order). An event's
            ``time`` is in seconds since the run started (``ft.run`` making its
            transport, before any rank starts), on every transport: wall-clock seconds
            on ``local`` and ``ray`` (a rank's events by its node's clock), virtual ones
            on ``sim``.
        metrics: counters and timings (wall time, messages, duplicates dropped, ...);
            ``kills_planned``, ``kills_fired`` and ``kills_unfired`` (each kill's
            settings; an unfired one with ``why``), ``restored_unregistered`` (ranks
            restored past the first loop's top with nothing registered),
            ``safe_points`` (whether any rank offered one): see ``runtime/_notices``.
        run_id: the run's id: its stored checkpoint sets are in ``run-<run_id>`` of a store.
    """

    results: list
    events: list[Event] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    run_id: str = ""

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, in time order."""
        return [ev for ev in self.events if ev.kind == kind]


class Harvest:
    """The run's gatherings from its hosts; ``c`` is the ``Coordinator`` (its fabric,
    hosts, identity and own event log)."""

    def __init__(self, c):
        self.c = c
        self.collected: list[dict] = []  # the last gathering: one entry per live host
        self.rank_events: list[Event] = []  # every rank event gathered so far

    async def collect(self) -> None:
        """Gather events, traces and counters from every live host (best effort)."""
        fabric = self.c.fabric

        async def one(h):
            try:
                return await asyncio.wait_for(fabric.collect(h), COLLECT_TIMEOUT_S)
            except (RankDied, asyncio.TimeoutError):
                return None
        got = await asyncio.gather(*(one(h) for h in self.c.handles))
        self.collected = [c for c in got if c is not None]
        for c in self.collected:
            self.rank_events.extend(c["events"])

    async def collect_events(self) -> None:
        """Take the events recorded so far from every live rank."""
        await self.collect()
        self.collected = []

    def timeline(self) -> list[Event]:
        """The run's events so far (the coordinator's and those gathered), in time
        order: what an error that ends the run carries."""
        return merge([self.c.events.events, self.rank_events])

    def result(self, results: list, wall_s: float) -> RunResult:
        """The run's ``RunResult``: the ranks' ``results``, the whole timeline, and the
        metrics summed over the last gathering."""
        c = self.c
        logs = [c.events.drain(), self.rank_events]
        stats = [got["stats"] for got in self.collected]
        metrics: dict[str, Any] = {"wall_s": wall_s, "ranks": c.n, "transport": c.fabric.name}
        for key in STATS:
            metrics[key] = sum(s[key] for s in stats)
        direct = [s["direct"] for s in stats if "direct" in s]  # the direct data plane's
        if direct:
            metrics["direct"] = {key: sum(d[key] for d in direct) for key in direct[0]}
        metrics.update(c.fabric.metrics())  # the sim's events
        metrics["failures"] = sum(1 for ev in logs[0] if ev.kind == "failure_detected")
        metrics["recoveries"] = sum(1 for ev in logs[0] if ev.kind == "recovery_end")
        result = RunResult(results, merge(logs), metrics, c.identity.run_id)
        result.trace_rows = [got["trace"] for got in self.collected if got["trace"] is not None]
        return result
