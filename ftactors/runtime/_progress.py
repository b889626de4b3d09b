"""Progress of a long run as it goes: ``ft.run(progress=True)`` or a function of one's own.

The coordinator's ``Reporter`` polls every rank every ``progress_interval_s`` for its
position (the loop and iteration of its last safe point) and how many checkpoint events
it has recorded, and reports at once whenever the coordinator records a kill, a detected
failure or the end of a recovery round (``EventLog.on_record``). Each report is a
``Progress`` record; ``progress=True`` prints them (``Printer``) to stderr: one status
line redrawn in place on a terminal, or a new line whenever it changes elsewhere, and a
line for each failure and recovery; a last report (``done``) ends the run's lines.
"""
from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass, field

from ..base import CHECKPOINT_KINDS, Event

NEWS_KINDS = ("killed", "failure_detected", "recovery_level", "recovery_end", "job_lost")
"""The coordinator's events reported as they happen."""
WAITS_SHOWN = 4
"""How many blocked ranks a status line names."""
PER_INITIATOR = ("hc3i_initiate",)
"""Checkpoint kinds one rank records per checkpoint (its initiator): counted over every
rank. The other rank-side kinds are recorded by every rank of a round: counted once."""


@dataclass(frozen=True)
class Progress:
    """What a run has done so far, handed to ``ft.run(progress=function)``.

    Attributes:
        time_s: seconds since the run started (its clock: virtual on sim).
        positions: each rank's ``(loop, iteration)`` at its last safe point (None: none
            yet, or the rank did not answer).
        checkpoints: checkpoints taken so far, by event kind (``backup``,
            ``rs_checkpoint``, ``checkpoint``, ...), each counted once however many
            ranks stored a part of it.
        failures: failures detected so far.
        recoveries: recovery rounds completed so far.
        news: what happened since the last report, a line each (kills, detections,
            recoveries).
        done: the run is over (its last report).
        waits: what each rank waits for now, in words (``receive from rank 1, tag 7,
            communicator w``, a protocol's round and whom it has not heard from); None:
            it runs, computes or sleeps, or did not answer.
    """

    time_s: float
    positions: tuple
    checkpoints: dict = field(default_factory=dict)
    failures: int = 0
    recoveries: int = 0
    news: tuple[str, ...] = ()
    done: bool = False
    waits: tuple = ()

    def status(self) -> str:
        """One line: where the ranks are, the checkpoints, failures and recoveries (the
        time left out: ``Printer`` puts it in front)."""
        known = [p for p in self.positions if p is not None]
        where = "starting"
        if known:
            lo, hi = min(known), max(known)
            where = f"iteration {lo[1]}" + (f"..{hi[1]}" if hi != lo else "") + f" (loop {lo[0]})"
        total = sum(self.checkpoints.values())
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.checkpoints.items()))
        return (f"{'done: ' if self.done else ''}{where}; "
                f"{total} checkpoint(s)" + (f" ({kinds})" if kinds else "")
                + f"; {self.failures} failure(s), {self.recoveries} recover(ies)"
                + self.blocked())

    def blocked(self) -> str:
        """The ranks blocked now and on what (``; blocked: rank 0 receive from ...``), the
        first ``WAITS_SHOWN`` of them; empty when none is."""
        blocked = [(r, w) for r, w in enumerate(self.waits) if w is not None]
        if not blocked:
            return ""
        text = "; ".join(f"rank {r} {w}" for r, w in blocked[:WAITS_SHOWN])
        more = len(blocked) - WAITS_SHOWN
        return f"; {len(blocked)} blocked: {text}" + (f"; ... ({more} more)" if more > 0 else "")


def news_line(ev: Event) -> str | None:
    """A coordinator event worth a line of its own as it happens (None: not one)."""
    d = ev.detail
    who = f"spare {d['spare']}" if "spare" in d else f"rank {ev.rank}"
    if ev.kind == "killed":
        where = f" at iteration {d['iteration']}" if "iteration" in d else ""
        return f"{who} killed ({d.get('how')}){where}"
    if ev.kind == "failure_detected":
        took = f" after {d['detection_s'] * 1e3:.0f} ms" if "detection_s" in d else ""
        return f"{who} failure detected{took}"
    if ev.kind == "recovery_level":
        return f"recovery of {d['failed']} by level {d['level']}"
    if ev.kind == "recovery_end":
        return f"recovery round {d.get('round')} done: every rank running"
    if ev.kind == "job_lost":
        return "the whole job is lost"
    return None


class Reporter:
    """The coordinator's side: gathers positions and counts, calls ``report``."""

    def __init__(self, report, interval_s: float, clock):
        self.report = report
        self.interval_s = interval_s
        self.clock = clock
        self.positions: tuple = ()
        self.waits: tuple = ()
        self._stuck = False
        self.news: list[str] = []
        self.events: Counter = Counter()  # the coordinator's own, by kind
        self.rank_counts: dict[int, Counter] = {}  # rank -> most ever seen, by kind
        self.wake = asyncio.Event()

    def on_event(self, ev: Event) -> None:
        """``EventLog.on_record`` of the coordinator's log."""
        self.events[ev.kind] += 1
        line = news_line(ev)
        if line is not None:
            self.news.append(line)
            self.wake.set()

    async def service(self, fabric, handles: list) -> None:
        """Report every ``interval_s``, and at once after news, until cancelled."""
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            answers = await asyncio.gather(*(fabric.progress(h) for h in handles),
                                           return_exceptions=True)
            positions, waits = [], []
            for rank, answer in enumerate(answers):
                if isinstance(answer, BaseException) or answer is None:
                    positions.append(None)
                    waits.append(None)
                    continue
                position, counts, state = answer
                positions.append(position)
                waits.append(None if state["wait"] is None else state["wait"].describe())
                seen = self.rank_counts.setdefault(rank, Counter())
                for kind, n in counts.items():
                    seen[kind] = max(seen[kind], n)
            self.positions, self.waits = tuple(positions), tuple(waits)
            self._send(done=False)

    def stuck(self, positions: tuple, waits: tuple) -> None:
        """The run ends deadlocked: where the ranks are and what each waits for (None:
        finished), for the last report."""
        self.positions, self.waits, self._stuck = positions, waits, True

    def finish(self) -> None:
        """The run is over: the last report (naming the blocked ranks only when it ended
        deadlocked: other waits seen before the end are over)."""
        if not self._stuck:
            self.waits = ()
        self._send(done=True)

    def _send(self, done: bool) -> None:
        counts = {k: self.events[k] for k in CHECKPOINT_KINDS if self.events[k]}
        for kind in CHECKPOINT_KINDS:
            per_rank = [c[kind] for c in self.rank_counts.values() if c[kind]]
            if per_rank:
                counts[kind] = counts.get(kind, 0) + (
                    sum(per_rank) if kind in PER_INITIATOR else max(per_rank))
        news, self.news = tuple(self.news), []
        self.report(Progress(self.clock(), self.positions, counts,
                             self.events["failure_detected"], self.events["recovery_end"],
                             news, done, self.waits))


class Printer:
    """``progress=True``: reports as lines on ``out`` (stderr): on a terminal one status
    line redrawn in place; elsewhere a new line whenever the status changes. News lines
    always get lines of their own."""

    def __init__(self, out=None):
        self.out = out if out is not None else sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.last = None

    def __call__(self, p: Progress) -> None:
        status = p.status()
        stamp = f"[{p.time_s:7.1f}s] " if p.time_s >= 1 else f"[{p.time_s:7.4f}s] "
        for line in p.news:
            self._line(stamp + line)
        if self.tty:
            self.out.write("\r\033[K" + stamp + status + ("\n" if p.done else ""))
        elif status != self.last or p.done:  # only the time moved: no new line
            self.out.write(stamp + status + "\n")
        self.last = status
        self.out.flush()

    def _line(self, text: str) -> None:
        self.out.write(("\r\033[K" if self.tty else "") + text + "\n")
