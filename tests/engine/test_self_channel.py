"""The channel from a rank to itself through snapshot, restore and a restart from the
start, and a finished rank run again (issue #15): each rule below once made recoveries
hang on a program whose ranks talk only to themselves."""
import asyncio

import ftactors as ft
from ftactors.engine._endpoint import Endpoint, Link, blank_snapshot
from ftactors.runtime._host import RankHost, RankSpec
from ftactors.engine._payload import unpack


class NullLink(Link):
    def send(self, dst, envs):
        raise AssertionError(f"a message to rank {dst} went to the transport")

    def clock(self):
        return 0.0


class Owner:
    """The protocol stack's side of an endpoint, with one counter as its state."""

    def __init__(self):
        self.rounds = 0

    def on_send(self, env):
        return env

    def on_receive(self, env):
        return env

    def protocol_state(self):
        return {"rounds": self.rounds}

    def restore_protocol_state(self, state):
        self.rounds = state["rounds"]


def endpoint(epoch=0):
    owner = Owner()
    ep = Endpoint(0, 2, NullLink(), owner, epoch=epoch)
    ep.started()
    ep.open()
    return ep, owner


def test_a_message_to_self_is_received_as_it_is_sent_so_a_snapshot_holds_it():
    async def body():
        ep, _ = endpoint()
        ep.send_app("world", 0, 1, ep.pack("mine", 0))
        # no turn of the event loop: a flush that had nothing to wait for snapshots now
        parts = ep.load(ep.snapshot())
        assert parts["sent"][0] == parts["received"][0] == 1
        assert [unpack(e.payload) for e in parts["replay"]] == ["mine"]
    asyncio.run(body())


def test_a_restored_incarnation_receives_what_it_sends_itself():
    async def body():
        for start_epoch in (0, 4):  # a first life, or a spare started as incarnation 4
            ep, _ = endpoint(start_epoch)
            ep.send_app("world", 0, 1, ep.pack("before", 0))
            blob = ep.snapshot()
            ep.restore(ep.load(blob), 7)
            ep.open()
            ep.send_app("world", 0, 1, ep.pack("after", 0))
            assert [unpack(e.payload) for e in ep.matcher.queued()] == ["before", "after"]
            assert ep.stats()["stale_dropped"] == 0
    asyncio.run(body())


def test_a_blank_snapshot_restores_the_protocols_state_of_the_start():
    async def body():
        ep, owner = endpoint()
        owner.rounds = 3  # a survivor had agreed on later rounds before the rollback
        ep.restore(ep.load(blank_snapshot(0, 2)), 1)
        assert owner.rounds == 0
        owner.rounds = 2
        ep.restore(ep.load(ep.snapshot()), 2)  # a snapshot's own state is kept
        assert owner.rounds == 2
    asyncio.run(body())


class Counter(ft.Rank):
    async def main(self, n):
        self.register("total", 0)
        async for it in self.iterations(n):
            self.total += it
        return self.total


def test_a_finished_rank_run_again_becomes_the_incarnation_its_restore_names():
    """A survivor that finished before another rank failed is rolled back and run again:
    it takes the new incarnation its peers were told of (else they drop its messages as
    stale and it holds theirs for a life it never begins)."""
    async def body():
        host = RankHost(RankSpec(Counter, 0, 2), NullLink(), lambda: None)
        assert (await host.run((3,), {}))["value"] == 3
        restore = {"snapshot": blank_snapshot(0, 2), "peer_epochs": [5, 4]}
        assert (await host.run((4,), {}, restore))["value"] == 6
        assert host.ep.epoch == 5 and host.ep.peer_epochs == [5, 4]
    asyncio.run(body())


def test_a_control_message_to_a_rank_outside_the_run_is_refused():
    """The send path takes checked ranks only (``transmit`` reads the peer's epoch
    without a range check): a protocol's control message to a rank outside the run
    fails where it is sent, not as a frame to nowhere."""
    async def go():
        ep, _ = endpoint()
        for bad in (2, -1):
            try:
                ep.send_control(bad, "p", "op")
            except IndexError as e:
                assert f"rank {bad} out of range" in str(e)
            else:
                raise AssertionError(f"rank {bad} was taken")
    asyncio.run(go())
