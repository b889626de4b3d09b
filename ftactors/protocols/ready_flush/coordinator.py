"""ReadyMessageFlush's coordinator side (``ReadyFlushCoordinator``): the checkpoint rounds
(CoCheck section 4: every rank flushes its channels, then checkpoints), the parts taken
from the ranks or salvaged from their holders, global restart, and migration (section
5.2). The rank side and the theory of operation are in ``rank.py``."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass, field

from ftactors.runtime import NewFailure, RankDied, position_index, prune_sets, seal_set
from ftactors.base import ConfigError, ProtocolError, open_store

from ..shared.flush import checkpoint_position
from ..shared.intervals import daly
from ..shared.parts import GIVEN_GRACE_S, PartTaker
from .handoff import holder
from .machine import salvage
from .options import ready_settings
from .rank import COST_FLOOR_S, FIRST_RETRY, KEEP_STABLE, NAME, RETRY_MAX, ReadyMessageFlush


@dataclass
class _Set:
    """A checkpoint being assembled or complete, as the coordinator knows it."""

    position: tuple
    index: int
    handles: dict = field(default_factory=dict)  # rank -> object-store handle (or None)
    bytes: int = 0
    flush_s: float = 0.0
    save_s: float = 0.0
    first_at: float = math.inf   # the first rank's arrival at the position (its clock)
    line: tuple | None = None    # the furthest resume point of its parts (``_part``)
    cost_s: float | None = None  # first_at to stored: what the checkpoint cost the job
    done: asyncio.Future | None = None


class ReadyFlushCoordinator:
    """Coordinator side: checkpoint requests, completion, global restart, migration."""

    def __init__(self, ctx):
        self.c = ctx
        self.settings = ready_settings(ctx.options)
        self.store = None if self.settings["storage"] == "object" else open_store(
            self.settings["dir"])
        self.sets: dict[tuple, _Set] = {}
        self.latest: _Set | None = None
        self.lock = asyncio.Lock()  # one request or migration at a time
        self.sealing = asyncio.Lock()  # completions in order (pruning sees sealed sets)
        self.busy: set[asyncio.Task] = set()  # requests and moves
        self.mover: int | None = None  # a moving rank given its new process, not started
        self.parts = PartTaker(ctx, ReadyMessageFlush.ft_rpc_ready_part,
                               ReadyMessageFlush.ft_rpc_ready_part_kept)
        self._ids = itertools.count()
        self.running = asyncio.Event()  # no rollback under way (the auto timer waits)
        self.running.set()
        self.stopped = asyncio.Event()  # a rollback began (restarts the auto timer's wait)

    # ------------------------------------------------------------- checkpoints
    def on_report(self, event) -> None:
        if event.kind == "checkpoint_part":
            self._part(event)
        elif event.kind == "checkpoint_request":
            self._spawn(self.request())

    def _set(self, position) -> _Set:
        position = tuple(position)
        ck = self.sets.get(position)
        if ck is None:
            ck = self.sets[position] = _Set(position, position_index(position))
            ck.done = asyncio.get_running_loop().create_future()
        return ck

    def _part(self, event) -> None:
        d = event.detail
        ck = self._set(d["position"])
        ck.bytes += d["bytes"]
        ck.flush_s = max(ck.flush_s, d["flush_s"])
        ck.save_s = max(ck.save_s, d["save_s"])
        ck.first_at = min(ck.first_at, d["at"])
        # a part taken where its rank was when it joined (blocked, finished, or at a
        # safe point past the round's position) resumes there: the recovery line a
        # restore checks each part against is the furthest of them
        at = d.get("part_position")
        ck.line = max((p for p in (ck.line, ck.position, at and tuple(at)) if p is not None))
        self.parts.take(event.rank, ck.position,
                        lambda handle: self._kept(ck, event.rank, handle),
                        fetch=self.settings["storage"] != "stable")

    async def _kept(self, ck: _Set, rank: int, handle) -> None:
        """Rank ``rank``'s part is kept; the set is complete with all of them."""
        if rank in ck.handles:
            return  # taken twice: salvaged while its own take was still under way
        ck.handles[rank] = handle
        if len(ck.handles) == self.c.n:
            await self._complete(ck)

    async def _complete(self, ck: _Set) -> None:
        async with self.sealing:  # one at a time, in the order they became complete
            await self._seal(ck)

    async def _seal(self, ck: _Set) -> None:
        if self.store is not None:
            await asyncio.to_thread(seal_set, self.store, self.c.identity, ck.index, self.c.n,
                                    {"position": list(ck.position), "protocol": NAME,
                                     "line": list(ck.line or ck.position)})
            await asyncio.to_thread(prune_sets, self.store, self.c.identity, KEEP_STABLE)
        self.c.stored(ck.position)
        if self.latest is None or ck.index > self.latest.index:
            self.latest = ck
        for pos in [p for p in self.sets if p < ck.position]:
            del self.sets[pos]  # older parts are no longer needed (frees the object store)
        if math.isfinite(ck.first_at):  # else salvaged with no report: cost unknown
            ck.cost_s = self.c.clock() - ck.first_at  # Daly's C, see _auto_timer
        self.c.events.record("checkpoint", position=ck.position, index=ck.index,
                             bytes=ck.bytes, flush_s=ck.flush_s, save_s=ck.save_s,
                             cost_s=ck.cost_s, storage=self.settings["storage"])
        if not ck.done.done():
            ck.done.set_result(ck)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.busy.add(task)
        task.add_done_callback(self.busy.discard)
        return task

    async def _settled(self, coro) -> asyncio.Task:
        """Run ``coro`` as a task a rollback can cancel (``busy``) and return it once it
        is done. If the caller stops waiting first (``run.checkpoint()`` or
        ``run.migrate()`` told the run ended), the task's own end is taken quietly when
        it comes: nobody is left to hear it, and asyncio would print its error as never
        retrieved on the user's terminal."""
        task = self._spawn(coro)
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.add_done_callback(_heard)
            raise
        return task

    async def _request(self) -> tuple | None:
        """``request`` as a task a rollback can cancel: None when it was."""
        task = await self._settled(self.request())
        return None if task.cancelled() else task.result()

    async def request(self) -> tuple | None:
        """Notify every rank and fix the checkpoint position (None: some rank has no
        safe point left in its loop, or a rank failed meanwhile, so none is taken)."""
        try:
            return await self._notify_and_decide()
        except NewFailure as failure:  # the rollback that follows makes it moot
            self.c.events.record("checkpoint_skipped", reason="a rank failed",
                                 ranks=sorted(failure.ranks))
            return None

    async def _notify_and_decide(self) -> tuple | None:
        c = self.c
        async with self.lock:
            await c.wired.wait()
            await self.running.wait()  # not while ranks are being rolled back
            request = next(self._ids)
            notified_at = c.clock()
            nexts = await asyncio.gather(*(
                c.call(r, ReadyMessageFlush.ft_rpc_ready_notify, request) for r in range(c.n)))
            position = checkpoint_position(nexts)
            await asyncio.gather(*(
                c.call(r, ReadyMessageFlush.ft_rpc_ready_decide, request, position)
                for r in range(c.n)))
            if position is None:
                c.events.record("checkpoint_skipped", request=request,
                                reason="a rank has no safe point left in its loop")
            else:
                c.events.record("checkpoint_requested", request=request, position=position,
                                notified_at=notified_at)
                self._set(position)
            return position

    async def checkpoint(self, attempts: int = 20) -> dict:
        """A checkpoint now (``await run.checkpoint()``): returns its description once
        every part is stored.

        Raises:
            ProtocolError: no position could be agreed (ranks outside their loops).
        """
        for _ in range(attempts):
            position = await self._request()
            if position is not None:
                ck = await asyncio.shield(self.sets[position].done)
                if ck is not None:
                    return {"position": ck.position, "index": ck.index, "bytes": ck.bytes,
                            "flush_s": ck.flush_s, "save_s": ck.save_s}
            await asyncio.sleep(0.01)  # between loops: ask again once they are in one
        raise ProtocolError(f"no checkpoint could be placed in {attempts} attempts: the "
                            f"ranks are not inside an iterations() loop")

    async def service(self) -> None:
        """The checkpoint timer: ``checkpoint_interval_s``, a request every so often, or
        ``checkpoint_interval="auto"`` (``_auto_timer``)."""
        if self.settings["auto"]:
            return await self._auto_timer()
        seconds = self.settings["interval_s"]
        if seconds is None:
            return
        while True:
            await self.c.sleep(seconds)
            await self._request()

    async def _auto_timer(self) -> None:
        """``checkpoint_interval="auto"``: after each checkpoint it requested, the timer
        waits Daly's optimal interval (``_intervals.daly``) for that checkpoint's measured
        cost C and ``mtbf_s``, then requests the next, and records the choice
        (``checkpoint_interval_chosen``).

        C is what the checkpoint held the job: from the first rank's arrival at the
        agreed safe point to the set being stored (``cost_s`` of the ``checkpoint``
        event): the wait for the slowest rank, the flush, the parts' save, their transfer
        to the coordinator and the manifest. Not from the request: between the request
        and the safe point the ranks still compute (up to an iteration, which in a test
        with iterations as long as a checkpoint tripled C now and then). The arrival is
        on the rank's clock and the end on the coordinator's: the same clock on one
        machine (and on sim: virtual), NTP-close across Ray nodes. The ranks' own
        ``flush_s`` + ``save_s`` would leave out the transfer, and on sim ``save_s`` is
        real time, which would make virtual runs irreproducible.

        The interval runs from the checkpoint being stored, not from its request: Daly's
        interval is the work between two checkpoints, the checkpoint's own time being C
        (the ``checkpoint_interval_s`` timer counts from request to request). A rollback
        starts the wait again from the resumed run, which restarts from its checkpoint,
        and no request is sent while one is under way.

        The first checkpoint is requested at once, so the cost is measured, not guessed:
        it costs one C early in the run, and every later interval is Daly's for this
        run's real cost, where a guessed C (Young's interval from an estimate) could be
        off by orders of magnitude for the whole first interval. A request no rank can
        place yet (none is inside a loop) is retried after ``FIRST_RETRY`` x ``mtbf_s``,
        doubling up to ``RETRY_MAX`` x ``mtbf_s``; later, a request that is not placed or
        a checkpoint lost to a failure waits the current interval again.
        """
        c, mtbf_s = self.c, self.settings["mtbf_s"]
        interval_s, retry_s = None, FIRST_RETRY * mtbf_s
        while True:
            if interval_s is not None:
                await self._run_for(interval_s)
            await self.running.wait()
            position = await self._request()
            ck = None if position is None else self.sets.get(position)
            if ck is not None:
                ck = await asyncio.shield(ck.done)  # None: abandoned, or lost to a failure
            if ck is None or ck.cost_s is None:
                if interval_s is None:
                    await c.sleep(retry_s)
                    retry_s = min(2 * retry_s, RETRY_MAX * mtbf_s)
                continue
            interval_s = daly(max(ck.cost_s, COST_FLOOR_S), mtbf_s)
            c.events.record("checkpoint_interval_chosen", position=ck.position,
                            cost_s=ck.cost_s, mtbf_s=mtbf_s, interval_s=interval_s)

    async def _run_for(self, seconds: float) -> None:
        """Wait until the job has run ``seconds`` without a rollback: one that begins
        meanwhile (or is under way) starts the count again once every rank runs."""
        while True:
            await self.running.wait()
            self.stopped.clear()
            sleep = asyncio.ensure_future(self.c.sleep(seconds))
            stop = asyncio.ensure_future(self.stopped.wait())
            try:
                await asyncio.wait([sleep, stop], return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleep.cancel()
                stop.cancel()
            if not self.stopped.is_set():
                return

    # ----------------------------------------------------------------- restart
    async def recover(self, failed: set[int]) -> None:
        """Global rollback: every rank restarts in a new actor from the last complete
        checkpoint (or the start of the run)."""
        c = self.c
        self.running.clear()
        await self.parts.let_finish()  # a part given just before the failure counts
        await self._salvage(failed)  # a part given only to its holder counts too
        self._abandon_execution()
        await self.parts.settle()  # every set whose parts all reach stable storage counts
        await c.collect_events()
        restore = await self._restore_handles()
        c.events.record("rollback", position=None if restore is None else restore[0],
                        failed=sorted(failed))
        await c.phase("restore_chosen")
        await asyncio.gather(*(c.respawn(rank) for rank in range(c.n)))  # actors start in parallel
        await c.rewire()
        for rank in range(c.n):
            handle = c.blank(rank) if restore is None else restore[1][rank]
            line = None if restore is None else restore[2]
            c.start_rank(rank, c.restore_spec(handle, line=line))
        await asyncio.gather(*(c.call(rank, "ready") for rank in range(c.n)))
        self.sets.clear()
        c.events.record("resumed", position=None if restore is None else restore[0])
        self.running.set()
        c.refill_spares()

    async def abandon(self, failed: set[int]) -> None:
        """A recovery round of a multi-level stack begins (``runtime/_escalation``):
        whichever level recovers, the requests and moves under way belong to the
        execution being abandoned, and so do the parts of the failed ranks. The parts
        the survivors reported are still taken: a set they complete is a consistent cut
        of a failure-free execution (a cheaper level may restore the survivors in place,
        still holding them). No request is placed until the round is over.

        A move cut short after its rank was given its new process leaves that rank with
        no state anywhere a level can ask (its old process stopped, the new one not
        started): it fails too, and the round starts again with it."""
        mover = self.mover
        if mover is not None and (mover in failed or mover in self.c.unstarted()):
            self.mover = None  # failed: the round (or the next one, raised here) has it
            if mover not in failed:
                raise NewFailure({mover})
        self.running.clear()
        await self.parts.let_finish()
        await self._salvage(failed)
        self._abandon_execution(failed)

    async def recovered(self) -> None:
        """The round of a multi-level stack is over: requests may be placed again."""
        self.running.set()

    async def _salvage(self, failed: set[int]) -> None:
        """Complete the newest checkpoint past the last complete one that the live ranks
        can still give whole: a rank goes on once its holder has a copy of its part, so
        the part of a rank that died before the coordinator took it (or whose report was
        lost with it) is taken from its holder's copy, and a survivor's part not taken
        yet from the survivor. None such (a rank and its holder both lost): the last
        complete checkpoint stays the one to restore."""
        if self.settings["storage"] == "stable":
            return  # parts on disk are reported before their rank goes on
        c = self.c

        async def held(rank):
            try:
                return rank, await asyncio.wait_for(
                    c.call_handle(c.handle(rank), ReadyMessageFlush.ft_rpc_ready_held),
                    GIVEN_GRACE_S)
            except (RankDied, asyncio.TimeoutError):  # dead, or hung: it gives nothing
                return rank, None
        # a rank on a new host not started yet (a move cut short) holds nothing yet
        empty = set(failed) | c.unstarted()
        got = await asyncio.gather(*(held(r) for r in range(c.n) if r not in empty))
        held_by = {r: h for r, h in got if h is not None}
        own = {r: {tuple(p) for p in h["own"]} for r, h in held_by.items()}
        copies = {r: {(src, tuple(p)) for src, p in h["copies"]} for r, h in held_by.items()}
        found = salvage(c.n, own, copies, {p: set(ck.handles) for p, ck in self.sets.items()},
                        None if self.latest is None else self.latest.position, holder)
        if found is None:
            return
        pos, sources = found
        try:
            handles = await asyncio.wait_for(asyncio.gather(*(
                c.call_handle_kept(c.handle(r), ReadyMessageFlush.ft_rpc_ready_part, pos)
                if src == r else
                c.call_handle_kept(c.handle(src), ReadyMessageFlush.ft_rpc_ready_copy, r, pos)
                for r, src in sources.items())), GIVEN_GRACE_S)
        except (RankDied, asyncio.TimeoutError):
            return  # a holder died (or hangs) as well: the next round sees it
        except KeyError:  # (on Ray a RayTaskError that is one) a part said held above was
            # handed to the regular take meanwhile, which gives it once: that take
            # completes the set, or the last complete checkpoint stays the one to restore
            # (HPL's second-loop restart on Ray crashed its recovery here, once in a CI)
            return
        ck = self._set(pos)
        c.events.record("checkpoint_salvaged", position=pos, from_holders=sorted(
            r for r, src in sources.items() if src != r))
        for r, handle in zip(sources, handles):
            await self._kept(ck, r, handle)

    def _abandon_execution(self, failed: set[int] | None = None) -> None:
        """Drop the requests and moves under way, and the parts still being taken from
        ``failed`` (default: every rank)."""
        self.stopped.set()  # the auto timer counts its interval again
        for task in list(self.busy):
            task.cancel()  # requests and moves of the lost execution
        self.parts.cancel(failed)
        for ck in self.sets.values():
            if not ck.done.done():
                ck.done.set_result(None)  # a waiting run.checkpoint() asks again

    async def _restore_handles(self):
        """``(position, handle per rank, line)`` of the newest complete checkpoint whose
        parts are still there: the object-store copy, else this run's own newest set on
        stable storage (never another run's, and never one past what this run stored);
        None: none. ``line``: the furthest resume point of its parts (``_part``)."""
        ck = self.latest
        if ck is not None and ck.handles.get(0) is not None:
            if await self.c.available(list(ck.handles.values())):
                return ck.position, [ck.handles[r] for r in range(self.c.n)], (
                    ck.line or ck.position)
            self.c.events.record("checkpoint_lost", position=ck.position, storage="object")
        if self.store is not None:
            return await self.c.newest_stable_set(self.store, "checkpoint set")
        return None

    async def finish(self) -> None:
        """The run is over: let the checkpoints whose parts are all reported complete
        (requests still in flight are moot)."""
        await self.parts.finish()

    # --------------------------------------------------------------- migration
    async def migrate(self, rank: int, node: str | None = None) -> dict:
        """Move rank ``rank`` to a new actor on ``node`` while the others run."""
        c = self.c
        if not (isinstance(rank, int) and 0 <= rank < c.n):
            raise ConfigError(f"rank {rank!r} is not a rank of this run (0..{c.n - 1})")
        async with self.lock:
            await c.wired.wait()
            move = await self._settled(self._move(rank, node))
        if move.cancelled() or isinstance(move.exception(), NewFailure):
            raise ProtocolError(f"the move of rank {rank} was cut short by a failure; the "
                                f"run recovers it with the failed ranks")
        return move.result()

    async def _move(self, rank: int, node: str | None) -> dict:
        c = self.c
        move = next(self._ids)
        t0 = c.clock()
        try:
            spare = await c.spawn_spare(node)
        except RankDied as died:
            raise ProtocolError(f"the new actor for rank {rank} died as it started "
                                f"({died.reason}); rank {rank} did not move") from None
        t_spare = c.clock()
        stop = await c.call(rank, ReadyMessageFlush.ft_rpc_ready_migrate_stop, move)
        if stop is None:
            await c.kill(spare, "ray.kill")
            raise ProtocolError(f"rank {rank} finished before it could move")
        t_stop = c.clock()
        others = [r for r in range(c.n) if r != rank]
        sent = await asyncio.gather(*(
            c.call(r, ReadyMessageFlush.ft_rpc_ready_migrate_notice, move, rank,
                   r in stop["out"]) for r in others))
        senders = [r for r, s in zip(others, sent) if s]
        out = await c.call(rank, ReadyMessageFlush.ft_rpc_ready_migrate_out, move, senders)
        t_saved = c.clock()
        self.mover = rank  # from its new process on until that one starts (``abandon``)
        try:
            old = await c.respawn(rank, spare, stop_old=False)
        except NewFailure:  # the rank is stopped and its old life left: a failure
            c.fail(rank, "the actor it was moving to died as it was set up")
            raise
        await c.rewire()
        c.start_rank(rank, c.restore_spec(out["handle"]))
        self.mover = None
        await c.call(rank, "ready")
        t_restored = c.clock()
        released = await asyncio.gather(*(
            c.call(r, ReadyMessageFlush.ft_rpc_ready_migrate_done, move, rank, c.epochs[rank])
            for r in others))
        await c.kill(old, "ray.kill")
        info = {"rank": rank, "node": node, "position": stop["position"],
                "bytes": out["bytes"], "partners": sorted(set(senders) | set(stop["out"])),
                "held": sum(released), "spare_s": t_spare - t0, "stop_s": t_stop - t_spare,
                "state_s": t_saved - t_stop, "restore_s": t_restored - t_saved,
                "total_s": c.clock() - t_spare}
        c.events.record("migrated", **info)
        return info


def _heard(task: asyncio.Task) -> None:
    """Take ``task``'s outcome, so that asyncio does not report its error as never
    retrieved (``ReadyFlushCoordinator._settled``)."""
    if not task.cancelled():
        task.exception()
