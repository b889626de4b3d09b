"""The direct plane's wire format: a frame encoded, decoded and read out of a byte
stream, no sockets.

Theory of operation
-------------------
A frame is a 5-byte header (``HEADER``: body length, body kind) and a pickled batch of
``to_rows`` tuples: ``ROWS`` pickled by the C pickler (the fast path), ``OBJECTS`` by
cloudpickle (piggyback data that needs it). Batches that hold object-store references
never come here (Ray must see those to keep them alive).

Large arrays travel without a joined copy. A batch whose payloads hold out-of-band
buffers (``_payload.pack``: pickle protocol 5 buffers of ``out_of_band_bytes`` and more)
is an *out-of-band frame*: its kind has the ``OOB`` bit, the header is followed by the
buffers' count and lengths (``OOB_COUNT``, ``OOB_LENGTH``), the body (rows whose buffers
field is the payload's number of buffers) and then the buffers themselves. A sender keeps
a frame as a tuple of pieces (head, body, buffers: no copy) for scatter-gather writes; a
reader fills each buffer in turn (``Filling``), straight from the socket into an array of
its own that becomes the payload's buffer.

A *shared-memory frame* (kind bits ``OOB | SHM``; to a peer on the same node that took
the channel's segment, ``shm``) carries, after the buffers' count, per buffer its length
and its offset in the segment (``SHM_ENTRY``); ``INLINE`` for a buffer that follows the
body on the socket as in any out-of-band frame. ``unshare`` rewrites such a frame with
every buffer inline, for a connection that took no segment.

A reader refuses a frame longer than its limit (``MAX_FRAME_BYTES`` by default) from its
head alone (``read_head`` raises ``FrameError("oversized")``), before any of its body is
buffered; ``decode`` raises on anything ``encode`` did not make.
"""
from __future__ import annotations

import pickle
import struct
from typing import Callable

import cloudpickle
import numpy as np

from ...engine import Envelope, from_rows, to_rows
from .areas import fresh

HEADER = struct.Struct("!IB")
"""Frame header: body length (bytes), body kind."""
ROWS = 0
"""Body kind: ``pickle.dumps(to_rows(envs))``."""
OBJECTS = 1
"""Body kind: ``cloudpickle.dumps(to_rows(envs))`` (piggyback data the C pickler cannot take)."""
OOB = 0x80
"""Body kind bit: the body is followed by out-of-band buffers (module docstring)."""
OOB_COUNT = struct.Struct("!I")
OOB_LENGTH = struct.Struct("!Q")
"""An out-of-band frame's number of buffers, then each one's length, before its body."""
SHM = 0x40
"""Body kind bit (with ``OOB``, Unix connections only): the table says which buffers
are in the sender's shared-memory segment (module docstring)."""
SHM_ENTRY = struct.Struct("!QQ")
"""A shared-memory frame's buffers: each one's length and its offset in the connection's
segment (``INLINE``: after the body)."""
INLINE = (1 << 64) - 1
COUNT = struct.Struct("!Q")
"""A number of frames: the listener's resume point in its proof, and its acknowledgements."""
MAX_FRAME_BYTES = 256 << 20
"""Longest frame a listener accepts; a sender routes a longer batch another way."""


class FrameError(ValueError):
    """A frame no reader takes; ``reason`` is the counter it is refused under."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def encode(envs: list[Envelope], plain: bool) -> tuple[int, bytes, list]:
    """A batch as a frame: ``(kind, body, buffers)``; ``plain``: every piggyback is plain
    data (``_payload.is_plain``), so the C pickler will do. The payloads' out-of-band
    buffers (bytes-like) are not pickled: the rows count them, and ``buffers`` lists
    them in order, to be written after the body."""
    rows = to_rows(envs)
    buffers: list = []
    for i, row in enumerate(rows):
        if row[7]:
            buffers.extend(b if type(b) in (bytes, bytearray) else memoryview(b).cast("B")
                           for b in row[7])
            rows[i] = row[:7] + (len(row[7]),) + row[8:]
    if plain:
        return ROWS, pickle.dumps(rows, protocol=5), buffers
    return OBJECTS, cloudpickle.dumps(rows, protocol=5), buffers


def decode(kind: int, body, buffers: list = ()) -> list[Envelope]:
    """The envelopes of an authenticated frame body (``encode`` made it), with the
    frame's out-of-band ``buffers`` (each becomes its payload's buffer, owned by it)."""
    if kind & ~(OOB | SHM) not in (ROWS, OBJECTS):
        raise ValueError(f"unknown frame kind {kind}")
    rows = pickle.loads(body)
    if buffers:
        it = iter(buffers)
        rows = [row if not row[7] else row[:7] + (tuple(next(it) for _ in range(row[7])),)
                + row[8:] for row in rows]
    return from_rows(rows)


def oob_head(size: int, kind: int, buffers: list) -> bytes:
    """An out-of-band frame's head: the body's ``size`` and ``kind``, the buffers' lengths."""
    return (HEADER.pack(size, kind | OOB) + OOB_COUNT.pack(len(buffers))
            + struct.pack(f"!{len(buffers)}Q", *map(len, buffers)))


def shm_head(size: int, kind: int, lengths: list, offsets: list) -> bytes:
    """A shared-memory frame's head: per buffer its length and its offset in the
    segment (``INLINE``: after the body)."""
    table = [x for pair in zip(lengths, offsets) for x in pair]
    return (HEADER.pack(size, kind | OOB | SHM) + OOB_COUNT.pack(len(lengths))
            + struct.pack(f"!{len(table)}Q", *table))


def read_head(buf, pos: int, end: int, limit: int):
    """The head of the frame at ``pos`` in ``buf[:end]``: ``(kind, start, size, lengths,
    offsets)``, ``start`` where its body begins, ``lengths`` its out-of-band buffers'
    (``()`` for none), ``offsets`` theirs in the segment (None but for a shared-memory
    frame); None while the head is not whole.

    Raises FrameError("oversized") as soon as the head says the frame is longer than
    ``limit``."""
    size, kind = HEADER.unpack_from(buf, pos)
    start = pos + HEADER.size
    if not kind & OOB:
        if size > limit:
            raise FrameError("oversized")
        return kind, start, size, (), None
    if end - start < OOB_COUNT.size:
        return None
    count = OOB_COUNT.unpack_from(buf, start)[0]
    entry = SHM_ENTRY.size if kind & SHM else OOB_LENGTH.size
    if count > limit // entry:
        raise FrameError("oversized")
    table = OOB_COUNT.size + count * entry
    if end - start < table:
        return None
    if kind & SHM:
        entries = struct.unpack_from(f"!{2 * count}Q", buf, start + OOB_COUNT.size)
        lengths, offsets = entries[::2], entries[1::2]
    else:
        lengths = struct.unpack_from(f"!{count}Q", buf, start + OOB_COUNT.size)
        offsets = None
    if size + sum(lengths) > limit:
        raise FrameError("oversized")
    return kind, start + table, size, lengths, offsets


def unshare(frame: tuple, segment) -> tuple[tuple, int]:
    """``frame`` (pieces: head, body, inline buffers) with every buffer after the body:
    those in ``segment`` (an array) copied out of their regions. Returns the frame and
    how many buffers it moved (0: ``frame`` itself, not a shared-memory frame)."""
    size, kind = HEADER.unpack_from(frame[0])
    if not kind & SHM:
        return frame, 0
    count = OOB_COUNT.unpack_from(frame[0], HEADER.size)[0]
    entries = struct.unpack_from(f"!{2 * count}Q", frame[0], HEADER.size + OOB_COUNT.size)
    inline = iter(frame[2:])
    buffers = [next(inline) if offset == INLINE else segment[offset:offset + n].tobytes()
               for n, offset in zip(entries[::2], entries[1::2])]
    return (oob_head(size, kind & ~SHM, buffers), frame[1], *buffers), count - (len(frame) - 2)


class Filling:
    """An out-of-band frame whose buffers arrive: one byte array each (``take(n)``
    gives it: a fresh one by default, a reused receive area on a connection,
    ``areas``), read into in turn (``view`` from ``at`` on is where the next bytes go);
    ``given`` buffers (out of shared memory) are there already."""

    __slots__ = ("kind", "body", "buffers", "todo", "nbytes", "index", "view", "at")

    def __init__(self, kind: int, body: bytes, lengths: tuple, given: list | None = None,
                 take: Callable[[int], np.ndarray] = fresh):
        self.kind = kind
        self.body = body
        given = given or [None] * len(lengths)
        self.buffers = [take(n) if g is None else g for n, g in zip(lengths, given)]
        self.todo = [b for b, g in zip(self.buffers, given) if g is None]
        self.nbytes = len(body) + sum(lengths)
        self.index = 0
        self.view = memoryview(self.todo[0]) if self.todo else memoryview(b"")
        self.at = 0

    def advance(self) -> bool:
        """Move past the buffers that are full; True when every one is."""
        while self.at == len(self.view):
            self.index += 1
            if self.index >= len(self.todo):
                return True
            self.view, self.at = memoryview(self.todo[self.index]), 0
        return False

    def take(self, data: memoryview) -> int:
        """Copy what ``data`` holds of the buffers into them; the bytes taken."""
        taken = 0
        while taken < len(data) and not self.advance():
            n = min(len(self.view) - self.at, len(data) - taken)
            self.view[self.at:self.at + n] = data[taken:taken + n]
            self.at += n
            taken += n
        return taken
