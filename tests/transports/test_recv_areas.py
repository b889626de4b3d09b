"""Out-of-band buffers read from the socket (across nodes: TCP) land in the connection's
receive areas (``direct/areas``): a message copied out as it is delivered (a posted
``Recv``) leaves its area to the next one, so a stream of large messages is read into
the same memory; a message kept (queued, logged, ``recv`` as an object) keeps its area,
and holds what was sent while the next ones arrive. Real sockets on one loop, no Ray."""
import asyncio

import numpy as np

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack, unpack
from ftactors.transports.direct.wire import encode

from .test_direct_plane import _channel, _until

N = 1 << 20


def _sent(i: int) -> np.ndarray:
    return np.arange(N // 8, dtype=np.float64) + i


def _send(peers, i: int) -> None:
    env = Envelope(APP, 0, 1, "w", 0, i, pack(_sent(i), lambda v, dst: bytearray(v)), seq=i)
    assert peers.send(1, *encode([env], True))


def _addresses(listener) -> set:
    return {a.__array_interface__["data"][0] for conn in listener.inbound
            for a in conn.areas.areas}


def test_messages_copied_out_as_delivered_are_read_into_one_area(tmp_path):
    into = np.zeros(N // 8)
    seen, where = [], []

    def receive(envs):  # a rank whose Recv is posted: copies out, drops the payload
        for env in envs:
            buf = env.payload.buffers[0]
            where.append(buf.__array_interface__["data"][0])
            into[:] = unpack(env.payload)
            seen.append(bool(np.array_equal(into, _sent(env.app_seq))))

    async def body():
        async with _channel(tmp_path, "node-b") as (listener, peers, _):
            listener.deliver = receive
            for i in range(6):
                _send(peers, i)
                await _until(lambda: len(seen) == i + 1)
            return _addresses(listener)
    areas = asyncio.run(body())
    assert seen == [True] * 6
    assert len(set(where)) == 1 and set(where) <= areas  # one area, read into six times


def test_messages_kept_hold_their_areas_and_what_was_sent(tmp_path):
    async def body():
        async with _channel(tmp_path, "node-b") as (listener, peers, got):
            for i in range(8):  # more than the pool keeps
                _send(peers, i)
                await _until(lambda: len(got) == i + 1)
            return [unpack(e.payload) for e in got]
    arrays = asyncio.run(body())
    assert all(np.array_equal(a, _sent(i)) and a.flags.writeable for i, a in enumerate(arrays))
    assert len({a.__array_interface__["data"][0] for a in arrays}) == 8
