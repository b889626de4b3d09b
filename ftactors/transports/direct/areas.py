"""Receive areas a connection reuses for the out-of-band buffers it reads from its
socket, no sockets.

Theory of operation
-------------------
An out-of-band buffer read from the socket becomes its payload's buffer, owned by the
receiver: an array rebuilt over it by ``recv`` (an object) is the program's, writable,
for as long as it keeps it. A fresh buffer for every frame costs its pages' first
touch, more than the copy into them (page faults: measured 1.5 ms per MiB on this
machine, against 0.1-0.2 ms for a copy into pages already there, ``shm.SEGMENT_BYTES``).
So a connection keeps a few areas (``Areas``) and reads a buffer into one that nothing
references any more: the receive that copied its message into the program's buffer
(``Recv``, ``Irecv``) dropped the payload, and with it every view of the area. An area
still referenced (a message queued for a later receive, held or logged by a protocol,
an array ``recv`` handed to the program, or a view of one) is never written: reuse is
decided by the area's reference count, which every view of it, however derived (numpy
slices, memoryviews, arrays pickle rebuilt over it) holds up, so there is nothing to
settle or copy and nothing a program can see. Past ``AREAS`` areas or ``AREAS_BYTES``
bytes a buffer is fresh, as it would be without the pool.
"""
from __future__ import annotations

import sys

import numpy as np

AREAS = 4
"""Areas a connection keeps at most."""
AREAS_BYTES = 64 << 20
"""Bytes of areas a connection keeps at most (a larger buffer, or one past this, is fresh)."""


def fresh(n: int) -> np.ndarray:
    """A buffer of ``n`` bytes of its own (not zeroed: every byte is read into it)."""
    return np.empty(n, np.uint8)


def _refs(areas: list, i: int) -> int:
    """The reference count of ``areas[i]`` as this function sees it (``Areas.idle``)."""
    return sys.getrefcount(areas[i])


class Areas:
    """A connection's receive areas (module docstring): ``take(n)`` gives a buffer of
    ``n`` bytes to read into, in an area nothing else references when there is one."""

    def __init__(self, count: int = AREAS, most: int = AREAS_BYTES):
        self.count = count
        self.most = most
        self.areas: list[np.ndarray] = []
        self.nbytes = 0
        self.idle = -1  # an area's reference count while only this pool holds it

    def take(self, n: int) -> np.ndarray:
        """A buffer of ``n`` bytes: a view of the smallest free area that holds it (a
        free one too small is replaced by a larger one), a new area while the pool has
        room, else a fresh buffer."""
        areas, best, small = self.areas, None, None
        for i in range(len(areas)):
            if _refs(areas, i) != self.idle:
                continue  # referenced: the program's, or a message still alive
            size = areas[i].nbytes
            if size >= n:
                if best is None or size < areas[best].nbytes:
                    best = i
            elif small is None:
                small = i
        if best is not None:
            area = areas[best]
            return area if area.nbytes == n else area[:n]
        if small is not None and self.nbytes - areas[small].nbytes + n <= self.most:
            self.nbytes -= areas.pop(small).nbytes
        if len(areas) >= self.count or self.nbytes + n > self.most:
            return fresh(n)
        areas.append(fresh(n))
        self.nbytes += n
        self.idle = _refs(areas, len(areas) - 1)
        return areas[-1]
