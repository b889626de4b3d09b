"""Ready-message channel flushing (CoCheck, section 4), shared by the protocols.

Theory of operation: every participant sends a *ready message* (a marker) on its
channel to every other participant and then keeps receiving. Channels are FIFO, so once
a participant holds the markers of a round from all its peers, every application
message they sent before their marker has arrived: it was received already or waits in
the matcher, and a snapshot taken now captures it. Nothing addressed to this rank from
those peers is in transit, which makes the set of snapshots of one round a consistent
global state (no message lost, none received but not sent). For the last point, a
snapshot must leave out what a peer sent *after* its marker (a fast peer finishes its
round and computes on while this rank still waits for other markers): ``last_cut`` holds
each peer's receive count at its marker, for ``Endpoint.snapshot(cut=)``.

A marker may carry a small value (for example rank 0's decision on when to take the next
backup) so that one exchange also makes the participants agree.
"""
from __future__ import annotations

import asyncio
from typing import Any, Hashable, Iterable

from ftactors.base._errors import ProtocolError


class Flush:
    """Markers of flush rounds, and waiting for a round to complete."""

    def __init__(self):
        self._got: dict[Hashable, dict[int, Any]] = {}
        self._cuts: dict[Hashable, dict[int, int]] = {}
        self._arrived = asyncio.Event()
        self.last_cut: dict[int, int] = {}  # of the round ``wait`` returned last

    def start(self, ft, protocol: str, round_id: Hashable, peers: Iterable[int],
              data: Any = None) -> None:
        """Send this rank's marker of ``round_id`` to every peer."""
        ft.send_control_all(peers, protocol, "marker", (round_id, data))

    def take_marker(self, ft, env) -> None:
        """A protocol's control envelope whose only message is this flush's marker."""
        op, data = ft.control_data(env)
        if op != "marker":
            raise ProtocolError(f"{env.comm}: unknown control message {op!r} from rank {env.src}")
        self.on_marker(ft, env.src, data)

    def on_marker(self, ft, src: int, payload: tuple) -> None:
        """``src``'s marker arrived: everything it sent before is received or queued."""
        round_id, data = payload
        self._got.setdefault(round_id, {})[src] = data
        self._cuts.setdefault(round_id, {})[src] = ft.received[src]
        self._arrived.set()

    async def wait(self, round_id: Hashable, peers: Iterable[int]) -> dict[int, Any]:
        """Wait for the markers of ``round_id`` from every peer; returns their data."""
        peers = set(peers)
        while not peers <= self._got.get(round_id, {}).keys():
            self._arrived.clear()
            await self._arrived.wait()
        self.last_cut = self._cuts.pop(round_id, {})
        return self._got.pop(round_id, {})  # no peers (a group of one): nothing to wait for

    def reset(self) -> None:
        """Forget every round (after a rollback the peers start over)."""
        self._got.clear()
        self._cuts.clear()
