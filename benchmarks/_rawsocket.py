"""The raw socket anchor of ``ftactors bench transport``: two Ray actors (two processes)
exchanging length-prefixed frames over a Unix socket with asyncio protocols, the same
kind of channel as the direct data plane but with nothing of ftactors on it (no pickled
envelopes, channels, matching or batching: one frame per message). The loops are those
of ``RawDriver``: round trips, one-way small messages then one acknowledgement, and
arrays (the receiver builds an ndarray over each frame and reads one element).
"""
from __future__ import annotations

import asyncio
import os
import pickle
import struct
import tempfile
import time

import numpy as np

_HEAD = struct.Struct("!IB")  # body length, op
ECHO, COUNT, ARRAY, DRAIN = range(4)


class _Frames(asyncio.Protocol):
    """Splits a byte stream into (op, body) frames for ``on_frame``."""

    def __init__(self, on_frame):
        self.on_frame = on_frame
        self.buf = bytearray()
        self.transport = None
        self.writable = asyncio.Event()  # flow control: cleared while the kernel is full
        self.writable.set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= _HEAD.size:
            size, op = _HEAD.unpack_from(buf, pos)
            start = pos + _HEAD.size
            if len(buf) - start < size:
                break
            self.on_frame(op, bytes(buf[start:start + size]))
            pos = start + size
        del buf[:pos]


def _frame(op: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body), op) + body


class SocketPeer:
    """The listening actor: echoes, counts, touches arrays, acknowledges drains."""

    def __init__(self):
        self.count = 0
        self.want: int | None = None
        self.total = 0.0
        self.conn: _Frames | None = None

    async def listen(self) -> str:
        directory = tempfile.mkdtemp(prefix="ftactors-bench-")  # mode 0700
        path = os.path.join(directory, "peer.sock")
        self.server = await asyncio.get_running_loop().create_unix_server(self._connection, path)
        return path

    def _connection(self) -> _Frames:
        self.conn = _Frames(self._on_frame)
        return self.conn

    def _on_frame(self, op: int, body: bytes) -> None:
        if op == ECHO:
            self.conn.transport.write(_frame(ECHO, body))
            return
        if op == DRAIN:
            self.want = pickle.loads(body)
        elif op == ARRAY:
            self.total += float(np.frombuffer(body, dtype=np.float64)[-1])
            self.count += 1
        else:
            self.count += 1
        if self.want is not None and self.count >= self.want:
            self.count -= self.want
            self.want = None
            self.conn.transport.write(_frame(DRAIN, b""))


class SocketDriver:
    """The sending actor: the same loops as ``RawDriver``, over the socket."""

    async def connect(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        self.replies: asyncio.Queue = asyncio.Queue()
        self.transport, self.frames = await loop.create_unix_connection(
            lambda: _Frames(lambda op, body: self.replies.put_nowait(body)), path)

    async def run(self, plan: dict, warmup) -> dict:
        out = {"latency": await self._pingpong(plan["round_trips"], warmup),
               "throughput": await self._stream(plan["messages"], warmup)}
        for nbytes, count in plan["arrays"].items():
            out[f"bandwidth_{nbytes}"] = await self._arrays(nbytes, count, warmup)
        return out

    async def _pingpong(self, n: int, warmup) -> float:
        write = self.transport.write
        for timed in (False, True):
            count = n if timed else warmup(n)
            t0 = time.perf_counter()
            for i in range(count):
                write(_frame(ECHO, pickle.dumps(i)))
                pickle.loads(await self.replies.get())
        return (time.perf_counter() - t0) / n

    async def _drain(self, count: int) -> None:
        self.transport.write(_frame(DRAIN, pickle.dumps(count)))
        await self.replies.get()

    async def _stream(self, n: int, warmup) -> float:
        for timed in (False, True):
            count = n if timed else warmup(n)
            t0 = time.perf_counter()
            for i in range(count):
                self.transport.write(_frame(COUNT, pickle.dumps(i)))
            await self._drain(count)
        return n / (time.perf_counter() - t0)

    async def _arrays(self, nbytes: int, n: int, warmup) -> float:
        arr = np.ones(nbytes // 8)
        for timed in (False, True):
            count = n if timed else warmup(n)
            t0 = time.perf_counter()
            for _ in range(count):
                self.transport.write(_HEAD.pack(arr.nbytes, ARRAY))
                self.transport.write(memoryview(arr).cast("B"))
                # asyncio's buffer drops its sent prefix by copying the rest: a backlog of
                # many arrays would make that quadratic, so wait for the kernel to take it
                await self.frames.writable.wait()
            await self._drain(count)
        return n * nbytes / (time.perf_counter() - t0)
