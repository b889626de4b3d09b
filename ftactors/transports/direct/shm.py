"""Shared-memory segments of the direct plane: a channel's ring (sending side) and the
listener's read-only mapping of it, no sockets.

Theory of operation
-------------------
To a peer on the same node, buffers of ``shm_bytes`` and more go through one segment per
channel instead of the socket. A segment is an anonymous memory file (``memfd``: no name
anywhere, so a killed rank leaves nothing in ``/dev/shm``; it goes when the last process
holding it closes it or dies), ``SEGMENT_BYTES`` long, its size sealed (``SEALS``) before
its descriptor is passed: reading a page cut off the end of a mapping would kill the
reader. The sender copies a frame's buffers into free regions (``Segment.put``) and the
frame names their offsets; the regions are a ring (``Ring``, offsets only) freed in frame
order once the listener has acknowledged the frames holding them (``release``), since
the listener copies each region out (``Mapping.copy``) before it delivers the frame. A
frame written again after a reconnection finds its buffers where they were.

The listener maps a segment only after the peer's proof checked, and only a sealed
regular memory file (``Mapping.take``); it maps it read-only, closes the descriptor, and
refuses a region outside it. Everything else (who passes the descriptor, when a refusal
is counted, what a frame looks like) is the glue's and the wire format's.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import stat
from collections import deque

import numpy as np

SEGMENT_BYTES = 64 << 20
"""A channel's shared-memory segment (anonymous; pages are taken as they are first
written): a buffer that does not fit in what is free of it goes on the socket."""
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""A segment's size is fixed before it is passed: a listener maps only a segment sealed
against shrinking (reading a page cut off the end of a mapping kills the process)."""


class Ring:
    """Which regions of a segment of ``size`` bytes are taken, by which frame: a ring
    whose regions come free in frame order (offsets only, no memory)."""

    def __init__(self, size: int):
        self.size = size
        self.head = 0  # where the next region starts
        self.regions: deque = deque()  # (frame number, start, end), in frame order

    def take(self, frame: int, n: int) -> int | None:
        """A free region of ``n`` bytes for frame number ``frame``: its offset, or None
        when no region is free that large."""
        regions = self.regions
        if not regions:
            self.head = 0
        tail = regions[0][1] if regions else self.size
        if self.head > tail or not regions:  # free: [0, tail) and [head, size)
            # from the start when it has room: the pages in use stay as few as the bytes
            # in flight (warm, in cache) instead of the whole segment in turn
            start = 0 if n <= tail else self.head if self.size - self.head >= n else None
        else:  # wrapped (head == tail: full): free [head, tail)
            start = self.head if tail - self.head >= n else None
        if start is None:
            return None
        self.head = start + n
        regions.append((frame, start, self.head))
        return start

    def release(self, count: int) -> None:
        """The frames numbered below ``count`` were delivered: free their regions."""
        regions = self.regions
        while regions and regions[0][0] < count:
            regions.popleft()


class Segment(Ring):
    """A channel's segment (sending side): the memory file behind a ``Ring``; ``fd`` is
    what the sender passes with its proof."""

    def __init__(self, size: int):
        super().__init__(size)
        self.fd = os.memfd_create("ftactors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, SEALS)
            self.map = mmap.mmap(self.fd, size)
        except OSError:
            os.close(self.fd)
            raise
        self.array = np.frombuffer(self.map, np.uint8)

    def put(self, frame: int, buf) -> int | None:
        """Copy ``buf`` into a free region for frame number ``frame``; its offset, or
        None when no region is free that large (the buffer goes on the socket)."""
        start = self.take(frame, len(buf))
        if start is not None:
            self.array[start:start + len(buf)] = np.frombuffer(buf, np.uint8)
        return start

    def close(self) -> None:
        self.regions.clear()
        del self.array
        self.map.close()
        os.close(self.fd)


class Mapping:
    """A peer's segment as its listener sees it: mapped read-only, regions copied out."""

    def __init__(self, seg: mmap.mmap):
        self.map = seg
        self.array = np.frombuffer(seg, np.uint8)

    @classmethod
    def take(cls, fds: list[int]) -> "Mapping":
        """Map the one descriptor of ``fds`` (a proven peer's; -1 stands for one the
        kernel closed) and close them all, used or not.

        Raises ValueError (or OSError) when ``fds`` is not exactly one sealed, non-empty
        memory file: the listener then takes no segment."""
        try:
            if len(fds) != 1 or fds[0] < 0:
                raise ValueError("more than one descriptor")
            st = os.fstat(fds[0])
            if (not stat.S_ISREG(st.st_mode) or not st.st_size
                    or fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & SEALS != SEALS):
                raise ValueError("not a sealed segment")
            return cls(mmap.mmap(fds[0], st.st_size, mmap.MAP_SHARED, mmap.PROT_READ))
        finally:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def copy(self, offset: int, n: int) -> np.ndarray | None:
        """A copy the receiver owns of the region at ``offset``, ``n`` long; None when
        the region is not inside the segment (the frame is refused)."""
        array = self.array
        if offset + n > len(array):
            return None
        own = np.empty(n, np.uint8)
        own[:] = array[offset:offset + n]
        return own

    def close(self) -> None:
        """Let go of the peer's segment."""
        del self.array
        self.map.close()
