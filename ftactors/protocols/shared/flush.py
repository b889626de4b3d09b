"""Ready-message channel flushing (CoCheck, section 4), shared by the protocols.

Theory of operation: every participant sends a *ready message* (a marker) on its
channels to the other participants and then keeps receiving. Channels are FIFO, so once
a participant holds the markers of a round from all its peers, every application
message they sent before their marker has arrived: it was received already or waits in
the matcher, and a snapshot taken now captures it. Nothing addressed to this rank from
those peers is in transit, which makes the set of snapshots of one round a consistent
global state (no message lost, none received but not sent). A participant's channel to
itself needs no marker: the endpoint receives a message to self as it is sent. For the last point, a
snapshot must leave out what a peer sent *after* its marker (a fast peer finishes its
round and computes on while this rank still waits for other markers): ``last_cut`` holds
each peer's receive count at its marker, for ``Endpoint.snapshot(cut=)``.

*Only channels that carried messages are flushed.* CoCheck sends a marker on every
channel, n(n-1) per round: at 4,096 ranks 16.8 million markers, where a halo program's
ranks talk to a dozen peers each. Here a participant sends its marker only to the peers
it has ever sent an application message to (``sent`` is not zero: no other channel can
hold one of its messages in transit) and to those its protocol names (``also``: where
control messages of its own must have arrived by the round's end), and the receiver learns how many markers
to wait for from the round's *root*, the first participant: each participant tells the
root to whom it sent markers, and the root, once it heard from every participant, tells
each one its count. A peer that sent no marker had sent this rank nothing before its
snapshot, so whatever arrived from it is cut at 0. The guarantee is CoCheck's (every
message sent before a participant's marker is received before the receiver's snapshot,
none sent after it is in it), at 2(n-1) messages through the root plus one per channel
in use. The root does O(n) work per round, once; no participant does O(n) work.

*Rounds joined out of step* (``joining.py``: a rank joins a round it has heard of, at its
own moment) need two more things, still without a marker on every channel. A member
must hear of a round although no joiner ever sent to it: the root, hearing of a round
for the first time, tells every member the first joiner did not mark that it began
(``flush_begin``, at most n - 1 messages a round). And a receiver that has not joined
must know every message sent after its sender's part: a joined participant that sends
on a channel its start left unmarked (nothing was ever sent on it) sends a *lazy*
marker first (``before_send``), until the root's count tells it every member has
joined; a lazy marker is not in the root's count (the receiver counts the others,
``counted``), and the cut of its channel is 0, as for a peer that sent no marker.

A marker may carry a small value (for example rank 0's decision on when to take the next
backup) so that one exchange also makes the participants agree: the root hands every
participant the values of all of them (``wait`` returns them). A participant may also
tell the root where its part of the round resumes (``at``, a safe-point position: ranks
that join a round out of step take their parts at different places); the root hands
every participant the furthest of them, the round's *recovery line* (``last_line``).

The rules are a machine, ``FlushRounds`` (one rank's side of every round: events in, the
control messages to send out, no I/O), stepped by ``tests/protocols/test_flush_machine.py``
with several ranks' machines and their application messages carried by the test;
``Flush`` performs its sends on the endpoint and waits for a round to complete.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

from ftactors.base import ProtocolError
from ftactors.engine import Wait

OPS = ("marker", "flush_count", "flush_go", "flush_begin")
"""The control operations a protocol hands to ``Flush.take``."""


def checkpoint_position(nexts: Iterable[tuple | list | None]) -> tuple | None:
    """The position of a requested checkpoint from every rank's next safe point: the
    furthest one (each rank waits at its own until told), or None when a rank has none
    left (it left its loop: no position is reachable by all)."""
    nexts = list(nexts)
    if any(p is None for p in nexts):
        return None
    return max(tuple(p) for p in nexts)


@dataclass(frozen=True)
class Send:
    """Effect: send control message ``op`` with ``data`` to the ranks ``to``."""

    to: tuple[int, ...]
    op: str
    data: Any


@dataclass(slots=True)
class _Round:
    """One flush round as one participant sees it."""

    cuts: dict = field(default_factory=dict)      # peer -> receive count at its marker
    markers: dict = field(default_factory=dict)   # peer -> its marker's value
    expected: int | None = None                    # markers to wait for (from the root)
    counted: int = 0                               # markers in that count that came
    marked_to: set = field(default_factory=set)    # this rank's start: whom it marked
    values: dict | None = None                     # every participant's value (from the root)
    line: tuple | None = None                      # the furthest part's position (from the root)
    sources: tuple = ()                            # who marked this rank at their start (root)
    members: Sequence[int] | None = None           # this rank's start: whom the round joins
    # the root's side: participants heard from, markers per destination, their values
    heard: int = 0
    heard_from: set = field(default_factory=set)  # (named in a wait record)
    counts: dict = field(default_factory=dict)
    given: dict = field(default_factory=dict)
    froms: dict = field(default_factory=dict)
    furthest: tuple | None = None
    announced: bool = False


DONE_KEPT = 16
"""Rounds over that a rank remembers. A lazy marker (``before_send``) goes while its
sender has not had the root's count, so it can reach a receiver that completed the round
already (it was not in that count); remembered as over, it is dropped there, where it
would otherwise begin the round afresh, to be joined and checkpointed a second time under
the same name (two different cuts called one round: a recovery mixing them lost a
message). Counted markers are never dropped: a round may be begun again under its name on
purpose (ReadyMessageFlush's coordinator placing a position twice), and then every
participant starts it again (``start`` forgets it was over). A lazy marker comes at most
one round late: once its channel is in use, the sender's
counted marker of the next round follows it on the same FIFO channel, and the receiver
cannot complete that round before it."""


def _furthest(a, b):
    return b if a is None or (b is not None and tuple(b) > tuple(a)) else a


class FlushRounds:
    """One rank's side of every flush round: what it sends when it joins a round or hears
    a flush message, and when a round is complete for it (the module docstring)."""

    __slots__ = ("me", "rounds", "done")

    def __init__(self, me: int):
        self.me = me
        self.rounds: dict[Hashable, _Round] = {}
        # rounds over here, newest last (``DONE_KEPT``): a lazy marker may still come
        self.done: dict[Hashable, None] = {}

    def _over(self, round_id: Hashable) -> None:
        del self.rounds[round_id]
        self.done[round_id] = None
        if len(self.done) > DONE_KEPT:
            del self.done[next(iter(self.done))]

    def _round(self, round_id) -> _Round:
        r = self.rounds.get(round_id)
        if r is None:
            r = self.rounds[round_id] = _Round()
        return r

    def start(self, round_id: Hashable, members: Sequence[int], sent_to: Iterable[int],
              data: Any = None, also: Iterable[int] = (), at: tuple | None = None,
              announce: bool = False) -> list[Send]:
        """Join round ``round_id`` of ``members`` (sorted, this rank among them; a
        ``range`` for every rank: never walked); ``sent_to``: the ranks this one ever sent
        an application message to. Its marker goes to those among the members and to
        ``also``; the list of them, and ``at`` (where its part resumes), to the root.
        ``announce``: members join out of step (the root tells them the round began)."""
        me, root = self.me, members[0]
        self.done.pop(round_id, None)  # begun again under the same name (a placed position)
        out = sorted(set(sent_to).union(also).difference((me,)))
        out = [p for p in out if p in members]
        effects = [Send(tuple(out), "marker", (round_id, data))] if out else []
        r = self._round(round_id)
        r.members = members
        r.marked_to = set(out)
        announce = members if announce else None
        if me == root:
            return effects + self._count(round_id, out, data, me, at, announce)
        return effects + [Send((root,), "flush_count", (round_id, out, data, at, announce))]

    def before_send(self, dst: int) -> list[Send]:
        """This rank sends an application message to ``dst``: on a channel its start
        left unmarked (it carried nothing then), a marker of every round it joined that
        some participant has not joined yet goes first (*lazy*, not in the root's
        count): ``dst`` tells what was sent after this rank's part by the marker before
        it, on every channel, without a marker on every channel at every round. Once
        the root's count is in, every participant has joined: no more are needed."""
        effects = []
        for round_id, r in self.rounds.items():
            if (r.members is not None and r.expected is None and dst != self.me
                    and dst not in r.marked_to and dst in r.members):
                r.marked_to.add(dst)
                effects.append(Send((dst,), "marker", (round_id, None, False)))
        return effects

    def take(self, src: int, op: str, data, received: int) -> list[Send]:
        """Flush message ``op`` (in ``OPS``) from ``src``; ``received``: how many
        application messages from ``src`` this rank has received (a marker's cut)."""
        if op == "marker":
            round_id, value, *lazy = data  # a lazy marker is not in the root's count
            if lazy and round_id in self.done:  # from a peer not told yet it is over
                return []
            r = self._round(round_id)
            r.markers[src] = value
            r.cuts[src] = received
            r.counted += not lazy
            return []
        if op == "flush_count":
            round_id, out, value, at, announce = data
            return self._count(round_id, out, value, src, at, announce)
        if op == "flush_begin":  # the root's word that a round began
            self._round(data)
            return []
        if op == "flush_go":
            round_id, expected, values, line, sources = data
            r = self._round(round_id)
            r.expected, r.values, r.line, r.sources = expected, values, line, sources
            return []
        raise ProtocolError(f"unknown flush message {op!r} from rank {src}")

    def _count(self, round_id, out: list[int], value, src: int, at, announce) -> list[Send]:
        """The root: ``src`` sent its markers to ``out`` (its part resumes ``at``); the
        first time, if asked (``announce``: the members), tell every other member that the
        round began (``flush_begin``: a member no marker reached learns of it so); once
        every participant has said so, tell each how many markers to wait for, the
        values and the round's line."""
        r = self._round(round_id)
        r.heard += 1
        r.heard_from.add(src)
        r.furthest = _furthest(r.furthest, at)
        effects = []
        if announce is not None and not r.announced:  # not to those ``src`` marked
            r.announced = True
            told = set(out).union((src, self.me))
            others = tuple(p for p in announce if p not in told)
            if others:
                effects.append(Send(others, "flush_begin", round_id))
        for p in out:
            r.counts[p] = r.counts.get(p, 0) + 1
            r.froms.setdefault(p, []).append(src)
        if value is not None:
            r.given[src] = value
        if r.members is None or r.heard < len(r.members):
            return effects
        for p in r.members:
            sources = tuple(r.froms.get(p, ()))
            if p == self.me:
                r.expected, r.values, r.line = r.counts.get(p, 0), r.given, r.furthest
                r.sources = sources
            else:
                effects.append(Send((p,), "flush_go", (round_id, r.counts.get(p, 0), r.given,
                                                       r.furthest, sources)))
        return effects

    def complete(self, round_id: Hashable, received_from: Iterable[int]
                 ) -> tuple[dict, dict[int, int], tuple | None, tuple] | None:
        """Whether every marker of ``round_id`` to this rank arrived: None, or the
        participants' values (not None, by rank), the cut, each member's receive count
        at its marker (``received_from``: the ranks this one received anything from; a
        member that sent no marker had sent nothing before its snapshot: cut at 0), and
        the round's line (the furthest ``at``), and the members whose start marked this
        rank (only they sent it anything before their part). The round is over then."""
        r = self.rounds.get(round_id)
        if r is None or r.members is None:
            raise ProtocolError(f"flush round {round_id!r} waited for before it was started")
        if r.expected is None or r.counted < r.expected:
            return None
        self._over(round_id)
        # the channel to self is never in transit: nothing of it is cut
        cut = {p: 0 for p in received_from if p != self.me and p in r.members}
        cut.update(r.cuts)
        return r.values, cut, r.line, r.sources

    def markers_from(self, round_id: Hashable, peers: Iterable[int]) -> dict | None:
        """The markers of ``round_id`` once ``peers`` all sent theirs (a migration's,
        where the peers are known), else None. The round is over then."""
        r = self._round(round_id)
        if not set(peers) <= r.markers.keys():
            return None
        self._over(round_id)
        return r.markers


class Flush:
    """Performs one rank's ``FlushRounds`` on its endpoint and waits for rounds."""

    def __init__(self):
        self.rounds: FlushRounds | None = None  # made at the first start (the rank known)
        self._arrived = asyncio.Event()
        self.last_cut: dict[int, int] = {}  # of the round ``wait`` returned last
        self.protocol = ""  # whose rounds (named in wait records)
        self.last_line: tuple | None = None  # its line (the furthest part's position)
        self.last_sources: tuple = ()  # the members whose start marked this rank

    def _machine(self, ft) -> FlushRounds:
        if self.rounds is None:
            self.rounds = FlushRounds(ft.rank)
        return self.rounds

    def _send(self, ft, protocol: str, effects: list[Send]) -> None:
        for e in effects:
            if len(e.to) == 1:
                ft.send_control(e.to[0], protocol, e.op, e.data)
            else:
                ft.send_control_all(list(e.to), protocol, e.op, e.data)
        self._arrived.set()

    def start(self, ft, protocol: str, round_id: Hashable, members: Sequence[int],
              data: Any = None, also: Iterable[int] = (), at: tuple | None = None,
              announce: bool = False) -> None:
        """Join round ``round_id`` (``FlushRounds.start``)."""
        sent_to = [p for p, _ in ft.sent.nonzero()]
        self.protocol = protocol
        self._send(ft, protocol, self._machine(ft).start(round_id, members, sent_to, data,
                                                         also, at, announce))

    def before_send(self, ft, protocol: str, dst: int) -> None:
        """An application message to ``dst`` is about to go: lazy markers first
        (``FlushRounds.before_send``)."""
        if self.rounds is not None and self.rounds.rounds:
            effects = self.rounds.before_send(dst)
            if effects:
                self._send(ft, protocol, effects)

    def take(self, ft, env, op: str, data) -> None:
        """A control message of this flush (``op`` in ``OPS``) from ``env.src``."""
        effects = self._machine(ft).take(env.src, op, data, ft.received[env.src])
        self._send(ft, env.comm, effects)

    def take_marker(self, ft, env) -> None:
        """A protocol's control envelope whose only messages are this flush's."""
        op, data = ft.control_data(env)
        self.take(ft, env, op, data)

    async def wait(self, ft, round_id: Hashable) -> dict[int, Any]:
        """Wait until every marker of ``round_id`` to this rank arrived (``start`` first);
        returns the participants' values that are not None, by rank. While it waits, the
        rank's wait record names the round and whom it has not heard from
        (``Endpoint.waiting_on``)."""
        machine = self._machine(ft)
        while (done := machine.complete(round_id, (p for p, _ in ft.received.nonzero()))) is None:
            self._arrived.clear()
            with ft.waiting_on(self._waiting(machine, round_id, self.protocol)):
                await self._arrived.wait()
        values, self.last_cut, self.last_line, self.last_sources = done
        return values

    async def wait_markers(self, ft, round_id: Hashable, peers: Iterable[int]) -> dict[int, Any]:
        """Wait for the markers of ``round_id`` from ``peers``; returns their data."""
        machine, peers = self._machine(ft), set(peers)
        while (markers := machine.markers_from(round_id, peers)) is None:
            self._arrived.clear()
            missing = lambda: sorted(peers - machine._round(round_id).markers.keys())
            with ft.waiting_on(Wait("round", what=f"{self.protocol} flush {round_id!r}: "
                                                  f"markers", lazy=missing)):
                await self._arrived.wait()
        return markers

    @staticmethod
    def _waiting(machine: FlushRounds, round_id: Hashable, protocol: str) -> Wait:
        """The wait record of a rank in ``protocol``'s round ``round_id``: the root's
        word on how many markers come (from the root, or at the root from the
        participants), or the markers; the ranks not heard from are listed only when
        asked (``Wait.lazy``)."""
        r = machine.rounds[round_id]
        me, root = machine.me, r.members[0]
        name = f"{protocol} flush {round_id!r}"
        if r.expected is None:
            if me == root:
                return Wait("round", what=f"{name}: the root, heard from {r.heard} of "
                                          f"{len(r.members)} participants",
                            lazy=lambda: [p for p in r.members if p not in r.heard_from])
            return Wait("round", what=f"{name}: the root's count", ranks=(root,))
        return Wait("round", what=f"{name}: {len(r.markers)} of {r.expected} markers",
                    lazy=lambda: [p for p in r.members if p != me and p not in r.markers])

    def reset(self) -> None:
        """Forget every round, those over too (after a rollback the peers start over, and
        the re-execution takes rounds of the same names again)."""
        if self.rounds is not None:
            self.rounds.rounds.clear()
            self.rounds.done.clear()

    def moving(self) -> dict:
        """The rounds under way and those over, for a migration to carry: a peer's
        marker that reached this process before the move is not sent again, and a late
        lazy marker of a round over does not begin it again in the new process."""
        if self.rounds is None:
            return {"rounds": {}, "done": {}}
        return {"rounds": dict(self.rounds.rounds), "done": dict(self.rounds.done)}

    def moved(self, rank: int, moving: dict) -> None:
        """Take back the rounds ``moving`` gave, in the rank's new process."""
        self.rounds = FlushRounds(rank)
        self.rounds.rounds.update(moving["rounds"])
        self.rounds.done.update(moving["done"])
