"""Chaos's matching, step by step (``KillPlan``, ``ChaosFabric``): every kind of kill is
due exactly at its own point and fires once, each firing names its kill, and the tally of
unfired kills reads that identity, not the kill's fields."""
import asyncio

import pytest

import ftactors as ft
from ftactors.base._events import Event, EventLog
from ftactors.protocols import StandbyReplacement
from ftactors.runtime._chaos import Kill, KillPlan, Strike
from ftactors.runtime._chaos_fabric import ChaosFabric
from ftactors.runtime._host import RankSpec
from ftactors.runtime._notices import kill_tally

EVERY_KIND = [
    Kill(0, iteration=3),                                # 0: at the rank's safe point
    Kill(1, time_s=2.0),                                 # 1: a timer
    Kill(2, moment="start"),                             # 2: moments of a rank's life
    Kill(2, moment="start", incarnation=1),              # 3
    Kill(1, moment="wire"),                              # 4
    Kill(0, moment="return"),                            # 5: as main() returns (rank-side)
    Kill(3, moment="finished"),                          # 6
    Kill(1, recovery_round=0),                           # 7: recovery phases
    Kill(3, recovery_round=0, recovery_phase="notified"),  # 8
    Kill(spare=0, moment="idle"),                        # 9: a spare's life
    Kill(spare=1, moment="promoted"),                    # 10
]


def test_each_kind_is_due_at_its_own_point_only():
    plan = KillPlan(EVERY_KIND)
    assert plan.due(rank=2, incarnation=0, moment="start") == [2]
    assert plan.due(rank=2, incarnation=1, moment="start") == [3]
    assert plan.due(rank=2, incarnation=0, moment="wire") == []
    assert plan.due(rank=1, incarnation=0, moment="wire") == [4]
    assert plan.due(rank=3, incarnation=0, moment="finished") == [6]
    assert plan.due(recovery_round=0, recovery_phase="start") == [7]
    assert plan.due(recovery_round=0, recovery_phase="notified") == [8]
    assert plan.due(recovery_round=1, recovery_phase="start") == []
    assert plan.due(spare=0, moment="idle") == [9]
    assert plan.due(spare=0, moment="promoted") == []
    assert plan.due(spare=1, moment="promoted") == [10]
    assert plan.due(spare=None, moment="promoted") == []  # a spare the pool did not start
    assert plan.timed() == [1]
    assert plan.on_host(0, 0) == (Strike(3, "die", 0), Strike("return", "die", 5))
    assert plan.on_host(0, 1) == ()  # a life no kill names


def test_a_kill_fires_once():
    plan = KillPlan([Kill(0, moment="start"), Kill(0, moment="start")])
    assert plan.due(rank=0, incarnation=0, moment="start") == [0, 1]
    plan.fire(0)
    assert plan.due(rank=0, incarnation=0, moment="start") == [1]
    with pytest.raises(AssertionError):
        plan.fire(0)


def test_a_timed_kill_strikes_a_first_life_only():
    assert KillPlan([Kill(0, time_s=1.0, incarnation=1), Kill(1, time_s=0.5)]).timed() == [1]


def test_what_a_host_does_to_itself():
    """Deaths at iterations (then the job's loss, for every life), or disconnects with
    that method, and one death at return."""
    kills = [Kill(0, iteration=4), Kill(0, iteration=2), Kill(1, iteration=1),
             Kill(0, moment="return"), Kill(0, moment="return")]
    lost = KillPlan(kills, job_lost_at=7)
    assert lost.on_host(0, 0) == (Strike(4, "die", 0), Strike(2, "die", 1),
                                  Strike(7, "die", None), Strike("return", "die", 3))
    assert lost.on_host(0, 2) == (Strike(7, "die", None),)
    cut = KillPlan(kills[:3], method="disconnect")
    assert cut.on_host(0, 0) == (Strike(4, "disconnect", 0), Strike(2, "disconnect", 1))
    spec = RankSpec(ft.Rank, 0, 2, chaos=cut.on_host(0, 0))
    assert not spec.doomed and RankSpec(ft.Rank, 0, 2, chaos=lost.on_host(0, 2)).doomed


class _Run:
    """What ``ChaosFabric`` reads of the coordinator."""

    def __init__(self):
        self.events = EventLog(lambda: 0.0)
        self.reports = []
        self.tasks = []
        self.wired = asyncio.Event()

    def helper(self, coro):
        self.tasks.append(asyncio.ensure_future(coro))
        return self.tasks[-1]

    def failing(self):
        return set()


class _Fabric:
    """A fabric that only says what was done to it."""

    name = "fake"

    def __init__(self):
        self.done = []

    async def start(self, ranks):
        self.done.append(("start", ranks))

    def track_wires(self):
        self.done.append(("track_wires",))

    async def spawn(self, spec):
        return f"host{spec.rank}.{spec.incarnation}:{list(spec.chaos)}"

    async def promote(self, spare, spec):
        return f"{spare}->{spec.rank}"

    async def kill(self, host, method):
        self.done.append(("kill", host, method))

    async def cut(self, host, peers, seconds):
        self.done.append(("cut", host, peers, seconds))

    async def sleep(self, seconds):
        await asyncio.sleep(0)

    def clock(self):
        return 0.0


def _chaos(kills, method="sigkill", partitions=()):
    run, fabric = _Run(), _Fabric()
    return run, fabric, ChaosFabric(fabric, KillPlan(kills, method), run,
                                    partitions=partitions)


def test_the_wrapper_fires_each_kind_and_names_it():
    async def go():
        run, fabric, chaos = _chaos(EVERY_KIND)
        assert chaos.clock() == 0.0 and chaos.name == "fake"  # the rest passes through
        chaos.on_report = "noted"
        assert fabric.on_report == "noted"
        await chaos.start(4)
        hosts = [await chaos.spawn(RankSpec(ft.Rank, r, 4)) for r in range(4)]
        assert hosts[0] == "host0.0:[Strike(at=3, action='die', kill=0), " \
                           "Strike(at='return', action='die', kill=5)]"
        await chaos.reached(hosts[2], rank=2, incarnation=0, moment="start")
        await chaos.reached(hosts[2], rank=2, incarnation=0, moment="start")  # fired
        await chaos.reached(hosts[1], rank=1, incarnation=0, moment="wire")
        await chaos.reached(hosts[3], rank=3, incarnation=0, moment="finished")
        await chaos.reached(recovery_round=0, recovery_phase="start")
        await chaos.reached(recovery_round=0, recovery_phase="notified")
        await chaos.reached("spare0", spare=0, moment="idle")
        await chaos.reached("spare1", spare=1, moment="promoted")
        await asyncio.gather(*run.tasks)  # the timer
        return run, fabric

    run, fabric = asyncio.run(go())
    killed = [(e.rank, e.detail) for e in run.events.events]
    assert killed == [
        (2, {"how": "sigkill", "moment": "start", "kill": 2}),
        (1, {"how": "sigkill", "moment": "wire", "kill": 4}),
        (3, {"how": "sigkill", "moment": "finished", "kill": 6}),
        (1, {"how": "sigkill", "during_recovery": 0, "phase": "start", "kill": 7}),
        (3, {"how": "sigkill", "during_recovery": 0, "phase": "notified", "kill": 8}),
        (-1, {"spare": 0, "how": "sigkill", "moment": "idle", "kill": 9}),
        (-1, {"spare": 1, "how": "sigkill", "moment": "promoted", "kill": 10}),
        (1, {"how": "sigkill", "at_s": 2.0, "kill": 1})]
    assert [e.detail["kill"] for e in run.reports] == [2, 4, 6, 7, 8, 1]  # rank deaths
    assert [d[1] for d in fabric.done if d[0] == "kill"][-3:] == ["spare0", "spare1",
                                                                  "host1.0:[]"]


def test_network_faults_kill_nobody():
    async def go():
        run, fabric, chaos = _chaos([Kill(0, time_s=1.0)], method="disconnect",
                                    partitions=[ft.Partition((1,), 0.5, 2.0)])
        await chaos.start(3)
        for r in range(3):
            await chaos.spawn(RankSpec(ft.Rank, r, 3))
        run.wired.set()
        await asyncio.gather(*run.tasks)
        return run, fabric

    run, fabric = asyncio.run(go())
    assert fabric.done[:2] == [("start", 3), ("track_wires",)]
    assert sorted((e.kind, e.rank, e.detail.get("kill")) for e in run.events.events) == [
        ("disconnected", 0, 0), ("partitioned", -1, None)]
    assert ("cut", "host0.0:[]", None, 0.0) in fabric.done
    assert ("cut", "host1.0:[]", [0, 2], 2.0) in fabric.done
    assert not any(d[0] == "kill" for d in fabric.done)


def test_the_tally_reads_identity_not_fields():
    """Twin kills: the event names the second, so the first is unfired though an event
    with its fields is in the timeline; an event that names no kill fires none."""
    kills = [Kill(0, iteration=2), Kill(0, iteration=2), Kill(1, moment="start")]
    events = [Event(1.0, "killed", 0, {"how": "chaos", "iteration": 2, "kill": 1}),
              Event(2.0, "killed", 1, {"how": "sigkill", "moment": "start"})]
    tally = kill_tally(kills, events)
    assert tally["kills_fired"] == [{"rank": 0, "iteration": 2}]
    assert [k["kill"] for k in tally["kills_unfired"]] == [
        {"rank": 0, "iteration": 2}, {"rank": 1, "moment": "start"}]


class SbSumming(StandbyReplacement, ft.Rank):
    checkpoint_interval = 2

    async def main(self, n):
        self.register("total", 0)
        async for it in self.iterations(n):
            self.total += await self.comm.allreduce(it)
        return self.total


def test_every_kind_fires_in_a_run_and_is_tallied():
    """On sim, a kill of each kind a run can reach: each event names its kill and no kill
    is left unfired."""
    plan = ft.Chaos(kill=[Kill(0, iteration=3), Kill(1, moment="start"),
                          Kill(2, moment="wire"), Kill(3, recovery_round=0),
                          Kill(spare=0, moment="idle"), Kill(0, moment="return",
                                                              incarnation=1),
                          Kill(2, moment="finished", incarnation=1)],
                    kill_at=[(2, 0.0001)])
    r = ft.run(SbSumming, 4, args=(8,), spares=6, transport="sim", chaos=plan)
    assert r.results == [sum(range(8)) * 4] * 4
    named = sorted(e.detail["kill"] for e in r.events if "kill" in e.detail)
    assert named == list(range(8))
    assert r.metrics["kills_unfired"] == [] and len(r.metrics["kills_fired"]) == 8


def test_a_moment_of_one_host_takes_one_kill():
    """Twin kills at a host's start: the first host dies of the first, the rank's next
    host (same life: it never ran) of the second."""
    async def go():
        run, fabric, chaos = _chaos([Kill(0, moment="start"), Kill(0, moment="start")])
        await chaos.start(1)
        for host in ("first", "second"):
            await chaos.reached(host, rank=0, incarnation=0, moment="start")
        return run, fabric

    run, fabric = asyncio.run(go())
    assert [e.detail["kill"] for e in run.events.events] == [0, 1]
    assert [d[1] for d in fabric.done if d[0] == "kill"] == ["first", "second"]
