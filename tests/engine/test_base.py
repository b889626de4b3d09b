"""The base a snapshot between safe points starts from (``keep_base``).

A base is kept at every safe point and loop end; its registered arrays' bytes are copied
into buffers reused from one base to the next, the rest is pickled (``_take_base``). It
must be the registered state as it was at that safe point, whatever the program writes
into it in place afterwards, and a snapshot taken from it (``state_now``, ``snapshot``
between safe points) must restore exactly what a snapshot taken at the safe point itself
restores, even after a later base has reused the buffers.
"""
import asyncio
import copy

import numpy as np
import pytest

from ftactors.engine._endpoint import Endpoint
from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack, unpack

from .test_endpoint_restore import NullLink, Owner


def registered_values() -> dict:
    """One registered value of each kind, as a program sets them up before its loop."""
    grid = np.arange(48.0).reshape(6, 8)
    readonly = grid.view()
    readonly.flags.writeable = False
    c = np.arange(12, dtype=np.int32).reshape(3, 4)
    return {
        "c": c,                                        # C-contiguous
        "alias": c,                                    # the same object, registered twice
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "rows": grid[1:3],                             # a contiguous view
        "strided": grid[:, ::2],                       # a view that is not contiguous
        "readonly": readonly,                          # a read-only view of a written array
        "objects": np.array([1, "a", None], dtype=object),
        "structured": np.zeros(2, dtype=[("x", "f8"), ("n", "i2")]),
        "list": [np.ones(3), np.zeros((2, 2), order="F"), 5],
        "dict": {"x": np.full(4, 2.0), "k": "text", "shared": c},
        "number": 7,
        "real": 0.1,
        "pair": (np.arange(3), 1),
    }


def write_everything(o) -> None:
    """What the loop does after the safe point: writes every value in place (or rebinds
    it, for the immutable ones)."""
    o.c[...] = -1
    o.fortran[...] = -2
    o.rows.base[...] = -3                              # the grid under every view of it
    o.objects[0] = "changed"
    o.structured["n"] = 9
    o.list[0][:] = -4
    o.list[1][...] = -5
    o.list.append("more")
    o.dict["x"][:] = -6
    o.dict["new"] = 1
    o.pair[0][:] = -7
    o.number = 99
    o.real = 0.5


def same(a, b) -> bool:
    """Bit for bit the same value: type, dtype, shape, memory order, writability, bytes."""
    return alike(a, b, writable=True)


def alike(a, b, writable: bool = False) -> bool:
    """The same value, its arrays' writability compared only if ``writable``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype.hasobject:
            return a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()
        return (a.dtype == b.dtype and a.shape == b.shape
                and a.flags.c_contiguous == b.flags.c_contiguous
                and a.flags.f_contiguous == b.flags.f_contiguous
                and (not writable or a.flags.writeable == b.flags.writeable)
                and a.tobytes(order="A") == b.tobytes(order="A"))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(alike(x, y, writable) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(alike(a[k], b[k], writable) for k in a)
    return a == b


class Rank:
    """An endpoint with the registered values of ``registered_values`` on its owner, in
    its first loop, with a base kept at every safe point."""

    def __init__(self):
        self.owner = Owner()
        self.ep = Endpoint(0, 2, NullLink(), self.owner, record_deliveries=True)
        self.ep.keep_base = True
        self.ep.open()
        for name, value in registered_values().items():
            setattr(self.owner, name, self.ep.register(name, value))
        self.ep.enter_loop(10)

    def values(self) -> dict:
        return {name: getattr(self.owner, name) for name in self.ep.registered}


def restored(blob: bytes) -> dict:
    """The registered values a rank restored from ``blob`` gets back."""
    owner = Owner()
    ep = Endpoint(0, 2, NullLink(), owner)
    ep.restore(ep.load(blob), 1)
    ep.open()
    return {name: ep.register(name, None) for name in registered_values()}


class SafePoint:
    """What a rank had registered at a safe point: a snapshot taken there (what a
    snapshot from the base must restore exactly) and a deep copy of the values."""

    def __init__(self, r: Rank):
        self.blob = r.ep.snapshot()
        self.values = copy.deepcopy(r.values())

    def check(self, blob: bytes) -> None:
        """``blob`` restores the state of this safe point."""
        got, want = restored(blob), restored(self.blob)
        for name in want:
            assert same(got[name], want[name]), name
            assert alike(got[name], self.values[name]), name  # (a deep copy is writable)
        # what one object was at the safe point is one object again
        assert got["alias"] is got["c"] and got["dict"]["shared"] is got["c"]


def run(body):
    return asyncio.run(body())


@pytest.mark.parametrize("how", ["state_now", "snapshot"])
def test_a_base_is_the_state_at_its_safe_point_whatever_is_written_in_place_later(how):
    async def body():
        r = Rank()
        r.ep.at_safe_point(3)
        want = SafePoint(r)
        write_everything(r.owner)
        assert not alike(r.values(), want.values)
        if how == "state_now":
            blob = r.ep.seal_state(r.ep.state_now(), None)
        else:  # a snapshot between safe points, after receiving since (``_state``)
            r.ep.deliver([Envelope(APP, 1, 0, "world", 7, 0, pack("since"), src_epoch=0,
                                   dst_epoch=0, seq=0)])
            assert unpack((await r.ep.receive("world", 1, 7)).payload) == "since"
            blob = r.ep.snapshot()
            assert [unpack(e.payload) for e in r.ep.load(blob)["replay"]] == ["since"]
        want.check(blob)
    run(body)


def test_a_base_at_a_loop_end_is_the_state_there():
    async def body():
        r = Rank()
        r.ep.at_safe_point(9)
        r.ep.exit_loop(10)
        want = SafePoint(r)
        write_everything(r.owner)
        want.check(r.ep.seal_state(r.ep.state_now(), None))
    run(body)


def test_a_part_taken_from_a_base_is_not_overwritten_by_the_next_base():
    async def body():
        r = Rank()
        r.ep.at_safe_point(3)
        want_3 = SafePoint(r)
        part_3 = r.ep.state_now()                  # sealed later, as a round does
        buffers = list(r.ep._base_buffers)
        write_everything(r.owner)
        r.ep.at_safe_point(4)
        # the next base reused the same buffers (same sizes), so a part sharing them
        # would now hold the values of safe point 4
        assert len(buffers) > 0 and all(
            a is b for a, b in zip(r.ep._base_buffers, buffers, strict=True))
        want_4 = SafePoint(r)
        part_4 = r.ep.state_now()
        r.owner.c[...] = 42                        # and the program goes on writing
        r.ep.at_safe_point(5)
        want_3.check(r.ep.seal_state(part_3, None))
        want_4.check(r.ep.seal_state(part_4, None))
    run(body)


def test_a_base_follows_registered_arrays_that_change_size():
    async def body():
        r = Rank()
        r.ep.at_safe_point(3)
        r.owner.c = np.arange(100, dtype=np.int32)   # rebound to a larger array
        r.owner.alias = r.owner.c
        r.owner.dict["shared"] = r.owner.c
        r.ep.at_safe_point(4)
        want = SafePoint(r)
        write_everything(r.owner)
        want.check(r.ep.seal_state(r.ep.state_now(), None))
    run(body)
