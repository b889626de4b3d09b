"""The direct plane's reliable window: what a sender keeps until it is acknowledged and
when a listener acknowledges, no sockets and no timers.

Theory of operation
-------------------
A connection between two live ranks may close on its own (a reset, an idle timeout, a
NIC flap); that loses no frame. A channel numbers its frames from 0 in the order they
are written and keeps those the listener has not acknowledged (``SendWindow``: from
``base`` on). The listener counts the frames of the channel's session it has delivered
(``Session.count``, kept across connections) and acknowledges cumulatively, with that
count, once it has delivered a quarter window of bytes or frames since its last
acknowledgement (``Acks.delivered`` says so), or ``ACK_DELAY_S`` after the first it has
not (the glue's timer): one 8-byte write per quarter window or per 50 ms, nothing on the
hot path but a few additions. A connection that ends (``SendWindow.lost``) is made again;
the listener's count in its proof says where to resume (``SendWindow.resume``), and the
frames after it are written again, in order, so none is lost or delivered twice.

The window also bounds memory: a channel is congested while more than ``WINDOW_BYTES``
or ``WINDOW_FRAMES`` are unacknowledged (``SendWindow.full``), connected or not, and its
sender waits. A frame's bytes in a shared-memory segment count too.
"""
from __future__ import annotations

from collections import deque

WINDOW_BYTES = 4 << 20
"""Bytes of frames a sender keeps unacknowledged before it waits (bounded memory)."""
WINDOW_FRAMES = 1024
"""Frames a sender keeps unacknowledged before it waits."""
ACK_BYTES = WINDOW_BYTES // 4
ACK_FRAMES = WINDOW_FRAMES // 4
"""A listener acknowledges once it has delivered this many bytes or frames since its last
acknowledgement, ..."""
ACK_DELAY_S = 0.05
"""... or this long after the first frame it has not acknowledged (a trickle)."""


class SendWindow:
    """The frames of one channel not yet acknowledged, numbered: ``frames[0]`` is number
    ``base``. A frame is whatever the glue writes (a tuple of pieces); ``lengths`` keeps
    each one's bytes, ``unacked`` their sum."""

    __slots__ = ("frames", "lengths", "base", "unacked", "written")

    def __init__(self):
        self.frames: deque = deque()
        self.lengths: deque = deque()
        self.base = 0
        self.unacked = 0
        self.written = 0  # frames numbered below this went on a connection that was lost

    @property
    def next(self) -> int:
        """The number the next frame gets."""
        return self.base + len(self.frames)

    def push(self, frame, nbytes: int) -> bool:
        """Keep ``frame`` (``nbytes`` long) until acknowledged; True when the window is
        full now."""
        self.frames.append(frame)
        self.lengths.append(nbytes)
        self.unacked += nbytes
        return self.unacked > WINDOW_BYTES or len(self.frames) > WINDOW_FRAMES

    def full(self) -> bool:
        """More than a window's worth is unacknowledged: the sender waits."""
        return self.unacked > WINDOW_BYTES or len(self.frames) > WINDOW_FRAMES

    def ack(self, count: int) -> None:
        """The listener has delivered the frames numbered below ``count``: forget them
        (an older count changes nothing)."""
        frames, lengths = self.frames, self.lengths
        for _ in range(min(count - self.base, len(frames))):
            frames.popleft()
            self.unacked -= lengths.popleft()
        self.base = max(self.base, count)

    def lost(self) -> None:
        """The connection ended: every frame kept was written on it."""
        self.written = self.next

    def resume(self, count: int) -> int:
        """A new connection's listener has delivered the frames below ``count``: forget
        them; the frames kept (``frames``) are to be written again. Returns how many of
        them had been written before (resent)."""
        self.ack(count)
        return max(0, self.written - count)

    def drop(self) -> int:
        """Forget every frame (the channel closes); returns how many were never written."""
        unwritten = self.next - max(self.written, self.base)
        self.frames.clear()
        self.lengths.clear()
        self.unacked = 0
        return unwritten


class Session:
    """What a listener knows of one sender's channel, across its connections: the frames
    it has delivered (``count``), and the connection they come on now (``conn``, the
    glue's)."""

    __slots__ = ("count", "conn")

    def __init__(self):
        self.count = 0
        self.conn = None


class Acks:
    """When the listener of one connection of ``session`` acknowledges."""

    __slots__ = ("session", "frames", "nbytes")

    def __init__(self, session: Session):
        self.session = session
        self.frames = 0  # delivered since the last acknowledgement
        self.nbytes = 0

    def delivered(self, nbytes: int) -> bool:
        """One frame of ``nbytes`` was delivered; True when it is time to acknowledge
        (else the glue's timer does, ``ACK_DELAY_S`` after the first not acknowledged)."""
        self.session.count += 1
        self.frames += 1
        self.nbytes += nbytes
        return self.frames >= ACK_FRAMES or self.nbytes >= ACK_BYTES

    def due(self) -> int | None:
        """The count to acknowledge now, or None when nothing was delivered since the
        last acknowledgement."""
        if not self.frames:
            return None
        self.frames = self.nbytes = 0
        return self.session.count
