"""A restored incarnation takes nothing before its protocols have reset: envelopes that
arrive early for it (a fast peer already in its new life, sending the marker of the next
flush or an application message) wait until the host opens the endpoint after
``on_restored``; before, they reached the protocols' state that the restore then reset,
and the matcher that the restore then replaced, and were lost (a standby run hung)."""
import asyncio

from ftactors.engine._endpoint import Endpoint, Link
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
