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
heartbeats (a hung process). The coordinator is the single arbiter: it handles failures
one *recovery round* at a time, each round with every failure known when it starts, so
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
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

from . import _notices
from ._chaos import KillPlan
from ._chaos_fabric import ChaosFabric
from ._config import RunConfig
from ._deadlock import DeadlockWatch, in_background
from ._deaths import NewFailure, RankDied
from ._escalation import Escalation, PartLevels
from ..base import (Deadlock, Event, EventLog, JobLost, ProtocolError, RankError, RankFailed,
                    merge)
from ..engine import RankVector, blank_snapshot
from ._host import RankSpec, ahead
from ._fabric import Fabric
from ._liveness import BUSY_FACTOR, BUSY_STATES, Liveness
from ._options import core_default
from ._progress import Printer, Reporter
from ._recovery_context import RecoveryContext
from ._protocol import parts_lead, protocol_classes
from ._spares import SparePool

COLLECT_TIMEOUT_S = 5.0
START_ATTEMPTS = 4
"""Hosts a rank may lose before it first runs (as they start, or while the ranks are
wired) before the run ends with ``RankFailed``: a death there loses no state, so the
rank simply gets another host, but a rank whose hosts keep dying is not started
forever."""
_ANY_SPARE = object()
"""``respawn``'s default: a warm spare if one is left, else a new host."""
_NO_LINE = object()
"""``restore_spec``'s default: no recovery line to check the snapshot against."""


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


class Coordinator:
    """Runs one job on one fabric."""

    def __init__(self, fabric: Fabric, config: RunConfig):
        # the fabric, wrapped: the run's points are handed to ``chaos.reached``
        self.fabric = self.chaos = ChaosFabric(
            fabric, KillPlan(config.kills, config.kill_method, config.job_lost_at), self,
            stall_s=config.stall_s, partitions=config.partitions)
        self.config = config
        self.rank_cls = config.rank_cls
        self.n = config.ranks
        self.identity = config.identity
        self.reached = config.start  # the newest position this run is known to have stored
        self.options = dict(config.options)
        self.job_lost_at = config.job_lost_at
        self.events = EventLog(fabric.clock)
        self._watch_settings()
        ranks = self.n
        self.handles: list[Any] = [None] * ranks
        self.pool = SparePool(self, config.spares)
        self._watchers: dict[int, asyncio.Task] = {}  # rank -> the watcher of its host
        self._lost_at_start: dict[int, Any] = {}  # rank -> its host that died before it ran
        self._round_failed: set[int] = set()  # the failed ranks of the current round
        self.epochs = RankVector(ranks)  # rank -> its current incarnation's epoch
        self._epoch_counter = 0  # the largest epoch handed out
        self.incarnations = [0] * ranks
        self.collected: list[dict] = []
        self.rank_events: list[Event] = []
        self.reports: list[Event] = []
        self._undated: dict[tuple[int, int], Event] = {}
        """(rank, incarnation) -> its ``failure_detected`` event, found before the rank's
        own ``killed`` report reached the coordinator (Ray delivers them on different
        paths): the report, when it comes, gives the event its ``detection_s``."""
        self._runs: dict[int, asyncio.Task] = {}  # rank -> its main() call under way
        self._ended: set[int] = set()  # ranks whose current main() call ended, not taken
        self._results: list = [None] * ranks
        self._done: set[int] = set()
        self._failed: set[int] = set()
        self._failed_life: dict[int, int] = {}  # rank -> the incarnation found failed
        self._failed_again: set[int] = set()  # failed again, on the host a round gave them
        self._fresh: set[int] = set()  # replaced, not started yet
        self._respawning: set[int] = set()  # between a new incarnation number and its host
        self._wake = asyncio.Event()
        self._watching = False  # supervising: hints are checked
        self._pinged: dict[int, int] = {}  # rank -> the incarnation its outstanding ping went to
        self._helpers: set[asyncio.Task] = set()  # background work stopped with the run
        self.wired = asyncio.Event()  # set once every rank is started and wired
        self.part_levels: PartLevels | None = None  # set by recovery_policy for such stacks
        self.policy = recovery_policy(self, config.rank_cls)
        self.watch = DeadlockWatch(self)
        self._deadlock: Deadlock | None = None  # found by the watch: ends the run
        self._calls = 0  # requests to ranks under way (``call``): they may wake a rank

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
        self.liveness = Liveness(self.heartbeat_timeout_s)
        self.reporter = None
        if progress:
            self.reporter = Reporter(Printer() if progress is True else progress, interval_s,
                                     self.fabric.clock)
            self.events.on_record = self.reporter.on_event

    # ------------------------------------------------------------------- specs
    def spec(self, rank: int) -> RankSpec:
        """What rank ``rank``'s next host becomes (chaos adds its part: ``ChaosFabric``)."""
        return RankSpec(self.rank_cls, rank, self.n, self.epochs[rank],
                        self.config.trace is not None, self.options,
                        incarnation=self.incarnations[rank], run=self.identity)

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
                await self._start()
                self.events.record("wired")
                self.wired.set()
                results = await self._supervise()
            except (RankError, RankFailed, Deadlock) as exc:
                exc.events = merge([self.events.events, self.rank_events])
                raise
            if self.policy is not None:
                await self._finish()
            self.events.record("run_end")
            await self._collect()
            completed = True
        except (RankDied, NewFailure) as exc:  # a death nothing above took: never raw
            ranks = sorted(exc.ranks) if isinstance(exc, NewFailure) else [exc.rank]
            failed = RankFailed(ranks, getattr(exc, "reason", "") or "its process died")
            failed.events = merge([self.events.events, self.rank_events])
            raise failed from None
        finally:
            for task in list(self._helpers):
                task.cancel()
            if self.reporter is not None:
                self.reporter.finish()
            await fabric.shutdown(completed)
        return self._result(results, fabric.clock() - t0)

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

    # ---------------------------------------------------------------- start-up
    async def _start(self) -> None:
        """Give every rank a host and wire them. A host that dies before its rank runs
        (as it starts, or while the ranks are wired) held nothing: the rank gets another
        one (a warm spare, else a new host) and the wiring is done again.

        Raises:
            RankFailed: a rank lost ``START_ATTEMPTS`` hosts before it could run.
        """
        lost = [0] * self.n
        await _all([self._host(rank, lost) for rank in range(self.n)])
        while True:
            try:
                await _all([self.fabric.wire(self.handles), self._all_reached("wire")])
            except RankDied as died:
                await self._host(died.rank, lost, died.reason)
                continue
            dead = [r for r, h in sorted(self._lost_at_start.items()) if h is self.handles[r]]
            self._lost_at_start.clear()
            if not dead:
                self.pool.fill()  # spares the start-up used
                return
            for rank in dead:  # died after its wiring call answered
                await self._host(rank, lost, "its process died")

    async def _host(self, rank: int, lost: list[int], died: str | None = None) -> None:
        """A (new) host for rank ``rank``, which has not run yet; ``died``: why the last
        one is gone."""
        while True:
            if died is not None:
                lost[rank] += 1
                self.events.record("start_failed", rank=rank, reason=died, attempt=lost[rank])
                if lost[rank] >= START_ATTEMPTS:
                    raise RankFailed([rank], f"its host died {lost[rank]} times before the "
                                             f"rank could run (last: {died})")
                old = self.handles[rank]
                if old is not None:
                    self._unwatch(rank)
                    await self.fabric.kill(old, "ray.kill")
            try:
                await self._new_host(rank, self.pool.take_ready() if died is not None else None)
                return
            except RankDied as exc:
                died = exc.reason or "its process died"

    async def _new_host(self, rank: int, spare: Any | None) -> None:
        """Rank ``rank``'s host from now on: ``spare`` promoted, else a new host (chaos
        may strike either as it starts)."""
        if spare is not None:
            await self.chaos.reached(spare, spare=self.pool.index.get(spare),
                                      moment="promoted")
            handle = await self.fabric.promote(spare, self.spec(rank))
        else:
            handle = await self.fabric.spawn(self.spec(rank))
        self._install(rank, handle)
        await self._reached(rank, "start")

    def _install(self, rank: int, handle: Any) -> None:
        """``handle`` is rank ``rank``'s host from now on: it is watched."""
        self._unwatch(rank)
        self.handles[rank] = handle
        self._watchers[rank] = self.helper(self._watch(rank, handle))

    def _unwatch(self, rank: int) -> None:
        watcher = self._watchers.pop(rank, None)
        if watcher is not None:
            watcher.cancel()

    async def _watch(self, rank: int, handle: Any) -> None:
        """Rank ``rank``'s host ``handle`` died: before the rank runs, the start-up gives
        it another; after, it is a failure (unless replaced meanwhile)."""
        await self.fabric.watch(handle)
        if self.handles[rank] is not handle or rank in self._respawning:
            return
        if not self._watching:
            self._lost_at_start[rank] = handle
            return
        self.fail(rank, "its process died")

    def helper(self, coro) -> asyncio.Task:
        """Run ``coro`` in the background until the run ends."""
        task = asyncio.ensure_future(coro)
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)
        return task

    def unstarted(self) -> set[int]:
        """Ranks given a new host in this recovery (or an aborted one) and not started
        yet: they hold no state."""
        return set(self._fresh)

    def start_rank(self, rank: int, restore: Any = None) -> None:
        """Run (or run again, from ``restore``) rank ``rank``'s ``main()``. The outcome of
        a run of it that ended and was not taken yet (it finished during a recovery round)
        belongs to the execution the restore abandons: it is dropped."""
        self._drop_runs({rank})
        task = asyncio.ensure_future(
            self.fabric.run(self.handles[rank], self.config.args, self.config.kwargs, restore))
        self._runs[rank] = task
        task.add_done_callback(functools.partial(self._run_ended, rank))
        self._done.discard(rank)
        self._fresh.discard(rank)
        self._wake.set()

    def _run_ended(self, rank: int, task: asyncio.Task) -> None:
        """A ``main()`` call ended: if it is still the rank's run, the supervisor takes it.
        (Each call says so itself: waiting on all of them at once would cost every rank's
        end a pass over every rank.)"""
        if self._runs.get(rank) is task:
            self._ended.add(rank)
            self._wake.set()

    async def _supervise(self) -> list:
        for rank in range(self.n):
            self.start_rank(rank, None if self.config.restore is None else
                            {"snapshot": self.config.restore[rank],
                             "peer_epochs": RankVector(self.n), "line": self.config.start})
        watching = [self.watch.service()]  # (their timers wake no rank: ``_deadlock``)
        if self.heartbeat_interval_s:
            watching.append(self._heartbeats())
        if self.reporter is not None:
            watching.append(self.reporter.service(self.fabric, self.handles))
        for w in watching:
            self.helper(in_background(w))
        service = getattr(self.policy, "service", None)
        if service is not None:
            self.helper(service())
        self.fabric.on_quiet(self._quiet)
        self._watching = True
        try:
            while len(self._done) < self.n or self._failed:
                if self._failed:
                    await self._recover()
                    continue
                if self._deadlock is not None:
                    await self._collect()
                    raise self._deadlock
                if not self._ended:
                    self._wake.clear()
                    await self._wake.wait()
                    if self._deadlock is not None:
                        continue
                ended, self._ended = sorted(self._ended), set()
                for rank in ended:
                    if rank not in self._runs:
                        continue  # dropped meanwhile: its outcome is not the run's
                    error = self._finished(rank)
                    if error is not None:
                        await self._collect()
                        raise error
                    if rank in self._done:
                        await self._reached(rank, "finished")
        finally:
            self._watching = False
            self.fabric.on_quiet(None)
            for _, task in sorted(self._runs.items()):
                task.cancel()  # a rank that dies after the run ended (a lost job's) is moot:
                task.add_done_callback(_consume)  # its death is nobody's to take
            for task in list(self._helpers):
                task.cancel()
        return self._results

    # ------------------------------------------------------------- deadlocks
    def steady(self) -> bool:
        """Whether nothing of the coordinator's can wake a rank now: no failure being
        recovered (a failed rank stays in ``_failed`` until its round ends), no request
        to a rank under way, every rank running or finished (``_deadlock``)."""
        return (not self._failed and not self._calls
                and not self._ended and not self._fresh and not self._respawning
                and len(self._runs) + len(self._done) == self.n)  # (never both)

    def finished(self) -> set[int]:
        """The ranks whose results are in hand (read only)."""
        return self._done

    def failing(self) -> set[int]:
        """The ranks failed and not recovered yet (read only)."""
        return self._failed

    def _quiet(self) -> None:
        """The fabric has nothing pending but the coordinator's watching (sim): read the
        ranks now, in this process."""
        if self._deadlock is None and self.steady():
            self.watch.quiet_check()

    def deadlocked(self, error: Deadlock) -> None:
        """The watch found the run deadlocked: the supervisor ends it with ``error``."""
        if self._deadlock is None:
            self.events.record("deadlock", waits=error.waits)
            self._deadlock = error
            self._wake.set()

    def _finished(self, rank: int) -> RankError | None:
        """Take the outcome of a rank's run (ended); returns the error that ends the run,
        if any."""
        task = self._runs.pop(rank)
        if task.cancelled():
            return None
        try:
            outcome = task.result()
        except RankDied as died:
            self.fail(rank, died.reason or "its process died")
            return None
        if not outcome["ok"]:
            return RankError(rank, outcome["error"], outcome["traceback"])
        self._results[rank] = outcome["value"]
        self._done.add(rank)
        return None

    def fail(self, rank: int, reason: str) -> None:
        """Rank ``rank`` (its current incarnation) is failed: arbitrate it."""
        if rank in self._failed:
            if self._failed_life.get(rank) == self.incarnations[rank]:
                return
            # the new host the round under way gave it died too: a failure of its own,
            # which must outlive the end of that round (``_recover``)
            self._failed_again.add(rank)
        if rank in self._done and (self.policy is None or len(self._done) == self.n):
            # its result is in hand and no recovery can need it again
            self.events.record("lost_after_return", rank=rank, reason=reason)
            return
        killed = [e for e in self.reports if e.rank == rank and e.kind == "killed"]
        detail = {"reason": reason, "incarnation": self.incarnations[rank]}
        if killed:
            detail["detection_s"] = self.fabric.clock() - killed[-1].time
        detected = self.events.record("failure_detected", rank=rank, **detail)
        if not killed:  # its last word may still be on its way: dated when it comes
            self._undated[(rank, self.incarnations[rank])] = detected
        self._failed.add(rank)
        self._failed_life[rank] = self.incarnations[rank]
        self._fresh.discard(rank)
        self._done.discard(rank)
        self._wake.set()

    async def _recover(self) -> None:
        if self.job_lost_at is not None:
            await self.fabric.drain_reports()  # a death's last word (Ray's inbox) is in
        if self._job_lost():
            self.events.record("job_lost", iteration=self.job_lost_at, ranks=list(range(self.n)))
            await self._collect()
            raise JobLost(sorted(self._failed),
                          f"the whole job was lost at iteration {self.job_lost_at} (chaos): "
                          f"every rank and the driver; a new job resumes from stable storage "
                          f"with restart_from")
        if self.policy is None:
            await self._collect()
            ranks = sorted(self._failed)
            reasons = "; ".join(e.detail["reason"] for e in self.events.events
                                if e.kind == "failure_detected" and e.rank in ranks)
            raise RankFailed(ranks, reasons or "its process died")
        failed = set(self._failed)
        round_no = sum(1 for e in self.events.events if e.kind == "recovery_start")
        self.events.record("recovery_start", round=round_no, failed=sorted(failed))
        self._drop_runs(failed)  # their deaths are known
        self._round = round_no
        self._round_failed = failed
        await self.phase("start")
        try:
            await self.policy.recover(failed)
        except (NewFailure, RankDied) as exc:
            more = exc if isinstance(exc, NewFailure) else NewFailure({exc.rank})
            for rank in sorted(more.ranks - failed):
                self.fail(rank, "failed during recovery")
            if self.part_levels is None:  # (levels that keep parts rescued theirs first)
                for rank in sorted(self._fresh - self._failed):  # its old life was stopped
                    self.fail(rank, "given a new host in a round cut short: it holds no state")
            self._failed_again.clear()  # still failed: the next round takes them
            self.events.record("recovery_restart", round=round_no, failed=sorted(self._failed))
            return
        except RankFailed:
            await self._collect()
            raise
        self._failed = (self._failed - failed) | self._failed_again
        self._failed_again.clear()
        self.events.record("recovery_end", round=round_no)
        await self.collect_events()  # so a rank that dies later does not take them along

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
        self.events.record("recovery_phase", round=self._round, phase=name)
        await self.chaos.reached(recovery_round=self._round, recovery_phase=name)

    async def _reached(self, rank: int, moment: str) -> None:
        """Rank ``rank``'s current host reached ``moment`` of its life: chaos may strike
        it (``ft.Kill(rank, moment=...)``)."""
        await self.chaos.reached(self.handles[rank], rank=rank,
                                  incarnation=self.incarnations[rank], moment=moment)

    async def _all_reached(self, moment: str) -> None:
        await asyncio.gather(*(self._reached(rank, moment) for rank in range(self.n)))

    async def asking(self, request) -> Any:
        """Await ``request`` to a rank (a fabric call): while one is under way no rank is
        deadlocked, as its arrival may wake one (``steady``)."""
        self._calls += 1
        try:
            return await request
        finally:
            self._calls -= 1

    async def call(self, rank: int, name: str, *args) -> Any:
        """Ask rank ``rank``'s host; a dead rank raises ``NewFailure``."""
        try:
            return await self.asking(self.fabric.call(self.handles[rank], name, *args))
        except RankDied:
            raise NewFailure({rank}) from None

    async def call_kept(self, rank: int, name: str, *args) -> Any:
        """``call``, with the (bytes) answer kept by the coordinator (``Fabric.call_kept``):
        it outlives the rank's process."""
        try:
            return await self.asking(self.fabric.call_kept(self.handles[rank], name, *args))
        except RankDied:
            raise NewFailure({rank}) from None

    async def replace(self, rank: int) -> None:
        """Promote a spare to be the next incarnation of ``rank`` and rewire everyone
        (a spare still starting is waited for).

        Raises:
            RankFailed: no spare is left.
        """
        if rank in self._fresh:
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
        self._drop_runs({rank})
        old = self.handles[rank]
        self._unwatch(rank)  # its death from now on is no failure
        self.incarnations[rank] += 1
        self.epochs[rank] = self.next_epoch()
        self._respawning.add(rank)  # its handle is the stopped old one until swapped
        try:
            if stop_old:
                await self.fabric.kill(old, "ray.kill")
            if spare is _ANY_SPARE:
                spare = self.pool.take_ready()
            warm = spare is not None
            await self._new_host(rank, spare)
        except RankDied:
            raise NewFailure({rank}) from None
        finally:
            self._respawning.discard(rank)
        self._fresh.add(rank)
        if rank not in self._round_failed:  # its old life died as this round replaced it:
            self._failed.discard(rank)  # moot, as the round restores it anyway
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

    def _drop_runs(self, ranks: set[int]) -> None:
        """Forget the ``main()`` calls of ``ranks`` (stopped if under way): their outcome,
        taken or not, is not the run's."""
        for rank in sorted(ranks):
            task = self._runs.pop(rank, None)
            if task is not None:
                self._ended.discard(rank)
                task.add_done_callback(_consume)  # nobody waits for its outcome
                task.cancel()

    def running(self, rank: int) -> bool:
        """Whether rank ``rank``'s ``main()`` call is still under way (not finished, even
        if the coordinator has not taken its outcome yet)."""
        task = self._runs.get(rank)
        return task is not None and not task.done()

    # ----------------------------------------------------------------- helpers
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
        _notices.on_report(event, self.reports)  # restored with nothing registered, ...
        self.reports.append(event)
        self.events.events.append(event)
        if event.kind == "peer_lost":
            self.hinted(event.detail["peer"])

    def hinted(self, rank: int) -> None:
        """A rank's direct connection to ``rank`` closed unexpectedly: ``rank``'s process
        may be gone. Only a hint (the connection may have failed on its own): ``rank`` is
        pinged now, unless a ping is already under way, and the ping's outcome
        (``hint_checked``) or the heartbeats' bound decides, as for any ping."""
        if self._watching and rank not in self._failed and rank not in self._respawning:
            self._beat(rank, self.fabric.clock(), hint=True)

    def _beat(self, rank: int, now: float, hint: bool = False) -> None:
        """Ping ``rank`` unless a ping to it is outstanding."""
        if self.liveness.ping(rank, now):
            self._pinged[rank] = self.incarnations[rank]
            task = asyncio.ensure_future(self._ping(rank, self._pinged[rank], hint))
            self._helpers.add(task)
            task.add_done_callback(self._helpers.discard)

    async def _heartbeats(self) -> None:
        """Every beat, ping each rank that has no ping outstanding; a rank whose ping has
        waited longer than the adaptive bound (``_liveness``) is hung: kill it. One whose
        process is gone is failed, unless it is being replaced or was since the ping."""
        live = self.liveness
        pinged = self._pinged
        busy: set[int] = set()  # silent past the bound, but its process is busy
        while True:
            await self.fabric.sleep(self.heartbeat_interval_s)
            now = self.fabric.clock()
            for rank in range(self.n):
                if (rank in self._failed or rank in self._respawning
                        or pinged.get(rank, self.incarnations[rank]) != self.incarnations[rank]):
                    live.forget(rank)  # its ping went to a life that is over
                    pinged.pop(rank, None)
                    continue
                self._beat(rank, now)
            bound = live.bound()
            silent = live.hung(now)
            busy &= {rank for rank, _ in silent}  # those that answered are busy no more
            for rank, waited in silent:
                state = self.fabric.process_state(self.handles[rank])
                if state in BUSY_STATES and waited <= BUSY_FACTOR * bound:
                    if rank not in busy:
                        busy.add(rank)
                        self.events.record("rank_busy", rank=rank, waited_s=waited,
                                           process_state=state)
                    continue
                busy.discard(rank)
                live.forget(rank)
                pinged.pop(rank, None)
                if rank in self._failed or rank in self._respawning:
                    continue
                self.events.record("hang_detected", rank=rank, waited_s=waited,
                                   timeout_s=bound)
                await self.fabric.kill(self.handles[rank], "ray.kill")
                self.fail(rank, f"no heartbeat for {waited:.1f} s (bound {bound:.1f} s; a rank "
                                f"that computes longer than that without awaiting needs a "
                                f"larger heartbeat_timeout_s)")

    async def _ping(self, rank: int, incarnation: int, hint: bool = False) -> None:
        """One heartbeat of ``rank``'s life ``incarnation``, recorded when it answers
        (``hint``: sent because a peer's connection to it closed; the outcome is an
        event)."""
        try:
            await self.fabric.ping(self.handles[rank])
        except RankDied as died:
            if hint:
                self.events.record("hint_checked", rank=rank, alive=False)
            if (self.incarnations[rank] == incarnation and rank not in self._failed
                    and rank not in self._respawning):
                self.fail(rank, died.reason or "its process died")
            if self.incarnations[rank] == incarnation:
                self.liveness.forget(rank)
            return
        if hint:
            self.events.record("hint_checked", rank=rank, alive=True)
        if self.incarnations[rank] == incarnation:
            self.liveness.answered(rank, self.fabric.clock())

    async def _collect(self) -> None:
        """Gather events, traces and counters from every live host (best effort)."""
        async def one(h):
            try:
                return await asyncio.wait_for(self.fabric.collect(h), COLLECT_TIMEOUT_S)
            except (RankDied, asyncio.TimeoutError):
                return None
        got = await asyncio.gather(*(one(h) for h in self.handles))
        self.collected = [c for c in got if c is not None]
        for c in self.collected:
            self.rank_events.extend(c["events"])

    async def collect_events(self) -> None:
        """Take the events recorded so far from every live rank."""
        await self._collect()
        self.collected = []

    def _result(self, results: list, wall_s: float) -> RunResult:
        logs = [self.events.drain(), self.rank_events]
        stats = [c["stats"] for c in self.collected]
        metrics: dict[str, Any] = {"wall_s": wall_s, "ranks": self.n, "transport": self.fabric.name}
        for key in ("sent", "received", "duplicates_dropped", "resends_suppressed",
                    "stale_dropped", "channel_duplicates", "logged_bytes"):
            metrics[key] = sum(s[key] for s in stats)
        direct = [s["direct"] for s in stats if "direct" in s]  # the direct data plane's
        if direct:
            metrics["direct"] = {key: sum(d[key] for d in direct) for key in direct[0]}
        metrics.update(self.fabric.metrics())  # the sim's events
        metrics["failures"] = sum(1 for ev in logs[0] if ev.kind == "failure_detected")
        metrics["recoveries"] = sum(1 for ev in logs[0] if ev.kind == "recovery_end")
        result = RunResult(results, merge(logs), metrics, self.identity.run_id)
        result.trace_rows = [c["trace"] for c in self.collected if c["trace"] is not None]
        return result


async def _all(aws: list) -> list:
    """``asyncio.gather`` that stops the others when one fails: nothing goes on starting
    hosts once the start-up gave up or starts again."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _consume(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


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
