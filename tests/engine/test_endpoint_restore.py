"""Restoring an endpoint.

A restored incarnation takes nothing before its protocols have reset: envelopes that
arrive early for it (a fast peer already in its new life, sending the marker of the next
flush or an application message) wait until the host opens the endpoint after
``on_restored``; before, they reached the protocols' state that the restore then reset,
and the matcher that the restore then replaced, and were lost (a standby run hung).

A restored endpoint puts its registered state back at the resumed loop: what the code
before the loop did to the values ``register`` handed it (rebound, or changed in place)
does not reach the loop, and the objects it handed out stay the ones the loop works on
(a program may hold them in locals, as in its first life). End to end, with every
protocol: tests/protocols/test_code_before_loop.py."""
import array
import asyncio
import collections

import numpy as np
import pytest

from ftactors.engine._endpoint import Endpoint, Link
from ftactors.engine._reentry import put_back, why_not_in_place
from ftactors.engine._envelope import APP, CTRL, Envelope
from ftactors.engine._payload import pack, unpack


class NullLink(Link):
    def send(self, dst, envs):
        pass

    def clock(self):
        return 0.0


class Owner:
    """The protocol stack's side of an endpoint, recording control messages."""

    def __init__(self):
        self.controls = []

    def on_send(self, env):
        return env

    def on_receive(self, env):
        return env

    def on_control(self, env):
        self.controls.append(unpack(env.payload))

    def protocol_state(self):
        return None

    def restore_protocol_state(self, state):
        self.controls.clear()  # like Flush.reset in on_restored


def test_envelopes_early_for_a_restored_incarnation_wait_until_it_is_open():
    async def body():
        owner = Owner()
        ep = Endpoint(0, 2, NullLink(), owner)
        ep.open()
        blob = ep.snapshot()
        # rank 1, already in its new life (epoch 3), sends to our next one (epoch 5)
        early = [Envelope(CTRL, 1, 0, "flush", 0, -1, pack(("marker", "round 1")),
                          src_epoch=3, dst_epoch=5, seq=0),
                 Envelope(APP, 1, 0, "world", 7, 0, pack("hello"), src_epoch=3, dst_epoch=5,
                          seq=1)]
        ep.deliver(early)
        ep.restore(ep.load(blob), 5)
        assert owner.controls == [] and ep.matcher.queued() == []
        owner.restore_protocol_state(None)  # what the host's on_restored does
        ep.deliver([Envelope(APP, 1, 0, "world", 7, 1, pack("again"), src_epoch=3,
                             dst_epoch=5, seq=2)])
        assert ep.matcher.queued() == []  # still closed
        ep.open()
        assert owner.controls == [("marker", "round 1")]
        assert [unpack(e.payload) for e in ep.matcher.queued()] == ["hello", "again"]
        assert ep.received[1] == 2
    asyncio.run(body())


def saved_at_iteration_3(how: str):
    """A rank with ``u`` (an array), ``hist`` (a list of arrays) and ``n`` registered, at
    the safe point of iteration 3: its state as a sealed snapshot or as a transfer
    (registered arrays as out-of-band buffers)."""
    owner = Owner()
    ep = Endpoint(0, 1, NullLink(), owner)
    ep.open()
    owner.u = ep.register("u", np.arange(8.0))
    owner.hist = ep.register("hist", [np.ones(2), np.zeros(3)])
    owner.n = ep.register("n", 4)
    ep.enter_loop(10)
    ep.at_safe_point(3)
    return ep.snapshot() if how == "snapshot" else ep.transfer()


def restored_at_iteration_3(how: str):
    """``(owner, endpoint)`` of a new incarnation restored from ``saved_at_iteration_3``
    (inside a running loop: the endpoint is opened)."""
    owner = Owner()
    ep = Endpoint(0, 1, NullLink(), owner)
    ep.restore(ep.load(saved_at_iteration_3(how)), 1)
    ep.open()
    return owner, ep


@pytest.mark.parametrize("how", ["snapshot", "transfer"])
def test_the_resumed_loop_starts_from_the_checkpoint_whatever_came_before(how):
    async def body():
        owner, ep = restored_at_iteration_3(how)
        assert ep.restored
        # what Rank.register does; the program keeps what it returned, as locals
        u = owner.u = ep.register("u", None)
        hist = owner.hist = ep.register("hist", None)
        first = hist[0]
        owner.n = ep.register("n", 0)
        assert np.array_equal(u, np.arange(8.0)) and owner.n == 4
        # the code before the loop writes them, in place and by rebinding
        u[:] = -1.0
        first[:] = 7.0
        hist.append(np.ones(1))
        owner.n = 99
        owner.hist = []
        assert ep.enter_loop(10) == 3
        assert owner.u is u and np.array_equal(u, np.arange(8.0))
        assert owner.hist is hist and hist[0] is first and len(hist) == 2
        assert np.array_equal(first, np.ones(2)) and np.array_equal(hist[1], np.zeros(3))
        assert owner.n == 4
        assert ep.register("v", 7) == 7   # a name registered afresh gets its initial
    asyncio.run(body())


def test_put_back_copies_into_what_is_held_where_the_structure_allows():
    a = np.zeros(3)
    held = [a, 5, 5]
    held.append(held)                                   # shared and self-containing
    was = [np.ones(3), 5, 7]
    was.append(was)
    assert put_back(held, was) is held
    assert held[0] is a and a.tolist() == [1, 1, 1] and held[1:3] == [5, 7] and held[3] is held
    d = {"x": a, "y": 3}                                # a key added before the loop
    assert put_back(d, {"x": np.full(3, 2.0), "z": 4}) is d
    assert d == {"x": a, "z": 4} and a[0] == 2
    pair = (a, 1)
    assert put_back(pair, (np.zeros(3), 1)) is pair and a[0] == 0
    changed = put_back(pair, (np.ones(3), 2))           # a tuple cannot change in place
    assert changed == (a, 2) and changed[0] is a and a[0] == 1
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    other = np.ones(2)
    assert put_back(frozen, other) is other             # read-only, or another shape
    assert put_back(np.zeros(3), other) is other


@pytest.mark.parametrize("how", ["snapshot", "transfer"])
def test_register_writes_the_checkpoint_into_the_object_it_is_given(how):
    """A port keeps the object it registered (``u = ...; self.register("u", u)``): the
    restore writes the checkpoint's value into it, and the resumed loop again, so the
    program's local is the attribute; a number cannot take it (``unfilled`` says why)."""
    async def body():
        owner, ep = restored_at_iteration_3(how)
        u, hist = np.zeros(8), []
        view = u[2:5]
        assert ep.register("u", u) is u and ep.register("hist", hist) is hist
        assert np.array_equal(view, [2, 3, 4]) and len(hist) == 2
        assert ep.register("n", 0) == 4                 # the checkpoint's number
        u[:] = -1.0                                     # the code before the loop
        hist.clear()
        assert ep.enter_loop(10) == 3
        assert np.array_equal(u, np.arange(8.0)) and np.array_equal(view, [2, 3, 4])
        assert np.array_equal(hist[1], np.zeros(3))
        assert list(ep.unfilled) == ["n"] and ep.unfilled["n"] == (
            "an int cannot be changed in place", 0)
    asyncio.run(body())


def test_put_back_writes_every_mutable_kind_in_place():
    a = np.asfortranarray(np.zeros((2, 3)))
    assert put_back(a, np.arange(6.0).reshape(2, 3)) is a
    assert a.flags.f_contiguous and a[1, 2] == 5
    base = np.zeros(6)
    assert put_back(base[1:4], np.ones(3)) is not None and base.tolist() == [0, 1, 1, 1, 0, 0]
    s, b, arr = {1, 2}, bytearray(b"xy"), array.array("d", [1.0])
    assert put_back(s, {3}) is s and s == {3}
    assert put_back(b, bytearray(b"abc")) is b and b == b"abc"
    assert put_back(arr, array.array("d", [4.0, 5.0])) is arr and arr.tolist() == [4, 5]
    q = collections.deque([1], maxlen=2)
    assert put_back(q, collections.deque([7, 8], maxlen=2)) is q and list(q) == [7, 8]
    assert put_back(3.5, 3.5) == 3.5 and put_back(float("nan"), float("nan")) != 1


@pytest.mark.parametrize("mine, saved, why", [
    (np.zeros(2), np.zeros(3), "has shape (3,) and yours (2,)"),
    (np.zeros(2), np.zeros(2, dtype=np.int32), "is of int32 and yours of float64"),
    (array.array("i"), array.array("d"), "of type 'd' and yours 'i'"),
    (collections.deque(maxlen=2), collections.deque(maxlen=3), "maxlen 3 and yours 2"),
    ((1, 2), (1, 3), "a tuple cannot be changed in place"),
    (5, 6, "an int cannot be changed in place"),
    ([1], (1,), "holds a tuple there, and yours is a list")])
def test_what_cannot_be_written_in_place_is_said(mine, saved, why):
    assert put_back(mine, saved) is not mine
    assert why in why_not_in_place(mine, saved)
