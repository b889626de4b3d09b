"""Ending a run that can never progress: the coordinator's deadlock watch.

Theory of operation
-------------------
A run is deadlocked when every live rank waits (in a receive, a probe, a request, a
synchronous send's acknowledgement, a protocol's round: ``engine/_waits``) and nothing
can wake any of them: no message is in flight, and the coordinator is not recovering
anyone nor calling any rank. A rank whose ``main()`` returned waits for nothing: it is
finished, and a rank that waits for a message a finished rank never sent is deadlocked.
A rank that computes, sleeps or waits on anything the engine did not name is busy, never
blocked, so no slow rank is ever called deadlocked; a message in flight (on a channel
between live incarnations, sent > arrived) is progress.

The coordinator reads every rank's wait state (``RankHost.progress``: its wait record,
position, waits begun, wire counts) and decides (``judge``):

* at a *quiet* moment, when nothing else is pending at all (``quiet_check``: the sim
  transport's loop has no timer left but the coordinator's own watches, ``BACKGROUND``),
  the first reading that finds every live rank blocked and nothing in flight is a
  deadlock, exactly at that virtual moment;
* otherwise (``service``: every ``Fabric.deadlock_check_s``, on local and Ray, and on
  sim as a net under periodic protocol timers), two readings in a row that find every
  live rank blocked, nothing in flight and nothing changed in between (no rank began a
  wait, no envelope was sent or arrived) are a deadlock: a timer that fired in between
  and did nothing could not wake anyone, and one that starts a round changes counts.

The error, ``ft.Deadlock``, names each rank's wait and position, and whether the program
(all waits are the program's: receives, probes, requests, synchronous sends) or a
protocol's round is stuck.
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ..base import Deadlock
from ..engine import Wait

BACKGROUND: ContextVar[bool] = ContextVar("ftactors_background", default=False)
"""True in the coordinator's watching tasks (heartbeats, progress reports, this watch,
the run's timeout): their timers wake no rank, so the sim loop does not count them as
something pending (``VirtualClockLoop.quiet``)."""

PROGRAM_KINDS = ("recv", "probe", "request", "any", "ssend")
"""The waits of a program's own calls (the rest are protocols')."""


@contextmanager
def background():
    """Timers made in this block (by this task) are the coordinator's watching: they
    wake no rank."""
    token = BACKGROUND.set(True)
    try:
        yield
    finally:
        BACKGROUND.reset(token)


async def in_background(coro):
    """Run ``coro`` as watching work (``background``), in its own task's context."""
    BACKGROUND.set(True)
    return await coro


@dataclass(frozen=True)
class RankWait:
    """One rank's state at a reading: ``wait`` None and not ``finished``: it is busy."""

    rank: int
    wait: Wait | None
    position: tuple | None
    finished: bool = False
    inner: tuple = ()

    def fields(self) -> dict:
        """Plain fields (``Deadlock.details``)."""
        w = self.wait
        if self.finished or w is None:
            return {"kind": "finished" if self.finished else "busy",
                    "position": self.position}
        return {"kind": w.kind, "source": w.source, "tag": w.tag, "comm": w.comm,
                "what": w.what, "ranks": list(w.ranks), "position": self.position}

    def describe(self) -> str:
        where = ""
        if self.position is not None:
            where = f" (loop {self.position[0]}, iteration {self.position[1]})"
        if self.finished:
            return f"rank {self.rank}: finished"
        text = f"rank {self.rank}{where}: " + (self.wait.describe() if self.wait else "busy")
        if self.inner:
            text += "; inside it: " + "; ".join(w.describe() for w in self.inner)
        return text


def in_flight(states: dict[int, dict]) -> list[tuple[int, int, int]]:
    """The channels between live incarnations with envelopes sent and not arrived:
    ``(src, dst, how many)``. ``states``: rank -> its ``wait_state``."""
    out = []
    for src, st in states.items():
        mine = st["epoch"]
        for (dst, dst_epoch, src_epoch), sent in st["out"].items():
            peer = states.get(dst)
            if dst == src or src_epoch != mine or peer is None or peer["epoch"] != dst_epoch:
                continue  # to itself (never in transit), or an incarnation no longer live
            arrived = peer["in"].get((src, src_epoch, dst_epoch), 0)
            if sent > arrived:
                out.append((src, dst, sent - arrived))
    return out


def judge(states: dict[int, dict], finished: set[int], before: dict | None,
          quiet: bool) -> list[RankWait] | None:
    """The ranks' waits if this reading shows a deadlock, else None. ``states``: every
    rank that answered (rank -> ``wait_state``; a rank missing is busy); ``finished``:
    the ranks whose results the coordinator holds; ``before``: the last reading's
    states (None: none); ``quiet``: nothing else is pending (module docstring)."""
    waits = []
    for rank in sorted(states):
        st = states[rank]
        if rank in finished:
            waits.append(RankWait(rank, None, st["position"], finished=True))
        elif st["wait"] is None:
            return None  # running: it may send
        else:
            waits.append(RankWait(rank, st["wait"], st["position"], inner=st["inner"]))
    if all(w.finished for w in waits) or in_flight(states):
        return None
    if quiet:
        return waits
    if before is None or before.keys() != states.keys():
        return None
    for rank, st in states.items():
        was = before[rank]
        if (st["count"], st["epoch"], st["out"], st["in"]) != (
                was["count"], was["epoch"], was["out"], was["in"]):
            return None
    return waits


def deadlock_error(waits: list[RankWait], time_s: float) -> Deadlock:
    """The error that ends the run, naming every rank's wait."""
    blocked = [w for w in waits if not w.finished]
    kinds = {w.wait.kind for w in blocked}
    whose = ("the program's own: each waits for a message no rank will send"
             if kinds <= set(PROGRAM_KINDS) else
             "a protocol's round waits for ranks that will not join it")
    lines = [f"the run can never progress (at {time_s:.3f} s): every live rank waits and "
             f"nothing in flight can wake any of them ({whose})"]
    lines += ["  " + w.describe() for w in waits]
    return Deadlock({w.rank: w.describe() for w in waits}, "\n".join(lines),
                    {w.rank: w.fields() for w in waits})


class DeadlockWatch:
    """The coordinator's side (module docstring): ``c`` is the ``Coordinator``."""

    def __init__(self, c):
        self.c = c
        self.before: dict | None = None

    def _finished(self) -> set[int]:
        return self.c.supervisor.finished()

    async def service(self) -> None:
        """Read every rank each ``deadlock_check_s`` until a deadlock is found."""
        c = self.c
        interval = c.fabric.deadlock_check_s
        while True:
            await c.fabric.sleep(interval)
            if not c.supervisor.steady():
                self.before = None
                continue
            if c.fabric.hosts_here:
                states = self._read_here()
            else:
                answers = await asyncio.gather(
                    *(asyncio.wait_for(c.fabric.progress(h), interval) for h in c.handles),
                    return_exceptions=True)
                states = {r: a[2] for r, a in enumerate(answers)
                          if not isinstance(a, BaseException) and a is not None}
                if len(states) < len(answers):
                    states = None  # a rank that did not answer in time is busy (computing)
            if states is None or not c.supervisor.steady():
                # (a failure or recovery that began meanwhile may wake anyone)
                self.before = None
                continue
            self.decide(states, quiet=False)

    def _read_here(self) -> dict[int, dict] | None:
        """Every rank's wait state, read from its host in this process (local, sim); None
        at the first rank that is busy (most readings stop there, at no cost per rank)."""
        hosts, finished = self.c.handles, self._finished()
        if any(r not in finished and h.ep.waiting is None for r, h in enumerate(hosts)):
            return None
        return {r: h.ep.wait_state() for r, h in enumerate(hosts)}

    def quiet_check(self) -> bool:
        """Nothing but the coordinator's watching is pending (the sim loop says so): read
        the ranks now. True when the run was found deadlocked."""
        states = self._read_here()
        if states is None:
            return False
        return self.decide(states, quiet=True)

    def last_waits(self) -> dict[int, str]:
        """Each rank's state in words (for a run given up at its time limit): what it
        waits for, or ``busy``; read now where the hosts are in this process, else from
        the last reading that read every rank (empty when there is none)."""
        finished = self._finished()
        states = self.before or {}
        if self.c.fabric.hosts_here:
            states = {r: h.ep.wait_state() for r, h in enumerate(self.c.handles)
                      if h is not None}
        return {r: RankWait(r, st["wait"], st["position"], r in finished,
                            st["inner"]).describe()
                for r, st in sorted(states.items())}

    def decide(self, states: dict[int, dict], quiet: bool) -> bool:
        waits = judge(states, self._finished(), self.before, quiet)
        self.before = states
        if waits is None:
            return False
        if self.c.reporter is not None:
            self.c.reporter.stuck(tuple(w.position for w in waits),
                                  tuple(w.wait and w.wait.describe() for w in waits))
        self.c.supervisor.deadlocked(deadlock_error(waits, self.c.fabric.clock()))
        return True
