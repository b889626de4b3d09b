"""Shared-memory segments step by step (``transports/direct/shm``): the ring's regions
without memory, a segment's copies, and what a listener agrees to map."""
import os

import numpy as np
import pytest

from ftactors.transports.direct import shm
from ftactors.transports.direct.shm import Mapping, Ring, Segment


def test_a_ring_takes_regions_after_the_newest_and_wraps_when_the_end_is_full():
    ring = Ring(10)
    assert [ring.take(0, 4), ring.take(1, 4)] == [0, 4]
    assert ring.take(2, 3) is None  # 2 left at the end, nothing free at the start
    ring.release(1)  # frame 0 delivered: [0, 4) is free
    assert ring.take(2, 3) == 0  # wrapped
    assert ring.take(3, 2) is None  # [3, 4) is all that is free
    assert ring.take(3, 1) == 3  # full now: head meets the oldest region
    assert ring.take(4, 1) is None
    ring.release(4)
    assert ring.take(4, 10) == 0  # all free again: from the start


def test_a_ring_takes_its_start_again_as_soon_as_it_is_free():
    """Not the end, where there is still room: the pages in use stay as few as the bytes
    in flight. (A mutant that keeps going from the head returns 8 here.)"""
    ring = Ring(10)
    assert [ring.take(0, 4), ring.take(1, 4)] == [0, 4]
    ring.release(1)
    assert ring.take(2, 2) == 0
    assert ring.take(3, 2) == 2  # [2, 4), before the oldest region at 4
    assert ring.take(4, 2) is None  # wrapped: [8, 10) waits until the ring unwraps
    ring.release(2)  # the oldest region is now at 0: the ring goes on after its head
    assert ring.take(4, 2) == 4


def test_a_ring_frees_regions_only_in_frame_order_and_only_below_the_count():
    ring = Ring(12)
    for frame in range(3):
        assert ring.take(frame, 4) == 4 * frame
    ring.release(0)  # nothing delivered yet
    assert ring.take(3, 1) is None
    ring.release(2)  # frames 0 and 1
    assert [r[0] for r in ring.regions] == [2]
    assert ring.take(3, 8) == 0


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


def test_a_mapping_copies_regions_out_and_refuses_one_outside_the_segment():
    segment = Segment(1 << 12)
    try:
        segment.put(0, bytes(range(200)))
        fds = [os.dup(segment.fd)]
        mapping = Mapping.take(fds)
        try:
            own = mapping.copy(10, 20)
            assert bytes(own) == bytes(range(10, 30)) and own.flags.writeable
            segment.put(1, b"x" * 20)  # the sender writes on: the copy is the receiver's
            assert bytes(own) == bytes(range(10, 30))
            assert mapping.copy(segment.size - 10, 11) is None
            assert mapping.copy(segment.size - 10, 10) is not None
            assert not mapping.array.flags.writeable  # read-only
        finally:
            mapping.close()
        with pytest.raises(OSError):
            os.fstat(fds[0])  # the descriptor was closed once mapped
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
