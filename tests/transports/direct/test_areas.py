"""A connection's receive areas step by step (``transports/direct/areas``): an area is
read into again only once nothing references it, however the program came to hold it."""
import pickle

import numpy as np

from ftactors.engine._payload import pack, unpack
from ftactors.transports.direct.areas import Areas


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.shares_memory(a, b)


def test_an_area_nothing_references_is_read_into_again():
    """What a posted ``Recv`` leaves: the payload dropped once copied out. The next
    buffer, as large or smaller, lands in the same memory (warm pages, no fault)."""
    areas = Areas()
    first = areas.take(1000)
    first[:] = 1
    kept = first.__array_interface__["data"][0]
    del first
    again = areas.take(1000)
    assert again.__array_interface__["data"][0] == kept and len(areas.areas) == 1
    del again
    smaller = areas.take(10)
    assert smaller.nbytes == 10 and smaller.__array_interface__["data"][0] == kept


def test_an_area_the_program_still_holds_is_never_written():
    """A payload kept (a queued message, a log) or an array rebuilt over its buffer
    (``recv`` of an object, a slice of that, a memoryview of a slice): the area is
    referenced, so the next buffers go elsewhere and what the program holds stays what
    arrived. (A pool that reused every area after its frame would overwrite them.)"""
    areas = Areas()
    arr = np.arange(1000, dtype=np.float64)
    payload = pack(arr, lambda view, dst: bytearray(view), 100)
    buf = areas.take(arr.nbytes)
    buf[:] = np.frombuffer(payload.buffers[0], np.uint8)
    payload.buffers = (buf,)
    del buf
    held = memoryview(unpack(payload)[10:20])  # the program's: a view of a view
    del payload
    for _ in range(2 * areas.count):
        areas.take(arr.nbytes)[:] = 0xFF  # every later buffer, written whole
    assert np.array_equal(np.frombuffer(held, np.float64), arr[10:20])
    del held
    assert _same(areas.take(arr.nbytes), areas.areas[0])  # free again: reused


def test_a_free_area_too_small_is_replaced_by_a_larger_one():
    areas = Areas()
    areas.take(100)
    big = areas.take(1000)
    assert len(areas.areas) == 1 and areas.areas[0].nbytes == 1000 and areas.nbytes == 1000
    assert _same(big, areas.areas[0])


def test_past_its_count_or_bytes_a_buffer_is_fresh():
    """The pool holds at most ``count`` areas of ``most`` bytes in all; past that a
    buffer is fresh and not kept."""
    areas = Areas(count=2, most=3000)
    held = [areas.take(1000), areas.take(1000)]
    extra = areas.take(1000)
    assert len(areas.areas) == 2 and not any(_same(extra, a) for a in areas.areas)
    del held[0]
    assert _same(areas.take(3000 - 1000), areas.areas[-1])  # replaces the free one: 3000 in all
    assert not any(_same(areas.take(4000), a) for a in areas.areas)  # more than most
    assert areas.nbytes <= 3000


def test_an_area_referenced_only_by_a_pickled_array_is_held():
    """``pickle.loads`` over an area (how a payload's buffer becomes an array) keeps a
    reference the pool sees."""
    areas = Areas()
    buf = areas.take(800)
    buf[:] = np.frombuffer(np.arange(100, dtype=np.float64).tobytes(), np.uint8)
    data = pickle.dumps(pickle.PickleBuffer(np.zeros(100)), protocol=5,
                        buffer_callback=lambda b: False)
    arr = pickle.loads(data, buffers=[buf])
    del buf
    assert not _same(areas.take(800), arr)
    del arr
    assert len(areas.areas) == 2
