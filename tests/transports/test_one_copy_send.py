"""The sender's one copy (``RayLink.put_large`` -> ``Peers.place``): a large buffer for a
peer on this node is copied by pickle's buffer callback straight into the channel's
shared-memory segment, with no intermediate bytes of the payload's size and no second
copy when the frame is written; the region is held while the sender's payload lives
(a message a protocol logged or holds), so what it holds stays what was sent,
and it travels again with no copy. Real sockets on one loop, no Ray."""
import asyncio
import tracemalloc

import numpy as np

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack, unpack
from ftactors.transports.direct import shm
from ftactors.transports.ray.link import RayLink

from .test_direct_plane import LARGE, _channel, _until

N = 4 << 20
"""Bytes of each message (as OSU's largest bandwidth size here)."""


def _sent(i: int) -> np.ndarray:
    return np.arange(N // 8, dtype=np.float64) + i


def _link(peers) -> RayLink:
    """A rank's link to rank 1 on its direct plane (what ``RankActor.setup`` makes)."""
    link = RayLink(0, None, 0.0, 16 << 20, "token")
    link.direct = peers
    return link


def _copies_into_segments(monkeypatch) -> list:
    """The buffers ``Segment.put`` copies into a segment when their frame is written."""
    copied, put = [], shm.Segment.put
    monkeypatch.setattr(shm.Segment, "put", lambda seg, frame, buf: copied.append(
        len(buf)) or put(seg, frame, buf))
    return copied


def _send(link: RayLink, i: int, arr: np.ndarray) -> tuple[Envelope, int]:
    """Pack ``arr`` for rank 1 and send it, as ``comm.Send`` does; the envelope and the
    most memory the Python allocators held meanwhile beyond what they held before
    (numpy's arrays and bytearrays are traced; the segment, a mapping, is not)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        env = Envelope(APP, 0, 1, "w", 0, i, pack(arr, link.put_large, LARGE, 1), seq=i)
        link.send(1, [env])
        grown = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return env, grown


def test_a_large_buffer_is_copied_once_straight_into_the_segment(tmp_path, monkeypatch):
    """Each message's bytes are written once, into the segment, by the buffer callback:
    nothing of the payload's size is allocated on the way (main's path made a bytearray
    of it, then copied that into the segment), the frame names the region the payload
    holds (no ``Segment.put``), and the array may be changed as soon as the send
    returns. The receiver gets exactly what was sent."""
    copied = _copies_into_segments(monkeypatch)

    async def body():
        async with _channel(tmp_path, shm_bytes=LARGE) as (listener, peers, got):
            link = _link(peers)
            for i in range(3):
                arr = _sent(i)
                env, grown = _send(link, i, arr)
                arr[:] = -1  # the program's array is its own again
                assert grown < N // 8, f"{grown} bytes allocated to send {N}"
                region = env.payload.buffers[0]
                assert peers.conns[1].segment.holder(region) is not None
                del env, region
                await _until(lambda: len(got) == i + 1)
            assert copied == [] and listener.counters.placed == 3
            assert listener.counters.shared == 3
            return [np.array_equal(unpack(e.payload), _sent(i)) for i, e in enumerate(got)]
    assert asyncio.run(body()) == [True] * 3


def test_a_payload_the_sender_keeps_holds_its_region_and_travels_again_uncopied(
        tmp_path, monkeypatch):
    """A payload still alive when its frame is acknowledged (a message a protocol
    logged or holds) keeps its region: the next messages go elsewhere in the
    segment, and sent again (a replay) it is written with no copy, whole. Once it is
    dropped its region is taken again, from the lowest offset."""
    copied = _copies_into_segments(monkeypatch)

    async def body():
        async with _channel(tmp_path, shm_bytes=LARGE) as (listener, peers, got):
            link = _link(peers)
            kept, _ = _send(link, 0, _sent(0))
            await _until(lambda: peers.conns[1].window.base == 1)  # acknowledged
            segment = peers.conns[1].segment
            offsets = []
            for i in (1, 2):
                env, _ = _send(link, i, _sent(i))
                offsets.append(segment.holder(env.payload.buffers[0]))
                del env
                await _until(lambda: peers.conns[1].window.base == i + 1)
            assert offsets == [N, N]  # not 0: the kept payload's region
            link.send(1, [kept])  # again, as a replay sends a logged message
            await _until(lambda: peers.conns[1].window.base == 4)
            assert segment.holder(kept.payload.buffers[0]) == 0
            del kept
            env, _ = _send(link, 4, _sent(4))
            assert segment.holder(env.payload.buffers[0]) == 0
            del env
            await _until(lambda: len(got) == 5)
            assert copied == [] and listener.counters.placed == 4
            return [unpack(e.payload) for e in got]
    got = asyncio.run(body())
    assert all(np.array_equal(a, _sent(i)) for a, i in zip(got, (0, 1, 2, 0, 4)))
