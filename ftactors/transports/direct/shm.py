"""Shared-memory segments of the direct plane: a channel's ring (sending side) and the
listener's read-only mapping of it, no sockets.

Theory of operation
-------------------
To a peer on the same node, buffers of ``shm_bytes`` and more go through one segment per
channel instead of the socket. A segment is an anonymous memory file (``memfd``: no name
anywhere, so a killed rank leaves nothing in ``/dev/shm``; it goes when the last process
holding it closes it or dies), ``SEGMENT_BYTES`` long, its size sealed (``SEALS``) before
its descriptor is passed: reading a page cut off the end of a mapping would kill the
reader. A buffer is copied in once: as the payload is pickled for a peer on this node,
pickle's buffer callback copies it straight into a free region whose read-only view
becomes the payload's buffer (``Segment.place``), and the frame names the region's
offset; a buffer pickled for no one destination (a broadcast's, forwarded) is copied in
as its frame is written (``Segment.put``). Regions are taken lowest first (``Ring``,
offsets only) and come free once the listener has acknowledged the frames holding them
(``release``) and, for a placed one, its view is gone: a payload the sender keeps (a
message a protocol logged, or holds for a rank on the move) holds what was sent, and
travels again from there. The listener lends each region to its rank as it is (``Mapping.lend``: a
read-only view, so a receive into the program's buffer copies the bytes straight from
there) and has every payload lent from a frame that is still alive take its own copy
before it acknowledges the frame (``listener``). A frame written again after a
reconnection finds its buffers where they were.

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
import weakref
from collections import deque

import numpy as np

SEGMENT_BYTES = 256 << 20
"""A channel's shared-memory segment (anonymous; pages are taken as they are first
written, and stay until the channel closes): a buffer that does not fit in what is free
of it goes on the socket, into memory allocated for it on both sides, whose first touch
costs more than the copy (page faults: measured 1.5 ms per MiB on this machine, against
0.1-0.2 ms for a copy into pages already there). So it holds a whole OSU window of 4 MiB
messages (64: 256 MiB); regions are taken lowest first, so a channel's resident pages
are the most bytes it had in flight at once."""
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""A segment's size is fixed before it is passed: a listener maps only a segment sealed
against shrinking (reading a page cut off the end of a mapping kills the process)."""


class Ring:
    """Which regions of a segment of ``size`` bytes are taken, and until when (offsets
    only, no memory): a region is taken at the lowest offset where it fits (so the pages
    in use stay as few as the bytes in flight, warm in cache). A region is held by the
    frame it travels in, until that frame is acknowledged (``release``), and by the
    sender's payload that was written there (``place``), until nothing references it
    (``dead``); it is free once neither holds it. A payload still alive at the
    acknowledgement (a message a protocol logged, or holds for a rank on the move)
    keeps its region, so what it holds stays what was sent, and may travel again
    (``assign``) with no copy."""

    def __init__(self, size: int):
        self.size = size
        # start -> [end, frame number or None, weak reference to the payload's view or None]
        self.regions: dict[int, list] = {}
        self.held: dict[int, int] = {}  # id of a view holding a region -> its start
        self.dead: deque = deque()  # (id, start, reference) of views gone (``_bury``)

    def take(self, frame: int | None, n: int) -> int | None:
        """A free region of ``n`` bytes, held by frame number ``frame`` (None: by a view,
        ``hold``): its offset, or None when no region is free that large. (Lowest first,
        not after the newest region as a ring would: a region freed behind the newest one
        is found at once, where a ring waits for every older region to go.)"""
        if self.dead:
            self._bury()
        at = 0
        for start, region in sorted(self.regions.items()):
            if start - at >= n:
                break
            at = max(at, region[0])
        if at + n > self.size:
            return None
        self.regions[at] = [at + n, frame, None]
        return at

    def hold(self, start: int, view) -> None:
        """The region at ``start`` is held by ``view`` (a payload's buffer) until it dies."""
        key = id(view)
        self.held[key] = start
        self.regions[start][2] = weakref.ref(
            view, lambda ref, dead=self.dead: dead.append((key, start, ref)))

    def holder(self, view) -> int | None:
        """The offset of the region ``view`` holds (``hold``), or None: not one of this ring's."""
        start = self.held.get(id(view))
        if start is None:
            return None
        ref = self.regions[start][2] if start in self.regions else None
        return start if ref is not None and ref() is view else None

    def assign(self, start: int, frame: int) -> None:
        """The region at ``start`` travels in frame number ``frame`` (again, maybe)."""
        self.regions[start][1] = frame

    def release(self, count: int) -> None:
        """The frames numbered below ``count`` were delivered: they hold nothing more."""
        if self.dead:
            self._bury()
        regions = self.regions
        for start in [s for s, r in regions.items() if r[1] is not None and r[1] < count]:
            region = regions[start]
            region[1] = None
            if region[2] is None:
                del regions[start]

    def _bury(self) -> None:
        """The views that died (``dead``, appended by their weak references' callbacks,
        in whatever thread dropped them) hold nothing more."""
        dead, regions = self.dead, self.regions
        while dead:
            key, start, ref = dead.popleft()
            if self.held.get(key) == start:
                del self.held[key]
            region = regions.get(start)
            if region is not None and region[2] is ref:
                region[2] = None
                if region[1] is None:
                    del regions[start]


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

    def place(self, buf) -> np.ndarray | None:
        """Copy ``buf`` into a free region held by the view returned (read-only: the
        payload's buffer from now on, so the sender copies its buffer once, straight
        into the segment) until that view dies; None when no region is free that large."""
        n = len(buf)
        start = self.take(None, n)
        if start is None:
            return None
        region = self.array[start:start + n]
        region[:] = np.frombuffer(buf, np.uint8)
        region.flags.writeable = False
        self.hold(start, region)
        return region

    def close(self) -> None:
        """Let go of the segment; views of it that payloads still hold keep the memory
        (the mapping goes with the last one)."""
        self.regions.clear()
        self.held.clear()
        del self.array
        try:
            self.map.close()
        except BufferError:
            pass
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

    def lend(self, offset: int, n: int) -> np.ndarray | None:
        """The region at ``offset``, ``n`` long, as it is (a read-only view, valid until
        its frame is acknowledged); None when the region is not inside the segment (the
        frame is refused)."""
        array = self.array
        if offset + n > len(array):
            return None
        return array[offset:offset + n]

    def close(self) -> None:
        """Let go of the peer's segment (the listener has settled what it lent: should a
        view of it still be alive, the mapping goes with the last one)."""
        del self.array
        try:
            self.map.close()
        except BufferError:
            pass
