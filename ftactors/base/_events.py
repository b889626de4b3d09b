"""The run's timeline: every start, checkpoint, failure, recovery and replay is an event.

Events are data that tests assert on and reports plot (DESIGN principle 8). Each rank
keeps its own log; the coordinator merges them, with its own, into ``RunResult.events``.
On the sim transport times are virtual, so the same seed gives the identical log.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple


CHECKPOINT_KINDS = ("checkpoint", "backup", "group_checkpoint", "rs_checkpoint",
                    "hc3i_initiate")
"""The events that mark a stored recovery point, by protocol (a run's checkpoints are
counted from them, whatever a protocol calls its checkpoints)."""


class Event(NamedTuple):
    """One record: ``time`` in seconds, ``kind`` a short name (``"start"``,
    ``"checkpoint"``, ``"failure"``, ...), ``rank`` (-1 for the coordinator) and
    ``detail``, a dict of plain values."""

    time: float
    kind: str
    rank: int
    detail: dict

    def __repr__(self):
        return f"Event({self.time:.6f}, {self.kind!r}, rank={self.rank}, {self.detail})"


class EventLog:
    """Append-only list of events stamped by a clock."""

    def __init__(self, clock: Callable[[], float], rank: int = -1):
        self._clock = clock
        self.rank = rank
        self.events: list[Event] = []
        self.counts: dict[str, int] = {}
        """Events recorded so far by kind (``drain`` keeps them): progress reports."""
        self.on_record: Callable[[Event], None] | None = None
        """Called with each event recorded (the coordinator's progress reports)."""

    def make(self, kind: str, rank: int | None = None, **detail: Any) -> Event:
        """An event stamped now, not kept here (to hand to someone else)."""
        return Event(self._clock(), kind, self.rank if rank is None else rank, detail)

    def record(self, kind: str, rank: int | None = None, **detail: Any) -> Event:
        ev = self.make(kind, rank, **detail)
        self.events.append(ev)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.on_record is not None:
            self.on_record(ev)
        return ev

    def drain(self) -> list[Event]:
        """Hand over the events recorded so far and forget them."""
        out, self.events = self.events, []
        return out


def merge(logs: list[list[Event]]) -> list[Event]:
    """All events in time order (stable: equal times keep their per-log order)."""
    merged = [ev for log in logs for ev in log]
    merged.sort(key=lambda ev: ev.time)
    return merged
