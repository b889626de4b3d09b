"""The direct plane's listening side, the asyncio glue: a rank's sockets, and for each
accepted connection its handshake, its frames read and delivered, its acknowledgements.

Theory of operation
-------------------
A rank listens on a Unix socket in the run's private directory (``secure_run_dir``) and
on TCP at its node's address, never all interfaces (``Listener.start``). Each accepted
connection (``_Inbound``) first runs the listener's side of the handshake
(``handshake.ServerHandshake``), and reads nothing else until the proof checks: on a Unix
connection the proof is read with ``recvmsg`` (and no byte after it: the sender writes
nothing more until answered), with the shared-memory segment's descriptor passed beside
it, which is looked at (``shm.Mapping.take``) only once the proof checks; a stranger's
descriptors are closed unused. The proof names the sender's channel (``window.Session``):
an older connection of the same session still held is dropped unread first, so no frame
is delivered twice, and the answer carries the session's count, where the sender
resumes.

Frames are then read by a buffered protocol: bytes go straight from the socket into a
receive area (``RECV_BYTES``), where whole frames are decoded in place (``wire.read_head``,
``wire.decode``; only a partial frame at its end is kept), and an out-of-band buffer
straight into a byte array (``wire.Filling``, the loop's ``recv_into``; not zeroed
first, a pass over memory that measured 10-20% of a 16 MiB message), which becomes the
payload's buffer: the receiver owns it and an array rebuilt over it is writable. The
array is one of the connection's receive areas that nothing references any more, when
there is one (``areas.Areas``: the pages are there already), else a fresh one. A
shared-memory frame's regions are lent to the rank as they are (``shm.Mapping.lend``, a
read-only view; the payload a ``_payload.LentPayload``), so that a receive into the
program's buffer (``Recv``, ``Irecv``, the large collectives' pieces) copies the message
straight from the sender's copy: one copy on this side. The sender reuses a region once
its frame is acknowledged, so before it acknowledges a frame that lent regions (one loop
turn after its delivery, by when the receives it completed have copied their messages
out: their tasks are woken first) and before it lets go of the connection, the listener
has every payload lent from it that is still alive (queued for a later receive, held or
logged by a protocol, received by ``recv`` as an object) take a copy of its own
(``_settle``; ``lent`` counts the payloads lent, ``lent_copied`` those that took a copy).
A shared-memory frame on a connection that took no segment, or naming a region outside
it, is refused as a bad frame. Each frame delivered counts towards the next
acknowledgement (``window.Acks``), written at once or ``ACK_DELAY_S`` later.

A connection that fails the proof, says nothing within ``AUTH_TIMEOUT_S``, sends a frame
longer than ``max_frame_bytes``, stops in the middle of a frame or sends one that does
not decode is closed and counted (``Counters``); nothing it sent reaches the rank.
"""
from __future__ import annotations

import asyncio
import os
import socket
import stat
import weakref
from dataclasses import dataclass
from typing import Callable

from ...engine import LentPayload
from . import shm
from .areas import Areas
from .counters import Counters
from .handshake import AUTH_TIMEOUT_S, RunSecret, ServerHandshake
from .window import ACK_DELAY_S, Acks, Session
from .wire import (COUNT, HEADER, INLINE, MAX_FRAME_BYTES, OOB, SHM, Filling, FrameError,
                   decode, read_head)

RECV_BYTES = 256 << 10
"""The listener's receive area: the most one read takes outside an out-of-band buffer."""


@dataclass(frozen=True)
class DirectEndpoint:
    """Where a rank listens: its node, its Unix socket and its TCP address."""

    node: str
    path: str
    host: str
    port: int


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
        self.areas = Areas()  # what out-of-band buffers from the socket are read into
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
                filling = None  # its areas are the rank's now (``areas``)
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
            size, kind = HEADER.unpack_from(buf, pos)
            if kind & OOB or size > limit:  # a table to read, or a frame to refuse
                try:
                    head = read_head(buf, pos, end, limit)
                except FrameError as error:
                    self._refuse(error.reason)
                    return 0
                if head is None:
                    break
                kind, start, size, lengths, offsets = head
            else:  # a plain frame, the usual case: read_head's answer, one call less
                start, lengths = pos + HEADER.size, ()
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
            filling = Filling(kind, bytes(buf[start:start + size]), lengths, given,
                              self.areas.take)
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
