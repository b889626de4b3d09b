"""Direct rank-to-rank channels beside Ray (``data_plane="direct"``).

Ray stays the control plane (actors, placement, spares, failure detection, the object
store); envelope batches between ranks travel on sockets that the ranks open to each
other: a Unix domain socket when both ends run on one node, TCP on the node's address
otherwise. Nothing here knows Ray: a rank's ``Listener`` is started where its actor
lives, the coordinator hands every rank the listeners' ``DirectEndpoint``s when it wires
them, and ``Peers`` opens one outbound channel per peer on first use.

Theory of operation
-------------------
A connection is one-way: the connecting rank sends frames, the listening rank reads
them (and sends back only acknowledgements). Before a single frame byte is read, the
connecting side proves it holds the run's secret (made by the driver, handed to ranks at
start, never printed): the listener sends a random nonce, the client answers with its own
nonce, its channel's session id and an HMAC-SHA256 over them and the listener's nonce, and
the listener answers with how many frames of that session it has delivered and an HMAC
over all of it in the other order, so a client also knows it reached the run's rank
before it sends anything. A connection that sends anything else,
nothing within ``AUTH_TIMEOUT_S``, a frame longer than ``MAX_FRAME_BYTES``, stops in the
middle of a frame, or a frame that does not decode, is closed and counted (``Counters``);
nothing it sent reaches the rank. A wrong proof counts as ``auth_failed``; a connection that
hangs up before its proof is whole (a peer on a node that went, a handshake its sender
abandoned) as ``handshake_lost``, which says nothing of the peer's secret.

A frame is a 5-byte header (body length, body kind) and a pickled batch of ``to_rows``
tuples: ``ROWS`` pickled by the C pickler (the fast path), ``OBJECTS`` by cloudpickle
(piggyback data that needs it). Batches that hold object-store references never come here
(Ray must see those to keep them alive): the transport sends them by actor call, and the
channel layer puts both paths back in order.

Large arrays travel without a joined copy. A batch whose payloads hold out-of-band
buffers (``_payload.pack``: pickle protocol 5 buffers of ``out_of_band_bytes`` and more)
is an *out-of-band frame*: its kind has the ``OOB`` bit, the header is followed by the
buffers' count and lengths (``OOB_COUNT``, ``OOB_LENGTH``), the body (rows whose buffers
field is the payload's number of buffers) and then the buffers themselves. The sender
keeps every frame as a tuple of pieces, its header, its body and the payload's buffers
(no copy, also in the resend window), and writes pieces with scatter-gather I/O
(``os.writev`` on the connection's socket, ``_Wire.send``: at once when nothing is
pending) once the handshake is done. The listener is a buffered protocol: bytes go
straight from the socket into a receive area, where whole frames are decoded in place
(only a partial frame at its end is kept), and an out-of-band buffer straight into a byte array of
its own (``recv_into``; ``numpy.empty``: not zeroed first, a pass over memory that
measured 10-20% of a 16 MiB message), which becomes the payload's buffer: the receiver owns it and an
array rebuilt over it is writable.

To a peer on the same node (a Unix connection), buffers of ``shm_bytes`` and more go
through shared memory instead: each channel has one segment (``direct.shm``: an anonymous
``memfd``, ``SEGMENT_BYTES``, its regions taken lowest first, its size sealed), whose
descriptor the sender passes with its proof on every connection (``SCM_RIGHTS``). The
listener reads a Unix connection's proof with ``recvmsg`` (and no byte after it: the
sender writes nothing more until answered), and only once the proof checks does it look
at the descriptor: a sealed memory file is mapped read-only and the descriptor closed; a
stranger's descriptors are closed unused. Its answer says whether it took the segment
(covered by its MAC), and only then does the sender copy such a buffer into a free region
of the segment; the frame (kind bit ``SHM``) carries, after the buffers' count, per
buffer its length and offset (``INLINE``: it follows the body on the socket, as in any
out-of-band frame: a buffer under ``shm_bytes``, or one the segment has no room for). The
listener lends each region to the rank as it is (``_payload.LentPayload``: a read-only
view of the mapping), so that a receive into the program's buffer (``Recv``, ``Irecv``,
the large collectives' pieces) copies the bytes straight from the sender's copy into the
program's array: one copy on this side. The region is free again once the frame is
acknowledged (the sender keeps it until then: a frame written again after a reconnection
finds its buffers where they were), so before it acknowledges a frame that lent regions
(one loop turn after its delivery, by when the receives it completed have copied their
messages out: their tasks are woken first), and before it lets go of the connection, the
listener has every payload lent from it that is still alive (queued for a later receive,
held or logged by a protocol, received by ``recv`` as an object) take a copy of its own
(``lent`` counts the payloads lent, ``lent_copied`` those that took a copy). Nothing is
named: the segment lives as long as a process holds it, so a killed rank or a closed
channel leaves nothing in ``/dev/shm`` or anywhere else to remove, and only a process it
was passed to can map it. A segment that cannot be made or passed, or that the listener
does not take, leaves the channel on the socket (``shared_fallback``,
``shared_refused``): the frames it kept with buffers in the segment are rewritten with
the buffers after the body before they are written again, so nothing waits on shared
memory that is not there. A shared-memory frame on a connection that took no segment, or
naming a region outside it, is refused as a bad frame.

A new incarnation in a new process gets a new endpoint; when a rewire changes a peer's
endpoint, the connection to the old one is closed and what was queued for it is dropped,
as a Ray call to a dead actor would be (the channel layer treats that traffic as stale
anyway); the coordinator, not this module, decides that a rank failed.

A connection between two live ranks may close on its own (a reset, an idle timeout, a
NIC flap; ``Chaos(method="disconnect")`` and ``Partition`` make them): that loses no
frame. A channel (``_Outbound``) numbers its frames and keeps those the listener has not
acknowledged; the listener acknowledges cumulatively (the count of frames of the session
it has delivered) once it has delivered a quarter window of bytes or frames since the
last acknowledgement, or ``ACK_DELAY_S`` after the first it has not (one 8-byte write per
quarter window or per 50 ms: nothing on the hot path but a few additions). A channel
whose connection ends connects again with backoff, through the same handshake; the
listener's count in its proof says where to resume, and the frames after it are written
again, in order (an older connection of the session, if the listener still holds it, is
dropped unread first, so no frame is delivered twice). A connection attempt that fails
(the peer's process may be gone) is a *hint*: ``Peers`` hands it to ``on_lost(dst)`` (the
rank tells the coordinator, which checks); after ``RECONNECT_S`` of failed attempts the
channel drops its frames and is closed, as for a rewire. A restored rank is a new
incarnation: in a new process it has a new endpoint (the rewire drops what was kept for
the old one, whose traffic the channel layer would drop as stale anyway); restored in
place it keeps its endpoint, and whatever is resent to or from it carries the old epochs
and is dropped as stale by the channel layer, as the protocols' replay expects.

Backpressure: a sender that writes faster than its peer reads (the peer's loop is busy
computing, its process stopped, the network is down) must not buffer without bound. A
channel is *congested* while its connection holds more than ``HIGH_WATER_BYTES`` the
kernel has not taken (until the transport has drained to a quarter of the mark), or while
more than ``WINDOW_BYTES`` or ``WINDOW_FRAMES`` are unacknowledged (connected or not);
``Peers.congested`` gives the sender something to await meanwhile (``comm.send`` awaits
it). Nothing is dropped or reordered by waiting: a frame is kept or written whole, in
order, either way.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import socket
import stat
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..engine._payload import LentPayload
from .direct import shm
from .direct.handshake import (AUTH_TIMEOUT_S, SESSION_BYTES, ClientHandshake, RunSecret,
                               ServerHandshake)
from .direct.window import ACK_DELAY_S, WINDOW_BYTES, Acks, SendWindow, Session
from .direct.wire import (COUNT, HEADER, INLINE, MAX_FRAME_BYTES, SHM, Filling, FrameError,
                         decode, encode, oob_head, read_head, shm_head, unshare)

RECV_BYTES = 256 << 10
"""The listener's receive area: the most one read takes outside an out-of-band buffer."""
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


@dataclass(frozen=True)
class DirectEndpoint:
    """Where a rank listens: its node, its Unix socket and its TCP address."""

    node: str
    path: str
    host: str
    port: int


class Counters:
    """What a rank's listener accepted and refused (see the module docstring), and how
    its loop waited: ``polled_waits`` ended while it polled, ``not_polling`` is 1 for a
    rank whose loop cannot poll (``_spin``)."""

    FIELDS = ("connections", "tcp_connections", "frames", "auth_failed", "auth_timeout",
              "oversized", "handshake_lost", "truncated", "bad_frame", "dropped_sends",
              "throttled", "reconnects", "resent", "shared", "shared_refused",
              "shared_fallback", "lent", "lent_copied", "polled_waits", "not_polling")

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
class _Inbound(asyncio.BufferedProtocol):
    """One accepted connection: the handshake, then frames to ``deliver``, acknowledged.

    Bytes are read into ``area`` and parsed from ``buf``; while an out-of-band frame's
    buffers arrive (``filling``), they are read into those buffers directly."""

    def __init__(self, listener: "Listener", tcp: bool):
        self.listener = listener
        self.tcp = tcp
        self.counters = listener.counters
        self.buf = bytearray()
        self.authed = False
        self.refused = False
        self.transport = None
        self.handshake = ServerHandshake(listener.secret)
        self.timer = None
        self.session: Session | None = None
        self.acks: Acks | None = None
        self.ack_timer = None
        self.area = memoryview(bytearray(RECV_BYTES))
        self.filling: Filling | None = None  # an out-of-band frame whose buffers arrive
        self.raw: socket.socket | None = None  # reads the proof and its descriptors (Unix)
        self.fds: list[int] = []  # descriptors passed with the proof, not yet taken
        self.segment: shm.Mapping | None = None  # the sender's shared-memory segment
        self.lent: list = []  # weak references to the payloads lent from it, not settled

    def get_buffer(self, sizehint: int) -> memoryview:
        filling = self.filling
        if filling is not None:
            return filling.view[filling.at:]
        return self.area

    def buffer_updated(self, nbytes: int) -> None:
        filling = self.filling
        if filling is None:
            if self.buf or not self.authed:
                self.data_received(self.area[:nbytes])
                return
            # nothing carried over (the usual case): frames are read in the receive
            # area itself, and only a partial frame at its end is kept
            data = self.area[:nbytes]
            pos = self._frames(data)
            if pos < nbytes and not self.refused:
                self.buf += data[pos:]
        elif not self.refused:
            filling.at += nbytes
            if filling.advance():
                self.filling = None
                self._complete(filling.kind, filling.body, filling.buffers, filling.nbytes)
                if not self.refused:
                    self._parse(self.buf)

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.listener.inbound.add(self)
        self.counters.connections += 1
        self.counters.tcp_connections += self.tcp
        if not self.tcp:  # the proof may come with a descriptor: read it with recvmsg
            transport.pause_reading()
            self.raw = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
            asyncio.get_running_loop().add_reader(self.raw.fileno(), self._read_proof)
        transport.write(self.handshake.hello())
        self.timer = asyncio.get_running_loop().call_later(
            self.listener.auth_timeout_s, self._auth_timeout)

    def _auth_timeout(self) -> None:
        reason = self.handshake.timed_out()
        if reason is not None:
            self._refuse(reason)

    def _refuse(self, reason: str | None) -> None:
        """Close the connection unread from here on; count it once under ``reason``."""
        if not self.refused:
            self.refused = True
            if reason is not None:
                setattr(self.counters, reason, getattr(self.counters, reason) + 1)
        self.buf = bytearray()
        self.filling = None
        self._settle()  # (a new connection of the session answers the count delivered)
        self._proof_read()
        self.transport.abort()

    def _read_proof(self) -> None:
        """On a Unix connection: read the proof (and no byte after it) with the
        descriptors passed with it, which stay unused until the proof checks."""
        try:
            data, fds, flags, _ = socket.recv_fds(
                self.raw, self.handshake.needs(), 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds, flags = b"", [], 0
        self.fds += fds
        if flags & socket.MSG_CTRUNC:  # more than one: the kernel closed the rest
            self.fds.append(-1)
        if not data:  # gone before a whole proof
            self._proof_read()
            self.transport.abort()
            return
        self.data_received(data)
        if self.authed and not self.refused:  # frames are read by the transport
            self._proof_read()
            self.transport.resume_reading()

    def _proof_read(self) -> None:
        """Stop reading with recvmsg; close every descriptor not taken."""
        if self.raw is not None:
            asyncio.get_running_loop().remove_reader(self.raw.fileno())
            self.raw.close()
            self.raw = None
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.fds = []

    def _take_segment(self) -> bool:
        """Map the segment passed with the proof (which checked): False when none was
        passed or it is not a sealed memory file (counted as ``shared_refused``: the
        sender then uses the socket)."""
        fds, self.fds = self.fds, []
        if not fds:
            return False
        try:
            self.segment = shm.Mapping.take(fds)
        except (OSError, ValueError):
            self.counters.shared_refused += 1
            return False
        return True

    def data_received(self, data) -> None:
        if self.refused:
            return
        if not self.authed:
            reason, session, data = self.handshake.receive(data)
            if reason is not None:
                self._refuse(reason)
                return
            if session is None:
                return
            self._proven(session)
        buf = self.buf
        buf += data
        self._parse(buf)

    def _proven(self, session_id: bytes) -> None:
        """The proof checked: take over the sender's session, answer."""
        self.authed = True
        self.timer.cancel()
        session = self.listener.sessions.get(session_id)
        if session is None:
            session = self.listener.sessions[session_id] = Session()
        if session.conn is not None:  # the sender gave up on it: what it still holds is sent again
            session.conn._refuse(None)
        self.session = session
        self.acks = Acks(session)
        session.conn = self
        self.transport.write(self.handshake.answer(session.count, self._take_segment()))

    def _parse(self, buf: bytearray) -> None:
        """``_frames`` on the carried-over bytes ``buf``, then drop what it took."""
        pos = self._frames(buf)
        if pos and not self.refused:
            del buf[:pos]

    def _frames(self, buf) -> int:
        """Deliver the whole frames at the start of ``buf`` (bytes-like); an out-of-band
        frame whose buffers have not all arrived starts ``filling``. Returns the bytes
        taken."""
        pos, end = 0, len(buf)
        limit = self.listener.max_frame_bytes
        while end - pos >= HEADER.size and not self.refused:
            try:
                head = read_head(buf, pos, end, limit)
            except FrameError as error:
                self._refuse(error.reason)
                return 0
            if head is None:
                break
            kind, start, size, lengths, offsets = head
            if end - start < size:
                break
            if not lengths:
                with memoryview(buf) as view, view[start:start + size] as whole:
                    self._complete(kind, whole, (), size)
                pos = start + size
                continue
            given = None
            if offsets is not None:  # the table is whole: its segment and the buffers in it
                given = self._shared(lengths, offsets)
                if given is None:
                    return 0
            filling = Filling(kind, bytes(buf[start:start + size]), lengths, given)
            pos = start + size
            with memoryview(buf) as view:  # what already arrived of the buffers
                pos += filling.take(view[pos:])
            if filling.advance():
                self._complete(kind, filling.body, filling.buffers, filling.nbytes)
                # the receiver owns them now: holding them while the next frame's are
                # made would have the allocator map fresh pages for every large buffer
                given = filling = None
            else:
                self.filling = filling
                break
        return pos

    def _shared(self, lengths: tuple, offsets: tuple) -> list | None:
        """A shared-memory frame's buffers (each a region lent as it is, None for one
        that follows the body), in the segment the sender passed with its proof; None
        once refused (a connection that took no segment: TCP, or the listener's answer
        said so; a region outside it)."""
        segment = self.segment
        given = []
        for n, offset in zip(lengths, offsets):
            if offset == INLINE:
                given.append(None)
                continue
            lent = segment.lend(offset, n) if segment is not None else None
            if lent is None:
                self._refuse("bad_frame")
                return None
            given.append(lent)
        return given

    def _lend(self, envs: list) -> None:
        """The payloads of a shared-memory frame that hold buffers become lent ones."""
        for env in envs:
            payload = env.payload
            if payload.buffers:
                env.payload = lent = LentPayload(payload.data, payload.buffers, payload.nbytes)
                self.lent.append(weakref.ref(lent))
                self.counters.lent += 1

    def _settle(self) -> None:
        """Before the regions lent go back to the sender (an acknowledgement, the end of
        the connection): every payload lent from them that is still alive takes a copy
        of its own."""
        lent, self.lent = self.lent, []
        for ref in lent:
            payload = ref()
            if type(payload) is LentPayload:
                payload.own()
                self.counters.lent_copied += 1

    def _unmap(self) -> None:
        """Let go of the peer's segment (settled first)."""
        self._settle()
        if self.segment is not None:
            self.segment, segment = None, self.segment
            segment.close()

    def _complete(self, kind: int, body, buffers: list, nbytes: int) -> None:
        """One whole frame: decode it, deliver its envelopes, acknowledge in time."""
        try:
            envs = decode(kind, body, buffers)
        except Exception:
            self._refuse("bad_frame")
            return
        self.counters.frames += 1
        due = self.acks.delivered(nbytes)
        if kind & SHM:
            self._lend(envs)
        self.listener.deliver(envs)
        del envs  # (the rank's receives decide what stays alive: ``_settle``)
        if self.refused:  # closed by what the frame did (a chaos disconnect)
            return
        if due:
            if self.lent:  # after the receives it woke (module docstring)
                asyncio.get_running_loop().call_soon(self._ack)
            else:
                self._ack()
        elif self.ack_timer is None:
            self.ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY_S, self._ack)

    def _ack(self) -> None:
        """Tell the sender how many frames of its session were delivered."""
        if self.ack_timer is not None:
            self.ack_timer.cancel()
            self.ack_timer = None
        if not self.refused:
            self._settle()
            count = self.acks.due()
            if count is not None:
                self.transport.write(COUNT.pack(count))

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.ack_timer is not None:
            self.ack_timer.cancel()
        if not self.refused:
            reason = self.handshake.lost()  # gone before a whole proof came
            if reason is not None:
                self._refuse(reason)
            elif self.buf or self.filling is not None:  # gone in the middle of a frame
                self._refuse("truncated")
        self.refused = True
        self.buf = bytearray()
        self.filling = None
        self._proof_read()
        self._unmap()
        if self.session is not None and self.session.conn is self:
            self.session.conn = None
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
        self.sessions: dict[bytes, Session] = {}  # a sender's session id -> its channel
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

    def disconnect(self) -> None:
        """Chaos: end every accepted connection, as a network fault would (their
        senders connect again and resend what was lost)."""
        for conn in list(self.inbound):
            conn.transport.abort()

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

    def send(self, dst: int, kind: int, body: bytes, buffers: list = ()) -> bool:
        """Queue one frame for ``dst``, with the out-of-band ``buffers`` of ``encode``
        after its body (referenced, not copied); False when ``dst`` has no direct
        endpoint or the frame is too long (the caller sends it another way)."""
        nbytes = len(body) + sum(map(len, buffers)) if buffers else len(body)
        if nbytes > MAX_FRAME_BYTES or dst >= len(self.endpoints) or self.endpoints[dst] is None:
            return False
        conn = self.conns.get(dst)
        if conn is None:
            conn = self.conns[dst] = _Outbound(self, dst, self.endpoints[dst])
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
        ``shm_bytes`` and more copied into the channel's segment: ``(head, inline)``,
        ``inline`` the buffers that still go on the socket; None when none went in."""
        if conn.closed:
            return None
        frame = conn.window.next  # the number the frame gets
        offsets, inline = [], []
        for buf in buffers:
            offset = None
            if len(buf) >= self.shm_bytes:
                offset = conn.segment.put(frame, buf)
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
