"""Synchronous sends (``ssend``/``issend``): a send completes once its receive has started.

Theory of operation: the sender wraps the object (``Synchronous``) so that the message
itself says it wants an acknowledgement; a wrapped payload is an ordinary application
payload, so every protocol logs, holds, flushes and replays it like any other and the
mark travels with every copy. When a receive matches such a message (a blocking receive
returning, or an ``irecv`` matched on arrival), the receiver sends back a control
message on protocol ``SYNC`` naming the message by its application number, which is
unique per (sender, receiver) and the same after a rollback. The endpoint takes these
acknowledgements itself, before the protocol stack: they carry no application data and
are not numbered as application messages, so they change no protocol's counts or cuts
and never make a rank's sends depend on the timing of another's receives.

Rollbacks: an acknowledgement that comes before its sender waits for it (a message to
itself, or a sender that rolled back past its ``ssend`` and sends it again) is kept and
completes that wait at once. A receiver keeps the numbers of the synchronous messages it
matched from each peer and acknowledges them all again when that peer comes back as a
new incarnation (``peer_restarted``): a sender restarted alone (GroupCoordination,
DDVPiggyback) sends again a message its receiver already has, which the receiver drops
as a duplicate and would otherwise never acknowledge. Both sets grow by one integer per
synchronous message received or sent again; they are not part of snapshots (a rank
restarted in a new process starts them empty and relies on its peers' acknowledgements
again). A receiver restarted *with* its sender has no such record, yet drops the message
as a duplicate when its restored state had received it (a cluster rolled back to a cut
taken between the sender's safe point and the receiver's): so a dropped duplicate of a
synchronous message that no receive is still to take is acknowledged again
(``duplicate``; found with an ``issend`` ring under DDVPiggyback, where the sender's new
life waited for ever).
"""
from __future__ import annotations

import asyncio
import pickle
from typing import Any

SYNC = "ssend"
"""The control-message protocol name of acknowledgements."""


class Synchronous:
    """The object of a synchronous send, as packed: the receiver acknowledges it."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __reduce__(self):
        return (Synchronous, (self.obj,))


def _class_reference() -> bytes:
    """The bytes that name ``Synchronous`` in its pickles: what two of them share after
    the protocol and frame header, up to the wrapped object."""
    one, two = (pickle.dumps(Synchronous(x), protocol=5) for x in (None, True))
    one, two = one[11:], two[11:]  # PROTO and FRAME (whose length differs)
    n = 0
    while one[n] == two[n]:
        n += 1
    return one[:n]


_REFERENCE = _class_reference()


def is_synchronous(payload) -> bool:
    """Whether a packed payload is a synchronous send's, read from its first bytes: its
    out-of-band buffers may still be references to fetch, and this is asked only of
    duplicates, after a rollback."""
    return _REFERENCE in payload.data[:64]


class SyncAcks:
    """One rank's acknowledgements of synchronous sends, both ways."""

    def __init__(self, endpoint):
        self._ep = endpoint
        self._waiting: dict[tuple[int, int], asyncio.Future] = {}
        self._early: set[tuple[int, int]] = set()  # acks with no waiter (yet)
        self._matched: dict[int, set[int]] = {}  # src -> app numbers acknowledged

    def expect(self, dst: int, app_seq: int) -> asyncio.Future:
        """A future done once world rank ``dst`` has matched our message ``app_seq``."""
        fut = asyncio.get_running_loop().create_future()
        key = (dst, app_seq)
        if key in self._early:
            self._early.discard(key)
            fut.set_result(None)
        else:
            self._waiting[key] = fut
        return fut

    def on_ack(self, src: int, app_seq: int) -> None:
        """World rank ``src`` has matched our message ``app_seq``."""
        fut = self._waiting.pop((src, app_seq), None)
        if fut is None or fut.done():
            self._early.add((src, app_seq))
        else:
            fut.set_result(None)

    def matched(self, src: int, app_seq: int) -> None:
        """A receive matched synchronous message ``app_seq`` from world rank ``src``."""
        self._matched.setdefault(src, set()).add(app_seq)
        self._ep.send_control(src, SYNC, "ack", app_seq)

    def duplicate(self, env) -> None:
        """``env`` came again and was dropped: acknowledge it again if it is synchronous
        and no receive is still to take the copy that came first (that receive will)."""
        if is_synchronous(env.payload) and not any(
                e.src == env.src and e.app_seq == env.app_seq
                for e in self._ep.matcher.queued()):
            self._ep.send_control(env.src, SYNC, "ack", env.app_seq)

    def peers(self) -> set[int]:
        """The ranks whose synchronous messages this rank matched (``peer_restarted``
        has something to do for them)."""
        return set(self._matched)

    def peer_restarted(self, src: int) -> None:
        """World rank ``src`` runs as a new incarnation: acknowledge again what we matched
        from it (its waits for them may run again)."""
        for app_seq in sorted(self._matched.get(src, ())):
            self._ep.send_control(src, SYNC, "ack", app_seq)
