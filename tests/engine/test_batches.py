"""How an endpoint cuts its outbox into batches: by count, and by bytes for mid-sized
messages (a frame of hundreds of arrays just under the out-of-band threshold was copied
whole at every step and held back by the window)."""
import asyncio

import numpy as np

from ftactors.engine._endpoint import Endpoint, Link
from ftactors.engine._outbox import BATCH_BYTES, BATCH_MAX


class Recording(Link):
    def __init__(self):
        self.batches = []

    def send(self, dst, envs):
        self.batches.append(len(envs))

    def clock(self):
        return 0.0


class Owner:
    def on_send(self, env):
        return env

    def on_receive(self, env):
        return env

    def protocol_state(self):
        return {}


def _endpoint():
    link = Recording()
    ep = Endpoint(0, 2, link, Owner())
    ep.started()
    ep.open()
    return ep, link


def test_mid_sized_messages_go_in_batches_of_a_bounded_size():
    async def body():
        ep, link = _endpoint()
        array = np.ones(BATCH_BYTES // 3 // 8)  # in-band, a third of the bound
        for _ in range(2):
            ep.send_app("world", 1, 0, ep.pack(array, 1))
        assert link.batches == []  # below the bound: the batch waits for the loop's turn
        ep.send_app("world", 1, 0, ep.pack(array, 1))
        assert link.batches == [3]  # at the bound: sent at once
    asyncio.run(body())


def test_small_messages_still_fill_a_batch_by_count():
    async def body():
        ep, link = _endpoint()
        for i in range(BATCH_MAX + 1):
            ep.send_app("world", 1, 0, ep.pack(i, 1))
        assert link.batches == [BATCH_MAX]
        await asyncio.sleep(0)
        assert link.batches == [BATCH_MAX, 1]
    asyncio.run(body())


def test_a_task_that_waits_for_a_message_sends_its_batch_first():
    """The task's queued messages leave before it blocks in a receive or a probe (the
    loop's scheduled flush has not run yet when the test looks), as one batch, once."""
    for wait in ("receive", "probe"):
        async def body():
            ep, link = _endpoint()

            async def exchange():
                for i in range(3):
                    ep.send_app("world", 1, 0, ep.pack(i, 1))
                await getattr(ep, wait)("world", 1, 0)

            task = asyncio.ensure_future(exchange())
            await asyncio.sleep(0)  # the task runs up to its wait, then this one
            assert link.batches == [3]
            await asyncio.sleep(0)  # the flush scheduled by the sends finds nothing
            assert link.batches == [3]
            task.cancel()
        asyncio.run(body())


def test_a_receive_that_finds_its_message_does_not_flush():
    """Only waiting flushes early: a receive served from the queue goes on without
    cutting the batch (a stream of sends and served receives keeps batching)."""
    async def body():
        ep, link = _endpoint()
        ep.send_app("world", 0, 5, ep.pack("to self", 0))  # received as it is sent
        ep.send_app("world", 1, 0, ep.pack(1, 1))
        env = await ep.receive("world", 0, 5)
        assert env.tag == 5 and link.batches == []
        ep.send_app("world", 1, 0, ep.pack(2, 1))
        await asyncio.sleep(0)
        assert link.batches == [2]
    asyncio.run(body())
