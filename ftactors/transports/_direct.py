"""Direct rank-to-rank channels beside Ray (``data_plane="direct"``).

Ray stays the control plane (actors, placement, spares, failure detection, the object
store); envelope batches between ranks travel on sockets that the ranks open to each
other: a Unix domain socket when both ends run on one node, TCP on the node's address
otherwise. Nothing here knows Ray: a rank's ``Listener`` is started where its actor
lives, the coordinator hands every rank the listeners' ``DirectEndpoint``s when it wires
them, and ``Peers`` opens one outbound connection per peer on first use.

Theory of operation
-------------------
A connection is one-way: the connecting rank sends frames, the listening rank reads
them. Before a single frame byte is read, the connecting side proves it holds the run's
secret (made by the driver, handed to ranks at start, never printed): the listener sends
a random nonce, the client answers with its own nonce and an HMAC-SHA256 over both, and
the listener answers with an HMAC over them in the other order, so a client also knows it
reached the run's rank before it sends anything. A connection that sends anything else,
nothing within ``AUTH_TIMEOUT_S``, a frame longer than ``MAX_FRAME_BYTES``, stops in the
middle of a frame, or a frame that does not decode, is closed and counted (``Counters``);
nothing it sent reaches the rank.

A frame is a 5-byte header (body length, body kind) and a pickled batch: ``ROWS`` for the
envelopes as ``to_rows`` tuples (the C pickler's fast path), ``OBJECTS`` for batches
whose piggyback data needs cloudpickle. Batches that hold object-store references never
come here (Ray must see those to keep them alive): the transport sends them by actor call,
and the channel layer puts both paths back in order.

A new incarnation in a new process gets a new endpoint; when a rewire changes a peer's
endpoint, the connection to the old one is closed and what was queued for it is dropped,
as a Ray call to a dead actor would be (the channel layer treats that traffic as stale
anyway). A connection that cannot be made (the peer's process is gone) drops its queue
the same way; the coordinator, not this module, decides that a rank failed. Such a
connection, or one the peer's side closed, is a *hint* that the peer may be gone:
``Peers`` hands it to ``on_lost(dst)`` (the rank tells the coordinator, which checks).

Backpressure: a sender that writes faster than its peer reads (the peer's loop is busy
computing, its process stopped) must not buffer without bound. Each connection has a
high-water mark (``HIGH_WATER_BYTES`` of frames the kernel has not taken yet, or queued
before the handshake); above it the connection is *congested* until the transport has
drained to a quarter of the mark, and ``Peers.congested`` gives the sender something to
await meanwhile (``comm.send`` awaits it). Nothing is dropped or reordered by waiting: a
frame is queued or written whole, in order, either way.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import struct
from dataclasses import dataclass
from typing import Callable

import cloudpickle

from ..engine._envelope import Envelope, from_rows, to_rows

HEADER = struct.Struct("!IB")
"""Frame header: body length (bytes), body kind."""
ROWS = 0
"""Body kind: ``pickle.dumps(to_rows(envs))``."""
OBJECTS = 1
"""Body kind: ``cloudpickle.dumps(envs)`` (piggyback data the C pickler cannot take)."""

MAX_FRAME_BYTES = 256 << 20
"""Longest frame a listener accepts; a sender routes a longer batch another way."""
HIGH_WATER_BYTES = 1 << 20
"""Bytes a connection may hold unsent before its sender waits (a quarter: it goes on)."""
NONCE_BYTES = 32
MAC_BYTES = 32
AUTH_TIMEOUT_S = 5.0
"""A connection that has not proved the secret this long after it opened is closed."""
_CONTEXT = b"ftactors direct v1 "


class RunSecret:
    """The run's shared key. Its repr never shows the key (it may end up in a log)."""

    __slots__ = ("key",)

    def __init__(self, key: bytes | None = None):
        self.key = key if key is not None else secrets.token_bytes(32)

    def mac(self, role: bytes, first: bytes, second: bytes) -> bytes:
        return hmac.new(self.key, _CONTEXT + role + first + second, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "RunSecret(<hidden>)"

    def __reduce__(self):
        return (RunSecret, (self.key,))


@dataclass(frozen=True)
class DirectEndpoint:
    """Where a rank listens: its node, its Unix socket and its TCP address."""

    node: str
    path: str
    host: str
    port: int


class Counters:
    """What a rank's listener accepted and refused (see the module docstring)."""

    FIELDS = ("connections", "tcp_connections", "frames", "auth_failed", "auth_timeout", "oversized",
              "truncated", "bad_frame", "dropped_sends", "throttled")

    def __init__(self):
        for name in self.FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}


def secure_run_dir(path: str) -> str:
    """Create (or join) the run's socket directory: owned by this user, mode 0700.

    Raises PermissionError when it exists with another owner, wider modes or as a link
    (someone else made it first: the run must not put its sockets there)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"socket directory {path} is not a private directory of "
                              f"this user (mode {stat.filemode(st.st_mode)})")
    return path


# ---------------------------------------------------------------------- listening side
class _Inbound(asyncio.Protocol):
    """One accepted connection: the handshake, then frames to ``deliver``."""

    def __init__(self, listener: "Listener", tcp: bool):
        self.listener = listener
        self.tcp = tcp
        self.counters = listener.counters
        self.buf = bytearray()
        self.authed = False
        self.refused = False
        self.transport = None
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.timer = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.listener.inbound.add(self)
        self.counters.connections += 1
        self.counters.tcp_connections += self.tcp
        transport.write(self.nonce)
        self.timer = asyncio.get_running_loop().call_later(
            self.listener.auth_timeout_s, self._auth_timeout)

    def _auth_timeout(self) -> None:
        if not self.authed:
            self._refuse("auth_timeout")

    def _refuse(self, reason: str) -> None:
        """Close the connection unread from here on; count it once under ``reason``."""
        if not self.refused:
            self.refused = True
            setattr(self.counters, reason, getattr(self.counters, reason) + 1)
        self.buf = bytearray()
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.authed:
            if len(buf) < NONCE_BYTES + MAC_BYTES:
                return
            theirs, mac = bytes(buf[:NONCE_BYTES]), bytes(buf[NONCE_BYTES:NONCE_BYTES + MAC_BYTES])
            secret = self.listener.secret
            if not hmac.compare_digest(mac, secret.mac(b"client", self.nonce, theirs)):
                self._refuse("auth_failed")
                return
            self.authed = True
            self.timer.cancel()
            del buf[:NONCE_BYTES + MAC_BYTES]
            self.transport.write(secret.mac(b"server", theirs, self.nonce))
        self._frames(buf)

    def _frames(self, buf: bytearray) -> None:
        pos, end = 0, len(buf)
        deliver = self.listener.deliver
        while end - pos >= HEADER.size:
            size, kind = HEADER.unpack_from(buf, pos)
            if size > self.listener.max_frame_bytes:
                self._refuse("oversized")
                return
            start = pos + HEADER.size
            if end - start < size:
                break
            try:
                with memoryview(buf) as view, view[start:start + size] as body:
                    envs = decode(kind, body)
            except Exception:
                self._refuse("bad_frame")
                return
            pos = start + size
            self.counters.frames += 1
            deliver(envs)
        if pos:
            del buf[:pos]

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.refused:
            if not self.authed:  # gone before it proved the secret
                self._refuse("auth_failed")
            elif self.buf:  # gone in the middle of a frame
                self._refuse("truncated")
        self.buf = bytearray()
        self.listener.inbound.discard(self)


class Listener:
    """A rank's listening sockets (Unix and TCP) and the connections they accepted.

    ``deliver(envs)`` hands each authenticated frame's envelopes to the rank (on the
    event loop, as a Ray delivery would)."""

    def __init__(self, secret: RunSecret, deliver: Callable, *,
                 auth_timeout_s: float = AUTH_TIMEOUT_S, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.secret = secret
        self.deliver = deliver
        self.auth_timeout_s = auth_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.counters = Counters()
        self.inbound: set[_Inbound] = set()
        self.servers: list = []
        self.endpoint: DirectEndpoint | None = None

    async def start(self, node: str, host: str, run_dir: str, name: str) -> DirectEndpoint:
        """Listen on ``run_dir/name.sock`` and on TCP ``host`` (an ephemeral port).

        ``host`` must be this node's address: never all interfaces."""
        if host in ("", "0.0.0.0", "::"):
            raise ValueError(f"refusing to listen on all interfaces ({host!r})")
        loop = asyncio.get_running_loop()
        path = os.path.join(secure_run_dir(run_dir), f"{name}.sock")
        unix = await loop.create_unix_server(lambda: _Inbound(self, False), path)
        os.chmod(path, 0o600)
        tcp = await loop.create_server(lambda: _Inbound(self, True), host, 0)
        self.servers = [unix, tcp]
        port = tcp.sockets[0].getsockname()[1]
        self.endpoint = DirectEndpoint(node, path, host, port)
        return self.endpoint

    def close(self) -> None:
        for server in self.servers:
            server.close()
        for conn in list(self.inbound):
            conn.transport.abort()
        if self.endpoint is not None:
            try:
                os.unlink(self.endpoint.path)
            except OSError:
                pass


# ----------------------------------------------------------------------- sending side
class _Outbound(asyncio.Protocol):
    """The connection to one peer endpoint: frames queue until the handshake is done."""

    def __init__(self, secret: RunSecret, counters: Counters, lost: Callable[[], None]):
        self.secret = secret
        self.counters = counters
        self.lost = lost  # called once if the connection ends without our close()
        self.queue: list[bytes] | None = []
        self.queued = 0  # bytes in the queue
        self.transport = None
        self.buf = b""
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.theirs: bytes | None = None  # the listener's nonce
        self.ready = False
        self.closed = False
        self.paused = False  # the transport holds more than the high-water mark
        self.writable = asyncio.Event()
        self.writable.set()

    def write(self, frame: bytes) -> None:
        if self.ready:
            self.transport.write(frame)  # may pause_writing
        elif self.closed:
            self.counters.dropped_sends += 1
        else:
            self.queue.append(frame)
            self.queued += len(frame)
            if self.queued > HIGH_WATER_BYTES:
                self.writable.clear()

    def congested(self) -> bool:
        """Whether the sender should wait before it writes more (see ``drained``)."""
        return not self.closed and (self.paused or self.queued > HIGH_WATER_BYTES)

    async def drained(self) -> None:
        """Return once the connection takes frames again (or is closed: they drop)."""
        self.counters.throttled += 1
        while self.congested():
            await self.writable.wait()

    def pause_writing(self) -> None:
        self.paused = True
        self.writable.clear()

    def resume_writing(self) -> None:
        self.paused = False
        self.writable.set()

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.closed:  # closed (a rewire, the end) while it was being opened
            transport.abort()
            return
        transport.set_write_buffer_limits(high=HIGH_WATER_BYTES)

    def data_received(self, data: bytes) -> None:
        if self.ready:
            return  # a listener sends nothing after its proof
        self.buf += data
        if self.theirs is None and len(self.buf) >= NONCE_BYTES:
            self.theirs, self.buf = self.buf[:NONCE_BYTES], self.buf[NONCE_BYTES:]
            self.transport.write(self.nonce + self.secret.mac(b"client", self.theirs, self.nonce))
        if self.theirs is not None and len(self.buf) >= MAC_BYTES:
            if not hmac.compare_digest(self.buf[:MAC_BYTES],
                                       self.secret.mac(b"server", self.nonce, self.theirs)):
                self.counters.auth_failed += 1
                self.close()
                return
            self.ready = True
            queue, self.queue, self.queued = self.queue, None, 0
            if queue:
                self.transport.writelines(queue)  # may pause_writing
            if not self.paused:
                self.writable.set()

    def connection_lost(self, exc) -> None:
        self.gone()

    def gone(self) -> None:
        """The connection failed or the peer's side closed it: a hint, then closed."""
        if not self.closed:
            self.close()
            self.lost()

    def close(self) -> None:
        """No more sends: what is queued is dropped (the peer is gone or replaced)."""
        if self.queue:
            self.counters.dropped_sends += len(self.queue)
        self.queue = None
        self.queued = 0
        self.ready = False
        self.closed = True
        self.writable.set()  # a waiting sender goes on; its frames drop
        if self.transport is not None:
            self.transport.abort()


class Peers:
    """A rank's outbound connections, one per peer endpoint, opened on first use.

    ``on_lost(dst)`` is called when the connection to ``dst`` could not be made or was
    closed by the other side (not by ``wire`` or ``close``): maybe ``dst`` is gone."""

    def __init__(self, secret: RunSecret, node: str, counters: Counters,
                 on_lost: Callable[[int], None] = lambda dst: None):
        self.secret = secret
        self.node = node
        self.counters = counters
        self.on_lost = on_lost
        self.endpoints: list[DirectEndpoint | None] = []
        self.conns: dict[int, _Outbound] = {}

    def wire(self, endpoints: list[DirectEndpoint | None]) -> None:
        """Take the peers' endpoints; close connections to endpoints that changed."""
        for dst, conn in list(self.conns.items()):
            if dst >= len(endpoints) or endpoints[dst] != self.endpoints[dst]:
                conn.close()
                del self.conns[dst]
        self.endpoints = list(endpoints)

    def send(self, dst: int, kind: int, body: bytes) -> bool:
        """Queue one frame for ``dst``; False when ``dst`` has no direct endpoint or the
        frame is too long (the caller sends it another way)."""
        if len(body) > MAX_FRAME_BYTES or dst >= len(self.endpoints) or self.endpoints[dst] is None:
            return False
        conn = self.conns.get(dst)
        if conn is None:
            conn = self.conns[dst] = self._open(dst, self.endpoints[dst])
        conn.write(HEADER.pack(len(body), kind) + body)
        return True

    def congested(self, dst: int):
        """None when the connection to ``dst`` takes more frames now; else an awaitable
        that completes once it does (the sender writes faster than ``dst`` reads)."""
        conn = self.conns.get(dst)
        if conn is None or not conn.congested():
            return None
        return conn.drained()

    def _open(self, dst: int, endpoint: DirectEndpoint) -> _Outbound:
        conn = _Outbound(self.secret, self.counters, lambda: self.on_lost(dst))
        loop = asyncio.get_running_loop()
        if endpoint.node == self.node:
            opening = loop.create_unix_connection(lambda: conn, endpoint.path)
        else:
            opening = loop.create_connection(lambda: conn, endpoint.host, endpoint.port)
        task = asyncio.ensure_future(opening)
        task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or conn.gone())
        return conn

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


def encode(envs: list[Envelope], plain: bool) -> tuple[int, bytes]:
    """A batch as a frame body: ``(kind, body)``; ``plain``: every piggyback is plain
    data (``_payload.is_plain``), so the C pickler's rows will do."""
    if plain:
        return ROWS, pickle.dumps(to_rows(envs), protocol=5)
    return OBJECTS, cloudpickle.dumps(envs, protocol=5)


def decode(kind: int, body) -> list[Envelope]:
    """The envelopes of an authenticated frame body (``encode`` made it)."""
    if kind == ROWS:
        return from_rows(pickle.loads(body))
    if kind == OBJECTS:
        return pickle.loads(body)
    raise ValueError(f"unknown frame kind {kind}")
