"""The run's central instance: starts the ranks, watches them, arbitrates failures.

The coordinator is transport-agnostic: it drives a *fabric* (``transports``) that knows
how to start a rank host, call it, ping it and kill it, wrapped in a ``ChaosFabric`` that
fires the run's planned kills at the points of the run the coordinator hands it (a rank's
host started, wired, its result taken; a recovery phase). It turns what it observes into the
run's outcome: every rank's return value, ``RankError`` (with the original traceback)
when a ``main()`` raises, ``RankFailed`` when a rank dies and nothing in the stack can
recover it. Whatever happens, every host it started is stopped before it returns.

Failure detection and arbitration (NR-MPI section 1.2): a rank is failed when its
process dies (the fabric reports it within milliseconds) or when it stops answering
heartbeats (a hung process). The coordinator is the single arbiter; its decisions (each
rank's life, the rounds, what a death comes to) are the ``Arbiter``'s (``_arbiter``, no
I/O), which it asks and whose decisions it performs. Failures are handled one *recovery
round* at a time, each round with every failure known when it starts, so
every survivor sees the same failures in the same order. A failure noticed during a
round (a call to a rank fails, or another rank's process dies) ends that round and starts
a new one with all failures so far (NR-MPI's self-loops 2, 9 and 12). A rank may report
that a peer looks gone (``peer_lost``: its direct connection to the peer closed); that
is only a hint: the coordinator pings the peer at once and only the ping's outcome (or
the heartbeats' bound) fails it.

What a round does is the business of the stack's recovery policy: the one protocol mixin
with a ``recovery_policy`` class, or with several (a multi-level stack) all of them,
cheapest level first (``_escalation``). Without one, a failure ends the run.

Deaths outside the solve (docs/architecture/recovery.md, "Deaths at every moment"): a host that
dies before its rank first runs (as it starts, or while the ranks are wired) held no
state, so the rank gets another host (a warm spare, else a new one) and the wiring is
done again. Every host is watched (``Fabric.watch``), so the death of a rank whose
``main()`` has returned is seen too: while other ranks still run, the stack's recovery
policy handles it like any failure (its peers may need it again: a rollback runs it
again from the recovery line, and its new result, the same by piecewise determinism,
replaces the one in hand); once every result is in hand, or where no policy exists, it
changes nothing and is only recorded (``lost_after_return``). Deaths while the run ends
(finalize, the policy's ``finish``, collecting events) are recorded and ignored: every
result is in hand. Spares are a ``SparePool``. A fabric's ``RankDied`` never leaves
``run``: what nothing recovers ends as ``RankFailed``.

Its parts, one role each (docs/architecture/recovery.md, "The coordinator by role"): the
``Arbiter`` (``_arbiter``: every decision about failures), ``Hosts`` (``_hosts``: start-up,
wiring, every host watched), the ``Supervisor`` (``_supervision``: the ``main()`` calls
and the loop over them), ``Heartbeats`` (``_heartbeats``) and the ``Harvest``
(``_results``: events, traces, metrics). This module keeps the run's course, the
recovery rounds it performs on the arbiter's word, and the services its recovery policy
calls through ``RecoveryContext``.
"""
from __future__ import annotations

import asyncio
from typing import Any

from . import _notices
from ._arbiter import Arbiter, GiveUp, Verdict
from ._chaos import KillPlan
from ._chaos_fabric import ChaosFabric
from ._config import RunConfig
from ._deadlock import DeadlockWatch
from ._deaths import NewFailure, RankDied
from ._escalation import Escalation, PartLevels
from ..base import Deadlock, Event, EventLog, JobLost, ProtocolError, RankError, RankFailed
from ..engine import RankVector, blank_snapshot
from ._fabric import Fabric
from ._heartbeats import Heartbeats
from ._host import RankSpec, ahead
from ._hosts import Hosts
from ._options import core_default
from ._progress import Printer, Reporter
from ._recovery_context import RecoveryContext
from ._results import Harvest, RunResult
from ._protocol import parts_lead, protocol_classes
from ._spares import SparePool
from ._supervision import Supervisor

_ANY_SPARE = object()
"""``respawn``'s default: a warm spare if one is left, else a new host."""
_NO_LINE = object()
"""``restore_spec``'s default: no recovery line to check the snapshot against."""


class Coordinator:
    """Runs one job on one fabric."""

    _told: Warning | None = None  # a rank's report's warning, made an error by the driver

    def __init__(self, fabric: Fabric, config: RunConfig):
        # the fabric, wrapped: the run's points are handed to ``chaos.reached``
        self.fabric = self.chaos = ChaosFabric(
            fabric, KillPlan(config.kills, config.kill_method, config.job_lost_at), self,
            stall_s=config.stall_s, partitions=config.partitions)
        self.config = config
        self.rank_cls = config.rank_cls
        self.n = ranks = config.ranks
        self.identity = config.identity
        self.job_lost_at = config.job_lost_at
        self.reached = config.start  # the newest position this run is known to have stored
        self.options = dict(config.options)
        self.events = EventLog(fabric.clock)
        self._watch_settings()
        self.handles: list[Any] = [None] * ranks
        self.pool = SparePool(self, config.spares)
        self.epochs = RankVector(ranks)  # rank -> its current incarnation's epoch
        self._epoch_counter = 0  # the largest epoch handed out
        self.harvest = Harvest(self)  # the ranks' events, traces and counters
        self.reports: list[Event] = []
        self._undated: dict[tuple[int, int], Event] = {}
        """(rank, incarnation) -> its ``failure_detected`` event, found before the rank's
        own ``killed`` report reached the coordinator (Ray delivers them on different
        paths): the report, when it comes, gives the event its ``detection_s``."""
        self._helpers: set[asyncio.Task] = set()  # background work stopped with the run
        self.wired = asyncio.Event()  # set once every rank is started and wired
        self.part_levels: PartLevels | None = None  # set by recovery_policy for such stacks
        self.policy = recovery_policy(self, config.rank_cls)
        self.arbiter = Arbiter(ranks, recoverable=self.policy is not None)
        self.incarnations = self.arbiter.incarnations  # rank -> its current life's number
        self.watch = DeadlockWatch(self)
        self.hosts = Hosts(self)  # start-up and wiring; every host watched
        self.supervisor = Supervisor(self)  # the main() calls and the loop over them

    def _watch_settings(self) -> None:
        """Heartbeats and progress reports, as the options set them: heartbeats by the
        fabric's default where none is set; progress reports (``runtime/_progress``) on
        the run's events. The progress options leave ``options`` (the ranks' copy)."""
        progress = self.options.pop("progress", False)
        interval_s = float(self.options.pop("progress_interval_s",
                                            core_default("progress_interval_s")))
        hb = self.options.get("heartbeat_interval_s", self.fabric.heartbeat_interval_s)
        self.heartbeat_interval_s = None if hb is None else float(hb)
        self.heartbeat_timeout_s = float(self.options.get("heartbeat_timeout_s",
                                                          core_default("heartbeat_timeout_s")))
        self.heartbeats = Heartbeats(self, self.heartbeat_interval_s, self.heartbeat_timeout_s)
        self.reporter = None
        if progress:
            self.reporter = Reporter(Printer() if progress is True else progress, interval_s,
                                     self.fabric.clock)
            self.events.on_record = self.reporter.on_event

    # ------------------------------------------------------------------- specs
    def spec(self, rank: int) -> RankSpec:
        """What rank ``rank``'s next host becomes (chaos adds its part: ``ChaosFabric``)."""
        return RankSpec(self.rank_cls, rank, self.n, self.epochs[rank],
                        self.config.trace is not None,
                        self.options, incarnation=self.incarnations[rank], run=self.identity)

    # --------------------------------------------------------------------- run
    async def run(self) -> RunResult:
        fabric = self.fabric
        fabric.on_report = self._on_report
        await fabric.start(self.n)
        t0 = fabric.clock()
        self.events.record("run_start", ranks=self.n, spares=self.config.spares,
                           transport=fabric.name)
        completed = False  # every rank returned and was collected
        try:
            self.pool.fill()
            try:
                await self.hosts.start()
                self.events.record("wired")
                self.wired.set()
                results = await self.supervisor.supervise()
            except (RankError, RankFailed, Deadlock) as exc:
                exc.events = self.harvest.timeline()
                raise
            if self.policy is not None:
                await self._finish()
            self.events.record("run_end")
            await self.harvest.collect()
            completed = True
        except (RankDied, NewFailure) as exc:  # a death nothing above took: never raw
            ranks = sorted(exc.ranks) if isinstance(exc, NewFailure) else [exc.rank]
            failed = RankFailed(ranks, getattr(exc, "reason", "") or "its process died")
            failed.events = self.harvest.timeline()
            raise failed from None
        finally:
            self.stop_helpers()
            if self.reporter is not None:
                self.reporter.finish()
            await fabric.shutdown(completed)
        if self._told is not None:
            raise self._told
        return self.harvest.result(results, fabric.clock() - t0)

    async def _finish(self) -> None:
        """The run is over and every result is in hand: let the ranks and the policy
        finish (seal the last stable sets, take the last parts). A rank that dies now
        changes no result: its death is recorded, not arbitrated."""
        fabric = self.fabric
        done = await asyncio.gather(*(fabric.call(h, "finalize") for h in self.handles),
                                    return_exceptions=True)
        for rank, outcome in enumerate(done):
            if isinstance(outcome, RankDied):
                self.events.record("lost_after_return", rank=rank, reason=outcome.reason,
                                   during="finalize")
        await fabric.drain_reports()
        finish = getattr(self.policy, "finish", None)
        if finish is not None:
            try:
                await finish()
            except (RankDied, NewFailure) as exc:
                self.events.record("lost_after_return", during="finish",
                                   reason=getattr(exc, "reason", "") or "a rank died")

    # ------------------------------------------------------- background work
    def helper(self, coro) -> asyncio.Task:
        """Run ``coro`` in the background until the run ends."""
        task = asyncio.ensure_future(coro)
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)
        return task

    def stop_helpers(self) -> None:
        """Stop the background work (``helper``)."""
        for task in list(self._helpers):
            task.cancel()

    def unstarted(self) -> set[int]:
        """Ranks given a new host in this recovery (or an aborted one) and not started
        yet: they hold no state."""
        return self.arbiter.unstarted()

    def failing(self) -> set[int]:
        """The ranks failed and not recovered yet (read only)."""
        return self.arbiter.pending

    # ------------------------------------------------- failures and rounds
    def fail(self, rank: int, reason: str) -> None:
        """Rank ``rank`` (its current incarnation) is failed: arbitrate it."""
        self._noticed(rank, reason, self.arbiter.died(rank))

    def _noticed(self, rank: int, reason: str, verdict: Verdict) -> None:
        """Record what the arbiter made of a death of ``rank``."""
        if verdict is Verdict.IGNORE:
            return
        if verdict is Verdict.LOST_AFTER_RETURN:
            self.events.record("lost_after_return", rank=rank, reason=reason)
            return
        killed = [e for e in self.reports if e.rank == rank and e.kind == "killed"]
        detail = {"reason": reason, "incarnation": self.incarnations[rank]}
        if killed:
            detail["detection_s"] = self.fabric.clock() - killed[-1].time
        detected = self.events.record("failure_detected", rank=rank, **detail)
        if not killed:  # its last word may still be on its way: dated when it comes
            self._undated[(rank, self.incarnations[rank])] = detected
        self.supervisor.wake.set()

    async def _recover(self) -> None:
        """One recovery round of the failures pending (``Arbiter.open_round``), or the
        end of the run where none can be. A failure during the round cuts it short: the
        supervisor's loop comes back with every failure so far."""
        if self.job_lost_at is not None:
            await self.fabric.drain_reports()  # a death's last word (Ray's inbox) is in
        rnd = self.arbiter.open_round(self._job_lost())
        if isinstance(rnd, GiveUp):
            raise await self._give_up(rnd)
        failed = set(rnd.failed)
        round_no = rnd.number
        self.events.record("recovery_start", round=round_no, failed=sorted(failed))
        self.supervisor.drop_runs(failed)  # their deaths are known
        await self.phase("start")
        try:
            await self.policy.recover(failed)
        except (NewFailure, RankDied) as exc:
            more = exc.ranks if isinstance(exc, NewFailure) else {exc.rank}
            # (levels that keep parts rescued the parts of ranks given a new host)
            for rank, reason, verdict in self.arbiter.round_cut(
                    more, rescued=self.part_levels is not None):
                self._noticed(rank, reason, verdict)
            self.events.record("recovery_restart", round=round_no,
                               failed=sorted(self.arbiter.pending))
            return
        except RankFailed:
            await self.harvest.collect()
            raise
        self.arbiter.round_done()
        self.events.record("recovery_end", round=round_no)
        await self.harvest.collect_events()  # so a rank that dies later does not take them along

    async def _give_up(self, decision: GiveUp) -> RankFailed:
        """No round can recover ``decision.ranks``: the error that ends the run (the
        ranks' events collected first)."""
        if decision.job_lost:
            self.events.record("job_lost", iteration=self.job_lost_at, ranks=list(range(self.n)))
            await self.harvest.collect()
            return JobLost(decision.ranks,
                           f"the whole job was lost at iteration {self.job_lost_at} (chaos): "
                           f"every rank and the driver; a new job resumes from stable storage "
                           f"with restart_from")
        await self.harvest.collect()
        reasons = "; ".join(e.detail["reason"] for e in self.events.events
                            if e.kind == "failure_detected" and e.rank in decision.ranks)
        return RankFailed(decision.ranks, reasons or "its process died")

    def _job_lost(self) -> bool:
        """A rank died where ``Chaos(job_lost_at=)`` loses the whole job."""
        return self.job_lost_at is not None and any(
            e.kind == "killed" and e.detail.get("iteration") == self.job_lost_at
            for e in self.reports)

    # -------------------------------------------------- services for policies
    async def phase(self, name: str) -> None:
        """A recovery policy reached phase ``name`` of the current round: chaos may
        strike here (``ft.Kill(rank, recovery_round=k, recovery_phase=name)``); the
        timeline records it, so reports can time each phase."""
        round_no = self.arbiter.round.number
        self.events.record("recovery_phase", round=round_no, phase=name)
        await self.chaos.reached(recovery_round=round_no, recovery_phase=name)

    async def reached_moment(self, rank: int, moment: str) -> None:
        """Rank ``rank``'s current host reached ``moment`` of its life: chaos may strike
        it (``ft.Kill(rank, moment=...)``)."""
        await self.chaos.reached(self.handles[rank], rank=rank,
                                  incarnation=self.incarnations[rank], moment=moment)

    async def all_reached_moment(self, moment: str) -> None:
        """Every rank's current host reached ``moment`` (the wiring)."""
        await asyncio.gather(*(self.reached_moment(rank, moment) for rank in range(self.n)))

    async def call(self, rank: int, name: str, *args) -> Any:
        """Ask rank ``rank``'s host; a dead rank raises ``NewFailure``."""
        try:
            return await self.supervisor.asking(self.fabric.call(self.handles[rank], name, *args))
        except RankDied:
            raise NewFailure({rank}) from None

    async def call_kept(self, rank: int, name: str, *args) -> Any:
        """``call``, with the (bytes) answer kept by the coordinator (``Fabric.call_kept``):
        it outlives the rank's process."""
        try:
            return await self.supervisor.asking(self.fabric.call_kept(self.handles[rank], name, *args))
        except RankDied:
            raise NewFailure({rank}) from None

    async def replace(self, rank: int) -> None:
        """Promote a spare to be the next incarnation of ``rank`` and rewire everyone
        (a spare still starting is waited for).

        Raises:
            RankFailed: no spare is left.
        """
        if rank in self.arbiter.unstarted():
            return  # promoted in an earlier (aborted) round and still unused
        spare = await self.pool.take()
        if spare is None:
            raise RankFailed([rank], f"no spare left to replace it "
                                     f"({self.config.spares} were started)")
        await self.respawn(rank, spare)
        self.events.record("replaced", rank=rank, incarnation=self.incarnations[rank],
                           epoch=self.epochs[rank], spares_left=len(self.pool))

    @property
    def spares(self) -> list:
        """The warm spares ready now."""
        return self.pool.ready

    async def respawn(self, rank: int, spare: Any = _ANY_SPARE, *,
                      stop_old: bool = True) -> Any:
        """Make ``spare`` (default: a warm spare if one is ready, else a new host) the next
        incarnation of rank ``rank``; returns the old host. Its ``main()`` call is
        forgotten (that is not a failure) and it is stopped unless ``stop_old`` is False
        (a migration stops it once the new one runs). Peers learn the new host by
        ``rewire`` and the new epoch by a restore or ``Endpoint.set_peer_epoch``."""
        self.supervisor.drop_runs({rank})
        old = self.handles[rank]
        self.hosts.unwatch(rank)  # its death from now on is no failure
        self.arbiter.respawning(rank)  # its handle is the stopped old one until swapped
        self.epochs[rank] = self.next_epoch()
        try:
            if stop_old:
                await self.fabric.kill(old, "ray.kill")
            if spare is _ANY_SPARE:
                spare = self.pool.take_ready()
            warm = spare is not None
            await self.hosts.new_host(rank, spare)
        except BaseException as exc:
            self.arbiter.host_lost(rank)
            if isinstance(exc, RankDied):
                raise NewFailure({rank}) from None
            raise
        self.arbiter.hosted(rank)
        self.events.record("respawned", rank=rank, incarnation=self.incarnations[rank],
                           epoch=self.epochs[rank], warm=warm)
        return old

    def refill_spares(self) -> None:
        """Start, in the background, warm spares for those used up, so that the next
        recovery finds them (``ft.run(spares=k)`` then means k at every recovery)."""
        self.pool.fill()

    def restore_spec(self, snapshot: Any, notes: dict | None = None,
                     line: Any = _NO_LINE) -> dict:
        """What a rank is restored from (``RankHost._install``): ``snapshot`` (a share
        handle), the current peer table, and the notes of every level of the stack
        (``restore_notes``) with ``notes`` added. ``line``: the position of the recovery
        line chosen (None: the start of the run, ``blank``); the rank refuses a snapshot
        ahead of it."""
        extra = getattr(self.policy, "restore_notes", None)
        parts = {} if self.part_levels is None else self.part_levels.restore_notes()
        merged = {**(extra() if extra is not None else {}), **parts, **(notes or {})}
        spec = {"snapshot": snapshot, "peer_epochs": RankVector.of(self.epochs), "notes": merged}
        if line is not _NO_LINE:
            spec["line"] = self.config.start if line is None else tuple(line)
        return spec

    def blank(self, rank: int) -> bytes:
        """A snapshot handle that restarts rank ``rank`` from the start of the run: of a
        job resumed with ``restart_from``, the set it started from."""
        if self.config.restore is not None:
            return self.config.restore[rank]
        return blank_snapshot(rank, self.n)

    def stored(self, position) -> None:
        """A recovery policy stored a set of this run at ``position``: the run reached it."""
        position = tuple(position)
        if self.reached is None or position > self.reached:
            self.reached = position

    def check_reached(self, position, source: str) -> None:
        """Refuse to restore the ranks to ``position`` from ``source`` when this run never
        stored a state that far (``stored``): such a set is no state of this run.

        Raises:
            ProtocolError: ``position`` is ahead of the run's own progress.
        """
        if ahead(position, self.reached):
            raise ProtocolError(
                f"refused to restore {source} at position {tuple(position)}: this run has "
                f"stored states up to {self.reached or 'its start'} only, so the set is not "
                f"one of its own (another run's in a shared store?)")

    def next_epoch(self) -> int:
        """A fresh incarnation number, larger than any used so far."""
        self._epoch_counter += 1
        return self._epoch_counter

    async def rewire(self) -> None:
        """Give every rank the current peer table."""
        try:
            await self.fabric.wire(self.handles)
        except RankDied as died:
            raise NewFailure({died.rank}) from None

    def _on_report(self, event: Event) -> None:
        """An event a rank posted to the coordinator (its own kill, a checkpoint part for
        the policy, ...)."""
        take = getattr(self.policy, "on_report", None)
        if take is not None:
            take(event)
        if event.kind == "killed":
            detected = self._undated.pop((event.rank, event.detail.get("incarnation")), None)
            if detected is not None:  # the failure was found before this report came
                detected.detail["detection_s"] = detected.time - event.time
        try:  # restored with nothing registered, ...
            _notices.on_report(event, self.reports, self.rank_cls)
        except Warning as told:  # warnings are errors: not in the rank's or link's path
            self._told = self._told or told  # (``run`` raises it at the end)
        self.reports.append(event)
        self.events.events.append(event)
        if event.kind == "peer_lost":
            self.heartbeats.hinted(event.detail["peer"])

    async def collect_events(self) -> None:
        """Take the events recorded so far from every live rank."""
        await self.harvest.collect_events()


def recovery_policy(coordinator: Coordinator, rank_cls: type):
    """The stack's recovery policy for this run: none, the one protocol's, or all of them
    escalating from the cheapest level (``Protocol.level_cost``) with the stack's helpers
    (``Protocol.stack_helper``) that this run uses. A consistency protocol
    that hands its parts to the levels (``hands_parts``) recovers alone, finding parts
    through ``coordinator.part_levels``. Each is handed the run's ``RecoveryContext``, not
    the coordinator: what a protocol's coordinator side may use."""
    ctx = RecoveryContext(coordinator)
    protos = protocol_classes(rank_cls)
    lead = parts_lead(rank_cls)
    if lead is not None:
        keepers = [(p.protocol_name, p.part_level)
                   for p in sorted(protos, key=lambda p: p.level_cost) if p.part_level]
        if keepers:
            coordinator.part_levels = PartLevels(ctx, lead.protocol_name, keepers)
        return lead.recovery_policy(ctx)
    levels = sorted((p for p in protos if getattr(p, "recovery_policy", None)),
                    key=lambda p: p.level_cost)
    kinds = dict.fromkeys(p.stack_helper for p in protos if p.stack_helper is not None)
    helpers = [h for h in (kind.for_run(ctx, rank_cls) for kind in kinds)
               if h is not None]
    if not levels:
        return None
    if len(levels) == 1 and not helpers:
        return levels[0].recovery_policy(ctx)
    return Escalation(ctx, [(p.protocol_name, p.recovery_policy) for p in levels],
                      helpers)
