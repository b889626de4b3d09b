"""Payload packing: the C-pickle fast path for plain data gives cloudpickle's exact bytes,
a message that is one array has its own short reduction, and everything else still goes
through cloudpickle."""
import enum
import pickle

import cloudpickle
import numpy as np
import pytest

from ftactors.engine._envelope import Envelope, from_rows, to_rows
from ftactors.engine._payload import (LARGE_BUFFER_BYTES, LentPayload, Payload, is_plain, pack,
                                      unpack, unpack_lent)

PLAIN = [
    None, True, 7, 2**70, 1.5, 2 + 3j, "text", b"bytes", bytearray(b"ba"),
    (1, "a"), [(0, 1.5), (1, 2.5)], {"k": (1, 2), 3: [4, None]}, {1, 2}, frozenset({3}),
    [np.arange(6).reshape(2, 3)], np.float64(2.5), np.int32(-3),
    {"big": np.arange(LARGE_BUFFER_BYTES // 8 + 1, dtype=np.float64)},  # out-of-band
]


class Color(enum.IntEnum):
    RED = 1


class Tup(tuple):
    pass


NOT_PLAIN = [Color.RED, Tup((1,)), np.array([1, "a"], dtype=object), [[[[[1]]]]],
             lambda x: x, {"f": len}]


def cloudpickle_reference(obj):
    """What ``pack`` produced before the fast path: cloudpickle with the same callback."""
    return cloudpickle.dumps(obj, protocol=5,
                             buffer_callback=lambda b: b.raw().nbytes < LARGE_BUFFER_BYTES)


@pytest.mark.parametrize("obj", PLAIN, ids=lambda o: type(o).__name__)
def test_plain_data_packs_to_cloudpickles_bytes(obj):
    assert is_plain(obj)
    payload = pack(obj)
    assert payload.data == cloudpickle_reference(obj)
    assert same(unpack(payload), obj)


def same(back, obj) -> bool:
    """Equal, of the same types, arrays inside containers too."""
    if type(back) is not type(obj):
        return False
    if isinstance(obj, np.ndarray):
        return np.array_equal(back, obj) and back.dtype == obj.dtype
    if isinstance(obj, (list, tuple)):
        return len(back) == len(obj) and all(map(same, back, obj))
    if isinstance(obj, dict):
        return back.keys() == obj.keys() and all(same(back[k], obj[k]) for k in obj)
    return back == obj


ARRAYS = [np.arange(6).reshape(2, 3), np.asfortranarray(np.ones((3, 4))), np.ones(0),
          np.array(2.5), np.arange(8, dtype=np.uint8), np.arange(5, dtype=">i4"),
          np.array(["a", "bc"]),
          np.arange(LARGE_BUFFER_BYTES // 8 + 1, dtype=np.float64)]  # the last out-of-band


@pytest.mark.parametrize("arr", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_an_array_packs_with_its_dtype_as_a_string(arr):
    payload = pack(arr)
    assert b"numpy" not in payload.data  # no dtype object, no numpy reducer
    assert pack(arr).data == payload.data  # the same bytes every time (logs, replays)
    back = unpack(payload)
    assert type(back) is np.ndarray and back.dtype == arr.dtype and back.shape == arr.shape
    assert np.array_equal(back, arr)
    assert back.flags.writeable == (not payload.buffers)  # out-of-band: immutable bytes here
    assert back.flags.f_contiguous == arr.flags.f_contiguous


@pytest.mark.parametrize("arr", [np.zeros(3, dtype=[("a", "<f8"), ("b", "<i4")]),
                                 np.arange(10.0)[::2], np.array([1, 2], dtype="datetime64[s]")],
                         ids=["fields", "strided", "datetime"])
def test_arrays_a_dtype_string_cannot_say_keep_numpys_reduction(arr):
    payload = pack(arr)
    assert payload.data == cloudpickle_reference(arr)
    back = unpack(payload)
    assert back.dtype == arr.dtype and np.array_equal(back, arr)


@pytest.mark.parametrize("obj", NOT_PLAIN, ids=lambda o: type(o).__name__)
def test_other_objects_still_go_through_cloudpickle(obj):
    assert not is_plain(obj)
    payload = pack(obj)
    assert payload.data == cloudpickle_reference(obj)


def test_large_buffers_go_to_put_large_on_both_paths():
    arr = np.ones(LARGE_BUFFER_BYTES // 8)
    for obj in (arr, [arr, Color.RED]):  # plain, and through cloudpickle
        stored = []
        payload = pack(obj, lambda view, dst: stored.append(bytes(view)) or len(stored))
        assert payload.buffers == (1,) and payload.nbytes == len(payload.data) + arr.nbytes
        assert len(stored) == 1 and stored[0] == arr.tobytes()


def test_the_out_of_band_threshold_is_the_callers():
    """A transport's own threshold (``Link.large_bytes``): buffers from it on go out of
    band, smaller ones are pickled in-band."""
    arr = np.ones(4096 // 8)
    assert pack(arr, lambda view, dst: bytes(view)).buffers == ()  # the default threshold: in-band
    for large_bytes, oob in ((4096, 1), (4097, 0)):
        payload = pack(arr, lambda view, dst: bytes(view), large_bytes)
        assert len(payload.buffers) == oob
        assert np.array_equal(unpack(payload), arr)


def test_unpicklable_object_is_a_type_error():
    import threading
    with pytest.raises(TypeError, match="lock"):
        pack(threading.Lock())
    with pytest.raises(TypeError):
        pack([threading.Lock()])


def test_envelope_rows_round_trip():
    from ftactors.engine._envelope import APP, CTRL, Envelope, from_rows, to_rows
    envs = [Envelope(APP, 0, 3, "w/c", 7, 41, pack((1, "x")), 2, 5, 9, {"ddv": [1, 2]}, 1.25),
            Envelope(CTRL, 1, 0, "flush", 0, -1, pack(None))]
    back = from_rows(pickle.loads(pickle.dumps(to_rows(envs), protocol=5)))
    for a, b in zip(envs, back, strict=True):
        assert a.__reduce__()[1][:6] == b.__reduce__()[1][:6]
        assert a.__reduce__()[1][7:] == b.__reduce__()[1][7:]
        assert (b.payload.data, b.payload.buffers, b.payload.nbytes) == (
            a.payload.data, a.payload.buffers, a.payload.nbytes)
        assert b.payload.origin is b.payload


# ------------------------------------------------------------------- lent payloads
def lent(obj, memory: np.ndarray) -> LentPayload:
    """``obj`` packed with its out-of-band buffer lent from ``memory`` (read-only, as the
    direct plane's shared-memory segment is mapped)."""
    payload = pack(obj, None, 1)
    (buf,) = payload.buffers
    memory[:len(buf)] = np.frombuffer(buf, np.uint8)
    view = memory[:len(buf)].view()
    view.flags.writeable = False
    return LentPayload(payload.data, (view,), payload.nbytes)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_lent_payload_is_read_in_place_only_by_unpack_lent(order):
    memory = np.zeros(1 << 10, np.uint8)
    sent = np.asfortranarray(np.arange(12.0).reshape(3, 4)) if order == "F" \
        else np.arange(12.0).reshape(3, 4)
    payload = lent(sent, memory)
    seen = unpack_lent(payload)
    assert np.shares_memory(seen, memory) and not seen.flags.writeable
    assert np.array_equal(seen, sent) and seen.flags[f"{order}_CONTIGUOUS"]
    assert type(payload) is LentPayload  # nothing copied: still lent


@pytest.mark.parametrize("read", [unpack, lambda p: p.buffers, pickle.dumps,
                                  lambda p: from_rows(to_rows([Envelope(0, 0, 1, "c", 0, 0, p)]))],
                         ids=["unpack", "buffers", "pickle", "rows"])
def test_anything_else_that_reads_a_lent_payload_takes_its_own_copy(read):
    memory = np.zeros(1 << 10, np.uint8)
    sent = np.arange(16, dtype=np.int32)
    payload = lent(sent, memory)
    read(payload)
    assert type(payload) is Payload  # owned from now on
    memory[:] = 255  # the lender reuses its memory
    got = unpack(payload)
    assert np.array_equal(got, sent) and got.flags.writeable
    assert not np.shares_memory(got, memory)


def test_own_settles_a_payload_before_its_memory_is_reused():
    memory = np.zeros(1 << 10, np.uint8)
    sent = np.arange(8.0)
    payload = lent(sent, memory)
    payload.own()
    memory[:] = 0
    assert np.array_equal(unpack_lent(payload), sent)


def test_a_small_array_packs_to_the_same_bytes_without_a_pickler_of_its_own():
    """``_dumps_small`` (no ``Pickler`` per message) writes exactly what ``_dumps_array``
    wrote for an array with nothing out of band, writable or not, any faithful dtype,
    shape and order; what it does not take (strided, a record or object dtype) goes the
    general way."""
    from ftactors.engine._payload import _dumps_array, _dumps_small
    taken = [np.zeros(8, np.uint8), np.arange(10.0), np.arange(12).reshape(3, 4),
             np.ones((2, 3, 4), np.complex128), np.array([True, False]),
             np.arange(5, dtype=">f8"), np.frombuffer(b"abcdefgh", np.uint8),
             np.array(3.0), np.zeros(0), np.zeros((0, 3)), np.arange(6).reshape(2, 3).T]
    for arr in taken:
        data = _dumps_small(arr)
        assert data == _dumps_array(arr, 5, lambda buf: True), (arr.dtype, arr.shape)
        back = pickle.loads(data)
        assert back.dtype == arr.dtype and back.shape == arr.shape and (back == arr).all()
        assert back.flags.writeable == arr.flags.writeable
    refused = [np.arange(4)[::2], np.zeros(3, dtype=[("x", "f8")]),
               np.array(["a", "b"], dtype=object)]
    assert all(_dumps_small(arr) is None for arr in refused)
    assert unpack(pack(np.arange(4)[::2])).tolist() == [0, 2]  # the general way still
