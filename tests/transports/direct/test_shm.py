"""Shared-memory segments step by step (``transports/direct/shm``): the ring's regions
without memory, a segment's copies, and what a listener agrees to map."""
import os
import threading

import numpy as np
import pytest

from ftactors.transports.direct import shm
from ftactors.transports.direct.shm import Mapping, Ring, Segment


def test_a_ring_takes_the_lowest_free_region_that_fits():
    ring = Ring(10)
    assert [ring.take(0, 4), ring.take(1, 4)] == [0, 4]
    assert ring.take(2, 3) is None  # 2 left at the end, nothing free at the start
    ring.release(1)  # frame 0 delivered: [0, 4) is free
    assert ring.take(2, 3) == 0
    assert ring.take(3, 2) == 8  # [3, 4) is too short: the end
    assert ring.take(4, 1) == 3
    assert ring.take(5, 1) is None  # full
    ring.release(6)
    assert ring.take(6, 10) == 0  # all free again: from the start


def test_a_ring_takes_its_start_again_as_soon_as_it_is_free():
    """Not the end, where there is still room: the pages in use stay as few as the bytes
    in flight. (A mutant that keeps going from the newest region returns 8 here.)"""
    ring = Ring(10)
    assert [ring.take(0, 4), ring.take(1, 4)] == [0, 4]
    ring.release(1)
    assert ring.take(2, 2) == 0
    assert ring.take(3, 2) == 2  # [2, 4), before the oldest region at 4


def test_a_region_freed_behind_the_newest_is_found_at_once():
    """What a ring could not do: the newest region sits below the oldest (taken from the
    start again), and the space after the oldest is free: a ring would call the segment
    full until the oldest went (a large message then took the socket, into fresh memory
    on both sides)."""
    ring = Ring(10)
    assert [ring.take(0, 4), ring.take(1, 4)] == [0, 4]
    ring.release(1)
    assert ring.take(2, 4) == 0  # below frame 1's [4, 8)
    assert ring.take(3, 2) == 8


def test_a_ring_frees_regions_only_in_frame_order_and_only_below_the_count():
    ring = Ring(12)
    for frame in range(3):
        assert ring.take(frame, 4) == 4 * frame
    ring.release(0)  # nothing delivered yet
    assert ring.take(3, 1) is None
    ring.release(2)  # frames 0 and 1
    assert [frame for _, frame, _ in ring.regions.values()] == [2]
    assert ring.take(3, 8) == 0


class _View:
    """Something a weak reference can follow, as it does a payload's buffer."""


def test_a_held_region_is_free_only_once_its_view_is_gone_and_its_frames_delivered():
    """What a sender's payload written straight into the segment does (``place``): the
    region is taken with no frame, held while the payload's view lives, and may travel
    in frames (again, with no copy); it comes free once both its frames are delivered
    and its view is gone, whichever is last. (A ring that freed it at the
    acknowledgement would let the next message overwrite an ``Isend``'s or a log's
    bytes; one that waited for the view alone would reuse a region still in flight.)"""
    ring = Ring(8)
    first, second = _View(), _View()
    assert ring.take(None, 4) == 0
    ring.hold(0, first)
    assert ring.holder(first) == 0 and ring.holder(second) is None
    ring.assign(0, 0)
    ring.release(1)  # delivered, but the view lives: still taken
    assert ring.take(1, 8) is None
    ring.assign(0, 1)  # sent again (a protocol's replay): the same region, no copy
    del first
    assert ring.take(2, 8) is None  # frame 1 is not delivered yet
    ring.release(2)
    assert ring.take(2, 8) == 0
    ring.release(3)
    assert ring.take(None, 4) == 0
    ring.hold(0, second)
    del second  # never written in a frame (gone another way, dropped): free at once
    assert ring.take(3, 8) == 0


def test_a_view_gone_in_another_thread_frees_its_region_at_the_next_take():
    """A payload may be dropped in whatever thread releases it last: its weak
    reference's callback only queues the region, which the ring's own thread frees."""
    ring = Ring(4)
    view = [_View()]
    assert ring.take(None, 4) == 0
    ring.hold(0, view[0])
    thread = threading.Thread(target=view.clear)
    thread.start()
    thread.join()
    assert ring.regions and len(ring.dead) == 1
    assert ring.take(0, 4) == 0 and not ring.dead and not ring.held


def test_a_ring_refuses_a_region_larger_than_itself():
    assert Ring(8).take(0, 9) is None


def test_a_segment_copies_into_the_region_it_takes():
    segment = Segment(10)
    try:
        assert segment.put(0, b"a" * 4) == 0
        assert segment.put(1, np.full(4, ord("b"), np.uint8)) == 4
        assert segment.put(2, b"c" * 3) is None
        segment.release(1)
        assert segment.put(2, b"e" * 3) == 0
        assert bytes(segment.map[:8]) == b"eeeabbbb"
    finally:
        segment.close()


def test_a_segment_places_a_buffer_once_in_a_region_its_read_only_view_holds():
    """``place`` copies the sender's buffer into the segment and hands back the view of
    its region that becomes the payload's buffer: read-only (it is what was sent), and
    recognised by ``holder`` through the memoryview ``wire.encode`` makes of it."""
    segment = Segment(10)
    try:
        src = bytearray(b"abcd")
        region = segment.place(memoryview(src))
        src[:] = b"zzzz"  # the sender's array is its own again
        assert bytes(region) == b"abcd" and bytes(segment.map[:4]) == b"abcd"
        assert not region.flags.writeable
        assert segment.holder(memoryview(region).cast("B").obj) == 0
        assert segment.place(b"e" * 7) is None  # 6 left
        segment.assign(0, 0)
        segment.release(1)
        assert segment.put(1, b"f" * 6) == 4  # the region still held by its view
        del region
        segment.release(2)
        assert segment.put(2, b"g" * 10) == 0
    finally:
        segment.close()


def test_a_segment_closes_while_a_placed_view_is_alive():
    """A payload kept past its channel (a log) keeps the memory it holds readable."""
    segment = Segment(1 << 12)
    region = segment.place(b"abc")
    segment.close()
    assert bytes(region) == b"abc"


def test_a_mapping_lends_regions_as_they_are_and_refuses_one_outside_the_segment():
    segment = Segment(1 << 12)
    try:
        segment.put(0, bytes(range(200)))
        fds = [os.dup(segment.fd)]
        mapping = Mapping.take(fds)
        try:
            lent = mapping.lend(0, 20)
            assert bytes(lent) == bytes(range(20)) and not lent.flags.writeable
            segment.release(1)
            segment.put(1, b"x" * 20)  # the region reused: a lent view is no copy
            assert bytes(lent) == b"x" * 20
            del lent
            assert mapping.lend(segment.size - 10, 11) is None
            assert mapping.lend(segment.size - 10, 10) is not None
            assert not mapping.array.flags.writeable  # read-only
        finally:
            mapping.close()
        with pytest.raises(OSError):
            os.fstat(fds[0])  # the descriptor was closed once mapped
    finally:
        segment.close()


def test_a_mapping_closes_while_a_lent_view_is_alive():
    """The listener settles what it lent before it unmaps; a view left anyway (a traceback
    holding one) keeps the mapping, rather than making close raise."""
    segment = Segment(1 << 12)
    try:
        segment.put(0, b"abc")
        mapping = Mapping.take([os.dup(segment.fd)])
        view = mapping.lend(0, 3)
        mapping.close()
        assert bytes(view) == b"abc"
    finally:
        segment.close()


@pytest.mark.parametrize("what", ["none", "two", "closed_by_kernel", "unsealed", "empty", "pipe"])
def test_a_mapping_is_taken_only_from_one_sealed_memory_file(what):
    """Every other descriptor (or set of them) is refused, and closed all the same."""
    segment = Segment(1 << 12)
    opened = []
    try:
        if what == "none":
            fds = []
        elif what == "two":
            fds = [os.dup(segment.fd), os.dup(segment.fd)]
        elif what == "closed_by_kernel":
            fds = [os.dup(segment.fd), -1]
        elif what in ("unsealed", "empty"):
            fd = os.memfd_create("unsealed")
            if what == "unsealed":
                os.ftruncate(fd, 1 << 12)
            fds = [fd]
        else:
            r, w = os.pipe()
            opened.append(w)
            fds = [r]
        with pytest.raises(ValueError):
            Mapping.take(fds)
        for fd in fds:
            if fd >= 0:
                with pytest.raises(OSError):
                    os.fstat(fd)
    finally:
        for fd in opened:
            os.close(fd)
        segment.close()


def test_a_segment_is_sealed_against_resizing():
    segment = Segment(1 << 12)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(segment.fd, 1 << 11)
        with pytest.raises(PermissionError):
            os.ftruncate(segment.fd, 1 << 13)
        assert shm.fcntl.fcntl(segment.fd, shm.fcntl.F_GET_SEALS) & shm.SEALS == shm.SEALS
    finally:
        segment.close()
