"""Joining checkpoint rounds out of step, shared by the protocols that take global rounds
(ReadyMessageFlush, StandbyReplacement, RSBackup), by GroupCoordination (whose rounds are
one group's: ``round_members``) and by every level of a stack of them.

Theory of operation: a round (``flush.py``: ready messages on the channels) is begun by
a rank at a safe point of its own schedule; every other rank *joins* it when it hears of
it (the first marker it gets: markers go to every rank) at whichever comes first:

(a) its next safe point: its part is that safe point's state, nothing to replay (the
    common case of lockstep programs);
(b) the moment it is *blocked* in a receive or probe (or a wait on receive requests,
    or a poll that found nothing: ``iprobe``, ``test``) whose message may come only after
    a round: from a rank whose marker of a round not joined yet it holds (that rank may
    be parked waiting for the round), or from any source (``Endpoint.blocked``, the
    ``on_blocked`` hook); or it is *parked* at a safe point waiting for a round (of any
    level) to seal;
(c) once ``main()`` has returned.

In (b) and (c) the part is ``Endpoint.state_now``: the last safe point's (or loop end's)
state plus what was consumed since, replayed on restore (piecewise determinism). So no
round waits for a rank that cannot come: a rank that never blocks reaches a safe point
or returns.

Why the cut stays consistent: a message that arrives from a rank whose marker of a round
not joined yet is here was sent after that rank's part, so it is *held* (not delivered)
until the round is joined, and the part does not count it (``unreceived``); a message
that arrives after this rank joined, and before its sender's marker, was in transit at
the cut: it is added to the part (``late``, ``Endpoint.seal_state``). Levels of a stack
hold in one place: a message held for one level's round may be pre-cut for another
level's round joined meanwhile (its sender's marker of that round came after it), and
goes into that part as late (``Hold.marked``: the rounds its sender had marked when it
arrived).

``Joins`` is the machine (one rank, every level: events in, decisions out, no I/O),
stepped by ``tests/protocols/test_joining.py``; ``JoinsRounds`` is the mixin the three
protocols inherit (once in a stack's MRO) that performs it on the endpoint.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from ftactors.engine import ANY_SOURCE
from ftactors.runtime import MOVED

from .level_plan import PlannedLevel


@dataclass(slots=True)
class Part:
    """One rank's part of one round, from the moment it joined to its seal."""

    state: dict                                      # Endpoint.state_now at the join
    protocols: dict                                  # the protocols' state then
    position: tuple | None                           # where main() was (its resume point)
    at: float                                        # when (the run's clock)
    late: list = field(default_factory=list)         # pre-cut messages that came since


@dataclass(slots=True)
class Hold:
    """A message held: its envelope and the rounds ``(level, round)`` whose marker from
    its sender had arrived before it (for those it is post-cut)."""

    env: Any
    marked: frozenset


@dataclass(slots=True)
class _Level:
    rounds: Callable[[], Any]      # -> its FlushRounds (None: none yet)
    is_round: Callable[[Hashable], bool]  # its checkpoint rounds among the flush's
    members: Callable[[Hashable], Any] | None  # a round's ranks (None: every rank)


class Joins:
    """One rank's side of joining the rounds of every level of its stack: which rounds
    it has not joined, which messages it holds, and when it must join at once."""

    def __init__(self, me: int):
        self.me = me
        self.levels: dict[str, _Level] = {}
        self.joined: dict[tuple, Part] = {}   # (level, round) -> part, not sealed yet
        self.held: list[Hold] = []            # in arrival order
        self.parked = 0                       # > 0: main() waits at a safe point for a seal
        self.finished = False                 # main() has returned

    def add_level(self, name: str, rounds: Callable[[], Any],
                  is_round: Callable[[Hashable], bool] = lambda rid: True,
                  members: Callable[[Hashable], Any] | None = None) -> None:
        """Level ``name``'s rounds are those of ``rounds()`` (a ``FlushRounds``) that
        ``is_round`` accepts; ``members(rid)``: the ranks of round ``rid`` (None: every
        rank)."""
        self.levels[name] = _Level(rounds, is_round, members)

    def _rounds(self, name: str) -> dict:
        machine = self.levels[name].rounds()
        return {} if machine is None else machine.rounds

    def unjoined(self, name: str) -> list:
        """Level ``name``'s rounds other ranks began that this rank has not joined."""
        level = self.levels[name]
        return [rid for rid, r in self._rounds(name).items()
                if level.is_round(rid) and r.members is None and (name, rid) not in self.joined]

    def _marked(self) -> set[int]:
        """The ranks whose marker of a round not joined here has arrived."""
        return {p for name in self.levels for rid in self.unjoined(name)
                for p in self._rounds(name)[rid].markers}

    def pending(self) -> bool:
        """Whether some level has a round to join."""
        return any(self.unjoined(name) for name in self.levels)

    def must_join_now(self, blocked: Iterable[int], silent: Callable[[int], bool]) -> bool:
        """Whether this rank must join the rounds under way now rather than at its next
        safe point: it is parked, finished, or blocked on a message that may come only
        after a round: from a marked rank, from any source, from a rank ``silent``
        so far (it sent this rank nothing: its marker, which goes only on channels in
        use, may never come, and it may wait for the round), or from a rank outside a
        round's members (a group's round: no marker of it ever comes from there, and
        that rank may wait for a member parked in the round)."""
        if self.parked or self.finished:
            return True
        blocked = list(blocked)
        if not blocked:
            return False
        marked = self._marked()
        if any(src == ANY_SOURCE or src in marked or silent(src) for src in blocked):
            return True
        return any(src not in level.members(rid)
                   for name, level in self.levels.items() if level.members is not None
                   for rid in self.unjoined(name) for src in blocked)

    def arrive(self, env) -> bool:
        """An application message from ``env.src``: add it to the parts it is late for;
        returns whether it is held (sent after a marker of a round not joined here, or
        behind a held message from the same sender)."""
        src = env.src
        if src == self.me:  # a message to self is never in transit: no cut divides it
            return False
        if not (self.joined or self.held or any(self._rounds(n) for n in self.levels)):
            return False
        for (name, rid), part in self.joined.items():
            r = self._rounds(name).get(rid)
            # a group's round cuts only its members' channels: a message from outside
            # the group is counted where it is received (the group protocol logs it)
            if r is not None and src not in r.markers and src in r.members:
                part.late.append(env)
        marked = frozenset((name, rid) for name in self.levels
                           for rid, r in self._rounds(name).items()
                           if self.levels[name].is_round(rid) and src in r.markers)
        if (any(h.env.src == src for h in self.held)
                or any(rid in self.unjoined(name) for name, rid in marked)):
            self.held.append(Hold(env, marked))
            return True
        return False

    def cut(self, name: str, rid) -> tuple[dict[int, int], list]:
        """For a join of ``(name, rid)`` now: how many messages from each rank are held
        (counted as received, not in the state) and those of them that were sent before
        their sender's marker of this round (they go into the part as late)."""
        unreceived: dict[int, int] = {}
        for h in self.held:
            unreceived[h.env.src] = unreceived.get(h.env.src, 0) + 1
        return unreceived, [h.env for h in self.held if (name, rid) not in h.marked]

    def join(self, name: str, rid, part: Part) -> None:
        self.joined[(name, rid)] = part

    def release(self) -> list:
        """The held messages no round left unjoined holds back, in arrival order."""
        marked = self._marked()
        out, keep, stuck = [], [], set()
        for h in self.held:
            src = h.env.src
            if src in marked or src in stuck:
                stuck.add(src)
                keep.append(h)
            else:
                out.append(h.env)
        self.held = keep
        return out

    def sealed(self, name: str, rid) -> Part:
        return self.joined.pop((name, rid))

    def reset(self) -> None:
        """A rollback: the parts under way and the messages held belong to the execution
        abandoned."""
        self.joined.clear()
        self.held.clear()
        self.parked, self.finished = 0, False


class JoinsRounds(PlannedLevel):
    """Mixin under ReadyMessageFlush, StandbyReplacement, RSBackup and GroupCoordination (once in a stack's
    MRO): performs ``Joins`` for every level. A level calls ``add_round_level`` at its
    ``on_start``, ``join_round`` to begin or join a round, ``joined_at_safe_point`` at
    its safe point, ``marker_taken`` after its flush took a control message, and
    implements ``joining_round`` (its bookkeeping, its marker's data), ``round_sealed`` (its own work with
    the sealed part) and, if it places rounds for idle ranks, ``rounds_to_begin_now``."""

    def _joins_machine(self) -> Joins:
        joins = self.__dict__.get("_joins")
        if joins is None:
            joins = self._joins = Joins(self.rank)
            self._joining, self._round_flushes, self._sealing = None, {}, {}
        return joins

    def add_round_level(self, name: str, flush, is_round=lambda rid: True) -> None:
        """Level ``name`` takes rounds on ``flush`` (a ``flush.Flush``; ``is_round``
        picks its checkpoint rounds among them)."""
        self._joins_machine().add_level(name, lambda: flush.rounds, is_round,
                                        lambda rid: self.round_members(name, rid))
        self._round_flushes[name] = flush

    def joining_part(self, name: str):
        """The round of level ``name`` whose part ``protocol_state`` is being taken for
        now (None: another level's, or a snapshot of another kind)."""
        joining = self.__dict__.get("_joining")
        return joining[1] if joining is not None and joining[0] == name else None

    # ------------------------------------------------------------- levels' hooks
    def joining_round(self, name: str, rid) -> Any:
        """This rank joins round ``rid`` of level ``name`` now, before its state is taken:
        the level's bookkeeping; returns its marker's data."""
        return None

    def round_agreed(self, name: str, rid, values: dict, protocols: dict) -> None:
        """Every marker of level ``name``'s round ``rid`` is in: ``values`` are the
        markers' data (a decision rank 0's marker carried); the level takes it, and puts
        it into ``protocols``, its part's protocol state (taken when it joined, before it
        was known), so a rank restored from the part goes on as the others do."""

    async def round_sealed(self, name: str, rid, part: Part, blob: bytes, values: dict,
                           line) -> None:
        """Level ``name``'s part of ``rid`` is sealed (``blob``); ``values``: the
        markers' data; ``line``: the round's recovery line (its furthest part)."""

    def round_also(self, name: str, rid) -> tuple:
        """Ranks level ``name``'s markers of ``rid`` go to beyond the channels in use
        (where control messages of its own must have arrived by the round's end)."""
        return ()

    def round_members(self, name: str, rid) -> tuple | range:
        """The ranks of level ``name``'s round ``rid`` (sorted, this rank among them):
        every rank, or a group's members (GroupCoordination)."""
        return range(self.size)

    def rounds_to_begin_now(self, name: str) -> list:
        """Rounds level ``name`` wants begun by a rank that joins at once (ready_flush:
        the positions the coordinator placed)."""
        return []

    # ------------------------------------------------------------------- joining
    def join_round(self, name: str, rid) -> asyncio.Task | None:
        """Begin or join round ``rid`` of level ``name`` now: this rank's state now is its
        part (module docstring), its markers go to every rank; returns the task that
        seals the part once every marker is in (None: joined already)."""
        joins, ft, flush = self._joins_machine(), self.ft, self._round_flushes[name]
        r = None if flush.rounds is None else flush.rounds.rounds.get(rid)
        if (name, rid) in joins.joined or (r is not None and r.members is not None):
            return None
        unreceived, late = joins.cut(name, rid)
        value = self.joining_round(name, rid)
        state = ft.state_now(unreceived=unreceived, global_cut=True)
        self._joining = (name, rid)
        try:
            protocols = self.protocol_state()
        finally:
            self._joining = None
        part = Part(state, protocols, ft.position, ft.link.clock(), list(late))
        joins.join(name, rid, part)
        # markers on the channels in use (and lazily before the first message on another,
        # ``Flush.before_send``); the root tells every rank the round began
        flush.start(ft, name, rid, self.round_members(name, rid), value,
                    also=self.round_also(name, rid), at=ft.position, announce=True)
        self._release_held()
        return self._spawn_seal(name, rid)

    def _spawn_seal(self, name: str, rid) -> asyncio.Task:
        key = (name, rid)
        task = self._sealing[key] = self.ft_spawn(self._seal_round(name, rid))
        task.add_done_callback(
            lambda t: self._sealing.pop(key) if self._sealing.get(key) is t else None)
        return task

    async def _seal_round(self, name: str, rid) -> None:
        flush = self._round_flushes[name]
        values = await flush.wait(self.ft, rid)
        line, sources = flush.last_line, set(flush.last_sources)
        part = self._joins_machine().sealed(name, rid)
        # in transit at the cut only from a member that had sent to this rank before its
        # part (its start marked this rank): a member that had not may have sent since,
        # with no marker before it once every member had joined
        part.late = [env for env in part.late if env.src in sources]
        self.round_agreed(name, rid, values, part.protocols)
        blob = self.ft.seal_state(part.state, part.protocols, part.late)
        await self.round_sealed(name, rid, part, blob, values, line)

    def join_all_now(self) -> None:
        """Join every round under way, of every level, now (the rank is idle)."""
        joins = self._joins_machine()
        if not self.ft.can_snapshot_now(after_loop=True):
            return  # a restored rank re-running the code before its resume point
        for name in list(joins.levels):
            for rid in self.rounds_to_begin_now(name) + joins.unjoined(name):
                self.join_round(name, rid)

    def _release_held(self) -> None:
        for env in self._joins_machine().release():
            env = super().on_receive(env)
            if env is not None:
                self.ft.deliver_now(env)

    async def joined_at_safe_point(self, name: str, begin: list) -> None:
        """At a safe point: begin the rounds ``begin`` and join level ``name``'s rounds
        under way with this safe point's state, then wait here until their parts are
        sealed (rounds that begin meanwhile are joined at once: the rank is parked)."""
        joins = self._joins_machine()
        seals = [self.join_round(name, rid) for rid in begin + joins.unjoined(name)]
        joins.parked += 1
        try:
            for seal in [t for t in seals if t is not None]:
                await seal
        finally:
            joins.parked -= 1

    def _quiet(self) -> bool:
        """No level has a round here (begun, heard of or sealing) and no message is held:
        then no message is held or late and no round is to be joined, so the hooks pass
        each message on untouched (what every message tests first)."""
        joins = self.__dict__.get("_joins")
        if joins is None:
            return True
        if joins.joined or joins.held:
            return False
        for flush in self._round_flushes.values():
            if flush.rounds is not None and flush.rounds.rounds:
                return False
        return True

    def _must_join(self) -> bool:
        joins = self._joins_machine()
        wants = ((not self._quiet() and joins.pending())
                 or any(self.rounds_to_begin_now(n) for n in joins.levels))
        received = self.ft.received
        return wants and joins.must_join_now(self.ft.blocked, lambda src: received[src] == 0)

    def marker_taken(self) -> None:
        """A level's flush took a control message: a round may have begun that this
        idle rank must join now."""
        if self._must_join():
            self.join_all_now()

    # ------------------------------------------------------------------ hooks
    def on_send(self, env):
        # none before the first round level (a level keeping another protocol's parts
        # takes no rounds: its first send may come before anything made the machine)
        if not self._quiet():
            for name, flush in self._round_flushes.items():
                flush.before_send(self.ft, name, env.dst)
        return super().on_send(env)

    def on_receive(self, env):
        if not self._quiet() and self._joins_machine().arrive(env):
            return None
        return super().on_receive(env)

    def on_blocked(self) -> None:
        """``main()`` waits for a message that may come only after a round: join now."""
        if self._must_join():
            self.join_all_now()
        super().on_blocked()

    async def on_finish(self) -> None:
        """``main()`` returned: its state is final, every round under way or to come
        takes it."""
        self._joins_machine().finished = True
        self.join_all_now()
        await super().on_finish()

    def moving_state(self) -> dict:
        """A migration carries the messages held and the parts not sealed yet (the
        mover's rounds under way go on in its new process)."""
        joins = self._joins_machine()
        return {**super().moving_state(), "joins": (list(joins.held), dict(joins.joined))}

    def restore_protocol_state(self, state: dict) -> None:
        super().restore_protocol_state(state)
        self._moved_joins = state.get(MOVED, {}).get("joins")

    async def on_restored(self) -> None:
        joins = self._joins_machine()
        joins.reset()
        for task in list(self._sealing.values()):  # a survivor's parts of rounds abandoned
            task.cancel()
        self._sealing.clear()
        moved, self._moved_joins = self.__dict__.get("_moved_joins"), None
        if moved is not None:  # the same execution in a new process
            joins.held, joins.joined = list(moved[0]), dict(moved[1])
            for name, rid in joins.joined:
                self._spawn_seal(name, rid)
        await super().on_restored()
