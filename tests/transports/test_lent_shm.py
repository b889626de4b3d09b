"""The listener lends shared-memory regions (``_payload.LentPayload``): a payload nobody
keeps past its delivery's loop turn is never copied on the receiving side, one that is
kept (queued, logged) takes its own copy before the frame is acknowledged, and so
before the sender may reuse the region; what it holds then is what was sent, whatever
the sender writes there next."""
import asyncio

import numpy as np

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import LentPayload, Payload, pack, unpack, unpack_lent
from ftactors.transports.direct import listener as direct_listener, shm
from ftactors.transports.direct.wire import encode

from .test_direct_plane import LARGE, _channel, _until


def _env(i: int, arr: np.ndarray) -> Envelope:
    return Envelope(APP, 0, 1, "w", 0, i, pack(arr), seq=i)


def _sent(i: int, n: int = 1 << 20) -> np.ndarray:
    return np.arange(n // 8, dtype=np.float64) + i


def _offsets(monkeypatch) -> list:
    """The offsets the segments' ``put`` returns from now on."""
    offsets, put = [], shm.Segment.put
    monkeypatch.setattr(shm.Segment, "put", lambda seg, frame, buf: offsets.append(
        put(seg, frame, buf)) or offsets[-1])
    return offsets


def test_a_payload_copied_out_in_its_delivery_is_lent_and_never_copied(tmp_path, monkeypatch):
    """What a posted buffer receive does: the array is read in place from the sender's
    segment (read-only, no copy) while its frame is delivered, copied into the program's
    buffer there, and dropped: the frame is acknowledged with nothing copied by the
    listener, and the region is reused for the next frame."""
    into = [np.zeros(1 << 17) for _ in range(4)]
    seen, offsets = [], _offsets(monkeypatch)

    def receive(envs):  # a rank whose Irecv is posted: fills its buffer as it matches
        for env in envs:
            seen.append(type(env.payload))
            arr = unpack_lent(env.payload)
            assert not arr.flags.writeable  # the segment itself
            into[env.app_seq][:] = arr

    async def body():
        async with _channel(tmp_path, shm_bytes=LARGE) as (listener, peers, _):
            listener.deliver = receive
            for i in range(4):
                assert peers.send(1, *peers_frame(i))
                await _until(lambda: peers.conns[1].window.base == i + 1)
            assert listener.counters.shared == listener.counters.lent == 4
            assert listener.counters.lent_copied == 0
            assert offsets == [0] * 4  # the one region, reused
    asyncio.run(body())
    assert seen == [LentPayload] * 4
    assert all(np.array_equal(into[i], _sent(i)) for i in range(4))


def peers_frame(i: int, n: int = 1 << 20):
    """A frame of one envelope, array ``i`` of ``n`` bytes."""
    return encode([_env(i, _sent(i, n))], True)


def test_a_payload_still_alive_at_the_acknowledgement_takes_its_own_copy(tmp_path, monkeypatch):
    """What an unexpected message, a protocol's log or ``recv`` (an object) does: the
    envelope is kept past its delivery. Before the frame is acknowledged it owns a copy
    (writable, not in the segment), so once the sender writes the next frames into the
    same region, the kept messages still hold what was sent."""
    offsets = _offsets(monkeypatch)

    async def body():
        async with _channel(tmp_path, shm_bytes=LARGE) as (listener, peers, got):
            for i in range(3):
                assert peers.send(1, *peers_frame(i))
                await _until(lambda: peers.conns[1].window.base == i + 1)
            assert listener.counters.lent_copied == 3
            assert offsets == [0] * 3  # the one region, reused
            for i, env in enumerate(got):
                assert type(env.payload) is Payload
                arr = unpack(env.payload)
                assert arr.flags.writeable and np.array_equal(arr, _sent(i))
    asyncio.run(body())


def test_lent_payloads_are_settled_when_the_connection_goes(tmp_path, monkeypatch):
    """A connection that ends (a reset, a rewire, the rank closing) settles what it lent
    before it unmaps the segment: the message kept stays readable. (A frame under the
    acknowledgement's bytes, its timer made long: nothing acknowledges it before.)"""
    monkeypatch.setattr(direct_listener, "ACK_DELAY_S", 600.0)

    async def body():
        async with _channel(tmp_path, shm_bytes=LARGE) as (listener, peers, got):
            assert peers.send(1, *peers_frame(0, 2 * LARGE))
            await _until(lambda: len(got) == 1)
            assert type(got[0].payload) is LentPayload and listener.counters.lent_copied == 0
            listener.disconnect()
            await _until(lambda: listener.counters.lent_copied == 1)
            assert type(got[0].payload) is Payload
        return got
    got = asyncio.run(body())
    assert np.array_equal(unpack(got[0].payload), _sent(0, 2 * LARGE))
