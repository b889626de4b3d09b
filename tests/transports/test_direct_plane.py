"""The direct data plane's sockets (``transports/direct``) without Ray: the handshake,
framing, backpressure, and what a listener does with peers that cannot prove they belong
to the run."""
import asyncio
import contextlib
import os
import pickle
import socket
import stat
import struct
import threading
import time
import weakref

import numpy as np
import pytest

from ftactors.engine import _payload
from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack, unpack
from ftactors.transports.direct import (WINDOW_BYTES, Counters, Listener, Peers, handshake, shm,
                                        secure_run_dir, wire)
from ftactors.transports.direct import listener as listening
from ftactors.transports.direct import peers as sending
from ftactors.transports.direct.handshake import MAC_BYTES, NONCE_BYTES, SESSION_BYTES, RunSecret
from ftactors.transports.direct.peers import HIGH_WATER_BYTES
from ftactors.transports.direct.wire import COUNT, HEADER, OOB, OOB_COUNT, ROWS, encode


def _env(i: int, piggyback=None) -> Envelope:
    return Envelope(APP, 0, 1, "w", 0, i, pack(i), seq=i, piggyback=piggyback)


async def _listening(tmp_path, secret, **kw):
    got = []
    listener = Listener(secret, got.extend, **kw)
    host = socket.gethostbyname("localhost")
    endpoint = await listener.start("node-a", host, str(tmp_path / "run"), "r1")
    return listener, endpoint, got


async def _until(cond, timeout_s=5.0, show=None):
    """Poll the loop until ``cond()`` (the sockets work on the same loop)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"condition not reached; {show() if show else ''}")
        await asyncio.sleep(0.005)


async def _handshake(reader, writer, secret: RunSecret) -> None:
    """A well-behaved client's handshake (to send bad frames after it)."""
    theirs = await reader.readexactly(NONCE_BYTES)
    mine = os.urandom(NONCE_BYTES) + os.urandom(SESSION_BYTES)
    writer.write(mine + secret.mac(b"client", theirs, mine))
    answer = await reader.readexactly(COUNT.size + 1)  # frames, then whether it took a segment
    assert await reader.readexactly(MAC_BYTES) == secret.mac(b"server", mine + answer, theirs)


def _frame(envs) -> bytes:
    kind, body, _ = encode(envs, True)
    return HEADER.pack(len(body), kind) + body


@pytest.mark.parametrize("same_node", [True, False], ids=["unix", "tcp"])
def test_batches_arrive_in_order_over_unix_and_tcp(tmp_path, same_node):
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        peers = Peers(secret, "node-a" if same_node else "node-b", listener.counters)
        peers.wire([None, endpoint])
        for i in range(0, 300, 3):
            assert peers.send(1, *encode([_env(i), _env(i + 1), _env(i + 2, {"x": [i]})],
                                         plain=i % 2 == 0))
        await _until(lambda: len(got) == 300)
        assert [e.app_seq for e in got] == list(range(300))
        assert got[2].piggyback == {"x": [0]}
        assert listener.counters.frames == 100 and listener.counters.connections == 1
        assert listener.counters.tcp_connections == (0 if same_node else 1)
        peers.close()
        listener.close()
        assert not os.path.exists(endpoint.path)
    asyncio.run(body())


def test_listener_never_binds_all_interfaces(tmp_path):
    async def body():
        listener = Listener(RunSecret(), print)
        for host in ("0.0.0.0", "", "::"):
            with pytest.raises(ValueError, match="all interfaces"):
                await listener.start("n", host, str(tmp_path / "run"), "r0")
    asyncio.run(body())


def test_socket_directory_is_private(tmp_path):
    path = secure_run_dir(str(tmp_path / "run"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    lax = tmp_path / "lax"
    lax.mkdir(mode=0o755)
    os.chmod(lax, 0o755)
    with pytest.raises(PermissionError, match="not a private directory"):
        secure_run_dir(str(lax))
    os.symlink(path, tmp_path / "link")
    with pytest.raises(PermissionError):
        secure_run_dir(str(tmp_path / "link"))


def test_secret_never_shown():
    secret = RunSecret()
    assert secret.key.hex() not in repr(secret) and "hidden" in repr(secret)
    assert pickle.loads(pickle.dumps(secret)).key == secret.key


def test_peers_that_cannot_prove_the_secret_are_dropped_and_counted(tmp_path):
    """No secret, a wrong one, garbage, silence, an oversized frame and a truncated
    frame: each connection is dropped and counted, none of their frames is delivered
    (a pickle that would run code is among them), and the run's own sender, interleaved
    with them, loses nothing."""
    evil = pickle.dumps(os.system)  # would be called by pickle.loads: must never be read

    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret, auth_timeout_s=0.3,
                                                   max_frame_bytes=1 << 16)
        peers = Peers(secret, "node-a", listener.counters)
        peers.wire([None, endpoint])
        c = listener.counters
        sent = 0

        def honest():
            nonlocal sent
            peers.send(1, *encode([_env(sent)], True))
            sent += 1

        async def attack(payload: bytes, *, secret_to_use=None, close=True):
            honest()
            r, w = await asyncio.open_unix_connection(endpoint.path)
            if secret_to_use is not None:
                await _handshake(r, w, secret_to_use)
            else:  # the listener's nonce first: what follows is read and judged as a proof
                await r.readexactly(NONCE_BYTES)
            w.write(payload)
            await w.drain()
            if close:
                w.close()
            honest()
            return r, w

        # no secret: frames straight away (the first 64 bytes fail as a proof)
        await attack(HEADER.pack(len(evil), ROWS) + evil + b"\0" * 64)
        await _until(lambda: c.auth_failed == 1, show=c.as_dict)
        # a wrong secret
        wrong = RunSecret()
        r, w = await asyncio.open_unix_connection(endpoint.path)
        theirs = await r.readexactly(NONCE_BYTES)
        mine = b"n" * (NONCE_BYTES + SESSION_BYTES)
        w.write(mine + wrong.mac(b"client", theirs, mine)
                + HEADER.pack(len(evil), ROWS) + evil)
        await _until(lambda: c.auth_failed == 2)
        try:  # dropped without the listener's proof (reset: the frame was left unread)
            assert await r.read() == b""
        except ConnectionResetError:
            pass
        honest()
        # garbage, then a hang-up halfway through the handshake (no proof to judge)
        await attack(os.urandom(200))
        await _until(lambda: c.auth_failed == 3)
        await attack(os.urandom(10))
        await _until(lambda: c.handshake_lost == 1)
        assert c.auth_failed == 3
        # silence: dropped when the proof does not come in time
        silent = await attack(b"", close=False)  # kept open (a dropped writer closes)
        await _until(lambda: c.auth_timeout == 1, show=c.as_dict)
        # the right secret, but an oversized frame, then a truncated one
        await attack(HEADER.pack(1 << 20, ROWS) + b"x" * 100, secret_to_use=secret)
        await _until(lambda: c.oversized == 1)
        await attack(_frame([_env(10_000)])[:-3], secret_to_use=secret)
        await _until(lambda: c.truncated == 1)
        # the right secret and a frame that does not decode
        await attack(HEADER.pack(5, ROWS) + b"trash", secret_to_use=secret)
        await _until(lambda: c.bad_frame == 1)
        await _until(lambda: len(got) == sent)
        assert [e.app_seq for e in got] == list(range(sent))  # nothing lost, no intruder
        assert c.frames == sent  # the intruders' frames were never counted as read
        assert c.connections == 9  # 8 intruders and the run's own sender
        peers.close()
        listener.close()

    calls = []
    real = os.system
    os.system = calls.append
    try:
        asyncio.run(body())
    finally:
        os.system = real
    assert calls == []


def test_rewire_to_a_new_endpoint_closes_the_old_connection(tmp_path):
    """A new incarnation's endpoint replaces the old one: the old connection is closed
    and later frames reach only the new listener; a peer that cannot be reached is
    hinted at once and its frames dropped after the reconnection bound."""
    async def body():
        secret = RunSecret()
        old, old_ep, got_old = await _listening(tmp_path / "a", secret)
        new, new_ep, got_new = await _listening(tmp_path / "b", secret)
        peers = Peers(secret, "node-a", old.counters)
        peers.wire([None, old_ep])
        peers.send(1, *encode([_env(0)], True))
        await _until(lambda: len(got_old) == 1)
        peers.wire([None, new_ep])
        await _until(lambda: not old.inbound)  # the fence closed it
        peers.send(1, *encode([_env(1)], True))
        await _until(lambda: len(got_new) == 1)
        assert len(got_old) == 1
        new.close()
        await asyncio.sleep(0.05)
        hints = []
        gone = Peers(secret, "node-a", old.counters, hints.append, reconnect_s=0.1)
        gone.wire([None, new_ep])  # its socket file is removed: the connect fails
        gone.send(1, *encode([_env(2)], True))
        await _until(lambda: hints == [1])  # at the first failed attempt
        assert old.counters.dropped_sends == 0  # kept while it tries again, ...
        await _until(lambda: old.counters.dropped_sends == 1)  # ... dropped after the bound
        assert gone.conns[1].closed
        peers.close()
        old.close()
    asyncio.run(body())


class _SlowReader:
    """A listener on its own event loop in another thread (another process's rank)
    that reads slowly: every frame it takes costs it ``delay_s`` of blocked loop."""

    def __init__(self, tmp_path, secret, delay_s):
        self.got = []
        self.delay_s = delay_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.listener = Listener(secret, self._take)
        host = socket.gethostbyname("localhost")
        self.endpoint = self.call(self.listener.start("node-a", host, str(tmp_path / "run"), "r1"))

    def _take(self, envs):
        time.sleep(self.delay_s)
        self.got.extend(envs)

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def pause(self):
        """Stop reading altogether (a stopped process)."""
        async def pause():
            for conn in self.listener.inbound:
                conn.transport.pause_reading()
        self.call(pause())

    def drive(self, body) -> None:
        """Run ``body(peers)`` on a loop of this thread, with ``peers`` wired to this
        reader; stop the reader after it."""
        async def sender():
            peers = Peers(self.listener.secret, "node-a", Counters())
            peers.wire([None, self.endpoint])
            await body(peers)
            peers.close()
            await asyncio.sleep(0)  # the aborted transport closes its socket
        try:
            asyncio.run(sender())
        finally:
            self.stop()

    def stop(self):
        async def close():
            self.listener.close()
            for _ in range(3):  # the aborted transports close their sockets
                await asyncio.sleep(0)
        self.call(close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def test_a_sender_faster_than_its_reader_is_throttled_and_loses_nothing(tmp_path):
    """Backpressure: a flood to a peer that reads slower than it is written holds at most
    the high-water mark plus one frame unsent, and a window plus one frame unacknowledged
    (the sender awaits ``congested``, as ``comm.send`` does), and every frame arrives, in
    order, intact."""
    frames, blob = 400, bytes(range(256)) * 128  # 32 KiB per frame: 12.5 MiB in all

    reader = _SlowReader(tmp_path, RunSecret(), delay_s=0.002)

    async def body(peers):
        waits, peak, peak_unacked, size = 0, 0, 0, 0
        for i in range(frames):
            kind, frame, _ = encode([Envelope(APP, 0, 1, "w", 0, i, pack((i, blob)), seq=i)], True)
            size = max(size, HEADER.size + len(frame))
            assert peers.send(1, kind, frame)
            conn = peers.conns[1]
            if conn.ready:  # what the kernel has not taken
                peak = max(peak, conn.wire.pending_bytes)
            peak_unacked = max(peak_unacked, conn.window.unacked)
            waiting = peers.congested(1)
            if waiting is not None:
                waits += 1
                await waiting
                assert not conn.congested()
        assert waits > 0 and peers.counters.throttled == waits  # the reader was slower
        assert peak <= HIGH_WATER_BYTES + size and peak_unacked <= WINDOW_BYTES + size
        await _until(lambda: len(reader.got) == frames, timeout_s=60)
        assert [e.app_seq for e in reader.got] == list(range(frames))
        assert all(unpack(e.payload) == (e.app_seq, blob) for e in reader.got)
        assert peers.counters.dropped_sends == 0

    reader.drive(body)


def test_a_sender_waiting_on_a_peer_that_stopped_reading_goes_on_when_it_is_replaced(tmp_path):
    """A peer that stops reading (a hung process) holds its senders; when the coordinator
    replaces it (a rewire to a new endpoint), the waiting sender goes on and what it
    had queued for the old incarnation is dropped, as a call to a dead actor would be."""
    reader = _SlowReader(tmp_path, RunSecret(), delay_s=0)

    async def body(peers):
        peers.send(1, *encode([_env(0)], True))
        await _until(lambda: len(reader.got) == 1)
        reader.pause()
        blob = bytes(64 << 10)
        while not peers.conns[1].congested():
            peers.send(1, *encode([Envelope(APP, 0, 1, "w", 0, 1, pack(blob), seq=1)], True))
            await asyncio.sleep(0)  # the loop writes to the socket until the kernel is full
        waiter = asyncio.ensure_future(peers.congested(1))
        await asyncio.sleep(0.2)
        assert not waiter.done()  # held while the peer does not read
        peers.wire([None, None])  # replaced (no direct endpoint known yet)
        await asyncio.wait_for(waiter, 5)
        assert peers.congested(1) is None and not peers.send(1, *encode([_env(2)], True))

    reader.drive(body)


@pytest.mark.parametrize("kib", [0, 512], ids=["small", "large"])
def test_a_dropped_connection_loses_no_frame(tmp_path, kib):
    """Connections cut again and again (from either side, in the middle of frames of a
    few bytes or of half a MiB) between two live ranks: every frame arrives once, in
    order; the sender reconnected and resent, and never hinted that its peer was gone."""
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        lost = []
        peers = Peers(secret, "node-a", Counters(), lost.append)
        peers.wire([None, endpoint])
        blob = bytes(kib << 10)
        peers.send(1, *encode([_env(0)], True))
        sent = 1
        for cut in range(12):
            await _until(lambda: peers.counters.reconnects == cut and peers.conns[1].ready,
                         show=lambda: (cut, peers.counters.as_dict(), listener.counters.as_dict()))
            for _ in range(20):
                peers.send(1, *encode([Envelope(APP, 0, 1, "w", 0, sent, pack((sent, blob)),
                                                seq=sent)], True))
                sent += 1
                waiting = peers.congested(1)
                if waiting is not None:
                    await waiting
            await asyncio.sleep(0)  # part of it on the wire
            if cut % 2:
                listener.disconnect()  # the receiving side's connection resets
            else:
                peers.disconnect()
        await _until(lambda: len(got) == sent, timeout_s=20, show=peers.counters.as_dict)
        assert [e.app_seq for e in got] == list(range(sent))
        assert all(unpack(e.payload) == (e.app_seq, blob) for e in got[1:])
        c = peers.counters
        assert c.reconnects == 12 and c.resent > 0 and c.dropped_sends == 0
        assert lost == []
        peers.close()
        listener.close()
    asyncio.run(body())


def test_a_partition_holds_senders_within_the_window_and_heals(tmp_path):
    """While a peer cannot be reached (a partition), its sender keeps sending until a
    window is unacknowledged, then waits (backpressure, not loss); a failed attempt hints
    the peer may be gone; once the partition ends everything arrives."""
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        lost = []
        peers = Peers(secret, "node-a", Counters(), lost.append)
        peers.wire([None, endpoint])
        blob = bytes(64 << 10)
        peers.send(1, *encode([_env(0)], True))
        await _until(lambda: len(got) == 1)
        peers.disconnect([1], seconds=0.5)
        sent = 1
        while not peers.conns[1].congested():
            peers.send(1, *encode([Envelope(APP, 0, 1, "w", 0, sent, pack(blob), seq=sent)], True))
            sent += 1
        conn = peers.conns[1]
        assert WINDOW_BYTES < conn.window.unacked <= WINDOW_BYTES + (65 << 10)
        assert len(got) == 1 and not conn.ready
        await asyncio.wait_for(peers.congested(1), 10)
        await _until(lambda: len(got) == sent)
        assert [e.app_seq for e in got] == list(range(sent))
        assert lost == [1] and peers.counters.reconnects == 1
        peers.close()
        listener.close()
    asyncio.run(body())


def test_a_hang_up_before_the_proof_is_not_counted_as_a_wrong_proof(tmp_path):
    """A peer that goes before its proof is whole (its node removed, a handshake its
    sender gave up on) counts as ``handshake_lost``; only a proof that does not check
    counts as ``auth_failed``, so a run can assert that no peer held a wrong secret."""
    async def body():
        secret = RunSecret()
        listener, endpoint, _ = await _listening(tmp_path, secret)
        c = listener.counters

        async def connect(payload: bytes, *, read_nonce=True):
            r, w = await asyncio.open_unix_connection(endpoint.path)
            theirs = await r.readexactly(NONCE_BYTES) if read_nonce else b""
            w.write(payload(theirs) if callable(payload) else payload)
            await w.drain()
            w.close()

        await connect(b"", read_nonce=False)  # gone at once
        await connect(os.urandom(NONCE_BYTES + SESSION_BYTES + MAC_BYTES - 1))  # a byte short
        await _until(lambda: c.handshake_lost == 2, show=c.as_dict)
        mine = os.urandom(NONCE_BYTES + SESSION_BYTES)
        await connect(lambda theirs: mine + RunSecret().mac(b"client", theirs, mine))
        await _until(lambda: c.auth_failed == 1, show=c.as_dict)
        assert (c.connections, c.handshake_lost, c.auth_failed) == (3, 2, 1)
        listener.close()
    asyncio.run(body())


def test_a_reconnecting_stranger_is_dropped_before_its_frames_are_read(tmp_path):
    """A reconnection proves the secret like a first connection: a peer that claims a
    live sender's session without the secret is dropped, and the session goes on."""
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        peers = Peers(secret, "node-a", Counters())
        peers.wire([None, endpoint])
        peers.send(1, *encode([_env(0)], True))
        await _until(lambda: len(got) == 1)
        session = peers.conns[1].session
        r, w = await asyncio.open_unix_connection(endpoint.path)
        theirs = await r.readexactly(NONCE_BYTES)
        mine = os.urandom(NONCE_BYTES) + session
        w.write(mine + RunSecret().mac(b"client", theirs, mine) + _frame([_env(99)]))
        await _until(lambda: listener.counters.auth_failed == 1)
        peers.send(1, *encode([_env(1)], True))
        await _until(lambda: len(got) == 2)
        assert [e.app_seq for e in got] == [0, 1]
        w.close()
        peers.close()
        listener.close()
    asyncio.run(body())


LARGE = _payload.LARGE_BUFFER_BYTES


def _arrays_env(i: int, *sizes: int) -> Envelope:
    """Envelope ``i`` carrying float64 arrays of ``sizes`` bytes, numbered by ``i``."""
    arrays = [np.arange(n // 8, dtype=np.float64) + i for n in sizes]
    return Envelope(APP, 0, 1, "w", 0, i, pack(arrays), seq=i)


def _intact(env: Envelope, *sizes: int) -> bool:
    arrays = unpack(env.payload)
    return all(a.flags.writeable and np.array_equal(a, np.arange(n // 8) + env.app_seq)
               for a, n in zip(arrays, sizes))


@pytest.mark.parametrize("same_node", [True, False], ids=["unix", "tcp"])
def test_out_of_band_arrays_arrive_intact_writable_and_owned(tmp_path, same_node):
    """Arrays just under and over the out-of-band threshold and of a few MiB, alone,
    together in one payload and batched with small envelopes, arrive intact, in order and
    writable, in buffers of their own; the sender keeps the payload's very buffers (not
    a copy) until they are acknowledged, and counts their bytes in its window."""
    sizes = [LARGE - 8, LARGE, LARGE + 8, 3 << 20]

    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        peers = Peers(secret, "node-a" if same_node else "node-b", listener.counters)
        peers.wire([None, endpoint])
        batches = [[_arrays_env(i, n)] for i, n in enumerate(sizes)]
        batches.append([_env(4), _arrays_env(5, LARGE, 0, 2 << 20), _env(6)])
        for batch in batches:
            kind, body_, buffers = encode(batch, True)
            assert peers.send(1, kind, body_, buffers)
            conn = peers.conns[1]
            kept = conn.window.frames[-1]
            oob = [b for env in batch for b in env.payload.buffers]
            assert [type(kept) is tuple, len(oob)] == [True, len(buffers)]
            assert len(kept) == 2 + len(oob)  # header, body (not joined: no copy), buffers
            if oob:  # the window holds the payload's own buffers
                assert all(k is b for k, b in zip(kept[2:], oob))
                assert conn.window.unacked >= sum(map(len, oob))
        await _until(lambda: len(got) == 7)
        assert [e.app_seq for e in got] == list(range(7))
        for env, n in zip(got, sizes):
            assert _intact(env, n)
        assert unpack(got[4].payload) == 4 and unpack(got[6].payload) == 6
        assert _intact(got[5], LARGE, 0, 2 << 20)
        assert all(type(b) is np.ndarray and b.base is None  # its own memory
                   for env in got for b in env.payload.buffers)
        assert listener.counters.frames == 5
        peers.close()
        listener.close()
    asyncio.run(body())


def test_frames_longer_than_the_kernel_takes_at_once_arrive_whole(tmp_path, monkeypatch):
    """With a small kernel send buffer every frame is written in parts (the sender keeps
    what the kernel did not take, from the middle of a piece) and read in parts (the
    listener carries a partial frame over to the next read): small, in-band and
    out-of-band frames, back to back, all arrive intact and in order."""
    monkeypatch.setattr(sending, "SEND_BUFFER_BYTES", 8 << 10)
    written = []
    real_writev = os.writev

    def writev(fd, pieces):
        n = real_writev(fd, pieces)
        written.append(n < sum(map(len, pieces)))
        return n
    monkeypatch.setattr(sending.os, "writev", writev)
    sizes = [LARGE - 8, LARGE + 8, 1 << 20]

    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        peers = Peers(secret, "node-a", listener.counters)
        peers.wire([None, endpoint])
        for i in range(12):
            env = _env(i) if i % 4 == 3 else _arrays_env(i, sizes[i % 4])
            assert peers.send(1, *encode([env], True))
        await _until(lambda: len(got) == 12)
        assert [e.app_seq for e in got] == list(range(12))
        assert all(unpack(e.payload) == e.app_seq if i % 4 == 3 else _intact(e, sizes[i % 4])
                   for i, e in enumerate(got))
        assert any(written)  # the kernel took parts of frames
        peers.close()
        listener.close()
    asyncio.run(body())


@pytest.mark.parametrize("side", ["listener", "sender"])
def test_a_cut_in_the_middle_of_an_out_of_band_frame_resends_it_whole(tmp_path, monkeypatch, side):
    """A connection that ends while a large out-of-band frame's buffers are half read
    (reset by either side) loses nothing: the listener drops the partial frame, the
    sender reconnects and writes the whole frame again from its window, and every frame
    arrives once, intact."""
    cuts = []
    fill = listening._Inbound.buffer_updated

    def cut_midway(inbound, nbytes):
        fill(inbound, nbytes)
        filling = inbound.filling
        if filling is not None and filling.at and not cuts:
            cuts.append(filling.at)
            (inbound.listener.disconnect if side == "listener" else peers.disconnect)()

    monkeypatch.setattr(listening._Inbound, "buffer_updated", cut_midway)
    size = 8 << 20

    async def body():
        nonlocal peers
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        peers = Peers(secret, "node-a", Counters())
        peers.wire([None, endpoint])
        for i in range(3):
            assert peers.send(1, *encode([_arrays_env(i, size)], True))
            waiting = peers.congested(1)
            if waiting is not None:
                await waiting
        await _until(lambda: len(got) == 3, timeout_s=20, show=peers.counters.as_dict)
        assert cuts and 0 < cuts[0] < size  # cut with part of a buffer read
        assert [e.app_seq for e in got] == [0, 1, 2]
        assert all(_intact(e, size) for e in got)
        assert listener.counters.truncated == 1
        assert peers.counters.reconnects == 1 and peers.counters.resent >= 1
        peers.close()
        listener.close()

    peers = None
    asyncio.run(body())


def test_an_out_of_band_frame_longer_than_the_limit_is_refused_unread(tmp_path):
    """The buffers' lengths count toward the frame limit: a frame announcing more is
    dropped before any of it is delivered."""
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret, max_frame_bytes=1 << 20)
        r, w = await asyncio.open_unix_connection(endpoint.path)
        await _handshake(r, w, secret)
        _, body_, _ = encode([_env(0)], True)
        w.write(HEADER.pack(len(body_), ROWS | OOB) + OOB_COUNT.pack(2)
                + struct.pack("!2Q", 1 << 19, 1 << 19) + body_)
        await _until(lambda: listener.counters.oversized == 1)
        assert got == []
        w.close()
        listener.close()
    asyncio.run(body())


@contextlib.asynccontextmanager
async def _channel(tmp_path, node: str = "node-a", *, shm_bytes: int | None = 1 << 20,
                   counters: Counters | None = None):
    """A listener (rank 1, on "node-a") and a sender's ``Peers`` on ``node`` wired to it
    (from another node: over TCP), counting in the listener's counters unless given
    others: ``(listener, peers, delivered envelopes)``, both closed after."""
    secret = RunSecret()
    listener, endpoint, got = await _listening(tmp_path, secret)
    peers = Peers(secret, node, listener.counters if counters is None else counters,
                  shm_bytes=shm_bytes)
    peers.wire([None, endpoint])
    try:
        yield listener, peers, got
    finally:
        peers.close()
        listener.close()


def _mapped(name: str = "ftactors") -> int:
    """Mappings of memory files called ``name`` (the direct plane's segments) in this process."""
    with open("/proc/self/maps") as maps:
        return sum(f"memfd:{name}" in line for line in maps)


@pytest.mark.parametrize("same_node", [True, False], ids=["unix", "tcp"])
def test_large_buffers_to_a_peer_on_the_node_go_through_shared_memory(tmp_path, same_node):
    """Buffers of ``shm_bytes`` and more to a peer on the same node go through the
    channel's segment (counted), the rest of the frame on the socket, smaller buffers
    beside them in the same frame: all arrive intact, in order, writable and owned by
    the receiver. Across nodes nothing is shared. Closing both ends unmaps every
    segment (anonymous: nothing named is left to remove)."""
    sizes = [LARGE, 1 << 20, 3 << 20]

    async def body():
        async with _channel(tmp_path, "node-a" if same_node else "node-b") as (listener, peers, got):
            before = os.listdir("/dev/shm")
            for i, n in enumerate(sizes):
                assert peers.send(1, *encode([_arrays_env(i, n)], True))
            assert peers.send(1, *encode([_arrays_env(3, LARGE, 2 << 20, 4 << 20)], True))
            await _until(lambda: len(got) == 4)
            assert [e.app_seq for e in got] == [0, 1, 2, 3]
            assert all(_intact(e, n) for e, n in zip(got, sizes))
            assert _intact(got[3], LARGE, 2 << 20, 4 << 20)
            assert all(type(b) is np.ndarray and b.base is None
                       for env in got for b in env.payload.buffers)
            assert listener.counters.shared == (4 if same_node else 0)
            assert _mapped() == (2 if same_node else 0)  # the sender's, the listener's
        await _until(lambda: _mapped() == 0)
        assert os.listdir("/dev/shm") == before
    asyncio.run(body())


def test_a_full_segment_sends_on_the_socket_and_frees_acknowledged_regions(tmp_path, monkeypatch):
    """A segment that has no free region large enough for a buffer lets that buffer go
    on the socket; regions come free as frames are acknowledged, so later buffers use
    the segment again, wrapping around it: a stream of arrays of mixed sizes arrives
    intact and in order either way."""
    monkeypatch.setattr(shm, "SEGMENT_BYTES", 5 << 20)
    sizes = [(2 << 20) + 8 * k for k in range(5)] + [3 << 20, 1 << 20]

    async def body():
        async with _channel(tmp_path) as (listener, peers, got):
            for i in range(40):
                assert peers.send(1, *encode([_arrays_env(i, sizes[i % len(sizes)])], True))
                if i % 4 == 3:  # a burst of four does not fit: let the listener catch up
                    await _until(lambda: peers.conns[1].window.base == i + 1)
            await _until(lambda: len(got) == 40)
            assert [e.app_seq for e in got] == list(range(40))
            assert all(_intact(e, sizes[e.app_seq % len(sizes)]) for e in got)
            assert 0 < listener.counters.shared < 40
    asyncio.run(body())


def test_a_receiver_holds_no_delivered_buffer_while_it_copies_the_next(tmp_path, monkeypatch):
    """Shared-memory frames read together are copied out one after the other: once a
    frame is delivered (and its receiver dropped it), the listener no longer holds its
    buffers when it makes the next frame's, so the allocator reuses their memory
    (holding them had every 1 MiB buffer page-faulted afresh: ~140 faults a message)."""
    held, refs = [], []
    real = listening._Inbound._shared

    def shared(inbound, *table):
        held.append(sum(ref() is not None for ref in refs))
        given = real(inbound, *table)
        refs.extend(weakref.ref(b) for b in given if b is not None)
        return given

    monkeypatch.setattr(listening._Inbound, "_shared", shared)

    async def body():
        secret = RunSecret()
        delivered = []
        listener = Listener(secret, lambda envs: delivered.append(len(envs)))  # dropped
        endpoint = await listener.start("node-a", socket.gethostbyname("localhost"),
                                        str(tmp_path / "run"), "r1")
        peers = Peers(secret, "node-a", listener.counters, shm_bytes=LARGE)
        peers.wire([None, endpoint])
        for i in range(3):  # queued before the connection: written, and read, together
            assert peers.send(1, *encode([_arrays_env(i, 1 << 20)], True))
        await _until(lambda: len(delivered) == 3)
        assert listener.counters.shared == 3 and held == [0, 0, 0]
        peers.close()
        listener.close()
    asyncio.run(body())


def test_a_segment_is_a_ring_of_regions_freed_in_frame_order():
    """Regions are taken after the newest, wrap to the start when the end has no room,
    and come free only when the frames that hold them are acknowledged."""
    segment = shm.Segment(10)
    try:
        assert [segment.put(0, b"a" * 4), segment.put(1, b"b" * 4)] == [0, 4]
        assert segment.put(2, b"c" * 3) is None  # 2 left at the end, nothing at the start
        segment.release(1)  # frame 0 delivered: [0, 4) is free
        assert segment.put(2, b"c" * 3) == 0  # wrapped
        assert segment.put(3, b"d" * 2) is None  # [3, 4) is all that is free
        assert segment.put(3, b"d") == 3  # full now
        assert segment.put(4, b"e") is None
        segment.release(4)
        assert segment.put(4, b"e" * 10) == 0  # all free again
        assert bytes(segment.map[:10]) == b"e" * 10
    finally:
        segment.close()


def test_a_segment_takes_its_start_again_first_and_the_window_counts_it(tmp_path):
    """Once its first region is free, a segment takes regions from its start again even
    when its end has room, so the pages in use stay as few as the bytes in flight; and
    the bytes a frame holds in the segment count in the channel's window, so a sender
    that runs ahead of its peer waits instead of walking the whole segment."""
    segment = shm.Segment(10)
    try:
        assert [segment.put(0, b"a" * 4), segment.put(1, b"b" * 4)] == [0, 4]
        segment.release(1)
        assert segment.put(2, b"c" * 2) == 0  # not 8, where the end still has room
    finally:
        segment.close()

    async def body():
        async with _channel(tmp_path) as (listener, peers, got):
            for i in range(3):
                assert peers.send(1, *encode([_arrays_env(i, 2 << 20)], True))
            conn = peers.conns[1]
            assert conn.window.unacked >= 6 << 20 and conn.congested()
            await _until(lambda: len(got) == 3 and conn.window.unacked == 0)
            assert listener.counters.shared == 3
    asyncio.run(body())


def test_a_cut_in_the_middle_of_a_shared_memory_frame_resends_it(tmp_path, monkeypatch):
    """A connection that ends after the listener took a frame's buffer out of the
    segment and before the frame's socket part arrived whole drops the partial frame;
    the sender keeps the region until the frame is acknowledged, writes the frame again
    on a new connection, the listener maps the segment again: delivered once, intact."""
    cuts = []
    fill = listening._Inbound.buffer_updated

    def cut_midway(inbound, nbytes):
        fill(inbound, nbytes)
        filling = inbound.filling
        if filling is not None and filling.at and not cuts:
            cuts.append(filling.at)
            inbound.listener.disconnect()  # the listener's end resets

    monkeypatch.setattr(listening._Inbound, "buffer_updated", cut_midway)
    sizes = (8 << 20, 1 << 20)  # the first in the segment, the second on the socket

    async def body():
        async with _channel(tmp_path, shm_bytes=4 << 20, counters=Counters()) as (listener, peers, got):
            for i in range(3):
                assert peers.send(1, *encode([_arrays_env(i, *sizes)], True))
                waiting = peers.congested(1)
                if waiting is not None:
                    await waiting
            await _until(lambda: len(got) == 3, timeout_s=20, show=peers.counters.as_dict)
            assert cuts and [e.app_seq for e in got] == [0, 1, 2]
            assert all(_intact(e, *sizes) for e in got)
            assert listener.counters.truncated == 1
            assert peers.counters.reconnects == 1 and peers.counters.resent >= 1
            assert peers.counters.shared == 3  # counted as sent, once each

    asyncio.run(body())


def test_large_buffers_go_through_shared_memory_where_proc_cannot_be_read(tmp_path, monkeypatch):
    """A host that forbids opening another process's ``/proc/<pid>/fd`` (an LSM,
    ``hidepid``) changes nothing: the segment's descriptor is passed on the socket, so
    every buffer goes through shared memory and arrives intact, none refused."""
    real_open = os.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_proc)

    async def body():
        async with _channel(tmp_path) as (listener, peers, got):
            for i in range(4):
                assert peers.send(1, *encode([_arrays_env(i, 2 << 20)], True))
            await _until(lambda: len(got) == 4, show=listener.counters.as_dict)
            assert [e.app_seq for e in got] == [0, 1, 2, 3]
            assert all(_intact(e, 2 << 20) for e in got)
            c = listener.counters
            assert (c.shared, c.bad_frame, c.shared_refused, c.shared_fallback) == (4, 0, 0, 0)
    asyncio.run(body())


@pytest.mark.parametrize("how", ["send_fds_fails", "listener_refuses", "no_memfd"])
def test_a_segment_that_cannot_be_passed_or_taken_leaves_the_channel_on_the_socket(
        tmp_path, monkeypatch, how):
    """When the descriptor cannot be passed (``send_fds`` fails), the listener does not
    take it (not sealed: it says so in its answer) or no segment can be made, the
    channel falls back to the socket, counted: frames queued for shared memory before
    the answer came are rewritten with their buffers after the body, and every one
    arrives intact (no frame refused and resent without end)."""
    if how == "send_fds_fails":
        def send_fds(*args):
            raise OSError(1, "Operation not permitted")
        monkeypatch.setattr(socket, "send_fds", send_fds)
    elif how == "listener_refuses":
        real_fcntl = shm.fcntl.fcntl
        monkeypatch.setattr(shm.fcntl, "fcntl", lambda fd, cmd, *arg: (
            0 if cmd == shm.fcntl.F_GET_SEALS else real_fcntl(fd, cmd, *arg)))
    else:
        def memfd_create(*args):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "memfd_create", memfd_create)

    async def body():
        async with _channel(tmp_path) as (listener, peers, got):
            for i in range(3):  # before the connection is made: shared memory, if any
                assert peers.send(1, *encode([_arrays_env(i, 2 << 20, LARGE)], True))
            kinds = [HEADER.unpack_from(frame[0])[1] for frame in peers.conns[1].window.frames]
            assert all(k & wire.SHM for k in kinds) == (how != "no_memfd")
            await _until(lambda: len(got) == 3, show=listener.counters.as_dict)
            assert peers.send(1, *encode([_arrays_env(3, 2 << 20, LARGE)], True))  # after it
            await _until(lambda: len(got) == 4, show=listener.counters.as_dict)
            assert [e.app_seq for e in got] == [0, 1, 2, 3]
            assert all(_intact(e, 2 << 20, LARGE) for e in got)
            c = listener.counters
            assert (c.shared, c.bad_frame, c.shared_fallback) == (0, 0, 1)
            assert c.shared_refused == (how == "listener_refuses")
            # the rewritten frames' bytes were counted: the acknowledgements (on their
            # way back, not yet read under load) bring the count to zero
            await _until(lambda: peers.conns[1].window.unacked == 0,
                         show=lambda: peers.conns[1].window.unacked)
    asyncio.run(body())


async def _recv_exactly(sock, n: int) -> bytes:
    loop, data = asyncio.get_running_loop(), b""
    while len(data) < n:
        more = await loop.sock_recv(sock, n - len(data))
        if not more:
            raise ConnectionResetError
        data += more
    return data


async def _prove(path: str, secret: RunSecret, fds=()):
    """A client's handshake on a raw Unix socket, passing ``fds`` with its proof: the
    socket and the listener's answer (``SHARED`` or ``NOT_SHARED``); for a proof that
    does not check, the socket and None."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    await loop.sock_connect(sock, path)
    theirs = await _recv_exactly(sock, NONCE_BYTES)
    mine = os.urandom(NONCE_BYTES + SESSION_BYTES)
    socket.send_fds(sock, [mine + secret.mac(b"client", theirs, mine)], list(fds))
    try:
        answer = await _recv_exactly(sock, COUNT.size + 1)
    except ConnectionResetError:
        return sock, None
    assert await _recv_exactly(sock, MAC_BYTES) == secret.mac(b"server", mine + answer, theirs)
    return sock, answer[COUNT.size:]


def _descriptors(name: str) -> int:
    """This process's open descriptors of memory files called ``name``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == f"/memfd:{name} (deleted)"
        except OSError:
            pass
    return n


def test_shared_memory_is_taken_only_from_a_proven_peer_and_within_its_segment(tmp_path):
    """A descriptor passed with a proof that does not check is closed unused; a proven
    peer's descriptor is taken only if it is a sealed memory file (else the answer says
    so, counted); a shared-memory frame on a TCP connection, on one that took no
    segment, or naming a region outside its segment is refused as a bad frame; none of
    them delivers anything."""
    async def body():
        secret = RunSecret()
        listener, endpoint, got = await _listening(tmp_path, secret)
        loop = asyncio.get_running_loop()
        c = listener.counters
        segment = shm.Segment(1 << 20)
        _, body_, _ = encode([_env(0)], True)

        def frame(offset):
            return (HEADER.pack(len(body_), ROWS | OOB | wire.SHM) + OOB_COUNT.pack(1)
                    + wire.SHM_ENTRY.pack(4096, offset) + body_)

        stranger = os.memfd_create("stranger")
        sock, answer = await _prove(endpoint.path, RunSecret(), [stranger])
        assert answer is None and c.auth_failed == 1
        os.close(stranger)
        sock.close()
        assert _descriptors("stranger") == 0 and _mapped("stranger") == 0

        r, w = await asyncio.open_connection(endpoint.host, endpoint.port)
        await _handshake(r, w, secret)
        w.write(frame(0))
        await _until(lambda: c.bad_frame == 1)
        w.close()

        unsealed = os.memfd_create("unsealed")
        os.ftruncate(unsealed, 1 << 20)
        for k, fds in enumerate(([], [unsealed], [segment.fd, segment.fd])):
            sock, answer = await _prove(endpoint.path, secret, fds)
            assert answer == handshake.NOT_SHARED and c.shared_refused == min(k, len(fds))
            await loop.sock_sendall(sock, frame(0))
            await _until(lambda: c.bad_frame == 2 + k)
            sock.close()
        os.close(unsealed)
        assert _descriptors("unsealed") == 0

        sock, answer = await _prove(endpoint.path, secret, [segment.fd])
        assert answer == handshake.SHARED and c.shared_refused == 2
        await loop.sock_sendall(sock, frame(segment.size - 100))
        await _until(lambda: c.bad_frame == 5, show=c.as_dict)
        assert got == [] and c.frames == 0
        sock.close()
        segment.close()
        listener.close()
    asyncio.run(body())
