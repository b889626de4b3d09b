"""The pool of kept rank processes and the run token that keeps a finished run's late
calls and batches away from the run a kept process serves now (``transports/ray/warm``);
no Ray started (the actor class is called as a plain object)."""
import asyncio
import pickle
import types

import pytest

from ftactors.base._errors import ProtocolError
from ftactors.engine._envelope import APP, Envelope, to_rows
from ftactors.engine._payload import Payload
from ftactors.transports.ray.warm import Warm, WarmProcesses
from ftactors.transports.ray import RankActor


def test_the_pool_keeps_at_most_its_limit_per_ray_job_and_takes_by_node():
    pool = WarmProcesses(limit=2)
    a, b, c = (Warm(f"actor{i}", f"w{i}", f"node{i % 2}") for i in range(3))
    assert pool.give("job1", a) and pool.give("job1", b) and not pool.give("job1", c)
    assert pool.take("job1", "node1") == b and pool.take("job1", "node1") is None
    assert pool.take("job2", None) is None  # another Ray job: not its processes
    assert pool.give("job2", c) and len(pool) == 1  # job1's are stale once job2 gives
    assert pool.take("job2", None) == c and len(pool) == 0


class _Host:
    def __init__(self):
        self.calls, self.batches = [], []
        self.ep = types.SimpleNamespace(deliver=self.batches.append)

    async def call(self, name, *args):
        self.calls.append(name)
        return name


def _env(seq: int) -> Envelope:
    return Envelope(APP, 1, 0, 0, 5, seq, Payload(pickle.dumps(seq), (), 8))


def _serving(token: str) -> tuple:
    actor = RankActor()
    actor.host, actor.link = _Host(), types.SimpleNamespace(token=token, rank=0)
    return actor, actor.host


def test_a_call_or_batch_of_another_run_never_reaches_the_rank_served_now():
    actor, host = _serving("run B")

    async def body():
        with pytest.raises(ProtocolError, match="another run"):
            await actor.call("group_commit", ((0, 3),), "run A")
        assert await actor.call("group_commit", ((0, 3),), "run B") == "group_commit"
        await actor.deliver(pickle.dumps(to_rows([_env(1)])), "run A")
        await actor.deliver(pickle.dumps(to_rows([_env(2)])), "run B")
    asyncio.run(body())
    assert host.calls == ["group_commit"]
    assert [[env.app_seq for env in batch] for batch in host.batches] == [[2]]


def test_a_take_of_the_last_run_takes_nothing_of_the_next():
    """A kept Inbox opened for the next run while the last run's take still waits there
    (the driver gave up waiting for it under load): that take ends with nothing, and
    every report of the new run goes to the new run's take."""
    from ftactors.transports.ray import Inbox
    inbox = Inbox("run A")

    async def body():
        old = asyncio.ensure_future(inbox.take(5.0, "run A"))
        await asyncio.sleep(0)  # it waits for a report
        inbox.open("run B")
        await inbox.post("report of B", "run B")
        await inbox.post("late report of A", "run A")
        assert await asyncio.wait_for(old, 1.0) == []
        assert await inbox.take(0, "run B") == ["report of B"]
        assert await inbox.take(0, "run A") == []
    asyncio.run(body())
