"""Receive determinants (``engine/_determinants``): what a rank's nondeterministic
receives took is recorded where the receive completes, carried to the peers outside its
unit before any message that may depend on it, garbage-collected by the floor, and
replayed by a restarted rank: a wildcard receive, probe or poll takes the recorded
message, ``waitany``/``waitsome`` complete the recorded requests. Named receives record
nothing and messages carry nothing for them.

End to end (groups and hc3i, kills of a farm's master and workers):
tests/programs/test_wildcard_replay.py."""
import asyncio

import pytest

from ftactors.base._errors import ProtocolError
from ftactors.engine._constants import ANY_SOURCE, ANY_TAG
from ftactors.engine._determinants import ANY, DETS, IPROBE, RECV, SOME, Determinants
from ftactors.engine._endpoint import Endpoint, Link
from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack
from ftactors.facade._comm import Communicator
from ftactors.facade._request import Request

from .test_endpoint_restore import Owner as StackOwner


class Owner(StackOwner):
    def on_blocked(self):
        pass  # no protocol takes a blocked rank's state here

CTX = "w"


class Recording(Link):
    """Keeps what is sent, per destination."""

    def __init__(self):
        self.out: dict[int, list[Envelope]] = {}

    def send(self, dst, envs):
        self.out.setdefault(dst, []).extend(envs)

    def clock(self):
        return 0.0


def endpoint(rank=0, size=4, causal=None, unit=(), record=False):
    ep = Endpoint(rank, size, Recording(), Owner(), record_deliveries=record)
    if causal is not None:
        ep.determinants.enable(causal=causal, unit=unit)
    ep.open()
    return ep


def message(src, dst, tag, seq, obj=None):
    return Envelope(APP, src, dst, CTX, tag, seq, pack(obj if obj is not None else (src, tag)),
                    seq=seq)


def arrive(ep, *envs):
    for env in envs:
        ep.deliver([env])


# ---------------------------------------------------------------- the record
def test_wildcard_receives_record_their_outcome_and_named_ones_nothing():
    async def body():
        ep = endpoint(causal=False)
        arrive(ep, message(2, 0, 5, 0), message(1, 0, 6, 0), message(3, 0, 4, 0))
        await ep.receive(CTX, 3, 4)                      # named: no event
        await ep.receive(CTX, ANY_SOURCE, ANY_TAG)       # takes 2's, the first here
        assert ep.iprobe(CTX, ANY_SOURCE, 9) is None     # a poll that found nothing
        await ep.receive(CTX, 1, ANY_TAG)                # the tag is a wildcard
        dets = ep.determinants
        assert dets.count == 2
        assert dets.since(0) == [(0, RECV, (2, 5)), (1, RECV, (1, 6))]
    asyncio.run(body())


def test_without_a_protocol_that_asks_nothing_is_recorded():
    async def body():
        ep = endpoint()
        arrive(ep, message(2, 0, 5, 0))
        await ep.receive(CTX, ANY_SOURCE, ANY_TAG)
        assert ep.determinants.count == 0 and ep.determinants.since(0) == []
    asyncio.run(body())


def test_an_irecv_records_its_outcome_when_it_matches():
    async def body():
        ep = endpoint(causal=False)
        fut = ep.receive_later(CTX, ANY_SOURCE, ANY_TAG)
        assert ep.determinants.count == 1 and ep.determinants.since(0) == []
        arrive(ep, message(3, 0, 1, 0))
        await fut
        assert ep.determinants.since(0) == [(0, RECV, (3, 1))]
    asyncio.run(body())


# ---------------------------------------------------------------- the replay
def replaying(ep, dets: dict, count=0):
    """``ep`` restored to ``count`` with ``dets`` {k: (kind, outcome)} to replay."""
    ep.determinants.restored(count, None, None, resume=False)
    ep.determinants.replay_from(dets)


def test_a_replayed_wildcard_receive_takes_the_recorded_message_and_waits_for_it():
    async def body():
        ep = endpoint(causal=False)
        replaying(ep, {0: (RECV, (3, 1)), 1: (RECV, (2, 7))})
        arrive(ep, message(2, 0, 7, 0), message(1, 0, 7, 0))
        got = asyncio.ensure_future(ep.receive(CTX, ANY_SOURCE, ANY_TAG))
        await asyncio.sleep(0)
        assert not got.done()              # rank 3's message is not here yet: it waits
        arrive(ep, message(3, 0, 1, 0))
        assert (await got).src == 3
        assert (await ep.receive(CTX, ANY_SOURCE, 7)).src == 2   # not 1's, queued first
        assert (await ep.receive(CTX, ANY_SOURCE, ANY_TAG)).src == 1  # past them: free
        assert ep.determinants.since(0) == [(0, RECV, (3, 1)), (1, RECV, (2, 7)),
                                            (2, RECV, (1, 7))]
    asyncio.run(body())


def test_a_replayed_poll_finds_only_what_its_first_life_found():
    async def body():
        ep = endpoint(causal=False)
        replaying(ep, {0: (IPROBE, (3, 1))})
        arrive(ep, message(2, 0, 7, 0))
        assert ep.iprobe(CTX, ANY_SOURCE, ANY_TAG) is None   # 2's is here, 3's is not yet
        assert ep.determinants.count == 0                    # found nothing: not counted
        arrive(ep, message(3, 0, 1, 0))
        assert ep.iprobe(CTX, ANY_SOURCE, ANY_TAG).src == 3
        assert ep.determinants.count == 1
    asyncio.run(body())


def test_a_replay_of_another_kind_of_receive_is_refused_at_once():
    async def body():
        ep = endpoint(causal=False)
        replaying(ep, {0: (IPROBE, (3, 1))})
        with pytest.raises(ProtocolError, match="diverged.*iprobe.*recv"):
            await ep.receive(CTX, ANY_SOURCE, ANY_TAG)
    asyncio.run(body())


def test_waitany_and_waitsome_complete_the_recorded_requests():
    async def body():
        ep = endpoint(causal=False)
        comm = Communicator(ep, CTX, range(4))
        reqs = [comm.irecv(source=s, tag=0) for s in (1, 2, 3)]
        arrive(ep, message(3, 0, 0, 0), message(1, 0, 0, 0))
        index, _ = await Request.waitany(reqs)    # both done: the first active one
        assert index == 0
        arrive(ep, message(2, 0, 0, 0))
        indices = await Request.Waitsome(reqs)
        assert indices == [1, 2]
        assert ep.determinants.since(0) == [(0, ANY, 0), (1, SOME, (1, 2))]
        # the same calls replayed with another first life's outcomes
        ep2 = endpoint(causal=False)
        replaying(ep2, {0: (ANY, 2), 1: (SOME, (0,))})
        comm2 = Communicator(ep2, CTX, range(4))
        reqs = [comm2.irecv(source=s, tag=0) for s in (1, 2, 3)]
        arrive(ep2, message(1, 0, 0, 0))
        got = asyncio.ensure_future(Request.waitany(reqs))
        await asyncio.sleep(0)
        assert not got.done()                    # rank 3's is the one to wait for
        arrive(ep2, message(3, 0, 0, 0), message(2, 0, 0, 0))
        assert (await got)[0] == 2
        st = []
        assert await Request.Waitsome(reqs, st) == [0]     # not 1, done too
        assert st[0].Get_source() == 1
        assert Request.Testany(reqs) == (1, True)          # past the record: free
    asyncio.run(body())


def test_a_named_pair_of_requests_is_recorded_only_when_two_are_active():
    async def body():
        ep = endpoint(causal=False)
        comm = Communicator(ep, CTX, range(4))
        reqs = [comm.irecv(source=1, tag=0), Request()]
        arrive(ep, message(1, 0, 0, 0))
        assert (await Request.waitany(reqs))[0] == 0
        assert ep.determinants.count == 0
    asyncio.run(body())


# --------------------------------------------------- re-execution to a cut (HC3I)
def test_a_snapshot_between_safe_points_replays_its_waitany_to_the_cut():
    """A part taken "now" is the last safe point plus the messages consumed since, all
    queued at once on restore: waitany would complete the first request any matches."""
    async def body():
        ep = endpoint(size=3, causal=False, record=True)
        ep.keep_base = True
        comm = Communicator(ep, CTX, range(3))
        ep.enter_loop(10)
        ep.at_safe_point(0)
        reqs = [comm.irecv(source=s, tag=0) for s in (1, 2)]
        arrive(ep, message(2, 0, 0, 0, "b"))
        first, value = await Request.waitany(reqs)
        assert (first, value) == (1, "b")
        arrive(ep, message(1, 0, 0, 0, "a"))
        await Request.waitany(reqs)
        blob = ep.seal_state(ep.state_now(), None)
        # restored: the code since the safe point runs again, both messages queued
        again = Endpoint(0, 3, Recording(), Owner(), record_deliveries=True)
        again.keep_base = True
        again.determinants.enable()
        again.restore(again.load(blob), 1)
        again.open()
        comm = Communicator(again, CTX, range(3))
        assert again.enter_loop(10) == 0
        reqs = [comm.irecv(source=s, tag=0) for s in (1, 2)]
        assert await Request.waitany(reqs) == (1, "b")
        assert await Request.waitany(reqs) == (0, "a")
    asyncio.run(body())


# ------------------------------------------------------------ causal logging
def test_determinants_travel_once_to_each_peer_outside_the_unit_before_a_message():
    async def body():
        ep = endpoint(causal=True, unit=(0, 1))
        arrive(ep, message(2, 0, 5, 0))
        await ep.receive(CTX, ANY_SOURCE, ANY_TAG)
        for dst in (1, 2, 3, 3):
            ep.send_app(CTX, dst, 0, pack(None))
        ep.flush()
        carried = {dst: [e.piggyback for e in envs] for dst, envs in ep.link.out.items()}
        assert carried == {1: [None],                    # same unit: restarts with it
                           2: [{DETS: (0, ((0, RECV, (2, 5)),))}],
                           3: [{DETS: (0, ((0, RECV, (2, 5)),))}, None]}
    asyncio.run(body())


def test_a_named_source_exchange_carries_nothing():
    async def body():
        ep = endpoint(causal=True, unit=(0,))
        for i in range(5):
            ep.send_app(CTX, 1, 0, pack(i))
            arrive(ep, message(1, 0, 0, i))
            await ep.receive(CTX, 1, 0)
        ep.flush()
        assert [e.piggyback for e in ep.link.out[1]] == [None] * 5
    asyncio.run(body())


def test_a_receiver_keeps_what_arrives_and_drops_it_below_the_senders_floor():
    held = Determinants()
    held.incoming(2, (0, ((0, RECV, (1, 5)), (1, RECV, (3, 5)))))
    held.incoming(2, (0, ((2, RECV, (1, 6)),)))
    assert held.held_of([2, 3]) == {2: {0: (RECV, (1, 5)), 1: (RECV, (3, 5)),
                                        2: (RECV, (1, 6))}}
    held.incoming(2, (2, ()))                    # rank 2 restarts from count 2 or later
    assert held.held_of([2]) == {2: {2: (RECV, (1, 6))}}
    assert held.state() == {2: {2: (RECV, (1, 6))}}

    sender = Determinants()
    sender.enable(causal=True, unit=(0,))
    for k in range(3):
        sender.found(RECV, (k, 0), sender.next(RECV)[0])
    assert sender.outgoing(1) == (0, ((0, RECV, (0, 0)), (1, RECV, (1, 0)),
                                      (2, RECV, (2, 0))))
    sender.set_floor(2)
    assert sender.outgoing(1) == (2, ())            # the floor moved: tell it
    assert sender.outgoing(1) is None
    assert sender.outgoing(3) == (2, ((2, RECV, (2, 0)),))   # a new peer: from the floor


def test_a_restarted_rank_counts_from_its_resume_point_and_piggybacks_its_replay():
    dets = Determinants()
    dets.enable(causal=True, unit=(0,))
    dets.restored(4, {1: {3: (RECV, (1, 0))}}, None, resume=True)
    dets.replay_from({3: (RECV, (9, 9)), 4: (RECV, (2, 0)), 5: (ANY, 1)})
    assert not dets.active()           # the code before the resume point: not counted
    dets.resumed()
    assert dets.active() and dets.count == 4
    assert dets.next(RECV) == (4, (2, 0))          # 3 is inside its restored state
    assert dets.outgoing(2) == (0, ((4, RECV, (2, 0)), (5, ANY, 1)))
    assert dets.held_of([1]) == {1: {3: (RECV, (1, 0))}}
