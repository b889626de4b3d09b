"""GroupCoordination's decisions for one member, in plain Python (no asyncio, no
transport): Algorithm 1 of the paper (Ho, Wang & Lau, 2008) as events in, effects out.

``GroupMember`` keeps the member's inter-group log, its RR values per checkpoint, the RR
it owes each peer (piggybacked on its next message there), the skip after a restart, the
fence counts and the resends a restarted member waits for. Each method takes one event
(a message sent or received, a group checkpoint taken, a set committed, a fence, a resend
asked, a restore) and returns what the rank must do: send or drop, piggyback, transmit
again, record. The mixin (``rank.py``) performs those effects; ``tests/protocols/
test_group_machine.py`` drives two members step by step with no transport. The theory of
operation is in ``rank.py``'s docstring.

Counts are the core's application sequence numbers: ``sent[x]`` messages to ``x`` so
far, ``received[x]`` from ``x``; the machine is handed them, it does not keep them.
"""
from __future__ import annotations

from typing import Sequence

from ftactors.engine import APP, Envelope

from ..shared.units import Groups

PARTS_AHEAD_MAX = 3
"""Parts a member may have made past its group's newest complete set before its next
group checkpoint waits for one of them to complete (back-pressure): the levels keep
every copy from the newest complete set on, so this bounds what they hold per rank."""


class GroupMember:
    """One rank's GroupCoordination state and rules (see the module docstring)."""

    __slots__ = ("rank", "groups", "interval", "log", "rr", "piggyback", "last", "complete",
                 "ahead", "skip", "fenced", "expect", "collected", "skipped", "logged")

    def __init__(self, rank: int, groups: Groups, interval: int | None):
        self.rank = rank
        self.groups = groups
        self.interval = interval      # iterations between this group's checkpoints
        self.log: dict[int, dict[int, Envelope]] = {}  # dst -> {app_seq: Envelope}
        self.rr: dict[tuple, dict[int, int]] = {}  # position -> {peer: RR} (not committed)
        self.piggyback: dict[int, int] = {}  # peer -> RR to send on the next message
        self.last: tuple | None = None       # position of the last group checkpoint
        self.complete: tuple | None = None   # newest complete set of this rank's group
        self.ahead: list[tuple] = []         # parts made past it
        self.skip: dict[int, int] = {}       # dst -> messages it holds (after a restart)
        self.fenced: dict[int, int] = {}     # restarting rank -> sent to it at the fence
        self.expect: dict[int, int] | None = None  # after a restart: peer -> resends end
        self.collected = 0                   # log entries dropped by garbage collection
        self.skipped = 0                     # messages not sent again thanks to skip
        self.logged = [0, 0]                 # messages, bytes ever logged

    def same_group(self, other: int) -> bool:
        return self.groups.same_group(self.rank, other)

    def members(self) -> tuple[int, ...]:
        return self.groups.members(self.rank)

    # ----------------------------------------------------------- message path
    def outgoing(self, env: Envelope) -> tuple[bool, int | None, bool, int]:
        """This rank sends ``env``: log it if it crosses groups. Returns ``(send,
        piggyback, skip_over, logged)``: whether to send it (False: the peer holds it
        already, after a restart), the RR to piggyback on it (None: none owed), whether
        this send ended the last skip (record ``group_skipped``), and the bytes logged."""
        dst = env.dst
        inter = not self.same_group(dst)
        logged = 0
        if inter:
            self.log.setdefault(dst, {})[env.app_seq] = Envelope(
                APP, env.src, dst, env.comm, env.tag, env.app_seq, env.payload)
            logged = env.payload.nbytes
            self.logged[0] += 1
            self.logged[1] += logged
        skip_over = False
        if dst in self.skip:
            if env.app_seq < self.skip[dst]:
                self.skipped += 1
                return False, None, False, logged
            del self.skip[dst]
            skip_over = not self.skip
        return True, self.piggyback.pop(dst, None) if inter else None, skip_over, logged

    def incoming(self, src: int, rr: int | None, received: Sequence[int]) -> bool:
        """A message from ``src`` arrives, carrying ``rr`` (None: no RR piggybacked):
        ``src`` holds everything numbered below it in its restart line, so the log drops
        those. Returns whether this rank just caught up with its resends (record
        ``group_caught_up``); ``received``: the counts, this message counted."""
        if rr is not None:
            log = self.log.get(src)
            if log:
                for seq in [s for s in log if s < rr]:
                    del log[seq]
                    self.collected += 1
        return self.caught_up(received) if self.expect is not None else False

    def log_size(self) -> tuple[int, int]:
        """(messages, bytes) in the log."""
        envs = [e for log in self.log.values() for e in log.values()]
        return len(envs), sum(e.payload.nbytes for e in envs)

    # ------------------------------------------------------------ checkpoints
    def due(self, iteration: int, position: tuple) -> bool:
        """Whether this group checkpoints at ``iteration`` (at ``position``)."""
        every = self.interval
        return bool(every and iteration > 0 and iteration % every == 0
                    and (self.last is None or position > self.last))

    def joined(self, position: tuple) -> None:
        """This member joined its group's round at ``position`` (the position of the
        safe point where a member began it; its own part may be taken elsewhere,
        ``shared/joining.py``): it begins no round at or before it."""
        if self.last is None or position > self.last:
            self.last = position

    def held_back(self) -> bool:
        """Whether the next checkpoint must wait for a set to complete first: this member
        made ``PARTS_AHEAD_MAX`` parts past its group's newest complete set."""
        return len(self.ahead) >= PARTS_AHEAD_MAX

    def checkpointed(self, position: tuple, received: list[tuple[int, int]]) -> None:
        """The group's channels are flushed for the round at ``position`` and this
        member's part is sealed; ``received``: the part's nonzero ``(peer, R)`` counts.
        RR_X = R_X for the peers outside the group heard from (an RR of 0 lets a sender
        drop nothing)."""
        self.ahead.append(position)
        self.joined(position)
        self.rr[position] = {x: n for x, n in received if not self.same_group(x)}

    def committed(self, position: tuple) -> bool:
        """The group set at ``position`` is complete: its RR values are owed to their
        peers. Returns whether the newest complete set moved (a held-back member may go
        on)."""
        moved = self.complete is None or position > self.complete
        if moved:
            self.complete = position
            self.ahead = [p for p in self.ahead if p > position]
        rr = self.rr.pop(position, None)
        for old in [p for p in self.rr if p < position]:
            del self.rr[old]
        if rr is not None:
            self.piggyback.update(rr)
        return moved

    # ------------------------------------------------------------------ restart
    def fence(self, epochs: dict[int, int], held: dict[int, int],
              sent: Sequence[int]) -> None:
        """Ranks ``epochs`` restart, holding ``held[rank]`` messages from this rank in
        their restored parts: what this rank sent them so far ends their resends; it
        skips what a restarted rank holds beyond what it sent again since its own
        restart; a rank rolled back no longer holds what it held."""
        for rank in epochs:
            self.fenced[rank] = sent[rank]
            self.skip.pop(rank, None)
            if held[rank] > sent[rank]:
                self.skip[rank] = held[rank]
            if self.expect is not None:
                self.expect.pop(rank, None)

    def resend(self, received: dict[int, int], sent: Sequence[int]
               ) -> tuple[list[Envelope], dict[int, int]]:
        """``received`` {rank: messages from this rank it holds} for the restarted ranks
        (and, on a restarted rank, the others): the logged messages they lack, in order,
        up to the fence (later ones go by running on), and where the resends end for
        each."""
        out, upto = [], {}
        for rank, since in received.items():
            if rank == self.rank or self.same_group(rank):
                continue
            end = self.fenced.pop(rank, sent[rank])
            log = self.log.get(rank, {})
            for seq in sorted(s for s in log if since <= s < end):
                env = log[seq]
                out.append(Envelope(APP, env.src, env.dst, env.comm, env.tag, env.app_seq,
                                    env.payload))
            upto[rank] = end
        return out, upto

    def expect_resends(self, upto: dict[int, int], received: Sequence[int]) -> bool:
        """The resends to this restarted rank end at ``upto`` {peer: app_seq}. Returns
        whether it holds them all already (record ``group_caught_up``)."""
        self.expect = {x: n for x, n in upto.items() if received[x] < n}
        return self.caught_up(received)

    def caught_up(self, received: Sequence[int]) -> bool:
        """Whether the last resend this rank waited for is here now."""
        if self.expect is None:
            return False
        for x in [x for x, n in self.expect.items() if received[x] >= n]:
            del self.expect[x]
        if self.expect:
            return False
        self.expect = None
        return True

    # ------------------------------------------------------------------ state
    def state(self) -> dict:
        """What a snapshot keeps: the log, the last checkpoint, the RR owed."""
        return {"log": {d: dict(v) for d, v in self.log.items()}, "last": self.last,
                "piggyback": dict(self.piggyback)}

    def restore(self, state: dict) -> None:
        self.log = {d: dict(v) for d, v in state["log"].items()}
        self.last = None if state["last"] is None else tuple(state["last"])
        self.piggyback = dict(state["piggyback"])

    def restored(self, notes: dict, sent: Sequence[int],
                 sent_at_cut: Sequence[int] | None = None) -> None:
        """This rank runs again from its restored part (of a complete set), with the
        restart's ``notes`` {peer: messages it holds from this rank}: skip sending those
        again; its own fence is what its part had sent: from there it sends by running
        on, so a resend from its log stops there. A part taken off a safe point
        (``sent_at_cut``: what it had sent when it was taken, beyond its base's ``sent``)
        is re-executed from its base, and the re-execution does not send again what
        the part had sent (``Endpoint.send_app``): its log holds those (it is the
        part's), so the fence is there and a peer that lacks them gets them resent."""
        self.rr.clear()
        self.complete, self.ahead = self.last, []
        upto = list(sent) if sent_at_cut is None else [max(a, b) for a, b in
                                                        zip(sent, sent_at_cut)]
        self.skip = {int(x): n for x, n in notes.items() if n > upto[int(x)]}
        self.fenced = {x: n for x, n in enumerate(upto) if x != self.rank}
