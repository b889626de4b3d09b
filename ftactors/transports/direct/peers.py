"""The direct plane's sending side, the asyncio glue: a rank's channels to its peers,
each over as many connections as it takes, its frames written with scatter-gather I/O.

Theory of operation
-------------------
``Peers`` opens one channel (``_Outbound``) per peer endpoint on first use. A channel
numbers its frames and keeps those not yet acknowledged (``window.SendWindow``); each
connection (``_Wire``) runs the client's side of the handshake
(``handshake.ClientHandshake``), passing the channel's shared-memory segment
(``shm.Segment``, to a peer on this node) with its proof (``SCM_RIGHTS``), and only once
the listener's answer checks are frames written on it: first those kept after the
listener's count, in order, then new ones. A frame is a tuple of pieces (its head, its
body and its payloads' buffers: no copy, in the window too), written with ``os.writev``
on a duplicate of the socket's descriptor (at once when nothing is pending; the pieces
the kernel has not taken stay referenced until the socket is writable again).

Buffers of ``shm_bytes`` and more to a peer on this node go in the segment instead
(``wire.shm_head``): copied there as they are pickled (``place``, called by the link's
``put_large``) or, for a buffer pickled for no one destination, as the frame is written
(``_shared``). A segment that cannot be made or passed, or that the listener does not
take, leaves the channel on the socket (``shared_fallback``; the frames kept with
buffers in the segment are rewritten with them inline, ``wire.unshare``), so nothing
waits on shared memory that is not there.

A connection that ends without ``close`` (a reset, an idle timeout, a NIC flap;
``Chaos(method="disconnect")`` and ``Partition`` make them) is made again with backoff
(``BACKOFF_S``), through the same handshake. A failed attempt is a *hint* that the peer
may be gone: ``Peers`` hands it to ``on_lost(dst)`` (the rank tells the coordinator,
which decides); after ``RECONNECT_S`` of failed attempts the channel drops its frames and
is closed. A new incarnation in a new process gets a new endpoint: a rewire closes the
channel to the old one and drops what was queued for it, as a Ray call to a dead actor
would be (the channel layer treats that traffic as stale anyway); restored in place it
keeps its endpoint, and whatever is resent to or from it carries the old epochs and is
dropped as stale by the channel layer, as the protocols' replay expects.

Backpressure: a sender that writes faster than its peer reads must not buffer without
bound. A channel is *congested* while its connection holds more than
``HIGH_WATER_BYTES`` the kernel has not taken (until it has drained to a quarter of the
mark), or while its window is full (connected or not); ``Peers.congested`` gives the
sender something to await meanwhile (``comm.send`` awaits it). Nothing is dropped or
reordered by waiting: a frame is kept or written whole, in order, either way.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections import deque
from typing import Callable

from . import shm
from .counters import Counters
from .handshake import AUTH_TIMEOUT_S, SESSION_BYTES, ClientHandshake, RunSecret
from .listener import DirectEndpoint
from .window import SendWindow
from .wire import COUNT, HEADER, INLINE, MAX_FRAME_BYTES, oob_head, shm_head, unshare

SEND_BUFFER_BYTES = 4 << 20
"""The kernel's send buffer asked for on each connection (capped by the system's
``net.core.wmem_max``): with the default 208 KiB a stream of 64 KiB-1 MiB arrays kept
the sender waiting for the socket to drain (measured: 64 KiB 1100 -> 1555 MiB/s, 128 KiB
1308 -> 1927 MiB/s one way between two Ray ranks). The window still bounds what is
unacknowledged."""
IOV_MAX = 1024
"""The most pieces one ``writev`` takes (Linux's limit)."""

HIGH_WATER_BYTES = 1 << 20
"""Bytes a connection may hold unsent before its sender waits (a quarter: it goes on)."""
RECONNECT_S = 30.0
"""A channel whose connection cannot be made again this long drops its frames."""
BACKOFF_S = (0.005, 0.5)
"""The first and the longest wait between two connection attempts."""


class _Wire(asyncio.Protocol):
    """One connection of an ``_Outbound``: the handshake, then the listener's
    acknowledgements. ``proven`` gets the listener's resume point and whether it took the
    channel's shared-memory segment (passed with the proof on a Unix connection) once it
    has proved the secret, or None when the connection failed first.

    The handshake is written by the transport; frames are written by ``send``, with
    ``os.writev`` on the socket: the pieces the kernel has not taken stay referenced in
    ``pending`` (no copy), written when the socket is writable again. Nothing else
    writes on the socket meanwhile: the transport's own buffer is empty once the
    listener has answered the proof (``_Outbound._attempt`` checks)."""

    def __init__(self, out: "_Outbound"):
        self.out = out
        self.transport = None
        self.buf = b""
        self.handshake = ClientHandshake(out.secret, out.session)
        self.proven = asyncio.get_running_loop().create_future()
        self.fd = -1
        self.pending: deque = deque()  # pieces not written yet (the first may be a tail)
        self.pending_bytes = 0
        self.waiting = False  # a writer callback is registered for fd
        self.dead = False
        self.passed = False  # the channel's segment went with the proof

    def connection_made(self, transport) -> None:
        self.transport = transport
        # a duplicate descriptor of the socket: the loop lets a transport's own one have
        # no other writer
        self.fd = os.dup(transport.get_extra_info("socket").fileno())
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                                       SEND_BUFFER_BYTES)

    def send(self, pieces, nbytes: int) -> None:
        """Write ``pieces`` (bytes-like, in order, ``nbytes`` in all) after what is
        pending."""
        if self.dead:
            return
        n = 0
        if not self.pending and len(pieces) <= IOV_MAX:  # the usual case: write at once
            n = self._writev(pieces)
            if n is None or n == nbytes:
                return
        self.pending.extend(pieces)
        self.pending_bytes += nbytes
        if n:  # the kernel took a part: keep the rest
            self._written(n)
            self._flush()
        elif not self.waiting:
            self._flush()
        else:
            self._pressure()

    def _writev(self, pieces) -> int | None:
        """``os.writev`` on the socket: the bytes the kernel took (0 when it takes none
        now), or None once the connection is lost (reset, broken pipe: aborted)."""
        try:
            return os.writev(self.fd, pieces)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self.abort()
            return None

    def _written(self, n: int) -> None:
        """Drop the ``n`` bytes the kernel took from the front of ``pending``."""
        pending = self.pending
        self.pending_bytes -= n
        while pending:
            piece = pending[0]
            size = len(piece)
            if n < size:
                if n:
                    pending[0] = memoryview(piece).cast("B")[n:]
                return
            n -= size
            pending.popleft()

    def _flush(self) -> None:
        """Write what the kernel takes now; wait for the socket to be writable for the rest."""
        pending = self.pending
        while pending:
            batch = list(pending) if len(pending) <= IOV_MAX else [pending[i] for i in range(IOV_MAX)]
            n = self._writev(batch)
            if n is None:
                return
            if not n:
                break
            self._written(n)
            if len(batch) < IOV_MAX:  # it had every pending piece: the kernel took what it could
                break
        loop = asyncio.get_running_loop()
        if pending and not self.waiting:
            self.waiting = True
            loop.add_writer(self.fd, self._flush)
        elif not pending and self.waiting:
            self.waiting = False
            loop.remove_writer(self.fd)
        self._pressure()

    def _pressure(self) -> None:
        """Hold the channel's senders while more than the high-water mark is pending;
        let them go on once a quarter of it is."""
        out = self.out
        if out.wire is self:
            if self.pending_bytes > HIGH_WATER_BYTES:
                if not out.paused:
                    out.paused = True
                    out.writable.clear()
            elif out.paused and self.pending_bytes <= HIGH_WATER_BYTES // 4:
                out.paused = False
                out.update()

    def abort(self) -> None:
        """End the connection now; nothing more is written on it."""
        self._stop()
        self.transport.abort()

    def _stop(self) -> None:
        self.dead = True
        self.pending.clear()
        self.pending_bytes = 0
        if self.waiting:
            self.waiting = False
            asyncio.get_running_loop().remove_writer(self.fd)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        if self.proven.done():  # acknowledgements: only the newest counts
            whole = len(buf) - len(buf) % COUNT.size
            if whole:
                if self.out.wire is self:
                    self.out.on_ack(COUNT.unpack_from(buf, whole - COUNT.size)[0])
                buf = buf[whole:]
            self.buf = buf
            return
        proof, verdict, rest = self.handshake.receive(data)
        if proof is not None:
            self._prove(proof)
        if verdict is None:
            return
        if isinstance(verdict, str):  # the listener does not hold the secret
            setattr(self.out.counters, verdict, getattr(self.out.counters, verdict) + 1)
            self.abort()
            self.proven.set_result(None)
            return
        self.buf = rest
        count, shared = verdict
        self.proven.set_result((count, self.passed and shared))

    def _prove(self, proof: bytes) -> None:
        """Write the proof; on a Unix connection of a channel with a segment, pass the
        segment's descriptor with it (``SCM_RIGHTS``). Nothing else is written before
        it, so the kernel takes it whole; if the descriptor cannot go, the proof goes
        alone and the channel uses the socket."""
        segment = self.out.segment
        if segment is not None:
            try:
                with socket.socket(fileno=os.dup(self.fd)) as sock:
                    sent = socket.send_fds(sock, [proof], [segment.fd])
            except OSError:
                sent = 0
            self.passed = sent > 0
            proof = proof[sent:]
        if proof:
            self.transport.write(proof)

    def connection_lost(self, exc) -> None:
        self._stop()
        if not self.proven.done():
            self.proven.set_result(None)
        else:
            self.out.on_lost(self)


class _Outbound:
    """The channel to one peer endpoint, over as many connections as it takes.

    Frames are numbered from 0 in the order they are written; ``frames`` keeps those from
    ``base`` on, which the listener has not acknowledged. A connection that ends without
    ``close`` is made again (with backoff, ``reconnect_s`` at most); the listener's proof
    says how many frames of this session (``session``) it has delivered, and the rest are
    written again. Nothing is dropped unless ``close`` drops it (a rewire, the end, or no
    connection within ``reconnect_s``)."""

    def __init__(self, peers: "Peers", dst: int, endpoint: DirectEndpoint):
        self.secret = peers.secret
        self.counters = peers.counters
        self.lost = lambda: peers.on_lost(dst)  # a hint: the peer may be gone
        self.endpoint = endpoint
        self.local = endpoint.node == peers.node
        self.reconnect_s = peers.reconnect_s
        self.session = secrets.token_bytes(SESSION_BYTES)
        # frames not yet acknowledged, each a tuple of pieces (header, body, buffers) and
        # counted with its bytes in the segment too
        self.window = SendWindow()
        self.connections = 0
        self.wire: _Wire | None = None  # the proven connection frames go on
        self.closed = False
        self.paused = False  # the wire's transport holds more than the high-water mark
        self.blocked_until = peers.blocked.get(dst, 0.0)  # chaos: partitioned until (loop time)
        self.writable = asyncio.Event()
        self.writable.set()
        self.segment: shm.Segment | None = None  # shared memory with a peer on this node
        if self.local and peers.shm_bytes is not None:
            try:
                self.segment = shm.Segment(shm.SEGMENT_BYTES)
            except OSError:  # no memfd or no memory for it: the socket will do
                self.counters.shared_fallback += 1
        # frames may use the segment: until a connection's listener says it did not take it
        self.shared = self.segment is not None
        self.task = asyncio.ensure_future(self._connect())

    @property
    def ready(self) -> bool:
        return self.wire is not None

    def write(self, frame: tuple, nbytes: int, held: int = 0) -> None:
        """Queue ``frame`` (a tuple of pieces, ``nbytes`` long; ``held``: its bytes in
        the segment, which the window counts too) and write it."""
        if self.closed:
            self.counters.dropped_sends += 1
            return
        full = self.window.push(frame, nbytes + held)
        wire = self.wire
        if wire is not None:
            if wire.transport.is_closing():  # lost; connection_lost is on its way
                self.on_lost(wire)
            else:
                wire.send(frame, nbytes)  # may pause
        if full:
            self.writable.clear()

    def congested(self) -> bool:
        """Whether the sender should wait before it writes more: the kernel holds more
        than the high-water mark, or the peer has not acknowledged a window's worth."""
        return not self.closed and (self.paused or self.window.full())

    async def drained(self) -> None:
        """Return once the channel takes frames again (or is closed: they drop)."""
        self.counters.throttled += 1
        while self.congested():
            await self.writable.wait()

    def update(self) -> None:
        """Let waiting senders go on unless the channel is congested."""
        if self.congested():
            self.writable.clear()
        else:
            self.writable.set()

    def on_ack(self, count: int) -> None:
        """The listener has delivered frames numbered below ``count``: forget them."""
        self.window.ack(count)
        self._acked()

    def _acked(self) -> None:
        """Free the segment's regions of the frames acknowledged; let senders go on."""
        if self.segment is not None:
            self.segment.release(self.window.base)
        if not self.writable.is_set():
            self.update()

    def on_lost(self, wire: _Wire) -> None:
        """Connection ``wire`` ended without ``close``: connect again and resend."""
        if self.wire is not wire or self.closed:
            return
        self.wire = None
        self.paused = False
        self.window.lost()
        self.task = asyncio.ensure_future(self._connect())
        self.update()

    def disconnect(self, until: float = 0.0) -> None:
        """Chaos: end the connection now (as a reset would); with ``until`` (loop time),
        connect again no earlier (a partition)."""
        self.blocked_until = max(self.blocked_until, until)
        wire = self.wire
        if wire is not None:
            wire.abort()
            self.on_lost(wire)

    async def _connect(self) -> None:
        """Connect (again) until proven, with backoff; a failed attempt is a hint that
        the peer is gone, and ``reconnect_s`` of them close the channel."""
        loop = asyncio.get_running_loop()
        delay, deadline = BACKOFF_S[0], None
        while not self.closed:
            if await self._attempt():
                return
            if deadline is None:
                deadline = loop.time() + self.reconnect_s
                self.lost()
            if loop.time() >= deadline:
                self.close()
                return
            await asyncio.sleep(delay)
            delay = min(2 * delay, BACKOFF_S[1])

    async def _attempt(self) -> bool:
        """One connection and handshake; True once proven (or closed meanwhile)."""
        loop = asyncio.get_running_loop()
        if loop.time() < self.blocked_until:
            return False
        wire = _Wire(self)
        endpoint = self.endpoint
        try:
            if self.local:
                await loop.create_unix_connection(lambda: wire, endpoint.path)
            else:
                await loop.create_connection(lambda: wire, endpoint.host, endpoint.port)
            resume = await asyncio.wait_for(asyncio.shield(wire.proven), AUTH_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            resume = None
        except BaseException:  # cancelled by close()
            if wire.transport is not None:
                wire.abort()
            raise
        if (resume is None or self.closed or loop.time() < self.blocked_until
                or wire.transport.get_write_buffer_size()):  # the proof not yet taken: never seen
            if wire.transport is not None:
                wire.abort()
            return self.closed
        resume, self.shared = resume
        if self.segment is not None and not self.shared:
            self.counters.shared_fallback += 1
            self._unshare()
        resent = self.window.resume(resume)
        self._acked()
        if self.connections:
            self.counters.reconnects += 1
            self.counters.resent += resent
        self.connections += 1
        self.wire = wire
        if self.window.frames:
            pieces = [piece for frame in self.window.frames for piece in frame]
            wire.send(pieces, sum(map(len, pieces)))  # may pause
        self.update()
        return True

    def _unshare(self) -> None:
        """The connection took no segment: the frames kept with buffers in it carry
        those buffers after the body instead (copied out of their regions, which stay
        taken until the frames are acknowledged), so every frame can be written on it."""
        array = self.segment.array
        frames = self.window.frames
        for i in range(len(frames)):
            frames[i], moved = unshare(frames[i], array)
            self.counters.shared -= moved  # not shared after all

    def close(self) -> None:
        """No more sends: what was never written is dropped (the peer is gone or
        replaced)."""
        if self.closed:
            return
        self.closed = True
        unwritten = self.window.drop()
        if self.wire is None:
            self.counters.dropped_sends += unwritten
        if self.wire is not None:
            self.wire.abort()
            self.wire = None
        if self.segment is not None:
            self.segment.close()
            self.segment = None
        if self.task is not asyncio.current_task():
            self.task.cancel()
        self.writable.set()  # a waiting sender goes on; its frames drop


class Peers:
    """A rank's outbound channels, one per peer endpoint, opened on first use.

    ``on_lost(dst)`` is called when a connection to ``dst`` could not be made (maybe
    ``dst`` is gone); ``reconnect_s`` later the channel gives up and drops its frames."""

    def __init__(self, secret: RunSecret, node: str, counters: Counters,
                 on_lost: Callable[[int], None] = lambda dst: None, *,
                 reconnect_s: float = RECONNECT_S, shm_bytes: int | None = None):
        self.secret = secret
        self.shm_bytes = shm_bytes  # buffers this large to a peer on this node: shared memory
        self.node = node
        self.counters = counters
        self.on_lost = on_lost
        self.reconnect_s = reconnect_s
        self.endpoints: list[DirectEndpoint | None] = []
        self.conns: dict[int, _Outbound] = {}
        self.blocked: dict[int, float] = {}  # chaos: peer -> partitioned until (loop time)

    def wire(self, endpoints: list[DirectEndpoint | None]) -> None:
        """Take the peers' endpoints; close channels to endpoints that changed."""
        for dst, conn in list(self.conns.items()):
            if dst >= len(endpoints) or endpoints[dst] != self.endpoints[dst]:
                conn.close()
                del self.conns[dst]
        self.endpoints = list(endpoints)

    def _channel(self, dst: int) -> "_Outbound | None":
        """The channel to ``dst``, opened now if need be; None when ``dst`` has no
        direct endpoint."""
        conn = self.conns.get(dst)
        if conn is None:
            if dst >= len(self.endpoints) or self.endpoints[dst] is None:
                return None
            conn = self.conns[dst] = _Outbound(self, dst, self.endpoints[dst])
        return conn

    def place(self, dst: int, buf):
        """``buf`` (a buffer being pickled for ``dst``) copied straight into the segment
        of the channel to ``dst``, a peer on this node: the read-only view of its region
        that becomes the payload's buffer (``shm.Segment.place``: the region is held until
        the view dies and its frames are acknowledged, and ``send`` writes only its
        offset), or None when it goes the usual way (too small, not on this node, no
        segment, none free that large)."""
        if self.shm_bytes is None or len(buf) < self.shm_bytes:
            return None
        conn = self._channel(dst)
        if conn is None or not conn.shared or conn.closed:
            return None
        region = conn.segment.place(buf)
        if region is not None:
            self.counters.placed += 1
        return region

    def send(self, dst: int, kind: int, body: bytes, buffers: list = ()) -> bool:
        """Queue one frame for ``dst``, with the out-of-band ``buffers`` of ``encode``
        after its body (referenced, not copied); False when ``dst`` has no direct
        endpoint or the frame is too long (the caller sends it another way)."""
        nbytes = len(body) + sum(map(len, buffers)) if buffers else len(body)
        if nbytes > MAX_FRAME_BYTES:
            return False
        conn = self._channel(dst)
        if conn is None:
            return False
        if buffers and conn.shared:
            shared = self._shared(conn, len(body), kind, buffers)
            if shared is not None:
                head, inline = shared
                sent = len(body) + sum(map(len, inline))
                conn.write((head, body, *inline), len(head) + sent, nbytes - sent)
                return True
        if buffers:  # the body is not copied behind the header: writev takes both
            head = oob_head(len(body), kind, buffers)
            conn.write((head, body, *buffers), len(head) + nbytes)
        else:
            conn.write((HEADER.pack(len(body), kind), body), HEADER.size + nbytes)
        return True

    def _shared(self, conn: "_Outbound", size: int, kind: int, buffers: list):
        """An out-of-band frame's header for a peer on this node, its buffers of
        ``shm_bytes`` and more in the channel's segment (there already when ``place``
        put them there, else copied now): ``(head, inline)``, ``inline`` the buffers
        that still go on the socket; None when none went in."""
        if conn.closed:
            return None
        frame = conn.window.next  # the number the frame gets
        segment = conn.segment
        offsets, inline = [], []
        for buf in buffers:
            offset = None
            if len(buf) >= self.shm_bytes:
                offset = segment.holder(buf.obj) if type(buf) is memoryview else None
                if offset is not None:
                    segment.assign(offset, frame)
                else:
                    offset = segment.put(frame, buf)
            if offset is None:
                inline.append(buf)
            offsets.append(INLINE if offset is None else offset)
        if len(inline) == len(buffers):
            return None
        self.counters.shared += len(buffers) - len(inline)
        return shm_head(size, kind, [len(buf) for buf in buffers], offsets), inline

    def congested(self, dst: int):
        """None when the channel to ``dst`` takes more frames now; else an awaitable
        that completes once it does (the sender writes faster than ``dst`` reads)."""
        conn = self.conns.get(dst)
        if conn is None or not conn.congested():
            return None
        return conn.drained()

    def disconnect(self, dsts=None, seconds: float = 0.0) -> None:
        """Chaos: end the connections to ``dsts`` (default: every peer) as a network
        fault would; with ``seconds``, none is made again before then (a partition)."""
        until = asyncio.get_running_loop().time() + seconds if seconds > 0 else 0.0
        for dst in (self.conns if dsts is None else dsts):
            if until:
                self.blocked[dst] = max(self.blocked.get(dst, 0.0), until)
            conn = self.conns.get(dst)
            if conn is not None:
                conn.disconnect(until)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
