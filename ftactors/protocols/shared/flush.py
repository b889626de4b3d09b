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

A marker may carry a small value (for example rank 0's decision on when to take the next
backup) so that one exchange also makes the participants agree: the root hands every
participant the values of all of them (``wait`` returns them).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

from ftactors.base._errors import ProtocolError

OPS = ("marker", "flush_count", "flush_go")
"""The control operations a protocol hands to ``Flush.take``."""


def checkpoint_position(nexts: Iterable[tuple | list | None]) -> tuple | None:
    """The position of a requested checkpoint from every rank's next safe point: the
    furthest one (each rank waits at its own until told), or None when a rank has none
    left (it left its loop: no position is reachable by all)."""
    nexts = list(nexts)
    if any(p is None for p in nexts):
        return None
    return max(tuple(p) for p in nexts)


@dataclass
class _Round:
    """One flush round as one participant sees it."""

    cuts: dict = field(default_factory=dict)      # peer -> receive count at its marker
    markers: dict = field(default_factory=dict)   # peer -> its marker's value
    expected: int | None = None                    # markers to wait for (from the root)
    values: dict | None = None                     # every participant's value (from the root)
    members: Sequence[int] | None = None           # this rank's start: whom the round joins
    # the root's side: participants heard from, markers per destination, their values
    heard: int = 0
    counts: dict = field(default_factory=dict)
    given: dict = field(default_factory=dict)


class Flush:
    """Markers of flush rounds, and waiting for a round to complete."""

    def __init__(self):
        self._rounds: dict[Hashable, _Round] = {}
        self._arrived = asyncio.Event()
        self.last_cut: dict[int, int] = {}  # of the round ``wait`` returned last

    def _round(self, round_id) -> _Round:
        r = self._rounds.get(round_id)
        if r is None:
            r = self._rounds[round_id] = _Round()
        return r

    def start(self, ft, protocol: str, round_id: Hashable, members: Sequence[int],
              data: Any = None, also: Iterable[int] = ()) -> None:
        """Join round ``round_id`` of ``members`` (sorted, this rank among them; a
        ``range`` for every rank: never walked): send this rank's marker on every
        channel to a member it sent application messages on, and on those to ``also``
        (where the protocol's own messages must have arrived when the round ends: a
        partner's copy, parity blocks), and the list of them to the root."""
        me, root = ft.rank, members[0]
        out = sorted({p for p, _ in ft.sent.nonzero()}.union(also).difference((me,)))
        out = [p for p in out if p in members]
        if out:
            ft.send_control_all(out, protocol, "marker", (round_id, data))
        r = self._round(round_id)
        r.members = members
        if me == root:
            self._count(ft, protocol, round_id, out, data, me)
        else:
            ft.send_control(root, protocol, "flush_count", (round_id, out, data))

    def take(self, ft, env, op: str, data) -> None:
        """A control message of this flush (``op`` in ``OPS``) from ``env.src``."""
        if op == "marker":
            self.on_marker(ft, env.src, data)
        elif op == "flush_count":
            round_id, out, value = data
            self._count(ft, env.comm, round_id, out, value, env.src)
        elif op == "flush_go":
            round_id, expected, values = data
            r = self._round(round_id)
            r.expected, r.values = expected, values
            self._arrived.set()
        else:
            raise ProtocolError(f"{env.comm}: unknown control message {op!r} from rank {env.src}")

    def take_marker(self, ft, env) -> None:
        """A protocol's control envelope whose only messages are this flush's."""
        op, data = ft.control_data(env)
        self.take(ft, env, op, data)

    def _count(self, ft, protocol: str, round_id, out: list[int], value, src: int) -> None:
        """The root: ``src`` sent its markers to ``out``; once every participant has
        said so, tell each how many markers to wait for."""
        r = self._round(round_id)
        r.heard += 1
        for p in out:
            r.counts[p] = r.counts.get(p, 0) + 1
        if value is not None:
            r.given[src] = value
        if r.members is None or r.heard < len(r.members):
            return
        for p in r.members:
            if p == ft.rank:
                r.expected, r.values = r.counts.get(p, 0), r.given
            else:
                ft.send_control(p, protocol, "flush_go", (round_id, r.counts.get(p, 0), r.given))
        self._arrived.set()

    def on_marker(self, ft, src: int, payload: tuple) -> None:
        """``src``'s marker arrived: everything it sent before is received or queued."""
        round_id, data = payload
        r = self._round(round_id)
        r.markers[src] = data
        r.cuts[src] = ft.received[src]
        self._arrived.set()

    async def wait(self, ft, round_id: Hashable) -> dict[int, Any]:
        """Wait until every marker of ``round_id`` to this rank arrived (``start`` first);
        returns the participants' values that are not None, by rank."""
        r = self._round(round_id)
        if r.members is None:
            raise ProtocolError(f"flush round {round_id!r} waited for before it was started")
        while r.expected is None or len(r.markers) < r.expected:
            self._arrived.clear()
            await self._arrived.wait()
        del self._rounds[round_id]
        # a member that sent no marker had sent nothing before its snapshot: cut at 0
        # (the channel to self is never in transit: nothing of it is cut)
        cut = {p: 0 for p, _ in ft.received.nonzero() if p != ft.rank and p in r.members}
        cut.update(r.cuts)
        self.last_cut = cut
        return r.values

    async def wait_markers(self, round_id: Hashable, peers: Iterable[int]) -> dict[int, Any]:
        """Wait for the markers of ``round_id`` from ``peers`` (sent as ``"marker"`` control
        messages: a migration's, where the peers are known); returns their data."""
        peers = set(peers)
        r = self._round(round_id)
        while not peers <= r.markers.keys():
            self._arrived.clear()
            await self._arrived.wait()
        del self._rounds[round_id]
        return r.markers

    def reset(self) -> None:
        """Forget every round (after a rollback the peers start over)."""
        self._rounds.clear()
