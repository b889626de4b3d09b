"""A restored endpoint sets its registered state back at the resumed loop, from an
untouched copy: what the code before the loop did to the values ``register`` handed it
(in place, too) does not reach the loop. End to end, with every protocol:
tests/protocols/test_code_before_loop.py."""
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
    """A rank with ``u`` registered, at the safe point of iteration 3: its state as a
    sealed snapshot or as a transfer (registered arrays as out-of-band buffers)."""
    owner = Owner()
    ep = Endpoint(0, 1, NullLink(), owner)
    ep.open()
    owner.u = ep.register("u", np.arange(8.0))
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
        owner.u = ep.register("u", None)  # what Rank.register does: the checkpoint's u
        assert np.array_equal(owner.u, np.arange(8.0))
        owner.u[:] = -1.0                 # the code before the loop writes it in place
        assert ep.enter_loop(10) == 3
        assert np.array_equal(owner.u, np.arange(8.0))
        owner.u[0] = 5.0                  # and the loop may write it in place too
        assert ep.register("v", 7) == 7   # a name registered afresh gets its initial
    asyncio.run(body())
