"""GroupCoordination: group-based checkpoint/restart with inter-group message logging.

Paper: group-based-checkpoint.txt (Ho, Wang & Lau, 2008), Algorithm 1, sections 3-4.
Measured by ``ftactors bench groups`` (the paper's Figures 5-9). Group sets are kept in
the object store by the coordinator, not on stable storage.

Theory of operation
-------------------
*Groups* (``groups`` option: a definition file or a policy, ``protocols/shared/units.py``;
default groups of ceil(sqrt(n)) consecutive ranks). A group checkpoints alone
(``group_checkpoint_interval``: an int, or ``{group index: int}``): a member due at a
safe point begins a round of its group, ready messages flush the channels between its
members only (CoCheck restricted to the group), each member saves its part, and the
other groups keep computing. Members need not be in step (a farm's master turns once per
message, a worker once per task; loops of different lengths; a member that has returned):
each joins the round as ``shared/joining.py`` says (its next safe point; or at once,
with its state now, when it blocks on a message that may come only after the round, or
once ``main()`` has returned), the round's members being the group's
(``round_members``). Only the group's channels are cut: a message from another group is
never held or added late to a part; it counts where it is received (R_X below), and its
sender logs it.

*Counters* are counted in messages, not bytes: the core's application sequence numbers
(``Endpoint.sent`` / ``received``, per peer) are S_X and R_X, and they identify each
message exactly, which byte counts cannot once messages differ in size. At a group
checkpoint a member records RR_X = R_X for every out-of-group peer X.

*Logging* (sender side): every message to a rank outside the sender's group is kept in
the sender's log (a reference to the already pickled message, appended when it is sent:
nothing is copied or written on the send's path); intra-group messages never are. The log
is part of the sender's snapshot, so it is saved with the group's checkpoint.

*Hand-off*: a member reports its part and goes on computing; the coordinator takes the
part (``PartTaker``) while it runs. Waiting for the report and the take cost every member
three Ray control-plane hops per checkpoint (the report, the coordinator's drain, its
call back: 25-30 ms under load on 2 cores, against a 6 ms flush); on the direct plane
that made a checkpoint on Ray several times dearer than the protocol's own work, and
waiting for the report alone measured no clear gain. Not waiting is safe here: a restart
uses complete sets only and logs are trimmed only once a set is complete (below), so a
member that dies before its part is taken (or its report sent) leaves that set
incomplete and its group restarts from the one before, with the logs that cover it. The
price: a failure within those hops of a checkpoint loses one interval more than it
would have (ReadyMessageFlush, whose tests pin "a failure after a checkpoint restarts
from it", waits for a copy at a holder rank), and a report still travelling when the run ends is not in its
timeline. Not waiting is bounded: a member that has made ``PARTS_AHEAD_MAX`` (3) parts
past its group's newest complete set (``group_commit`` tells it) waits at its next group
checkpoint until one completes. The levels of a stack keep every copy from that set on
(``parts_floor``), so this bounds what they hold; it stalls a member only when the
coordinator is that far behind, where its pending parts would grow without bound too.

*Garbage collection*: once a group checkpoint is complete (every member's part is kept by
the coordinator), each member piggybacks RR_X on its next message to each out-of-group X;
X then drops from its log for that member every message numbered below RR_X: the
member's restart line already holds them.

*Restart of one group* (the recovery policy): the group of every failed rank restarts
from its last complete group checkpoint (or the start), in new actors; every other rank
goes on. First every other rank is *fenced*: it learns the new incarnations (so what
the dead lives still had in flight is dropped) and reports its R for the restarted
ranks, final until their new lives send; one that is itself running again after an
earlier restart and has not yet sent again all that a restarted rank's part holds from
it skips those messages when it gets there (they would be orphans of the new line).
Then each of them resends from its log what
the restarted ranks had not received at their checkpoint (their restored R), up to
the fence (later messages already went to the new lives); a restarted rank records
``group_caught_up`` once it holds all of them. The restarted ranks in turn resend to
the others, from their restored logs, what those lack below the parts' counts (a
message sent before the checkpoint but still in flight at the failure was dropped with
the dead life's traffic). The restarted ranks start with the
fenced R of every peer (restore notes) and skip sending the messages below it (the
"skip" of Algorithm 1, done at the sender); a skipped message is still logged, since
its receiver may later roll back past it.
Messages between two restarted groups are resent from the restored logs the same way,
and skipped the same way: a group checkpoint's report carries each part's R, so the
coordinator knows what a restarted peer will hold before it starts. Whatever the skip
misses would still be dropped by the receivers' sequence numbers. Piecewise
determinism is assumed, as everywhere in ftactors: a restarted rank resends the same
messages with the same numbers. A part taken off a safe point (a member that joined
while blocked, or after returning) is re-executed from its base, and the re-execution
does not send again what the part had sent (``Endpoint.sent_at_cut``): the members'
parts hold those sent inside the group, and the restored log holds those sent to other
groups, so the restarted rank's own fence and skip count up to ``sent_at_cut``, not its
base's ``sent``: what a peer outside the group lacks below it is resent from the log,
and nothing is sent twice (``GroupMember.restored``).

*In a stack* (``class S(StandbyReplacement, GroupCoordination, App)``) every part is
also handed to the levels (``on_part``; ``hands_parts``), and the restart of a group
takes each part from the cheapest level that keeps a copy, this protocol's own copy last
(``runtime/_escalation.PartLevels``). There a set every member *reported* is a restart
line as soon as the levels hold all its parts, even where the coordinator has not taken
them all yet: a member reports after handing its part to the levels, and the takes are
calls into the members' processes, so a node lost within those hops of a checkpoint
(measured on a loaded machine: 0.5 s and more) would otherwise send its group back to an
older set, or to the start, though the copies of the newer one were safe on another
node. The restart tries the group's reported sets newest first and falls back to its
newest complete set; the set it restores becomes that group's complete set.

*Footprint* (bounded whatever the run's length): per group, the newest complete group
set in the object store and the sets still being taken (at most ``PARTS_AHEAD_MAX``: an
older set that never completes is dropped when a newer one does); each sender's log holds its messages to
other groups sent since their receiver's group last checkpointed (the RR piggyback
drops the rest), so about two checkpoint intervals of inter-group traffic (sim-check
checks that bound). Measured by ``ftactors bench footprint``.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ftactors.engine import DETS, Envelope
from ftactors.runtime import CONSISTENCY, LEVEL

from ..shared.determinants import ReplaysDeterminants
from ..shared.flush import Flush
from ..shared.joining import JoinsRounds, Part
from ..shared.parts import HeldParts
from ..shared.units import Groups, load_groups, of_unit
from .machine import GroupMember
from .options import OPTIONS, group_settings

NAME = "groups"


@dataclass(slots=True)  # a misspelt field fails, not becomes a new attribute
class _GroupState:
    """One rank's GroupCoordination state (under ``self._gc``): the member's machine and
    what the rank side keeps around it."""

    member: GroupMember
    flush: Flush = field(default_factory=Flush)
    parts: HeldParts = field(default_factory=HeldParts)  # until the coordinator takes them
    completed: asyncio.Event = field(default_factory=asyncio.Event)  # ``complete`` moved
    nondet: dict = field(default_factory=dict)  # position -> determinants counted there


class GroupCoordination(ReplaysDeterminants, JoinsRounds):
    """Mixin: group checkpoints, inter-group message logs, restart of one group; the
    decisions are ``GroupMember``'s (``machine.py``), performed here."""

    protocol_name = NAME
    roles = {CONSISTENCY: "group cuts and inter-group message logs",
             LEVEL: "the driver's object store"}
    stacks_with = ("standby",)
    stack_order = 2
    level_cost = 3
    uses_spares = True
    needs_safe_points = True
    hands_parts = True
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, options: dict) -> None:
        group_settings(options)
        super().check_options(options)

    # ------------------------------------------------------------------ start
    async def on_start(self) -> None:
        settings = group_settings(getattr(self, "options", {}))
        groups = load_groups(settings["groups"], self.size)
        self._gc = _GroupState(GroupMember(
            self.rank, groups, of_unit(settings["group_checkpoint_interval"],
                                       groups.group_of(self.rank))))
        self._record_determinants(self.my_group())
        self.ft.keep_base = True  # a round may take this rank's state between safe points
        self.add_round_level(NAME, self._gc.flush)
        await super().on_start()

    def part_units(self) -> Groups:
        return self._gc.member.groups

    def parts_floor(self) -> tuple | None:
        return self._gc.member.complete

    def my_group(self) -> tuple[int, ...]:
        return self._gc.member.members()

    # ----------------------------------------------------------- message path
    def on_send(self, env: Envelope) -> Envelope | None:
        env = super().on_send(env)
        if env is None:
            return None
        send, rr, skip_over, logged = self._gc.member.outgoing(env)
        if logged:
            self.ft.logged_bytes += logged
        if skip_over:
            self.ft.events.record("group_skipped", messages=self._gc.member.skipped)
        if not send:
            return None
        if rr is not None:
            env.piggyback = {**(env.piggyback or {}), NAME: rr}
        return env

    def on_receive(self, env: Envelope) -> Envelope | None:
        rr = env.piggyback.get(NAME) if env.piggyback else None
        member = self._gc.member
        # most receives carry no RR and wait for no resend: no call into the machine
        if (rr is not None or member.expect is not None) and member.incoming(
                env.src, rr, self.ft.received):
            self.ft.events.record("group_caught_up")
        return super().on_receive(env)

    # ------------------------------------------------------------ checkpoints
    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        gc, pos = self._gc, self.ft.position
        due = gc.member.due(iteration, pos)
        while due and gc.member.held_back():  # see "Hand-off"
            gc.completed.clear()
            await gc.completed.wait()
            due = gc.member.due(iteration, pos)
        # its own round here, and the rounds other members began: this safe point's state
        await self.joined_at_safe_point(NAME, [("ckpt", pos)] if due else [])

    def round_members(self, name: str, rid) -> tuple:
        if name != NAME:
            return super().round_members(name, rid)
        return tuple(sorted(self.my_group()))

    def joining_round(self, name: str, rid):
        if name != NAME:
            return super().joining_round(name, rid)
        self._gc.member.joined(tuple(rid[1]))  # saved in the part: not begun again
        return None

    async def round_sealed(self, name: str, rid, part: Part, blob: bytes, values: dict,
                           line) -> None:
        """Every marker of the group's round is in: hold this member's part for the
        coordinator, hand it to the stack's levels, report it with its R_X."""
        if name != NAME:
            return await super().round_sealed(name, rid, part, blob, values, line)
        gc, ft = self._gc, self.ft
        member, pos = gc.member, tuple(rid[1])
        flushed_at = ft.link.clock()
        held = list(part.state["received"])  # R_X in the part
        for env in part.late:
            held[env.src] += 1
        member.checkpointed(pos, [(x, n) for x, n in enumerate(held) if n])
        # a restart from this part replays its own determinants from its base's count
        # on, and needs the peers' copies of those recorded after it was taken: keep
        # from the base's (the rank may have gone on past the part before it sealed)
        gc.nondet[pos] = part.state["nondet"]
        t0 = time.perf_counter()
        gc.parts.hold(pos, blob)  # until the coordinator takes it; this rank goes on
        self.on_part(pos, blob)  # and the stack's levels keep copies
        n_log, log_bytes = member.log_size()
        ft.link.report(ft.events.make(  # not waited for either: see "Hand-off"
            "group_checkpoint_part", group=member.groups.group_of(self.rank), position=pos,
            bytes=len(blob), flush_s=flushed_at - part.at, save_s=time.perf_counter() - t0,
            log_messages=n_log, log_bytes=log_bytes, received=held,
            part_position=part.position))

    def ft_rpc_group_part(self, position) -> bytes:
        return self._gc.parts.give(tuple(position))

    def ft_rpc_group_commit(self, position) -> None:
        """The group checkpoint at ``position`` is complete: piggyback its RR values; the
        levels may drop copies of older parts, and a member held back may go on."""
        gc, position = self._gc, tuple(position)
        if gc.member.committed(position):
            gc.completed.set()
        count = gc.nondet.pop(position, None)
        for old in [p for p in gc.nondet if p < position]:
            del gc.nondet[old]
        if count is not None:  # this rank restarts from there or later: see ``determinants``
            self.ft.determinants.set_floor(count)

    # ------------------------------------------------------------------ restart
    def ft_rpc_group_received(self) -> list[int]:
        """R_X of this (restored) rank for every X."""
        return list(self.ft.received)

    def ft_rpc_group_fence(self, epochs: dict, held: dict) -> list[int]:
        """Ranks restart as ``epochs`` {rank: new incarnation}, holding ``held`` {rank:
        messages from this rank in its restored state}: from now on drop what their old
        lives still had in flight, and return R_X for every X (final for them until
        their new lives send). A rank that is itself running again after a restart may
        not have sent again all a restarted rank holds: it skips those."""
        ft = self.ft
        epochs = {int(rank): epoch for rank, epoch in epochs.items()}
        for rank, epoch in epochs.items():
            ft.set_peer_epoch(rank, epoch)
        self._gc.member.fence(epochs, {int(r): n for r, n in held.items()}, ft.sent)
        return list(ft.received)

    def ft_rpc_group_resend(self, received: dict) -> int:
        """``received`` {rank: how many messages from this rank it holds} for the
        restarted ranks (and, on a restarted rank, for the others too): resend from the
        log what they lack, in order, up to the fence (what was sent after it, or after a
        restored part, is sent by running on); returns how many, and where the resends
        end for each of them."""
        ft = self.ft
        received = {int(rank): n for rank, n in received.items()}
        envs, upto = self._gc.member.resend(received, ft.sent)
        first = set()
        for env in envs:
            if env.dst not in first:  # it may have lost what the first copies carried
                first.add(env.dst)
                env.piggyback = {DETS: ft.determinants.resent(env.dst)}
            ft.transmit(env)
        ft.events.record("group_resent", to=sorted(received), messages=len(envs),
                         bytes=sum(env.payload.nbytes for env in envs))
        return {"messages": len(envs), "upto": upto}

    def ft_rpc_group_expect(self, upto: dict) -> None:
        """The resends end at ``upto`` {peer: app_seq}: record ``group_caught_up`` once
        every one of them is here (the restarted rank is back to normal execution)."""
        if self._gc.member.expect_resends({int(x): n for x, n in upto.items()},
                                          self.ft.received):
            self.ft.events.record("group_caught_up")

    async def on_finish(self) -> None:
        member = self._gc.member
        self.ft.events.record("group_log_total", messages=member.logged[0],
                              bytes=member.logged[1], collected=member.collected,
                              skipped=member.skipped)
        await super().on_finish()

    # ------------------------------------------------------------------ state
    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        self._gc.flush.take_marker(self.ft, env)
        self.marker_taken()

    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        state[NAME] = self._gc.member.state()
        return state

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        self._gc.member.restore(state[NAME])

    async def on_restored(self) -> None:
        await self._replay_determinants()
        gc = self._gc
        gc.flush.reset()
        gc.nondet.clear()
        gc.member.restored(self.ft.restore_notes.get(NAME, {}), self.ft.sent,
                           self.ft.sent_at_cut)
        if gc.member.skip:
            self.ft.events.record("group_skip", upto=dict(gc.member.skip))
        await super().on_restored()
        self.ft.restored_from = None
