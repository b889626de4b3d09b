"""The per-rank message engine that every communicator and protocol goes through.

Theory of operation
-------------------
Send: a communicator hands over (context, destination, tag, packed payload). The
endpoint gives the message its ``app_seq`` (the k-th message to that destination),
passes it down the protocol stack (``on_send``: a protocol may add piggyback data, log,
hold or drop it), stamps the channel sequence number and puts it in the per-destination
outbox. Outboxes are flushed as one batch per destination when the sending task yields
to the event loop, when a batch is full, or at once for a large message, because on Ray
one call per message costs far more than one call per batch; a task that is about to
wait for a message (``receive``, ``probe``) flushes first, so its peer can answer
without the loop turn the scheduled flush would cost. A message to this rank
itself is received as it is sent (see ``transmit``).

Receive: the transport hands over batches. The channel layer (``_channels``) restores
FIFO order and drops duplicates and stale incarnations. Control envelopes go to the
protocol stack (``on_control``) in channel order, so a marker really flushes a channel.
Application envelopes are checked against ``received[src]``: an ``app_seq`` already
received is a re-sent duplicate (after a rollback) and is dropped; a later one waits
for the gap to fill. Then ``on_receive`` runs (a protocol may buffer or hold it) and the
matcher completes a posted receive or queues the message.

State that survives failures (see ``snapshot``): the registered application state, the
safe-point position, the ``sent``/``received`` counters, the messages that arrived but
were not yet received, the log of messages received outside ``iterations()`` loops
(straight-line code runs again after a restore and must get the same messages back),
and each protocol's own state. Restoring puts the logged and queued messages back in
front of the matcher, so receives are served first from them, in their original order,
then from the network (CoCheck, section 4). While ``main()`` re-runs the code before the
resume point, its sends are suppressed (they happened before the snapshot, and the flush
that made the snapshot consistent delivered them), its receives must take the messages
it received there in its first life again, and the registered attributes are set back
to the snapshot's at the resume point (``_reentry``); from the resume point on, messages
sent again get their original numbers and their receivers drop the ones they have. This is correct under the piecewise-determinism assumption: from
the same state and the same received messages, a rank sends the same messages.
"""
from __future__ import annotations

import asyncio
import pickle
from typing import Any, Awaitable, Callable

import cloudpickle

from ..base import _storage
from ._channels import InChannels, OutChannels
from ._envelope import APP, COLLECTIVE_SUFFIX, CTRL, KIND_NAMES, Envelope
from ..base._errors import ProtocolError
from ..base._events import EventLog
from ._matching import Matcher, Posted
from ._payload import LARGE_BUFFER_BYTES, Payload, pack, unpack
from ._reentry import Reentry
from ._synchronous import SYNC, SyncAcks
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


class Link:
    """What an endpoint needs from its transport (one per rank).

    ``send`` must not block and must not run receiver code synchronously.
    """

    cheap_messages = False
    """Whether a message costs little more than the wake-up it causes (the direct data
    plane): then allreduce and allgather prefer fewer hops to fewer messages."""

    large_bytes = LARGE_BUFFER_BYTES
    """Buffers at least this large travel out of band (``put_large``), and a message
    holding one is sent without waiting for the batch."""

    def send(self, dst: int, envs: list[Envelope]) -> None:
        raise NotImplementedError

    def congested(self, dst: int) -> Awaitable | None:
        """None when the link to ``dst`` takes more now; else an awaitable that completes
        once it does (the sender writes faster than ``dst`` reads). Default: never."""
        return None

    def put_large(self, view: memoryview) -> Any:
        """Store one large buffer for shipping; default: an immutable copy."""
        return bytes(view)

    async def resolve(self, payload: Payload) -> Payload:
        """Fetch a payload's out-of-band references (identity where there are none)."""
        return payload

    def share(self, data: bytes | tuple) -> Any:
        """Make ``data`` (a snapshot blob or an ``Endpoint.transfer`` pair) fetchable by
        another rank through a small handle; the data stays owned by this rank."""
        return data

    async def fetch(self, handle: Any) -> bytes:
        """The data behind a ``share`` handle or a fabric's ``call_kept`` handle."""
        return handle

    def report(self, event) -> None:
        """Tell the coordinator (an event that must outlive this rank)."""
        raise NotImplementedError

    def cut(self, peers: list[int] | None, seconds: float) -> None:
        """Chaos: end this rank's connections with ``peers`` (None: every peer), as a
        network fault would; none is made again for ``seconds``. Default: nothing to cut."""

    async def report_now(self, event) -> None:
        """``report`` and wait until the coordinator has it (before dying)."""
        self.report(event)

    def clock(self) -> float:
        raise NotImplementedError


class Endpoint:
    """Messaging state and services of one rank; protocols reach it as ``self.ft``."""

    def __init__(self, rank: int, size: int, link: Link, owner, *, epoch: int = 0,
                 trace=None, record_deliveries: bool = False):
        self.rank = rank
        self.size = size
        self.epoch = epoch
        self.link = link
        self.owner = owner
        # one entry per rank, kept for the peers this rank talked to only (``_vector``)
        self.peer_epochs = RankVector(size)  # its own entry is its own epoch (self-sends)
        self.peer_epochs[rank] = epoch
        self._out = OutChannels()
        self._in = InChannels(epoch)
        self._in.epochs = self.peer_epochs
        self.sent = RankVector(size)
        self.received = RankVector(size)
        self._gaps: dict[int, dict[int, Envelope]] = {}
        self.matcher = Matcher()
        self.sync = SyncAcks(self)  # acknowledgements of synchronous sends
        self._outbox: dict[int, list[Envelope]] = {}
        self._outbox_bytes: dict[int, int] = {}  # per batch: bytes of its counted messages
        self._held: dict[int, list[Envelope]] = {}  # destinations on the move (see hold)
        self._flush_pending = False
        self._waiting: list[list[Envelope]] | None = []
        self._early: list[Envelope] = []  # accepted for a restored incarnation, not open yet
        self._loop = asyncio.get_running_loop()
        self.events = EventLog(link.clock, rank)
        self.trace = trace
        self.duplicates_dropped = 0
        self.logged_bytes = 0  # payload bytes protocols kept in sender logs (a footprint)
        self.resends_suppressed = 0
        self._consumed_since = 0  # messages received since the last safe point
        self._replay_sent: RankVector | None = None  # while re-running code before the resume point
        # replay support (see module docstring)
        self._record = record_deliveries
        self._prefix_log: list[Envelope] = []
        self._since_safe_point: list[Envelope] | None = None
        self._log: list[Envelope] | None = self._prefix_log if record_deliveries else None
        # safe points and registered state
        self.registered: list[str] = []
        self.position: tuple[int, int] | None = None
        self._resume: tuple[int, int] | None = None
        self._reentry: Reentry | None = None  # a restored rank before its resume point
        self._restored = False
        self._loop_count = 0
        self._in_loop = False
        self._loop_n = 0
        self._base: dict | None = None
        self._posted_at_base: list = []  # receives pending at the base's safe point
        self._in_flight: list[Envelope] = []  # matched by a blocking receive, not resumed yet
        self.keep_base = False
        self.restored_from: tuple | None = None  # (position, blob) of the last restore
        self._start_protocols: bytes | None = None  # what a blank snapshot restores (started)
        self.restore_notes: dict = {}  # what the recovery policy sent with that restore
        # set by the host: protocol tasks, chaos kills at safe points
        self.spawn: Callable[[Any], asyncio.Task] | None = None
        self.kill_iterations: set[int] = set()
        self.die: Callable[[], Any] | None = None
        self.disconnect_iterations: set[int] = set()
        self.disconnect: Callable[[int], None] | None = None

    # ---------------------------------------------------------------- sending
    def pack(self, obj: Any, dst: int | None = None) -> Payload:
        """Pickle ``obj`` for sending (large buffers to the transport's store)."""
        put = None if dst == self.rank else self.link.put_large
        return pack(obj, put, self.link.large_bytes)

    def send_app(self, ctx: str, dst: int, tag: int, payload: Payload) -> int | None:
        """Send one application message (world rank ``dst``) through the protocol stack;
        returns its application number, or None when it is not sent again (below).

        While a restored rank re-runs the code before its resume point, its sends are
        the ones it made before the snapshot: they were sent then, so they are dropped
        here, before any protocol sees them again.
        """
        if self._replay_sent is not None:
            self.resends_suppressed += 1
            return None
        app_seq = self.sent.bump(dst)
        env = Envelope(APP, self.rank, dst, ctx, tag, app_seq, payload)
        env = self.owner.on_send(env)
        if env is not None:
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
        self._out.stamp(env, self.epoch, self.peer_epochs[dst])
        if self.trace is not None:  # tracing is run-wide: only traces read send times
            env.t_send = self.link.clock()
        if dst == self.rank:
            self.deliver([env])
            return
        box = self._outbox.get(dst)
        if box is None:
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

    def _flush_one(self, dst: int) -> None:
        envs = self._outbox.pop(dst, None)
        self._outbox_bytes.pop(dst, None)
        if envs:
            self.link.send(dst, envs)

    def congested(self, dst: int) -> Awaitable | None:
        """None when the transport toward world rank ``dst`` takes more now; else what to
        await before sending more (backpressure: a sender faster than its receiver must
        not buffer without bound)."""
        return self.link.congested(dst)

    def option(self, name: str, default: Any) -> Any:
        """The value of the run's option ``name`` (``default``: its declared default,
        when the run did not give it)."""
        return getattr(self.owner, "options", {}).get(name, default)

    def doubling_collectives(self) -> bool:
        """Whether allreduce/allgather use recursive doubling (option ``collectives``:
        ``"auto"``, the default, follows ``Link.cheap_messages``)."""
        choice = self.option("collectives", "auto")
        return choice == "doubling" or (choice == "auto" and self.link.cheap_messages)

    # --------------------------------------------------------------- receiving
    def deliver(self, envs: list[Envelope]) -> None:
        """Take a batch from the transport (payload references already resolved).

        Batches that come before the rank has started (its protocols' ``on_start`` has
        not run yet) wait in arrival order and are taken by ``open``.
        """
        if self._waiting is not None:
            self._waiting.append(envs)
            return
        accept = self._in.accept
        for env in envs:
            for e in accept(env):
                self._dispatch(e)

    def open(self) -> None:
        """The rank has started (or been restored): take what arrived before."""
        early, self._early = self._early, []
        waiting, self._waiting = self._waiting, None
        for env in early:
            self._dispatch(env)
        for envs in waiting or ():
            self.deliver(envs)

    def _dispatch(self, env: Envelope) -> None:
        if self.trace is not None:
            kind = "coll" if env.comm.endswith(COLLECTIVE_SUFFIX) else KIND_NAMES[env.kind]
            self.trace.record(env.t_send, self.link.clock(), env.src, env.dst, env.tag,
                              env.payload.nbytes, kind, env.comm)
        if env.kind == CTRL:
            if env.comm == SYNC:  # not a protocol's: see _synchronous
                self.sync.on_ack(env.src, unpack(env.payload)[1])
            else:
                self.owner.on_control(env)
            return
        src = env.src
        expected = self.received[src]
        if env.app_seq != expected:
            if env.app_seq < expected:
                self.duplicates_dropped += 1
            else:
                self._gaps.setdefault(src, {})[env.app_seq] = env
            return
        self.received.bump(src)
        self._accept_app(env)
        gaps = self._gaps.get(src)
        while gaps and self.received[src] in gaps:
            nxt = gaps.pop(self.received.bump(src))
            self._accept_app(nxt)

    def _accept_app(self, env: Envelope) -> None:
        env = self.owner.on_receive(env)
        if env is not None:
            self.matcher.arrive(env)

    def deliver_now(self, env: Envelope) -> None:
        """Hand an application envelope to matching (protocols release held ones here)."""
        self.matcher.arrive(env)

    def report(self, kind: str, **detail) -> None:
        """Record an event in the coordinator's timeline rather than this rank's, so it
        survives this rank."""
        self.link.report(self.events.make(kind, **detail))

    def control_data(self, env: Envelope) -> tuple[str, Any]:
        """The ``(op, data)`` carried by a control envelope."""
        return unpack(env.payload)

    # -------------------------------------------------------- receives, probes
    def _consumed(self, env: Envelope) -> Envelope:
        self._consumed_since += 1
        if self._log is not None:
            self._log.append(env)
        return env

    async def receive(self, ctx: str, source: int, tag: int) -> Envelope:
        """Wait for and consume the first message matching (world ``source``)."""
        env = self.matcher.find(ctx, source, tag, consume=True)
        if self._reentry is not None:
            self._received_again(env, source, tag)
        if env is not None:  # already here: no waiter to build
            return self._consumed(env)
        fut = self._loop.create_future()
        track = self.keep_base  # only snapshot_now reads what is in flight
        p = Posted(ctx, source, tag,
                   _resolver(fut, self.matcher, self._matched if track else None))
        self.matcher.post(p)
        self._flush_before_wait()
        try:
            env = await fut
        except asyncio.CancelledError:
            self.matcher.withdraw(p)
            if fut.done() and not fut.cancelled():
                if track:
                    self._unmatched(fut.result())
                self.matcher.arrive(fut.result())  # matched just before the cancel: give back
            raise
        if track:
            self._unmatched(env)
        return self._consumed(env)

    def _matched(self, env: Envelope) -> Envelope:
        """A blocking receive got ``env``; until its task resumes, the message is neither
        queued nor consumed, so ``state_now`` takes it from here."""
        self._in_flight.append(env)
        return env

    def _unmatched(self, env: Envelope) -> None:
        for i, e in enumerate(self._in_flight):
            if e is env:
                del self._in_flight[i]
                return

    def receive_later(self, ctx: str, source: int, tag: int) -> asyncio.Future:
        """Post a receive now; the future completes with the consumed envelope."""
        fut = self._loop.create_future()
        p = Posted(ctx, source, tag, _resolver(fut, self.matcher, self._consumed))
        env = self.matcher.post(p)
        if self._reentry is not None:
            if env is None:
                self.matcher.withdraw(p)
            self._received_again(env, source, tag)
        if env is not None:
            fut.set_result(self._consumed(env))
        else:
            fut.add_done_callback(lambda f: f.cancelled() and self.matcher.withdraw(p))
        return fut

    def _received_again(self, env: Envelope | None, source: int, tag: int) -> None:
        """A receive of a restored rank before its resume point found ``env`` queued:
        it must be one of the messages that code received in its first life (see
        ``_reentry``; raises ProtocolError)."""
        if self._reentry.took(env, source, tag):
            self._reentry = None

    async def probe(self, ctx: str, source: int, tag: int) -> Envelope:
        """Wait until a matching message is queued; it stays queued."""
        env = self.matcher.find(ctx, source, tag, consume=False)
        if env is not None:
            return env
        fut = self._loop.create_future()
        p = Posted(ctx, source, tag, _resolver(fut, self.matcher, requeue=False), consume=False)
        self.matcher.post(p)
        self._flush_before_wait()
        try:
            return await fut
        except asyncio.CancelledError:
            self.matcher.withdraw(p)
            raise

    def iprobe(self, ctx: str, source: int, tag: int) -> Envelope | None:
        return self.matcher.find(ctx, source, tag, consume=False)

    # ------------------------------------------------------------ safe points
    def enter_loop(self, n: int) -> int:
        """Start an ``iterations(n)`` loop; returns the iteration to start from."""
        if self._in_loop:
            raise RuntimeError("iterations() loops cannot be nested")
        index = self._loop_count
        self._loop_count += 1
        start = 0
        if self._resume is not None:
            r_index, r_iter = self._resume
            if index < r_index:
                start = n  # finished before the snapshot: run no iteration of it again
            elif index == r_index:
                start = min(r_iter, n)
                self._resume = None
                self.sent, self._replay_sent = self._replay_sent, None  # caught up
        if self._reentry is not None and self._resume is None:
            self._reentered()
        self._in_loop = True
        self._loop_n = n
        self._since_safe_point = [] if self._record else None
        self._log = self._since_safe_point
        return start

    def _reentered(self) -> None:
        """The resumed loop is reached: the registered attributes are the checkpoint's
        again, whatever the code before it did to them (``Reentry.at_loop`` raises if that
        code did not receive again what it received in its first life). Attributes that
        were registered inside the loop are registered again here, since the code that
        registered them may not run again."""
        values = self._reentry.at_loop()
        self._reentry = None
        for name, value in values.items():
            if name not in self.registered:
                self.registered.append(name)
            setattr(self.owner, name, value)

    def at_safe_point(self, iteration: int) -> None:
        self.position = (self._loop_count - 1, iteration)
        self._consumed_since = 0
        if self._since_safe_point:
            self._since_safe_point.clear()
        if self.keep_base:
            self._base = self._snapshot_parts()
            self._posted_at_base = self.matcher.posted_receives()

    def exit_loop(self, n: int) -> None:
        self.position = (self._loop_count - 1, n)
        self._in_loop = False
        self._since_safe_point = None
        self._log = self._prefix_log if self._record else None

    def next_safe_point(self) -> tuple[int, int] | None:
        """The position of the next safe point this rank will offer, if it is inside a
        loop that has one left; else None."""
        if not self._in_loop:
            return None
        index = self._loop_count - 1
        if self.position is None or self.position[0] != index:
            return None  # entering the loop: its first iteration is not known yet
        nxt = self.position[1] + 1
        return (index, nxt) if nxt < self._loop_n else None

    def register(self, name: str, initial: Any) -> Any:
        """Add ``name`` to the registered state; returns its value: the checkpoint's
        before a restored rank's resume point, else ``initial``."""
        if name not in self.registered:
            self.registered.append(name)
        return initial if self._reentry is None else self._reentry.value(name, initial)

    @property
    def restored(self) -> bool:
        """True while ``main()`` runs again after a restore to a safe point or with
        registered state (not after a restore to the start of the run)."""
        return self._restored

    # -------------------------------------------------------------- snapshots
    def _snapshot_parts(self, buffers: list | None = None) -> dict:
        values = {name: getattr(self.owner, name) for name in self.registered}
        return {
            "rank": self.rank,
            "position": self.position,
            "registered": cloudpickle.dumps(values, protocol=5, buffer_callback=(
                None if buffers is None else buffers.append)),
            "sent": RankVector.of(self.sent),
            "received": RankVector.of(self.received),
            "prefix_log": list(self._prefix_log),
        }

    def snapshot(self, protocol_state: dict | None = None,
                 cut: dict[int, int] | None = None) -> bytes:
        """The rank's recoverable state now, as a sealed blob (see module docstring).

        ``cut`` {peer: n}: count only the first n messages from each of these peers as
        received, and leave the later ones out of the queued messages (a channel flush's
        cut: they were sent after the peer's own snapshot, which will send them again).

        Taken at a safe point it needs nothing else. Taken between safe points (only when
        ``keep_base`` is on) it is the last safe point's state plus the messages received
        since, which a restore replays. A receive posted before the safe point and still
        pending (an ``irecv`` not waited for yet) cannot be saved: the code that posted it
        does not run again after a restore, so that is a ProtocolError.
        """
        return _storage.dumps(self._state(protocol_state, cut=cut))

    def received_at(self, cut: dict[int, int]) -> RankVector:
        """``received`` as a snapshot cut at ``cut`` {peer: n} counts it."""
        received = RankVector.of(self.received)
        for src, n in cut.items():
            received[src] = n
        return received

    def snapshot_now(self, protocol_state: dict | None = None, *,
                     unreceived: dict[int, int] | None = None) -> bytes:
        """The rank's state at this very moment, between safe points, as a sealed blob:
        for a protocol that must checkpoint "now" (an HC3I forced checkpoint, taken from a
        control-message handler while ``main()`` may be blocked in a receive). Needs
        ``keep_base`` from the start and a stack that records deliveries. Same as
        ``seal_state(state_now(unreceived=...), protocol_state)``."""
        return self.seal_state(self.state_now(unreceived=unreceived),
                               self.owner.protocol_state() if protocol_state is None
                               else protocol_state)

    def state_now(self, *, unreceived: dict[int, int] | None = None) -> dict:
        """The state of ``snapshot_now``, not sealed yet (``seal_state`` finishes it, maybe
        later, adding messages that were in transit at this moment).

        Inside a loop it is the last safe point's state plus every message consumed
        since (replayed on restore, in order); before the first loop it is the start of
        the run plus every message consumed so far, with no message counted as sent, so
        re-running ``main()`` sends them again with their original numbers. Either way a
        restore re-executes the code since that point and the receivers drop what they
        already have (piecewise determinism). Receives posted since that point and still
        pending are posted again by the re-execution, so they are no obstacle; an
        ``irecv`` still pending from before the safe point is (ProtocolError).

        Args:
            unreceived: ``{source: k}``: the last ``k`` messages accepted from ``source``
                are held back by the protocol and not delivered; the state does not count
                them as received (after a rollback their senders send them again).

        Raises:
            ProtocolError: outside a loop once one was entered (straight-line code after
                a loop cannot be resumed; see ``can_snapshot_now``), or an irecv from
                before the safe point is still pending.
        """
        if not self.keep_base or not self._record:
            raise ProtocolError("snapshot_now() needs keep_base = True from the start and "
                                "a protocol that records deliveries")
        if self._in_loop:
            posted = self.matcher.posted_receives()
            if any(p is q for p in posted for q in self._posted_at_base):
                raise ProtocolError(
                    f"rank {self.rank}: an irecv posted before the last safe point is still "
                    f"pending; complete irecv requests before the next safe point")
            parts = dict(self._base)
            replay = parts["prefix_log"] + list(self._since_safe_point) + self._in_flight
        elif self.position is None and self._resume is None:
            parts = self._snapshot_parts()
            parts["registered"] = cloudpickle.dumps({})
            parts["sent"] = RankVector(self.size)
            # what a blocked receive got is received before the loop too: a restore
            # hands both to the code before the loop again (``_reentry``)
            parts["prefix_log"] = parts["prefix_log"] + self._in_flight
            replay = list(parts["prefix_log"])
        else:
            raise ProtocolError(f"rank {self.rank}: no snapshot now outside a loop once "
                                f"one was entered (position {self.position})")
        received = RankVector.of(self.received)
        for src, k in (unreceived or {}).items():
            received[src] -= k
        parts["received"] = received
        parts["replay"] = replay + self.matcher.queued()
        return parts

    def seal_state(self, parts: dict, protocol_state: dict, late=()) -> bytes:
        """Seal a ``state_now`` with the protocols' state. ``late``: messages that were
        in transit when the state was taken and arrived since (in arrival order): they
        are added as received and not consumed yet."""
        parts = dict(parts)
        received = RankVector.of(parts["received"])
        for env in late:
            received[env.src] += 1
        parts["received"] = received
        parts["replay"] = parts["replay"] + list(late)
        parts["protocols"] = protocol_state
        return _storage.dumps(parts)

    def can_snapshot_now(self) -> bool:
        """Whether ``snapshot_now`` can capture this moment: inside a loop, or before the
        first one (not while a restored rank re-runs the code before its resume point,
        nor after a loop ended)."""
        return self._in_loop or (self.position is None and self._resume is None)

    def transfer(self, protocol_state: dict | None = None) -> tuple[bytes, list]:
        """The rank's state at this safe point for a move to another process, as
        ``(pickle, buffers)``: the registered values' large buffers (numpy arrays) are
        left out of the pickle, as views, so the transport ships them with no copy of ours
        (``Link.share``) and ``load`` takes the pair. Not sealed: it goes from memory to
        memory and is never stored (checkpoints use ``snapshot``); the rank must not
        change its registered state until the pair is shipped."""
        buffers: list = []
        parts = self._state(protocol_state, buffers)
        parts["buffers"] = len(buffers)
        return cloudpickle.dumps(parts, protocol=5), [b.raw() for b in buffers]

    def _state(self, protocol_state: dict | None, buffers: list | None = None,
               cut: dict[int, int] | None = None) -> dict:
        """What ``snapshot`` and ``transfer`` save; ``buffers`` collects the registered
        values' out-of-band buffers (a safe point only); ``cut``: see ``snapshot``."""
        if self.matcher.pending():
            raise ProtocolError(
                f"rank {self.rank}: {self.matcher.pending()} receive(s) still pending at the "
                f"snapshot; complete irecv requests before the next safe point")
        if self._in_loop and self._consumed_since:
            if self._base is None or self._since_safe_point is None or buffers is not None:
                raise ProtocolError(
                    "a snapshot between safe points (after receiving since the last one) "
                    "needs keep_base = True from the start and a protocol that records "
                    "deliveries; a transfer needs a safe point")
            parts = dict(self._base)
            parts["received"] = RankVector.of(self.received)
            replay = parts["prefix_log"] + list(self._since_safe_point)
        else:
            parts = self._snapshot_parts(buffers)
            replay = list(parts["prefix_log"])
        queued = self.matcher.queued()
        if cut:
            queued = [e for e in queued if e.src not in cut or e.app_seq < cut[e.src]]
            parts["received"] = self.received_at(cut)
        parts["replay"] = replay + queued
        parts["protocols"] = self.owner.protocol_state() if protocol_state is None else protocol_state
        return parts

    def blank_snapshot(self, rank: int) -> bytes:
        """See ``blank_snapshot`` (module level)."""
        return blank_snapshot(rank, self.size)

    def load(self, blob: bytes | tuple) -> dict:
        """Check and decode a snapshot blob (raises CheckpointCorrupted), or take a
        ``transfer`` pair."""
        if isinstance(blob, tuple):
            data, buffers = blob
            parts = pickle.loads(data)
            if parts.get("buffers") != len(buffers):
                raise ProtocolError(f"a transfer of rank {parts.get('rank')} came with "
                                    f"{len(buffers)} buffers, not {parts.get('buffers')}")
            # writable: the program may write into its registered arrays (a transport
            # that fetched them as writable copies already is not copied again)
            parts["buffers"] = [b if type(b) is bytearray else bytearray(b) for b in buffers]
        else:
            parts = _storage.loads(blob)
        if parts.get("rank") != self.rank:
            raise ProtocolError(f"snapshot of rank {parts.get('rank')} given to rank {self.rank}")
        return parts

    def restore(self, parts: dict, epoch: int) -> None:
        """Install a decoded snapshot and become incarnation ``epoch``.

        ``main()`` must be (re)started afterwards; it resumes at the saved position. The
        code before that position runs again with the registered values of the snapshot
        and the messages it received in its first life (the first ``len(prefix_log)`` of
        the replayed ones); ``_reentry`` checks that it takes them again and sets the
        registered attributes back when the resumed loop is reached.
        """
        self._resume = parts["position"]
        replay = list(parts["replay"])
        again = replay[:len(parts["prefix_log"])]
        self._reentry = None
        if self._resume is not None or again:
            self._reentry = Reentry(self.rank, self._resume, again, parts["registered"],
                                    parts.get("buffers"))
        values = {} if self._reentry is None else self._reentry.values
        self.registered = list(values)
        self._restored = bool(values) or self._resume is not None
        self.sent = RankVector.of(parts["sent"])
        self._replay_sent = None if self._resume is None else self.sent
        self.received = RankVector.of(parts["received"])
        self._gaps.clear()
        self._outbox.clear()
        self._outbox_bytes.clear()
        # re-running the code before the resume point consumes (and logs) the replayed
        # prefix messages again: starting from the saved log would hold them twice, and
        # the next snapshot would replay the extra copies into later receives
        self._prefix_log = []
        self._loop_count = 0
        self._in_loop = False
        self._since_safe_point = None
        self._log = self._prefix_log if self._record else None
        self._base = None
        # become incarnation ``epoch`` (channels in and out start afresh), closed until
        # the host has run ``on_restored`` (``open``): envelopes that arrived early for it
        # (a fast peer's marker, say) would otherwise reach the protocols before they
        # reset, and the matcher before its restored messages, and be lost
        self.epoch = epoch
        self.peer_epochs[self.rank] = epoch  # the channel to self reaches this incarnation
        self._out.reset()
        self._early = self._in.new_epoch(epoch)
        if self._waiting is None:
            self._waiting = []
        self._in_flight.clear()
        self.matcher.reset(replay)
        protocols = parts["protocols"]
        if protocols is None and self._start_protocols is not None:
            protocols = pickle.loads(self._start_protocols)  # a blank snapshot: the start
        if protocols is not None:
            self.owner.restore_protocol_state(protocols)

    def started(self) -> None:
        """The protocols have started (``on_start`` ran): keep their state as it is now,
        which a blank snapshot restores. A rank restored to the start of the run is often
        a survivor (non-stop recovery rolls everyone back in place); without this it would
        go on with the state of the execution it abandoned, e.g. the next backup round it
        had agreed on, and wait in another round than the others."""
        self._start_protocols = cloudpickle.dumps(self.owner.protocol_state())

    def set_peer_epoch(self, rank: int, epoch: int) -> None:
        """Peer ``rank`` now runs as ``epoch``; traffic from its older lives is stale,
        including what waits for an earlier message (it would fill in the new life's
        numbers with the old life's messages)."""
        restarted = epoch != self.peer_epochs[rank]
        self.peer_epochs[rank] = epoch
        self._in.peer_epoch(rank, epoch)
        gaps = self._gaps.get(rank)
        if gaps:
            for seq in [s for s, env in gaps.items() if env.src_epoch < epoch]:
                del gaps[seq]
                self._in.stale += 1
        if restarted:
            self.sync.peer_restarted(rank)

    def set_peer_epochs(self, epochs) -> None:
        """Every other rank's epoch at once (a restore's table; this rank's own entry is
        the restore's to set). The channels read the table as traffic arrives
        (``InChannels.epochs``), so only the peers with state waiting here are visited:
        a rollback renumbers every rank, and a pass over all of them in every rank cost
        O(ranks^2) per recovery (4,096 ranks: 16.8 million calls)."""
        table = RankVector.of(epochs)
        table[self.rank] = self.peer_epochs[self.rank]
        for rank in sorted((self._gaps.keys() | self.sync.peers()) - {self.rank}):
            if table[rank] != self.peer_epochs[rank]:
                self.set_peer_epoch(rank, table[rank])
        self.peer_epochs = self._in.epochs = table

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict:
        return {
            "sent": self.sent.total(), "received": self.received.total(),
            "duplicates_dropped": self.duplicates_dropped,
            "resends_suppressed": self.resends_suppressed,
            "stale_dropped": self._in.stale, "channel_duplicates": self._in.duplicates,
            "logged_bytes": self.logged_bytes,
        }


def blank_snapshot(rank: int, size: int) -> bytes:
    """The state of rank ``rank`` before ``main()`` first ran: restoring it re-runs the
    program from the start, with the protocols' state of the start (``Endpoint.started``)."""
    return _storage.dumps({
        "rank": rank, "position": None, "registered": cloudpickle.dumps({}),
        "sent": RankVector(size), "received": RankVector(size), "prefix_log": [],
        "replay": [], "protocols": None})


def _resolver(fut: asyncio.Future, matcher: Matcher,
              on_done: Callable[[Envelope], Envelope] | None = None, requeue: bool = True):
    """Completion callback for a posted receive: a cancelled waiter gives the message back."""

    def deliver(env: Envelope) -> None:
        if fut.done():
            if requeue:
                matcher.arrive(env)
            return
        fut.set_result(on_done(env) if on_done else env)

    return deliver


