"""The outbox: how a rank's messages leave it (numbered, stamped, batched, held).

Theory of operation
-------------------
A communicator hands over (context, destination, tag, packed payload). ``send_app`` gives
the message its ``app_seq`` (the k-th message to that destination) and passes it down
the protocol stack (``on_send``: a protocol may add piggyback data, log, hold or drop
it); ``transmit`` stamps the channel sequence number and puts it in the destination's
batch. The first message to a destination since the sending task last waited for a
message (or passed a safe point, or the outbox last flushed) goes at once, and schedules
nothing: the task may compute for long before it yields, and its peer may be waiting
for exactly that message (an ``isend`` before a computation, a collective's step, a
result sent to a root); a scheduled flush behind it would cost every exchange a loop
turn of its own. The next ones to that destination before then are batched,
because on Ray one call per message costs far more than one call per batch; batches are
flushed as one per destination when the sending task yields to the event loop, when a
batch is full (``BATCH_MAX`` messages, or ``BATCH_BYTES`` of mid-sized ones), or at once
for a large message; a task that is about to wait for a message, or that receives one
already there (``receive``, ``probe``), flushes first, so its peer can answer without
the loop turn the scheduled flush would cost. A message to this rank itself is received
as it is sent (see ``transmit``). Envelopes for a destination that is moving wait, in
order, between ``hold`` and ``release``.

``Outbox`` is a mixin of ``Endpoint`` (``_endpoint``), not an object the endpoint calls:
``send_app`` -> ``transmit`` -> ``_flush_one`` -> the link is the hot path, and a
delegating call per message would cost more than the split is worth. Its own state is
set in ``_init_outbox``. From the rest of the endpoint it reads ``rank``, ``size``,
``epoch``, ``peer_epochs`` (the destination's incarnation to stamp), ``link``, ``owner``
(the protocol stack, whose ``on_send`` it looks up once: ``_hooks``), ``trace``, ``_loop``, ``deliver`` (a message to itself) and the
positions' ``_replay_sent`` (sends of a restored rank before its resume point are
dropped) and ``determinants`` (what a message carries of them, ``_determinants``); ``sent`` is set back by restores and resume points (``_positions``). The
batching tests run it with only those (``tests/engine/test_batches.py``).
"""
from __future__ import annotations

from typing import Any, Awaitable

from ._channels import OutChannels
from ._determinants import DETS
from ._envelope import APP, CTRL, Envelope
from ._hooks import message_hook
from ._payload import Payload, pack
from ._vector import RankVector

BATCH_MAX = 512
"""Messages per destination batch before the outbox is flushed without waiting."""
BATCH_BYTES = 256 << 10
"""Bytes per destination batch before it is flushed without waiting: a sender of many
mid-sized messages (an array just under ``LARGE_BUFFER_BYTES``) would otherwise make
frames of up to ``BATCH_MAX`` of them, each copied whole at every step and written only
when its window has room (measured on Ray's direct plane: 64 KiB messages at 250 MiB/s
in batches of 512, against 850 MiB/s for 128 KiB ones sent one per frame)."""
BATCH_BYTES_FROM = 4 << 10
"""Only messages at least this large count toward ``BATCH_BYTES`` (kept as a running
total per destination, so the small-message path pays nothing)."""


class Outbox:
    """Sending: application numbers, channel stamps, per-destination batches, held
    destinations (module docstring)."""

    def _init_outbox(self) -> None:
        self.sent = RankVector(self.size)  # application messages sent to each rank
        self._on_send = message_hook(self.owner, "on_send")  # None: no protocol's (``_hooks``)
        self.resends_suppressed = 0
        self._sent_at_cut = None  # restored from a state taken "now": see ``send_app``
        self._out = OutChannels()
        self._outbox: dict[int, list[Envelope]] = {}
        self._outbox_bytes: dict[int, int] = {}  # per batch: bytes of its counted messages
        self._held: dict[int, list[Envelope]] = {}  # destinations on the move (see hold)
        self._flush_pending = False
        # written at once since the task last waited for a message or the outbox flushed
        self._sent_now: set[int] = set()
        # envelopes handed to the link, by batch: (dst, its epoch, mine) -> how many
        # (``_waits``: what is in flight)
        self.wire_out: dict[tuple[int, int, int], int] = {}

    @property
    def sent_at_cut(self):
        """What this rank had sent when the state it was restored from was taken "now"
        (a ``RankVector``; None: restored at a safe point, or never): its re-execution
        does not send those again (``send_app``)."""
        return self._sent_at_cut

    def pack(self, obj: Any, dst: int | None = None) -> Payload:
        """Pickle ``obj`` for sending (large buffers to the transport's store)."""
        put = None if dst == self.rank else self.link.put_large
        return pack(obj, put, self.link.large_bytes, dst)

    def send_app(self, ctx: str, dst: int, tag: int, payload: Payload) -> int | None:
        """Send one application message (world rank ``dst``) through the protocol stack;
        returns its application number, or None when it is not sent again (below).

        While a restored rank re-runs the code before its resume point, its sends are
        the ones it made before the snapshot: they were sent then, so they are dropped
        here, before any protocol sees them again. So are the sends of a rank restored
        from a part taken off a safe point on a global cut, up to the cut (``_sent_at_cut``):
        their receivers' parts hold them.
        """
        if self._replay_sent is not None:
            self.resends_suppressed += 1
            return None
        app_seq = self.sent.bump(dst)
        if self._sent_at_cut is not None and app_seq < self._sent_at_cut[dst]:
            # restored from a state taken "now" (``state_now``): the code since its base
            # sent this before the cut, and the receiver's part of that round has it
            self.resends_suppressed += 1
            return None
        env = Envelope(APP, self.rank, dst, ctx, tag, app_seq, payload)
        dets = self.determinants
        if dets.causal and dets.told.get(dst, 0) != dets.changed:
            # before the protocols: their logs keep what it carries
            carried = dets.outgoing(dst)
            if carried is not None:
                env.piggyback = {DETS: carried}
        on_send = self._on_send
        if on_send is not None:
            env = on_send(env)
            if env is None:  # held by a protocol
                return app_seq
        self.transmit(env)
        return app_seq

    def send_control(self, dst: int, protocol: str, op: str, data: Any = None) -> None:
        """Send a protocol control message on the FIFO channel to world rank ``dst``."""
        self.send_control_all((dst,), protocol, op, data)

    def send_control_all(self, dsts, protocol: str, op: str, data: Any = None) -> None:
        """``send_control`` to every rank in ``dsts``, pickling ``(op, data)`` once (a
        flush sends the same marker to every peer)."""
        payload = pack((op, data))
        for dst in dsts:
            if not 0 <= dst < self.size:  # (``transmit`` takes checked ranks only)
                raise IndexError(f"rank {dst} out of range for {self.size} ranks")
            self.transmit(Envelope(CTRL, self.rank, dst, protocol, 0, -1, payload))

    def transmit(self, env: Envelope) -> None:
        """Stamp and queue an envelope for the wire (protocols release held ones here).

        A message to this rank itself is received at once, as it is sent: the channel to
        self has no transit, so no snapshot ever finds a message this rank sent and has
        not received (a flush has no marker to wait for on it, a cut nothing to cut).
        """
        dst = env.dst
        if self._held and dst in self._held:
            self._held[dst].append(env)
            return
        self._out.stamp(env, self.epoch, self.peer_epochs.get(dst))  # dst: checked at the send
        if self.trace is not None:  # tracing is run-wide: only traces read send times
            env.t_send = self.link.clock()
        if dst == self.rank:
            self.deliver([env])
            return
        box = self._outbox.get(dst)
        if box is None:
            if dst not in self._sent_now:  # the first since the task waited: at once
                self._sent_now.add(dst)
                self.link.send(dst, [env])
                key = (dst, env.dst_epoch, env.src_epoch)  # (``count_out`` without a call)
                self.wire_out[key] = self.wire_out.get(key, 0) + 1
                return
            box = self._outbox[dst] = []
        box.append(env)
        nbytes = env.payload.nbytes
        counted = 0
        if nbytes >= BATCH_BYTES_FROM:
            counted = self._outbox_bytes[dst] = self._outbox_bytes.get(dst, 0) + nbytes
        if len(box) >= BATCH_MAX or nbytes >= self.link.large_bytes or counted >= BATCH_BYTES:
            self._flush_one(dst)
        elif not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self.flush)

    def hold(self, dst: int) -> None:
        """Keep every envelope for ``dst`` (application and control) from now on, in
        order, until ``release``: ``dst`` is moving and its new address is not known."""
        self._held.setdefault(dst, [])

    def release(self, dst: int) -> int:
        """Send what ``hold`` kept for ``dst``, stamped for its incarnation now; returns
        how many."""
        envs = self._held.pop(dst, [])
        for env in envs:
            self.transmit(env)
        return len(envs)

    def flush(self) -> None:
        """Send every queued batch now."""
        self._flush_pending = False
        self._sent_now.clear()
        if self._outbox:
            for dst in list(self._outbox):
                self._flush_one(dst)

    def _flush_before_wait(self) -> None:
        """The task is about to wait for a message: send what it queued now rather than
        on the loop's next turn (the ``flush`` already scheduled then finds nothing).
        A peer often waits for exactly that message to answer (a ping-pong, a
        collective's step), so the answer's round trip starts one loop turn sooner; what
        is queued still goes as one batch per destination, in order."""
        if self._flush_pending:
            self.flush()
        elif self._sent_now:
            self._sent_now.clear()

    def _flush_one(self, dst: int) -> None:
        envs = self._outbox.pop(dst, None)
        self._outbox_bytes.pop(dst, None)
        if envs:
            self.link.send(dst, envs)
            self.count_out(envs[0], len(envs))

    def congested(self, dst: int) -> Awaitable | None:
        """None when the transport toward world rank ``dst`` takes more now; else what to
        await before sending more (backpressure: a sender faster than its receiver must
        not buffer without bound)."""
        return self.link.congested(dst)

    def count_out(self, env: Envelope, n: int) -> None:
        """The link took a batch of ``n`` envelopes, ``env`` the first (a batch is one
        flush of one destination's outbox: one incarnation pair)."""
        key = (env.dst, env.dst_epoch, env.src_epoch)
        self.wire_out[key] = self.wire_out.get(key, 0) + n

    def _restart_outbox(self) -> None:
        """A restore: the queued batches belong to the abandoned execution, and every
        channel out starts afresh for the new incarnation. So do the holds: a move under
        way is abandoned with the execution (ReadyMessageFlush's ``Move.restored``), and
        no ``release`` would ever come for a rank restored in place (a cheaper level's
        recovery during a move) that kept holding what it sends the mover."""
        self._outbox.clear()
        self._outbox_bytes.clear()
        self._sent_now.clear()
        self._held.clear()
        self._out.reset()
