"""How the outbox cuts its batches: by count, and by bytes for mid-sized messages (a frame
of hundreds of arrays just under the out-of-band threshold was copied whole at every step
and held back by the window); what it holds for a moving destination; and, in an
endpoint, that a task about to wait for a message sends its batch first.

The first tests run the outbox alone (``Sender``: the mixin with only what its module
docstring says it reads from the endpoint), so a new dependency of the send path on the
rest of the endpoint shows here."""
import asyncio

import numpy as np

from ftactors.engine._determinants import Determinants
from ftactors.engine._endpoint import Endpoint, Link
from ftactors.engine._outbox import BATCH_BYTES, BATCH_MAX, Outbox
from ftactors.engine._payload import unpack
from ftactors.engine._vector import RankVector
from ftactors.engine._waits import Wait


class Recording(Link):
    def __init__(self):
        self.batches = []  # the size of each batch sent, in order
        self.envelopes = []  # every envelope sent, in order

    def send(self, dst, envs):
        self.batches.append(len(envs))
        self.envelopes.extend(envs)

    def clock(self):
        return 0.0


class Owner:
    def on_send(self, env):
        return env

    def on_receive(self, env):
        return env

    def protocol_state(self):
        return {}


class Sender(Outbox):
    """An outbox without an endpoint: rank 0 of 2, first incarnation."""

    def __init__(self, link):
        self.rank, self.size, self.epoch = 0, 2, 0
        self.peer_epochs = RankVector(2)
        self.link, self.owner, self.trace = link, Owner(), None
        self._loop = asyncio.get_running_loop()
        self._replay_sent = None
        self.determinants = Determinants()  # off, as without a protocol that replays
        self.delivered = []  # what it sent itself
        self._init_outbox()

    def deliver(self, envs):
        self.delivered.extend(envs)


def _sender():
    link = Recording()
    return Sender(link), link


def test_mid_sized_messages_go_in_batches_of_a_bounded_size():
    async def body():
        out, link = _sender()
        array = np.ones(BATCH_BYTES // 3 // 8)  # in-band, a third of the bound
        for _ in range(3):
            out.send_app("world", 1, 0, out.pack(array, 1))
        assert link.batches == [1]  # the first at once; then below the bound: waiting
        out.send_app("world", 1, 0, out.pack(array, 1))
        assert link.batches == [1, 3]  # at the bound: sent at once
    asyncio.run(body())


def test_small_messages_still_fill_a_batch_by_count():
    async def body():
        out, link = _sender()
        for i in range(BATCH_MAX + 2):
            out.send_app("world", 1, 0, out.pack(i, 1))
        assert link.batches == [1, BATCH_MAX]
        await asyncio.sleep(0)
        assert link.batches == [1, BATCH_MAX, 1]
    asyncio.run(body())


def test_a_held_destination_gets_its_messages_in_order_stamped_for_its_new_life():
    """``hold`` keeps application and control envelopes alike, unstamped; ``release``
    stamps them for the incarnation the destination has by then, numbered from 0 on
    that new channel, and sends them in the order they were sent."""
    async def body():
        out, link = _sender()
        out.hold(1)
        out.send_app("world", 1, 0, out.pack("a", 1))
        out.send_control(1, "flush", "marker")
        out.send_app("world", 1, 0, out.pack("b", 1))
        out.send_app("world", 0, 0, out.pack("self", 0))  # not held: received at once
        await asyncio.sleep(0)
        assert link.envelopes == [] and len(out.delivered) == 1
        out.peer_epochs[1] = 3  # rank 1 moved and came back as incarnation 3
        assert out.release(1) == 3
        await asyncio.sleep(0)
        assert link.batches == [1, 2]
        assert [unpack(e.payload) for e in link.envelopes] == ["a", ("marker", None), "b"]
        assert [(e.dst_epoch, e.seq) for e in link.envelopes] == [(3, 0), (3, 1), (3, 2)]
        assert [e.app_seq for e in link.envelopes] == [0, -1, 1]
    asyncio.run(body())


def _endpoint():
    link = Recording()
    ep = Endpoint(0, 2, link, Owner())
    ep.started()
    ep.open()
    return ep, link


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
            assert link.batches == [1, 2]  # the first at once, the rest before the wait
            await asyncio.sleep(0)  # the flush scheduled by the sends finds nothing
            assert link.batches == [1, 2]
            task.cancel()
        asyncio.run(body())


def test_the_first_message_since_the_task_waited_goes_at_once_and_schedules_nothing():
    """A task may compute for long before it yields: the first message to each
    destination leaves as it is sent (an isend before a computation, a collective's step,
    a root's result), with no flush scheduled behind it (that flush found nothing and
    cost every exchange a loop turn); the next ones to that destination batch until the
    task waits for a message or the batch is flushed."""
    async def body():
        out, link = _sender()
        out.send_app("world", 1, 0, out.pack("first", 1))
        assert link.batches == [1] and not out._flush_pending
        await asyncio.sleep(0)  # a yield that is no wait for a message
        for i in range(3):
            out.send_app("world", 1, 0, out.pack(i, 1))
        assert link.batches == [1] and out._flush_pending
        await asyncio.sleep(0)
        assert link.batches == [1, 3]
        out.send_app("world", 1, 0, out.pack("after the flush", 1))
        assert link.batches == [1, 3, 1]
    asyncio.run(body())


def test_a_safe_point_sends_the_batch_and_begins_a_step():
    """At a safe point what the step queued leaves, and the next step's first message to
    each destination goes at once again (a loop that sends to a root every iteration and
    receives nothing is not held a computation behind)."""
    async def body():
        ep, link = _endpoint()
        ep.enter_loop(3)
        ep.at_safe_point(0)
        ep.send_app("world", 1, 0, ep.pack("a", 1))  # at once
        ep.send_app("world", 1, 0, ep.pack("b", 1))  # queued
        assert link.batches == [1]
        ep.at_safe_point(1)
        assert link.batches == [1, 1]
        ep.send_app("world", 1, 0, ep.pack("c", 1))
        assert link.batches == [1, 1, 1]
    asyncio.run(body())


def test_a_request_wait_sends_the_batch_and_the_next_message_goes_at_once():
    """A task that waits for requests (``Waitall`` on a window of ``Irecv``) blocks as a
    receive does: what it queued leaves first, and its next message to each destination
    goes at once (OSU's receiver answers each window with an acknowledgement: held until
    it had posted the next window, the sender's next window waited that long)."""
    async def body():
        ep, link = _endpoint()
        ep.send_app("world", 1, 0, ep.pack("ack", 1))     # at once
        ep.send_app("world", 1, 0, ep.pack("queued", 1))  # queued
        token = ep.wait_begin(Wait("request", what="a window of receives"))
        assert link.batches == [1, 1]
        ep.wait_end(token)
        ep.send_app("world", 1, 0, ep.pack("next ack", 1))
        assert link.batches == [1, 1, 1]
    asyncio.run(body())


def test_a_receive_that_finds_its_message_sends_the_batch_first():
    """A receive served from the queue returns to a program that may compute for long
    before it waits: what it queued leaves now (the second half of an exchange; before,
    an allreduce between computations cost the other rank the whole computation)."""
    async def body():
        ep, link = _endpoint()
        ep.send_app("world", 0, 5, ep.pack("to self", 0))  # received as it is sent
        ep.send_app("world", 1, 0, ep.pack(1, 1))       # at once
        ep.send_app("world", 1, 0, ep.pack(2, 1))       # queued
        assert link.batches == [1]
        env = await ep.receive("world", 0, 5)
        assert env.tag == 5 and link.batches == [1, 1]
    asyncio.run(body())
