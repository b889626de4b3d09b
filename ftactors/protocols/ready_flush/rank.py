"""ReadyMessageFlush: CoCheck's coordinated checkpoint, global restart and migration.

Paper: cocheck-ready-messages.txt (Stellner, 1996), sections 2, 4 and 5.2.

Theory of operation
-------------------
*Checkpoint* (section 4). The central instance is the run's coordinator. A checkpoint is
a *round* named by a safe-point position K (a position is ``(loop, iteration)``): with
``checkpoint_interval`` a rank begins the round of K when it reaches K (every k-th
iteration) and has not joined a round of K or later; for a request (``await
run.checkpoint()``, ``self.request_checkpoint()`` or the ``checkpoint_interval_s``
timer) the coordinator notifies every rank, each answers with the next safe point it
will reach and stops there until told K, the largest of the answers, and begins the
round when it reaches K. The notification is handled between sends (message hooks are
synchronous), as the paper requires. A rank that joins a round takes its part's state
*then*, sends a ready message (RM) on every channel it ever sent on (and, lazily, before
its first message on another; the round's root tells the ranks no RM reached that the
round began: ``shared/flush.py``) and keeps receiving: every application message that
arrives before the RM of its channel belongs to the part (queued for the application,
or consumed meanwhile and so replayed). Once it holds the RMs the root counted for it
nothing addressed to it is in transit, and its part (registered state, protocol state,
the messages to receive again in arrival order, the channel and application counters)
is sealed and saved, in the object store (``checkpoint_storage="object"``, owned by the
coordinator: it survives the rank, not its node), on stable storage through pyarrow.fs
(``"stable"``, ``checkpoint_dir``), or both. A checkpoint is complete (committed: usable
for a restore) when the coordinator holds every rank's part: it then writes the manifest
(stable storage) and makes it the one to restart from, so a failure during a checkpoint
leaves the previous one in force. After a restart, receives are served first from the
restored messages, in arrival order, then from the network (the core's matcher).

*Ranks in any shape* (issue 40: task farms, loops of different lengths, ranks with no
loop, two loops, a rank that leaves its loop first). Waiting at K for every RM, as the
paper does, assumes every rank reaches K while its peers wait there: a farm's worker
blocked in ``recv(source=0)`` for a task the master sends only after the round never
does, nor does a rank whose loop is shorter. So a rank joins a round it has heard of (an
RM, or the root's word that it began) at whichever comes first: (a) its next safe
point, where its part is that safe point's state (the common case of lockstep programs:
nothing to replay); (b) the moment it is blocked in a receive or probe whose message may
come only after the round (from a rank whose RM it holds, a rank that never sent to it,
or any source), or parked at a safe point; (c) once ``main()`` has returned. In (b) and
(c) the part is ``Endpoint.state_now``: the last safe point's or loop end's state plus
every message consumed since, replayed on restore. Post-cut messages are held until the
rank joins, pre-cut ones that come later go into the part (``late``). The rules, shared
with StandbyReplacement and RSBackup and with every level of a stack, are
``protocols/shared/joining.py``'s (its docstring says why the cut stays consistent);
this protocol adds the rounds the coordinator placed (``rounds_to_begin_now``: an idle
rank begins them, it may never reach them) and its own work with a sealed part
(``round_sealed``: store, hand-off). The round keeps its name K, but each part resumes
where its rank was when it joined, so the coordinator's recovery line is the furthest
part's resume point (``_Set.line``; ``line`` in a stable set's manifest), which the
restore checks every part against; a rank restored from a part taken in (b) or (c)
re-runs the code since its base and does not send again what it sent before the cut.

*Hand-off* (object store; ``handoff.py`` has its rules and their reasons). A rank past a
checkpoint must never hold the only copy of its part, yet waiting for the coordinator's
take and confirmation (three control-plane hops: 41 ms a checkpoint on CG W x8 on Ray on a
loaded machine, against 15 ms for a copy) is too slow. So the rank sends a copy of its
part on the direct plane to its *holder*, rank ``(r + n // 2) % n`` (StandbyReplacement's
partner: another node when ranks are spread), reports the part without waiting, and goes
on once the holder acknowledged the copy or the coordinator confirmed it holds the part
(``ready_part_kept``), which also lets the holder drop the copy. A recovery first lets
the takes under way finish, then *salvages* (``ReadyFlushCoordinator._salvage``, decided
by ``machine.salvage``): it asks every live rank what it still holds (own parts not
taken, copies) and completes the newest checkpoint past the last complete one from the
survivors' parts and the dead ranks' holders, so a rank that died between going on and
the confirmation (its part, even its report, lost with it) restarts from that
checkpoint; with its holder dead too the checkpoint stays incomplete and the previous
complete one is restored. With one rank there is no holder, and the rank waits for the
confirmation; with stable storage only, the part is on disk before the rank reports it
(and it waits for the report to arrive); with ``"both"`` the disk part is written before
the copy is sent, so a salvaged set's parts are all on disk when its manifest is written.

*How often* (``checkpoint_interval="auto"`` with ``mtbf_s``). The coordinator's timer
requests a first checkpoint at once, measures what each checkpoint it requested held the
job (first rank at the position to the set stored: ``cost_s`` of every ``checkpoint``
event), and waits Daly's optimal interval for that cost and the given MTBF
(``protocols/shared/intervals.py``) from the set being stored to its next request; each choice is
a ``checkpoint_interval_chosen`` event (``ReadyFlushCoordinator._auto_timer`` says why).

Programs must not keep an ``irecv`` pending across a safe point (the code that posted it
does not run again after a restart); the snapshot refuses with a ProtocolError. A rank
that waits in ``Request.wait`` on an ``irecv``, or polls with ``iprobe``/``test``, is not
*blocked* to the protocol: it joins at its next safe point, so a round can wait for it
while it waits for a rank parked at the round's position (not yet handled).

*Restart* (global rollback). When a rank fails, every rank is restarted in a new actor
(a new incarnation: traffic of the old ones is dropped by the channels) from the last
complete checkpoint, or from the start of the run when there is none; the coordinator's
handle table is CoCheck's virtual-address mapping, handed to every rank by ``rewire``.
``ft.run(restart_from=DIR)`` restarts a whole lost job from the latest set on disk of the
same program, ranks, arguments and stack (``runtime/_identity``); a run's own rollbacks
read only the sets it wrote itself (its folder of ``checkpoint_dir``, shared or not).

*Migration* (section 5.2, the optimised protocol; ``migration.py`` has its rules and
their reasons). ``await run.migrate(rank, node)`` starts a warm actor on ``node`` (Ray
node affinity); only the migrating rank (MP) stops, at its next safe point. Ready
messages clear the channels to MP, the other ranks keep what they send it
(``Endpoint.hold``), MP's snapshot moves to the new actor as its next incarnation, and
they send it what they kept (``Endpoint.release``). Only MP rolls back to its snapshot,
which is the state it was stopped in.

*In a stack* the global sets are the costliest level (``roles``), under partner copies
(StandbyReplacement) and encoded blocks (RSBackup), each on its own schedule: recovery
reaches the global restart only when the cheaper levels lack what it needs
(``runtime/_escalation``). As every recovery round begins, the requests and parts under
way are dropped (``abandon``), whichever level recovers; complete sets stay.

*Footprint* (bounded whatever the run's length): the coordinator keeps in the object
store the newest complete checkpoint set (one part per rank) and the parts of sets still
being taken; every older set is dropped, and its object references released, as soon as
a newer one is complete. Each rank holds, in its own memory, its part until taken and the
copies it holds for other ranks until confirmed (at most ``handoff.KEEP_COPIES`` each). Stable
storage keeps the run's ``KEEP_STABLE`` (2) newest sets in its folder (other runs'
folders are not touched). No message log. Measured by
``ftactors bench footprint``.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ftactors.runtime import CONSISTENCY, LEVEL, MOVED, position_index, store_part
from ftactors.base import NoCheckpointWarning, ProtocolError, open_store

from ..shared.flush import OPS as FLUSH_OPS, Flush
from ..shared.joining import JoinsRounds, Part
from ..shared.parts import HeldParts
from .handoff import GoOn, HandOff
from .machine import ReadyRank
from .migration import Hold, Marker, Move, Release, Stopped, WaitMarkers
from .options import OPTIONS, ready_settings

NAME = "ready_flush"
KEEP_STABLE = 2
"""Complete checkpoint sets kept on stable storage (older ones are deleted)."""
FIRST_RETRY = 1e-4
"""Before the first auto checkpoint, a request no rank could place (not in a loop yet) is
retried after this fraction of ``mtbf_s``, doubling up to ``RETRY_MAX``."""
RETRY_MAX = 1e-2
COST_FLOOR_S = 1e-9
"""A measured cost of zero (a sim without latency) would give a zero interval."""


@dataclass(slots=True)  # a misspelt field fails, not becomes a new attribute
class _Ready:
    """One rank's ReadyMessageFlush state (under ``self._ready``)."""

    settings: dict
    where: ReadyRank                                 # where this rank checkpoints
    handoff: HandOff                                 # parts and copies (``handoff.py``)
    moving: Move                                     # migrations (``migration.py``)
    flush: Flush = field(default_factory=Flush)
    store: Any = None
    undecided: dict = field(default_factory=dict)   # request id -> future of K (or None)
    parts: HeldParts = field(default_factory=lambda: HeldParts(confirmed=True))
    safe: dict = field(default_factory=dict)        # position -> future: the part is safe
    stop: asyncio.Future | None = None               # MP's answer: where it stopped
    moved: dict | None = None                        # restored by a migration: what came


def _is_checkpoint(round_id) -> bool:
    return round_id[0] == "ckpt"  # not a migration's (``("move", n)``)


class ReadyMessageFlush(JoinsRounds):
    """Mixin: coordinated checkpoints by ready messages, global restart, migration."""

    protocol_name = NAME
    roles = {CONSISTENCY: "global cut (CoCheck ready messages)",
             LEVEL: "the driver's object store and stable storage"}
    stack_order = 2
    level_cost = 3
    uses_spares = True
    needs_safe_points = True
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, options: dict) -> None:
        ready_settings(options)
        super().check_options(options)

    @classmethod
    def start_notices(cls, stack: type, options: dict, spares: int) -> list[tuple[type, str]]:
        """With no interval of any kind, only an explicit request checkpoints."""
        s = ready_settings(options)
        if s["interval"] or s["interval_s"] or s["auto"] or s["level_intervals"]:
            return []
        return [(NoCheckpointWarning,
                 "ReadyMessageFlush has no checkpoint interval: it checkpoints only when "
                 "asked (run.checkpoint(), self.request_checkpoint()), and a failure "
                 "before that restarts every rank from the start; set checkpoint_interval=K "
                 "(iterations), checkpoint_interval_s=S, or checkpoint_interval='auto' "
                 "with mtbf_s")]

    # ------------------------------------------------------------------ start
    async def on_start(self) -> None:
        settings = ready_settings(getattr(self, "options", {}))
        st = self._ready = _Ready(settings, ReadyRank(settings["interval"]),
                                  HandOff(self.rank, self.size), Move(self.rank))
        if st.settings["storage"] != "object":
            st.store = open_store(st.settings["dir"])
        self.ft.keep_base = True  # a round may take this rank's state between safe points
        self.add_round_level(NAME, st.flush, _is_checkpoint)
        await super().on_start()

    async def on_finish(self) -> None:
        """``main()`` returned: its state is final, so every round under way or to come
        takes it as this rank's part (``JoinsRounds.on_finish``), once the positions
        asked of it are decided."""
        st = self._ready
        for fut in st.undecided.values():
            await fut
        await self._migrate(st.moving.finished())
        await super().on_finish()

    # ------------------------------------------------------------ safe points
    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        st, pos = self._ready, self.ft.position
        for fut in list(st.undecided.values()):
            await fut  # notified: wait here for the position (never past it)
        st.where.decided(fut.result() for fut in st.undecided.values())
        st.undecided.clear()
        here, passed = st.where.at_safe_point(iteration, pos, self.planned_due(NAME, iteration))
        # its own checkpoint here, decided positions it went past (a new loop began), and
        # the rounds other ranks began: this safe point's state is its part of each
        rounds = [("ckpt", k) for k in sorted(passed)] + ([("ckpt", pos)] if here else [])
        st.where.targets.difference_update(passed)
        await self.joined_at_safe_point(NAME, rounds)
        if st.moving.stopping:
            await self._stop_for_migration()

    async def checkpoint_here(self) -> None:
        """Take a checkpoint at this safe point: this rank starts the round of its
        position (the others join it, module docstring) and waits until its part is
        sealed and safe."""
        if self.ft.position is None:
            raise ProtocolError("checkpoint_here() must be called at a safe point")
        await self.joined_at_safe_point(NAME, [("ckpt", self.ft.position)])

    # ---------------------------------------------------------------- rounds
    def joining_round(self, name: str, round_id):
        if name != NAME:
            return super().joining_round(name, round_id)
        self._ready.where.taken(round_id[1])
        self._ready.where.targets.discard(round_id[1])
        return None

    def rounds_to_begin_now(self, name: str) -> list:
        """The positions the coordinator placed that this rank has not reached (it may
        never reach them: it is blocked, parked or finished)."""
        if name != NAME:
            return super().rounds_to_begin_now(name)
        st = self._ready
        if not (st.undecided or st.where.targets):  # (asked at every blocking receive)
            return []
        st.where.decided(f.result() for f in st.undecided.values() if f.done())
        for key in [k for k, f in st.undecided.items() if f.done()]:
            del st.undecided[key]
        return [("ckpt", k) for k in sorted(st.where.targets)]

    async def round_sealed(self, name: str, round_id, part: Part, blob: bytes, values: dict,
                           line) -> None:
        """Every marker of ``round_id`` is in and this rank's part sealed: save it and
        hand it off."""
        if name != NAME:
            return await super().round_sealed(name, round_id, part, blob, values, line)
        st, ft = self._ready, self.ft
        t_flushed, flushed_at = time.perf_counter(), ft.link.clock()
        pos = round_id[1]
        index = position_index(pos)
        if st.store is not None:  # first: a copy at the holder implies the part on disk
            await asyncio.to_thread(store_part, st.store, self.run_identity, index, self.rank,
                                    blob)
        safe = None  # what makes the part safe from this rank's death (stable: the disk)
        if st.settings["storage"] != "stable":
            st.parts.hold(pos, blob)  # until the coordinator takes it (ready_part)
            safe = st.safe[pos] = asyncio.get_running_loop().create_future()
            self._hand_off(st.handoff.saved(pos, blob))
        t_saved = time.perf_counter()
        event = ft.events.make(
            "checkpoint_part", position=pos, index=index, bytes=len(blob),
            flush_s=flushed_at - part.at, save_s=t_saved - t_flushed, at=part.at,
            flushed_at=flushed_at, part_position=part.position)
        if safe is None:
            await ft.link.report_now(event)  # on disk: the coordinator must know to seal it
        else:
            ft.link.report(event)  # lost with this rank? the coordinator finds the copy (salvage)
            await safe  # a rank past the position never holds the only copy of its part
            ft.events.record("checkpoint_copied", position=pos, holder=st.handoff.holder,
                             wait_s=time.perf_counter() - t_saved)
        self.planned_cost(NAME, part.at)

    def _hand_off(self, effects: list) -> None:
        """Do what the hand-off machine (``handoff.HandOff``) says."""
        st = self._ready
        for effect in effects:
            if isinstance(effect, GoOn):
                safe = st.safe.pop(effect.position)
                if not safe.done():  # else cancelled: the checkpoint's task was
                    safe.set_result(None)
            else:
                self.ft.send_control(effect.to, NAME, effect.op, effect.data)

    def ft_rpc_ready_part(self, position) -> bytes:
        """Hand this rank's part of the checkpoint at ``position`` to the coordinator,
        which keeps it in the object store (it then outlives this rank)."""
        return self._ready.parts.give(tuple(position))

    def ft_rpc_ready_part_kept(self, position) -> None:
        """The coordinator holds this rank's part at ``position``: the holder's copy is no
        longer needed, and the rank may go on if it has not yet (its holder has not
        answered, or it has none: one rank)."""
        position = tuple(position)
        self._ready.parts.kept(position)
        self._hand_off(self._ready.handoff.kept(position))

    def ft_rpc_ready_held(self) -> dict:
        """What the coordinator can still take from this rank (``ReadyFlushCoordinator.
        _salvage``): the positions of its own parts not handed over, and the
        ``(rank, position)`` of the copies it holds for other ranks."""
        st = self._ready
        return {"own": st.parts.keys(), "copies": st.handoff.held()}

    def ft_rpc_ready_copy(self, rank: int, position) -> bytes:
        """The copy of rank ``rank``'s part at ``position`` held here, for the coordinator
        (which keeps it in the object store)."""
        return self._ready.handoff.copies[(rank, tuple(position))]

    def request_checkpoint(self) -> None:
        """Ask the coordinator for a checkpoint (any rank, any time; it is taken at a
        safe point every rank can still reach)."""
        self.ft.report("checkpoint_request")

    # ---------------------------------------------------- coordinator requests
    def ft_rpc_ready_notify(self, request: int) -> tuple | None:
        """A checkpoint is wanted: stop at the next safe point until told where to take
        it; returns that next safe point (None: this rank has none left in its loop)."""
        nxt = self.ft.next_safe_point()
        if nxt is not None:
            self._ready.undecided[request] = asyncio.get_running_loop().create_future()
        return nxt

    def ft_rpc_ready_decide(self, request: int, position) -> None:
        """The checkpoint of ``request`` is at ``position`` (None: not taken)."""
        fut = self._ready.undecided.get(request)
        if fut is not None and not fut.done():
            fut.set_result(None if position is None else tuple(position))
            if not self._joins.parked and self._must_join():  # parked: on_safe_point takes it
                self.join_all_now()

    # --------------------------------------------------------------- migration
    async def _migrate(self, effects: list) -> int:
        """Do what the migration machine (``migration.Move``) says; returns how many
        messages kept for a mover were released."""
        st, ft = self._ready, self.ft
        released = 0
        for effect in effects:
            if isinstance(effect, Marker):
                ft.send_control(effect.to, NAME, "marker", (("move", effect.move), None))
            elif isinstance(effect, Hold):
                ft.hold(effect.rank)
            elif isinstance(effect, WaitMarkers):
                await st.flush.wait_markers(ft, ("move", effect.move), effect.ranks)
            elif isinstance(effect, Release):
                ft.set_peer_epoch(effect.rank, effect.epoch)
                released += ft.release(effect.rank)
            elif isinstance(effect, Stopped):
                st.stop.set_result(effect.where)
        return released

    async def ft_rpc_ready_migrate_stop(self, move: int) -> dict | None:
        """MP: stop at the next safe point; the answer says where, and to whom this rank
        sent an RM there (None: ``main()`` ended first)."""
        st = self._ready
        st.stop = asyncio.get_running_loop().create_future()
        await self._migrate(st.moving.stop_asked(move))
        return await st.stop

    async def _stop_for_migration(self) -> None:
        ft = self.ft
        await self._migrate(self._ready.moving.at_safe_point(
            ft.position, (r for r, _ in ft.sent.nonzero())))
        await asyncio.get_running_loop().create_future()  # never resolved: once moved this
        # actor is stopped, and a move cut short after this stop fails the rank
        # (``ReadyFlushCoordinator._move``)

    async def ft_rpc_ready_migrate_notice(self, move: int, mover: int, wait_rm: bool) -> bool:
        """Rank ``mover`` is moving: clear this rank's channel to it with an RM if it
        ever sent on it, and keep everything for it from now on; with ``wait_rm`` (the
        mover sent to this rank) wait for the mover's RM, so everything its old
        incarnation sent has arrived before the new one exists (the new incarnation's
        first envelope makes the old one's stale). Returns whether an RM was sent."""
        sent, effects = self._ready.moving.notice(move, mover, self.ft.sent[mover] > 0,
                                                  wait_rm)
        await self._migrate(effects)
        return sent

    async def ft_rpc_ready_migrate_out(self, move: int, senders: list[int]) -> dict:
        """MP: wait for the RMs of the ranks that sent to it, then hand over the state
        (its large buffers straight to the object store, see ``Endpoint.transfer``)."""
        st, ft = self._ready, self.ft
        await self._migrate(st.moving.hand_over(senders))
        state = self.protocol_state()
        state[NAME]["targets"] = sorted(st.where.targets)  # MP goes on with the same plan
        state[MOVED] = self.moving_state()  # the stack's copies in memory move with it
        stream, buffers = ft.transfer(protocol_state=state)
        size = len(stream) + sum(memoryview(b).nbytes for b in buffers)
        return {"handle": ft.link.share((stream, buffers)), "bytes": size}

    async def ft_rpc_ready_migrate_done(self, move: int, mover: int, epoch: int) -> int:
        """The move is over: ``mover`` runs as ``epoch``; send it what was kept. Returns
        how many."""
        return await self._migrate(self._ready.moving.done(move, mover, epoch))

    # ------------------------------------------------------------------ state
    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        st, ft = self._ready, self.ft
        op, data = ft.control_data(env)
        if op in FLUSH_OPS:
            st.flush.take(ft, env, op, data)
            self.marker_taken()
        elif op == "copy":  # a part to hold for env.src until the coordinator took it
            pos, blob = data
            self._hand_off(st.handoff.copy_received(env.src, tuple(pos), bytes(blob)))
        elif op == "copied":
            self._hand_off(st.handoff.copied(tuple(data)))
        elif op == "drop":
            self._hand_off(st.handoff.dropped(env.src, tuple(data)))
        else:
            raise ProtocolError(f"{NAME}: unknown control message {op!r} from rank {env.src}")

    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        # a rollback forgets the requests in flight (the coordinator dropped them too)
        state[NAME] = {"targets": [], "last": self._ready.where.last}
        return state

    def moving_state(self) -> dict[str, Any]:
        st = self._ready
        return {**super().moving_state(),
                NAME: {"flush": st.flush.moving(), "copies": st.handoff.copies}}

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        self._ready.moved = state.get(MOVED, {}).get(NAME)
        mine = state[NAME]
        self._ready.where.targets = {tuple(t) for t in mine["targets"]}
        self._ready.where.last = None if mine["last"] is None else tuple(mine["last"])

    async def on_restored(self) -> None:
        st = self._ready
        st.undecided.clear()
        st.safe.clear()  # the parts under way belong to the execution left
        st.stop = None
        st.moving.restored()
        if st.moved is None:
            st.flush.reset()
            st.handoff.restored()
        else:  # a migration: the same execution, its rounds and the copies it keeps came too
            st.flush.moved(self.rank, st.moved["flush"])
            st.handoff.copies = st.moved["copies"]
            st.moved = None
        await super().on_restored()
        self.ft.restored_from = None  # nothing here needs the blob: do not keep it alive
