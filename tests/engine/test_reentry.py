"""A restored endpoint puts its registered state back at the resumed loop: what the code
before the loop did to the values ``register`` handed it (rebound, or changed in place)
does not reach the loop, and the objects it handed out stay the ones the loop works on
(a program may hold them in locals, as in its first life). End to end, with every
protocol: tests/protocols/test_code_before_loop.py."""
import asyncio

import numpy as np
import pytest

from ftactors.engine._endpoint import Endpoint, Link


class NullLink(Link):
    def send(self, dst, envs):
        pass

    def clock(self):
        return 0.0


class Owner:
    """The protocol stack's side of an endpoint, and the program's attributes."""

    def on_send(self, env):
        return env

    def on_receive(self, env):
        return env

    def protocol_state(self):
        return None

    def restore_protocol_state(self, state):
        pass


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


@pytest.mark.parametrize("how", ["snapshot", "transfer"])
def test_the_resumed_loop_starts_from_the_checkpoint_whatever_came_before(how):
    async def body():
        saved = saved_at_iteration_3(how)
        owner = Owner()
        ep = Endpoint(0, 1, NullLink(), owner)
        ep.restore(ep.load(saved), 1)
        ep.open()
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
