"""Busy-polling (``transports._spin``): a loop with nothing to do polls before it
blocks, takes what comes meanwhile without blocking, blocks for the rest of its timeout
when nothing comes, and is its old self after ``stop``."""
import asyncio
import socket

import pytest

from ftactors.transports import _spin
from ftactors.transports._spin import Spin


class Spy:
    """The selector's own ``select``, recording the timeouts it was called with."""

    def __init__(self, selector):
        self.inner = selector.select
        self.timeouts = []
        selector.select = self  # under the spin's wrapper

    def __call__(self, timeout=None):
        self.timeouts.append(timeout)
        return self.inner(timeout)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_message_that_comes_while_polling_is_taken_without_blocking(loop, monkeypatch):
    a, b = socket.socketpair()
    got = loop.create_future()
    loop.add_reader(b, lambda: got.set_result(b.recv(16)))
    yields = []

    def sched_yield():  # the peer writes on the third poll: mid-spin, deterministically
        yields.append(1)
        if len(yields) == 3:
            a.send(b"ping")
    monkeypatch.setattr(_spin.os, "sched_yield", sched_yield)
    spy = Spy(loop._selector)
    spin = Spin()
    assert spin.start(loop, 60.0)
    assert loop.run_until_complete(got) == b"ping"
    assert spin.caught == 1
    assert all(t == 0 for t in spy.timeouts)  # never blocked (a 60 s spin otherwise)
    spin.stop()
    loop.remove_reader(b)
    a.close(), b.close()


def test_nothing_comes_then_the_loop_blocks_for_the_rest_of_its_timeout(loop):
    spy = Spy(loop._selector)
    spin = Spin()
    assert spin.start(loop, 0.01)
    loop.run_until_complete(asyncio.sleep(0.05))
    blocking = [t for t in spy.timeouts if t]
    assert blocking, spy.timeouts
    assert all(t < 0.05 - 0.01 + 1e-3 for t in blocking)  # the spin's time is taken off
    assert spin.caught == 0


def test_stop_gives_the_loop_back(loop):
    spin = Spin()
    assert spin.start(loop, 0.001)
    assert "select" in vars(loop._selector)
    assert spin.start(loop, 0.002)  # a second start replaces the first, not wraps it
    spin.stop()
    assert "select" not in vars(loop._selector)
    spin.stop()  # twice is harmless


def test_no_selector_or_no_time_means_no_polling(loop):
    spin = Spin()
    assert not spin.start(object(), 0.001)  # uvloop's loop has no selector to poll
    assert not spin.start(loop, 0)
    assert "select" not in vars(loop._selector)
