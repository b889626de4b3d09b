"""StandbyReplacement: NR-MPI's non-stop recovery with standby ranks.

Paper: nr-mpi-standby-replacement.txt (Suo et al., 2016), sections 1.2-1.5, Tables 1-3,
Figures 3, 5 and 6.

Theory of operation
-------------------
*Backups* (NR_Backup, double in-memory, section 1.5): a rank at a safe point chosen by
``need_backup`` (every ``backup_interval`` iterations, or about every
``backup_interval_s`` seconds) begins a backup round, and the ranks flush their channels
with ready messages (``shared/flush.py``, CoCheck) so the parts of one round form a
consistent cut; once flushed, each keeps its part and sends a copy to its *partner*,
rank ``(r + n // 2) % n``. Ranks need not be in step (task farms, uneven loops, ranks
with other roles): the others join the round at their next safe point, when blocked on
a message that may come only after it, or once ``main()`` returned, with their state
then (``shared/joining.py``, shared with ReadyMessageFlush and RSBackup and with every
level of a stack). Each part resumes where its rank joined, so a round's recovery line
is its furthest part (the flush's root hands it to every rank; kept beside each copy and
reported with the rounds held), and a restored copy is named by its round
(``part_of`` in its protocol state) or, restored by another level, by that recovery
line. Both keep
the three newest rounds, so a failure in the middle of a backup round
never destroys the last complete one. The partner's copy is a plain object in the
partner's process, so it survives the death of the rank it protects. Rank 0's marker
carries the iteration of the next backup, so all ranks agree on it even when the
interval is given in seconds (``round_agreed`` puts it into every part too: ranks
restored from a round begin the next one together).

*Stable checkpoint sets* (the ``stable_store`` option): each rank also writes its part of
every round to stable storage, and rank 0 seals a round's set (writes its manifest) only
once every rank has said it wrote its part: every rank's marker carries the newest round
it has written (``written``), rank 0 gathers them (``proofs``) and seals the newest round
all name. The flush of round k+1 alone is no proof: a rank joins it while blocked,
before its part of k is written. A round never proven stays unsealed (a newer one
supersedes it). The last rounds have no later marker: once the run is over, every rank's
writes done (``on_finalize``), the coordinator asks each which rounds it wrote and rank 0
seals the newest they all name (``StandbyRecovery.finish``).

*Detection and arbitration* (section 1.2) are the coordinator's: it sees a dead rank
within milliseconds, a hung one by heartbeats, and handles failures one recovery round at
a time, so every survivor sees the same failures in the same order.

*Recovery without restarting the job* (``StandbyRecovery``, section 1.3): the survivors
are paused (RUNNING -> FAILURE) and report the rounds they hold; the newest round held by
every survivor and, for each failed rank, by its live partner is chosen (none yet: the
start of the run); each failed rank is replaced by a spare that takes over its rank number
in every communicator (a new incarnation: anything from the dead one is dropped); all
ranks get the new peer table ("MPI core data": FAILURE -> RECOVER, INIT ->
REPLACE_RECOVER); then survivors restore their own copy and replacements the partner's
("application data": -> RUNNING), and ``main()`` resumes at the backed-up iteration. The
restored state and the replayed messages are those of the failure-free run, so the result
is bit-identical to it (piecewise determinism). A failure during recovery ends the round
and starts a new one with all failures so far (self-loops 2, 9, 12).

Unrecoverable: both partners of a pair dead (their data is gone) and no spare left end
the run with ``ft.RankFailed`` (ABORT). Shrinking to fewer ranks is not supported. (In a
stack with a costlier level, a missing spare is replaced by a new actor instead: slower
to start, but far cheaper than the next level's rollback of every rank.)

*In a stack* the partner copies are the cheapest level (``roles``; ``class S(RSBackup,
StandbyReplacement, ReadyMessageFlush, App)``): recovery tries them first, and a lost
pair or no backup yet passes the round to the next level
(``runtime/_escalation``), which restores every rank; the restored round then becomes
every rank's newest copy here, sent to its partner, so the pairs are whole again at once.

The NR-MPI interface in Python (Table 3): NR_Register is ``self.register``; NR_Backup is
``await self.backup()`` (collective, at a safe point); NR_Need_backup is
``self.need_backup(iteration)``; NR_Recover is done by the framework before ``main()``
re-enters (override ``on_restored`` for a custom recovery, e.g. ABFT); NR_Get_state /
NR_Set_state are ``self.nr_state`` / ``self.set_nr_state``; NR_Get_failure_ranks is
``self.failure_ranks()``.

*Keeping another protocol's parts* (``class S(StandbyReplacement, GroupCoordination,
App)``, or DDVPiggyback): those protocols checkpoint one group or cluster at a time, so
no global round is taken here (``runtime/_escalation``, "Levels that keep another
protocol's parts"). Each part they make (``on_part``) is sent to its *holder*, the rank
at the same place in the next unit (group or cluster; with one unit, the rank half of
it further on), so that a unit lost with its node keeps its copies elsewhere; the
holder keeps each rank's parts from the oldest one the recovery may still restore on
(``parts_floor``, sent with each copy: a group's newest complete set, the oldest CLC
the garbage collection keeps), never a fixed number: ranks run parts ahead of their
newest complete set, and a copy dropped by count was the one the recovery needed. Their recovery asks the holders
first (``PartnerCopies``): a copy is pulled into the driver's object store before any
restarted rank is stopped, and copies of parts newer than the restored ones (of the
execution abandoned) are dropped. Spares are used by that recovery's respawns.

*Footprint* (bounded whatever the run's length): each rank holds, in its own memory, the
newest ``KEEP_ROUNDS`` (3) complete backup rounds of its own state and of its partner's
(a round is dropped once three newer ones are complete); no message log; the
coordinator and the object store keep nothing per round (a replacement's snapshot travels
from the surviving partner). Keeping another protocol's parts, a rank holds the parts
of each rank it keeps copies for (one rank, more where the next unit is smaller) from
its floor on: under GroupCoordination at most ``PARTS_AHEAD_MAX`` + 1 (its members are
held back), under DDVPiggyback those of the CLCs the coordinator keeps; the driver holds the copies it pulled only until the round ends. Measured by ``ftactors bench footprint``.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ftactors.runtime import (LEVEL, MOVED, SPARES, parts_lead, position_index,
                              protocol_classes, seal_set, store_part)
from ftactors.base import NoSparesWarning, ProtocolError, open_store

from ..shared.flush import OPS as FLUSH_OPS, Flush
from ..shared.intervals import Pacer
from ..shared.joining import JoinsRounds, Part
from .machine import (Input, StandbyMachine, State, next_backup, part_holder,
                      partner)
from .options import OPTIONS, standby_settings

NAME = "standby"
KEEP_ROUNDS = 3
"""The newest three complete rounds are kept. Two (NR-MPI's ping-pong) are enough when
ranks take rounds in step; joined out of step, a rank may complete round k+1 while the
copy of its partner's round k is still on its way, and a failure then finds no round
every survivor and partner still holds with two (the recovery passed to a costlier level,
or gave up, on HeatRing and self-talking ranks)."""


@dataclass
class _Standby:
    """One rank's StandbyReplacement state (under ``self._standby``)."""

    machine: StandbyMachine = field(default_factory=StandbyMachine)
    own: dict = field(default_factory=dict)       # round -> sealed snapshot
    held: dict = field(default_factory=dict)      # rank -> {round -> sealed snapshot}
    flush: Flush = field(default_factory=Flush)
    next_backup: int = 0
    last: tuple | None = None                     # the newest round this rank joined
    lines: dict = field(default_factory=dict)     # round -> its line (own and held copies)
    restored_round: tuple | None = None           # the round of the part restored (ours)
    failures: list = field(default_factory=list)  # failed rank sets, in arbitration order
    stable: Any = None                                # a Store, with the stable_store option
    written: list = field(default_factory=list)       # the newest rounds this rank wrote
    writes: set = field(default_factory=set)          # its writes under way (tasks)
    sealed: tuple | None = None                       # rank 0: the newest round it sealed
    proofs: dict = field(default_factory=dict)        # rank 0: round -> ranks that wrote it
    pacer: Pacer | None = None                        # backup_interval_s in iterations
    parts_mode: bool = False  # keeping a hands_parts protocol's parts, no rounds of ours
    copies: dict = field(default_factory=dict)  # rank -> {part key -> its part}
    listed: dict = field(default_factory=dict)  # the copies as ft_rpc_standby_parts listed them
    moved: bool = False  # restored by a migration: own and held copies came with it


def _keep(store: dict, round_id, blob: bytes, keep: int = KEEP_ROUNDS) -> None:
    store[round_id] = blob
    for old in sorted(store)[:-keep]:
        del store[old]


class StandbyReplacement(JoinsRounds):
    """Mixin: survive rank failures by promoting standby ranks (``ft.run(spares=k)``)."""

    protocol_name = NAME
    roles = {LEVEL: "partner copies in memory", SPARES: "warm standby ranks, promoted in place"}
    stacks_with = ("rs", "ready_flush", "groups", "hc3i")
    stack_order = 1
    level_cost = 1
    uses_spares = True
    needs_safe_points = True
    backup_interval: ClassVar[int] = 5
    """Iterations between backups (NR_Need_backup)."""
    backup_interval_s: ClassVar[float | None] = None
    """If set, back up about this often instead, in seconds (rank 0 decides)."""
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, options: dict) -> None:
        standby_settings(options)
        super().check_options(options)

    @classmethod
    def start_notices(cls, stack: type, options: dict, spares: int) -> list[tuple[type, str]]:
        """With ``spares=0`` there is no standby rank to promote: say what a failure
        does instead (``StandbyRecovery.recover``, or the lead protocol's respawns)."""
        if spares:
            return []
        lead = parts_lead(stack)
        above = [p.__name__ for p in protocol_classes(stack)
                 if p.recovery_policy is not None and p.level_cost > cls.level_cost]
        if lead is None and not above:
            return [(NoSparesWarning,
                     "StandbyReplacement with spares=0 has no standby rank to promote: the "
                     "first failure ends the run with ft.RankFailed; set spares=k to keep k "
                     "warm standby ranks")]
        who = lead.__name__ if lead is not None else "StandbyReplacement"
        return [(NoSparesWarning,
                 f"StandbyReplacement with spares=0: {who} restarts a failed rank in a new "
                 f"actor (a cold start: about a second on Ray, against 0.02-0.2 s to "
                 f"promote a warm spare); set spares=k to keep k warm standby ranks")]

    # ----------------------------------------------------------------- start, end
    async def on_start(self) -> None:
        self._standby = _Standby(
            parts_mode=parts_lead(type(self)) is not None)
        self._standby.pacer = Pacer(self.ft.link.clock)
        uri = standby_settings(getattr(self, "options", {}))["stable_store"]
        self._standby.stable = None if uri is None else open_store(uri)
        if not self._standby.parts_mode:
            self.ft.keep_base = True  # a round may take this rank's state between safe points
            self.add_round_level(NAME, self._standby.flush)
        self._nr_fire(Input.PROMOTED if self.incarnation > 0 else Input.STARTED)
        await super().on_start()

    async def on_finalize(self) -> None:
        """This rank's writes under way end (then ``StandbyRecovery.finish`` has rank 0
        seal the newest round every rank wrote, which no later marker proves); FINISH.
        A round whose flush is not over is not waited for: it is never written."""
        await asyncio.gather(*list(self._standby.writes))
        self._nr_fire(Input.FINALIZE)
        await super().on_finalize()

    # ------------------------------------------------------------------ backups
    def _interval(self) -> tuple[int, float | None]:
        v = standby_settings(getattr(self, "options", {}))
        every, seconds = v["backup_interval"], v["backup_interval_s"]
        return (int(self.backup_interval if every is None else every),
                self.backup_interval_s if seconds is None else seconds)

    def need_backup(self, iteration: int) -> bool:
        """NR_Need_backup: whether the backup agreed for this iteration is due (with
        ``level_intervals="auto"``, planned with the stack's other levels)."""
        st = self._standby
        planned = self.planned_due(NAME, iteration)
        return not st.parts_mode and iteration >= st.next_backup and planned in (None, True)

    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        st, pos = self._standby, self.ft.position
        if st.parts_mode:
            return
        due = self.need_backup(iteration) and (st.last is None or pos > st.last)
        # its own round here, and the rounds other ranks began: this safe point's state
        await self.joined_at_safe_point(NAME, [pos] if due else [])

    async def backup(self) -> None:
        """NR_Backup: begin a backup round at this safe point (every other rank joins
        it, ``shared/joining.py``) and wait until this rank's part is kept here and sent
        to the partner."""
        st, ft = self._standby, self.ft
        if ft.position is None:
            raise ProtocolError("backup() must be called at a safe point (inside iterations())")
        if st.parts_mode:
            raise ProtocolError("backup() takes a global round; in this stack the partner "
                                "copies are of the consistency protocol's parts (on_part)")
        await self.joined_at_safe_point(NAME, [ft.position])

    def joining_round(self, name: str, round_id):
        """The marker: ``(next backup, newest round written)``. Rank 0's carries the
        iteration of the next backup (its choice); with ``stable_store`` every rank's
        carries the newest round it has written there (rank 0 seals by these); None when
        both are None."""
        if name != NAME:
            return super().joining_round(name, round_id)
        st = self._standby
        if st.last is None or round_id > st.last:
            st.last = round_id  # saved in the part: a rank restored here does not begin it
        if self.rank == 0:
            every, seconds = self._interval()
            st.next_backup = next_backup(round_id[1], self._levels_plan is not None, every,
                                         seconds, st.pacer)
        due = st.next_backup if self.rank == 0 else None
        wrote = st.written[-1] if st.written else None
        return None if due is None and wrote is None else (due, wrote)

    def round_also(self, name: str, round_id) -> tuple:
        """The partner's channel too: the last round's copy is held once this one is
        over."""
        if name != NAME:
            return super().round_also(name, round_id)
        return (partner(self.rank, self.size),)

    def round_agreed(self, name: str, round_id, values: dict, protocols: dict) -> None:
        if name != NAME:
            return super().round_agreed(name, round_id, values, protocols)
        st = self._standby
        if values.get(0, (None,))[0] is not None:
            st.next_backup = protocols[NAME]["next_backup"] = values[0][0]
        if self.rank == 0 and st.stable is not None:
            for rank, (_, wrote) in values.items():
                self._wrote(rank, wrote)

    async def round_sealed(self, name: str, round_id, part: Part, blob: bytes, values: dict,
                           line) -> None:
        """Every marker is in: keep this rank's part of ``round_id`` and send a copy to
        the partner."""
        if name != NAME:
            return await super().round_sealed(name, round_id, part, blob, values, line)
        st, ft = self._standby, self.ft
        flushed_at = ft.link.clock()
        t_flushed = time.perf_counter()
        if self.rank == 0:
            await self._seal_proven()  # by the markers of this round
        _keep(st.own, round_id, blob)
        st.lines[round_id] = line
        holder = self._send_to_partner(round_id, blob)
        if st.stable is not None:
            await self._write_stable(round_id, blob)
        st.pacer.mark(round_id[1])
        ft.events.record("backup", position=round_id, bytes=len(blob), partner=holder,
                         flush_s=flushed_at - part.at, save_s=time.perf_counter() - t_flushed,
                         part_position=part.position)
        self.planned_cost(NAME, part.at)

    def _send_to_partner(self, round_id, blob: bytes) -> int:
        """Keep ``blob`` (this rank's backup of ``round_id``) safe from this rank's death:
        send a copy, with the round's line, to the partner; returns it."""
        holder = partner(self.rank, self.size)
        if holder != self.rank:
            self.ft.send_control(holder, NAME, "copy",
                                 (round_id, blob, self._standby.lines.get(round_id)))
        return holder

    def on_part(self, key, blob: bytes) -> None:
        super().on_part(key, blob)
        holder = part_holder(self.part_units(), self.rank)
        if holder != self.rank:  # with the oldest part the recovery may still restore
            self.ft.send_control(holder, NAME, "part", (key, blob, self.parts_floor()))

    async def _write_stable(self, round_id, blob: bytes) -> None:
        """Write this rank's part of ``round_id`` to stable storage (``on_finalize`` waits
        for the write), then name it among the rounds written; rank 0 seals what is
        proven."""
        st = self._standby
        write = asyncio.ensure_future(asyncio.to_thread(
            store_part, st.stable, self.run_identity, position_index(round_id), self.rank,
            blob))
        st.writes.add(write)
        try:
            await write
        finally:
            st.writes.discard(write)
        st.written = sorted({*st.written, round_id})[-KEEP_ROUNDS:]
        if self.rank == 0:
            self._wrote(0, round_id)
            await self._seal_proven()

    def _wrote(self, rank: int, round_id) -> None:
        """Rank 0: ``rank`` said it has written its part of ``round_id`` (a marker's
        value, or rank 0's own write)."""
        st = self._standby
        if round_id is not None and (st.sealed is None or tuple(round_id) > st.sealed):
            st.proofs.setdefault(tuple(round_id), set()).add(rank)

    async def _seal_proven(self) -> None:
        """Rank 0: seal the newest round every rank (rank 0 too) said it has written in
        this execution; older unsealed rounds stay so, superseded. Ranks join
        rounds out of step, so a marker of round k+1 may leave before its sender's part
        of k is written: only a rank's own word that it wrote k proves it."""
        st = self._standby
        proven = [k for k, ranks in st.proofs.items() if len(ranks) == self.size
                  and (st.sealed is None or k > st.sealed)]
        if proven:
            await self._seal_stable(max(proven))

    async def _seal_stable(self, round_id) -> None:
        """Rank 0: write the manifest that makes the round's checkpoint set complete."""
        st = self._standby
        st.sealed = round_id  # before the write: a round sealed meanwhile must be newer
        st.proofs = {k: v for k, v in st.proofs.items() if k > round_id}
        await asyncio.to_thread(seal_set, st.stable, self.run_identity,
                                position_index(round_id), self.size,
                                {"position": round_id, "protocol": NAME,
                                 "line": st.lines.get(round_id) or round_id})
        self.ft.events.record("stable_checkpoint", position=round_id)

    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        op, data = self.ft.control_data(env)
        st = self._standby
        if op in FLUSH_OPS:
            st.flush.take(self.ft, env, op, data)
            self.marker_taken()
        elif op == "copy":
            round_id, blob, line = data
            _keep(st.held.setdefault(env.src, {}), round_id, bytes(blob))
            st.lines[round_id] = line
        elif op == "part":
            key, blob, floor = data
            kept = st.copies.setdefault(env.src, {})
            kept[key] = bytes(blob)
            for old in [k for k in kept if floor is not None and k < floor]:
                del kept[old]
        else:
            raise ProtocolError(f"standby: unknown control message {op!r} from rank {env.src}")

    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        st = self._standby
        # ``part_of``: this state is this rank's part of that round of ours (not another
        # level's snapshot)
        state[NAME] = {"next_backup": st.next_backup, "last": st.last,
                       "part_of": self.joining_part(NAME)}
        return state

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        st = self._standby
        mine = state[NAME]
        st.next_backup = mine["next_backup"]
        st.last = None if mine.get("last") is None else tuple(mine["last"])
        st.restored_round = None if mine.get("part_of") is None else tuple(mine["part_of"])
        moved = state.get(MOVED, {}).get(NAME)
        st.moved = moved is not None
        if st.moved:
            st.own, st.held, st.copies = moved["own"], moved["held"], moved["copies"]
            st.lines = moved["lines"]
            st.written, st.sealed, st.proofs = (moved["written"], moved["sealed"],
                                                moved["proofs"])
            st.flush.moved(self.rank, moved["flush"])

    def moving_state(self) -> dict[str, Any]:
        st = self._standby
        return {**super().moving_state(),
                NAME: {"own": st.own, "held": st.held, "copies": st.copies, "lines": st.lines,
                       "written": st.written, "sealed": st.sealed, "proofs": st.proofs,
                       "flush": st.flush.moving()}}

    # ------------------------------------------------- recovery (coordinator calls)
    async def ft_rpc_standby_failure(self, failed: list[int]) -> dict:
        """A failure notice: stop, and say which backup rounds this rank holds."""
        st = self._standby
        st.failures.append(tuple(failed))
        self._nr_fire(Input.FAILURE, failed=list(failed))
        return {"own": sorted(st.own), "held": {r: sorted(v) for r, v in st.held.items()},
                "lines": {r: st.lines.get(r) for r in {*st.own, *(k for v in st.held.values()
                                                                  for k in v)}}}

    def ft_rpc_standby_written(self) -> list:
        """The newest rounds this rank wrote to stable storage (after ``on_finalize``:
        every write it began is done)."""
        return self._standby.written

    async def ft_rpc_standby_seal(self, round_id) -> None:
        """Rank 0, the run over: seal ``round_id``, which every rank wrote (unless a
        newer round is sealed already)."""
        st, round_id = self._standby, tuple(round_id)
        if st.sealed is None or round_id > st.sealed:
            await self._seal_stable(round_id)

    def ft_rpc_standby_share(self, rank: int, round_id) -> Any:
        """A handle to the snapshot of ``rank`` for backup round ``round_id`` (own or held
        copy; the start of the run is the coordinator's ``blank``)."""
        st, ft = self._standby, self.ft
        blob = st.own[round_id] if rank == self.rank else st.held[rank][round_id]
        return ft.link.share(blob)

    def ft_rpc_standby_parts(self) -> dict:
        """The keys of the parts this rank keeps copies of, by rank; ``ft_rpc_standby_part``
        answers from these copies. The rank keeps running between the two calls, and a
        newer part that arrives meanwhile drops the oldest copy (``on_part``): read from
        the live table, a copy listed could be gone when it is asked for."""
        st = self._standby
        st.listed = {r: dict(v) for r, v in st.copies.items()}
        return {r: sorted(v) for r, v in st.listed.items()}

    def ft_rpc_standby_part(self, rank: int, key) -> bytes:
        """A copy ``ft_rpc_standby_parts`` listed."""
        return self._standby.listed[rank][key]

    async def ft_rpc_standby_part_keep(self, rank: int, handles: dict) -> None:
        """This rank was restarted and held copies of ``rank``'s parts, which went with
        its old life: keep them again, from the consistency protocol's own copies
        (``handles`` {key: object-store handle}). A part ``rank`` sent meanwhile wins."""
        keys = list(handles)
        blobs = await asyncio.gather(*(self.ft.link.fetch(handles[k]) for k in keys))
        kept = self._standby.copies.setdefault(int(rank), {})
        for key, blob in zip(keys, blobs):
            kept.setdefault(key, bytes(blob))

    def ft_rpc_standby_part_drop(self, after: dict) -> None:
        """Ranks rolled back to their parts ``after`` {rank: key, None: the start): drop
        the copies of their newer parts."""
        copies = self._standby.copies
        for rank, key in after.items():
            kept = copies.get(int(rank), {})
            for newer in [k for k in kept if key is None or k > key]:
                del kept[newer]

    async def on_restored(self) -> None:
        st, ft = self._standby, self.ft
        if st.parts_mode:  # a restarted group or cluster: no round of ours to take back
            if st.machine.state is State.REPLACE_RECOVER:
                self._nr_fire(Input.DATA_RECOVERED, position=ft.position)
            return await super().on_restored()
        if st.machine.state in (State.FAILURE, State.REPLACE_FAILURE):
            self._nr_fire(Input.CORE_RECOVERED)
        position, blob = ft.restored_from
        if st.moved:  # the same execution in a new process: its rounds and copies came too
            st.moved = False
        else:
            st.flush.reset()
            # its parts, and the others', may belong to the abandoned execution
            st.written, st.sealed, st.proofs = [], None, {}
            # the restored round becomes this rank's newest copy, and the partner (maybe
            # a fresh replacement) gets it again, so every pair is whole at once: named
            # by our round if the part is ours, else by the recovery line (the same on
            # every rank, where the parts' positions may differ)
            key = st.restored_round or ft.restored_line or position
            st.own = {} if key is None else {key: blob}
            st.lines = {} if key is None else {key: ft.restored_line or position}
            if key is not None:
                self._send_to_partner(key, blob)
        if st.machine.state is State.RUNNING:
            # a new job restarted from stable storage: not a transition of NR-MPI's machine
            ft.events.record("restarted_from_stable", position=position)
        else:
            self._nr_fire(Input.DATA_RECOVERED, position=position)
        await super().on_restored()

    # ---------------------------------------------------------- NR-MPI interface
    @property
    def nr_state(self) -> State:
        """NR_Get_state."""
        return self._standby.machine.state

    def set_nr_state(self, state: State) -> None:
        """NR_Set_state (only RUNNING, after a custom recovery)."""
        self._record(*self._standby.machine.set_state(state))

    def failure_ranks(self) -> tuple[int, ...]:
        """NR_Get_failure_ranks: the ranks of the last failure notice."""
        failures = self._standby.failures
        return failures[-1] if failures else ()

    def _nr_fire(self, inp: Input, **detail) -> None:
        self._record(*self._standby.machine.fire(inp), **detail)

    def _record(self, prev: State, nxt: State, tid: int, **detail) -> None:
        detail.update(state=nxt.value, prev=prev.value, transition=tid)
        if nxt is State.RUNNING and prev is not State.INIT:
            self.ft.report("nr_state", **detail)  # the coordinator times recoveries by these
        else:
            self.ft.events.record("nr_state", **detail)

