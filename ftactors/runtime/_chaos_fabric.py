"""The run's fabric with its failure plan: where chaos is matched and fired.

``ChaosFabric`` wraps the transport's fabric (``LocalFabric``, ``SimFabric``,
``RayFabric``); every call it does not take passes through unchanged. It is the one
place a planned kill (``_chaos.Kill``) is matched to the run and fired:

* what a rank's host does to itself (a death or a disconnect at an iteration, a death
  as ``main()`` returns) goes into the ``RankSpec`` of every host it starts or promotes
  (``KillPlan.on_host``): the rank strikes at its own safe point;
* a moment of a rank's or a spare's life, or a recovery phase, is handed to it by the
  coordinator or the spare pool (``reached``): each kill due there fires;
* kills at a time, and partitions, are timers started with the run (``start``).

Every firing is an event that names its kill (``kill=i``, its index in the plan), the
rank's own ``killed`` or ``disconnected`` report included, so the unfired-kill tally
(``runtime/_notices``) reads the identity off the timeline. The kill of a rank's host
is also a report of the run (``run.reports``): the coordinator dates the failure's
detection from it.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ._chaos import Kill, KillPlan, Partition
from ._deaths import RankDied

_DETAIL = {"recovery_round": "during_recovery", "recovery_phase": "phase"}
"""A point's field -> the name of its ``killed`` event's detail (rank and incarnation
are the event's rank and the life the kill names)."""


class ChaosFabric:
    """``fabric`` with the failure plan ``plan``; ``run`` (the coordinator) provides
    ``events``, ``reports``, ``helper(coro)`` (background work stopped with the run),
    ``wired`` (set once every rank is started and wired) and ``failing()`` (the ranks
    failed and not recovered yet)."""

    def __init__(self, fabric, plan: KillPlan, run, *, stall_s: float = 0.0,
                 partitions: tuple = ()):
        own = object.__setattr__
        own(self, "_fabric", fabric)
        own(self, "_plan", plan)
        own(self, "_run", run)
        own(self, "_stall_s", stall_s)
        own(self, "_partitions", tuple(partitions))
        own(self, "_hosts", {})  # rank -> its current host (the last started or promoted)
        own(self, "_hosted", {})  # rank -> set once it has a host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fabric, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fabric, name, value)  # (``on_report``, a test's stand-in): the fabric's

    # ----------------------------------------------------------- the run's hosts
    async def start(self, ranks: int) -> None:
        """Start the fabric, then the plan's timers (seconds from now: start-up and
        wiring can be struck)."""
        await self._fabric.start(ranks)
        for rank in range(ranks):
            self._hosted[rank] = asyncio.Event()
        if self._plan.method == "disconnect" or self._partitions:
            self._fabric.track_wires()
        for i in self._plan.timed():
            self._run.helper(self._kill_later(i))
        for p in self._partitions:
            self._run.helper(self._partition_later(p))

    async def spawn(self, spec):
        return self._hosting(spec, await self._fabric.spawn(self._armed(spec)))

    async def promote(self, spare, spec):
        return self._hosting(spec, await self._fabric.promote(spare, self._armed(spec)))

    def _armed(self, spec):
        return dataclasses.replace(spec, chaos=self._plan.on_host(spec.rank, spec.incarnation))

    def _hosting(self, spec, handle):
        self._hosts[spec.rank] = handle
        self._hosted[spec.rank].set()
        return handle

    # --------------------------------------------------------------- strikes
    async def reached(self, host: Any = None, **point) -> None:
        """The run reached ``point`` (``KillPlan``): fire the kills due there. A moment
        of one host's life (``host``) takes one kill (another due there waits for the
        rank's next host); a recovery phase (no ``host``) fires every kill due, each at
        its rank's current host."""
        due = self._plan.due(**point)
        for i in due[:1] if host is not None else due:
            kill = self._plan.fire(i)
            where = {_DETAIL.get(k, k): v for k, v in point.items()
                     if k not in ("rank", "incarnation")}
            await self._kill(i, kill, host if host is not None else self._hosts[kill.rank],
                             **where)

    async def _kill(self, i: int, kill: Kill, host: Any, **where) -> None:
        """Fire kill ``i`` at ``host``: record it (a rank's death is a report too), then
        kill."""
        ev = self._run.events.record("killed", rank=kill.rank, how=self._plan.method,
                                    **where, kill=i)
        if kill.rank is not None:
            self._run.reports.append(ev)
        await self._fabric.kill(host, self._plan.method)

    async def _kill_later(self, i: int) -> None:
        """Kill ``i``, ``time_s`` seconds after the run started; a rank with no host yet
        dies as soon as it has one. A hang, a stall or a disconnect waits until the ranks
        are wired (heartbeats watch a run from then on); the last two kill nobody."""
        kill, method = self._plan.kills[i], self._plan.method
        await self._fabric.sleep(kill.time_s)
        await self._hosted[kill.rank].wait()
        if method in ("sigstop", "stall", "disconnect"):
            await self._run.wired.wait()
        self._plan.fire(i)
        host = self._hosts[kill.rank]
        if method == "disconnect":  # not a failure: the rank's connections close
            self._run.events.record("disconnected", rank=kill.rank, at_s=kill.time_s, kill=i)
            try:
                await self._fabric.cut(host, None, 0.0)
            except RankDied:
                pass  # it died meanwhile (of something else): nothing left to cut
        elif method == "stall":  # not a failure: the rank freezes, then goes on
            self._run.events.record("stalled", rank=kill.rank, at_s=kill.time_s,
                                   for_s=self._stall_s, kill=i)
            await self._fabric.stall(host, self._stall_s)
        else:
            await self._kill(i, kill, host, at_s=kill.time_s)

    async def _partition_later(self, p: Partition) -> None:
        """Ranks ``p.ranks`` and the others cannot reach each other for ``p.seconds``,
        from ``p.time_s`` after the run started (once wired). Not a failure: no rank is
        told, the channels wait and resend."""
        await self._fabric.sleep(p.time_s)
        await self._run.wired.wait()
        self._run.events.record("partitioned", ranks=list(p.ranks), at_s=p.time_s,
                               for_s=p.seconds)
        ranks, inside, failing = range(len(self._hosted)), set(p.ranks), self._run.failing()
        outside = [r for r in ranks if r not in inside]
        await asyncio.gather(*(
            self._fabric.cut(self._hosts[r], outside if r in inside else list(p.ranks),
                           p.seconds)
            for r in ranks if r not in failing and r in self._hosts),
            return_exceptions=True)  # a rank that died meanwhile is not cut off
