"""The direct plane's wire format step by step (``transports/direct/wire``): frames
encoded, read head by head out of a stream cut anywhere, decoded, refused."""
import pickle

import numpy as np
import pytest

from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack, unpack
from ftactors.transports.direct import wire
from ftactors.transports.direct.wire import (HEADER, INLINE, OBJECTS, OOB, ROWS, SHM, Filling,
                                             FrameError, decode, encode, oob_head, read_head,
                                             shm_head, unshare)

LIMIT = 1 << 20


def _env(i, payload=None, piggyback=None):
    return Envelope(APP, 0, 1, "w", 0, i, pack(i if payload is None else payload, large_bytes=1024),
                    seq=i, piggyback=piggyback)


def _stream(envs_batches):
    """Frames of ``encode`` as one byte string, each with its buffers after its body."""
    out = b""
    for envs in envs_batches:
        kind, body, buffers = encode(envs, True)
        head = oob_head(len(body), kind, buffers) if buffers else HEADER.pack(len(body), kind)
        out += head + body + b"".join(bytes(b) for b in buffers)
    return out


def _read_all(data: bytes):
    """Read ``data`` frame by frame as a listener does: the batches decoded."""
    pos, got = 0, []
    while pos < len(data):
        kind, start, size, lengths, _ = read_head(data, pos, len(data), LIMIT)
        body = data[start:start + size]
        filling = Filling(kind, body, lengths)
        pos = start + size + filling.take(memoryview(data)[start + size:])
        assert filling.advance()
        got.append(decode(kind, filling.body, filling.buffers))
    return got


def test_a_plain_batch_round_trips():
    envs = [_env(0), _env(1, piggyback={"x": [1]})]
    kind, body, buffers = encode(envs, True)
    assert kind == ROWS and buffers == []
    assert [e.app_seq for e in decode(kind, body)] == [0, 1]
    assert decode(kind, body)[1].piggyback == {"x": [1]}


def test_a_batch_the_c_pickler_cannot_take_goes_by_cloudpickle():
    envs = [_env(0, piggyback={"f": lambda x: x + 1})]
    kind, body, _ = encode(envs, False)
    assert kind == OBJECTS
    assert decode(kind, body)[0].piggyback["f"](1) == 2


def test_out_of_band_buffers_follow_the_body_and_arrive_writable_and_owned():
    a = np.arange(4096, dtype=np.float64)
    assert len(encode([_env(0, a)], True)[2]) == 1  # out of band
    data = _stream([[_env(0, a), _env(1)], [_env(2, a * 2)]])
    first, second = _read_all(data)
    got = unpack(first[0].payload)
    assert np.array_equal(got, a) and got.flags.writeable
    assert np.array_equal(unpack(second[0].payload), a * 2)
    assert unpack(first[1].payload) == 1


@pytest.mark.parametrize("cut", [1, 4, 5, 9, 12, 40, 100, 5000])
def test_a_head_cut_anywhere_reads_as_not_yet_whole(cut):
    """A reader never takes a head before it is whole, whatever the cut."""
    data = _stream([[_env(0, np.arange(1024.0))]])
    kind, start, size, lengths, _ = read_head(data, 0, len(data), LIMIT)
    table_end = start
    if cut < HEADER.size:
        return  # the reader does not call read_head before a header's bytes are there
    head = read_head(data[:cut], 0, cut, LIMIT)
    if cut < table_end:
        assert head is None
    else:
        assert head == (kind, start, size, lengths, None)


def test_frames_longer_than_the_limit_are_refused_by_their_head():
    """Before any of the body: a plain frame by its length, an out-of-band frame by its
    buffers' lengths, or by a count of buffers whose table alone would be too long."""
    plain = HEADER.pack(LIMIT + 1, ROWS)
    with pytest.raises(FrameError) as e:
        read_head(plain, 0, len(plain), LIMIT)
    assert e.value.reason == "oversized"
    assert read_head(HEADER.pack(LIMIT, ROWS), 0, HEADER.size, LIMIT) is not None  # at the limit
    oob = oob_head(10, ROWS, [b"x" * 8, bytes(LIMIT - 10 - 8 + 1)])
    with pytest.raises(FrameError):
        read_head(oob, 0, len(oob), LIMIT)
    oob = oob_head(10, ROWS, [b"x" * 8, bytes(LIMIT - 10 - 8)])
    assert read_head(oob, 0, len(oob), LIMIT)[3] == (8, LIMIT - 18)
    many = HEADER.pack(0, ROWS | OOB) + wire.OOB_COUNT.pack(LIMIT // 8 + 1)
    with pytest.raises(FrameError):
        read_head(many, 0, len(many), LIMIT)  # refused before its table arrives


def test_a_shared_memory_head_names_each_buffers_length_and_offset():
    head = shm_head(7, ROWS, [100, 200], [4096, INLINE])
    kind, start, size, lengths, offsets = read_head(head, 0, len(head), LIMIT)
    assert (kind, start, size, lengths, offsets) == (ROWS | OOB | SHM, len(head), 7,
                                                     (100, 200), (4096, INLINE))
    too_long = shm_head(7, ROWS, [LIMIT], [0])
    with pytest.raises(FrameError):
        read_head(too_long, 0, len(too_long), LIMIT)


def test_unshare_puts_every_buffer_after_the_body_in_order():
    segment = np.frombuffer(bytes(range(256)) * 4, np.uint8)
    inline = b"I" * 5
    frame = (shm_head(3, ROWS, [10, 5, 20], [16, INLINE, 100]), b"bod", inline)
    new, moved = unshare(frame, segment)
    assert moved == 2
    assert new[1] == b"bod" and new[2] == bytes(range(16, 26)) and new[3] == inline
    assert new[4] == bytes(range(100, 120))
    kind, start, size, lengths, offsets = read_head(new[0], 0, len(new[0]), LIMIT)
    assert kind == ROWS | OOB and lengths == (10, 5, 20) and offsets is None
    plain = (HEADER.pack(3, ROWS), b"bod")
    assert unshare(plain, segment) == (plain, 0)


def test_filling_takes_buffers_in_turn_and_leaves_given_ones_alone():
    given = np.full(3, 7, np.uint8)
    filling = Filling(ROWS | OOB, b"body", (2, 3, 4), [None, given, None])
    assert filling.nbytes == 4 + 9
    assert filling.take(memoryview(b"ab")) == 2 and not filling.advance()
    assert filling.take(memoryview(b"cdefXX")) == 4  # only what the buffers hold
    assert filling.advance()
    assert [bytes(b) for b in filling.buffers] == [b"ab", b"\x07" * 3, b"cdef"]
    assert filling.buffers[1] is given


def test_an_unknown_kind_or_a_body_that_is_not_a_batch_does_not_decode():
    with pytest.raises(ValueError, match="unknown frame kind"):
        decode(5, pickle.dumps([]))
    with pytest.raises(Exception):
        decode(ROWS, b"not a pickle")
