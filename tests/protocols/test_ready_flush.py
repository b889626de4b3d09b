"""ReadyMessageFlush (CoCheck): checkpoints with messages in flight, global restart from
them, restart of a lost job from disk, and migration, on the local and sim transports."""
import asyncio
import gc
import os

import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush

from .programs import FLOOD, Flood, Heat1D, positions

# Most of these tests checkpoint on requests (the driver's, a rank's) with no interval on
# purpose; the warning that says so is tested in tests/runtime/test_notices.py.
pytestmark = pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")


class RFFlood(ReadyMessageFlush, Flood):
    pass


class RFHeat(ReadyMessageFlush, Heat1D):
    pass


# ----------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_checkpoints_with_messages_in_flight_lose_and_duplicate_nothing(
        transport, flood_reference):
    """Every safe point has (ranks - 1) x per_peer messages in flight into each rank;
    the run is killed after a checkpoint and restarts from it: the program checks every
    message's identity and order, the digests equal the failure-free run's."""
    r = ft.run(RFFlood, 5, transport=transport, kwargs=FLOOD, checkpoint_interval=4,
               chaos=ft.Chaos(kill=[(3, 6)]), timeout_s=60)
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]
    assert [res["total"] for res in r.results] == [x["total"] for x in flood_reference(5)]
    assert positions(r, "rollback") == [(0, 4)]
    assert positions(r, "checkpoint") == [(0, 4), (0, 8)]
    # the checkpoint is an exact cut: nothing sent after a sender's part is in the
    # receiver's part, so nothing sent again after the restart is a duplicate
    assert r.metrics["duplicates_dropped"] == 0
    # the checkpoint at 4 held messages in transit: each part has queued messages
    parts = [e for e in r.events_of("checkpoint_part") if tuple(e.detail["position"]) == (0, 4)]
    assert len(parts) == 5


@pytest.mark.parametrize("seed", range(6))
def test_requests_arrive_while_isend_irecv_and_collectives_are_pending(seed, flood_reference):
    """Rank 0 asks for checkpoints in the middle of iterations (its isends, an irecv
    and the allreduce in progress); random-latency sim runs, a kill after each."""
    kw = dict(FLOOD, request_at=(2, 7))
    r = ft.run(RFFlood, 5, transport="sim", seed=seed, kwargs=kw, timeout_s=60,
               sim_jitter_s=2e-5, chaos=ft.Chaos(kill=[(seed % 5, 10)]))
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]
    taken = positions(r, "checkpoint")
    assert len(taken) == 2 and all(p[1] in (3, 4, 8, 9) for p in taken), taken
    assert positions(r, "rollback") == [taken[-1]]
    assert r.metrics["duplicates_dropped"] == 0
    requested = positions(r, "checkpoint_requested")
    assert requested == taken


def test_kill_during_a_checkpoint_restarts_from_the_previous_one(flood_reference):
    """Rank 2 dies at the top of iteration 8, where the others wait for its RM: the
    checkpoint at 8 never completes and the restart uses the one at 4."""
    r = ft.run(RFFlood, 5, transport="local", kwargs=FLOOD, checkpoint_interval=4,
               chaos=ft.Chaos(kill=[(2, 8)]), timeout_s=60)
    assert positions(r, "rollback") == [(0, 4)]
    assert positions(r, "checkpoint") == [(0, 4), (0, 8)]  # 8: again, after the restart
    t_kill = r.events_of("killed")[0].time
    assert all(e.time < t_kill for e in r.events_of("checkpoint")[:1])
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]


class SlowAnswer(RFFlood):
    """Its answers to the coordinator's takes of its parts arrive 50 ms late (as a loaded
    Ray's can); the one of ``unanswered`` ``(rank, position)`` never does (on Ray it is
    lost with the rank's process when the rank died meanwhile)."""

    unanswered: set = set()

    async def ft_rpc_ready_part(self, position) -> bytes:
        blob = super().ft_rpc_ready_part(position)
        await asyncio.sleep(0.05)  # the answer on its way
        if (self.rank, tuple(position)) in self.unanswered:
            self.unanswered.discard((self.rank, tuple(position)))
            await asyncio.get_running_loop().create_future()
        return blob


@pytest.mark.parametrize("lost_with_the_rank", [False, True], ids=["late", "lost"])
def test_a_failure_right_after_a_checkpoint_restarts_from_it(flood_reference,
                                                             lost_with_the_rank):
    """Rank 2 dies at 9, an instant after the checkpoint at 8, while the answers that hand
    the parts over are on their way, or its own never comes. A failure found meanwhile
    must not drop the parts (the coordinator lets the takes under way finish), and a
    rank goes on only once its part is safe outside its process (at its holder): the
    restart uses the checkpoint just taken."""
    SlowAnswer.unanswered = {(2, (0, 8))} if lost_with_the_rank else set()
    r = ft.run(SlowAnswer, 5, transport="local", kwargs=FLOOD, checkpoint_interval=4,
               chaos=ft.Chaos(kill=[(2, 9)]), timeout_s=60)
    assert positions(r, "rollback") == [(0, 8)]
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]


def test_failure_before_any_checkpoint_restarts_from_the_start(flood_reference):
    r = ft.run(RFFlood, 5, transport="sim", kwargs=FLOOD, checkpoint_interval=6,
               chaos=ft.Chaos(kill=[(1, 3)]), timeout_s=60)
    assert r.events_of("rollback")[0].detail["position"] is None
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]


def test_two_failures_two_rollbacks_and_every_rank_is_new(flood_reference):
    chaos = ft.Chaos(kill=[(1, 5), ft.Kill(4, iteration=10, incarnation=1)])
    r = ft.run(RFFlood, 5, transport="local", kwargs=FLOOD, checkpoint_interval=3,
               chaos=chaos, timeout_s=60)
    assert positions(r, "rollback") == [(0, 3), (0, 9)]
    respawned = sorted((e.rank, e.detail["incarnation"]) for e in r.events_of("respawned"))
    assert respawned == sorted((rank, inc) for rank in range(5) for inc in (1, 2))
    assert [res["digest"] for res in r.results] == [x["digest"] for x in flood_reference(5)]


def test_timer_checkpoints_in_virtual_time():
    r = ft.run(RFHeat, 4, transport="sim", kwargs={"iterations": 60},
               checkpoint_interval_s=2e-4, sim_latency_s=1e-5)
    assert len(r.events_of("checkpoint")) >= 2
    assert len(r.events_of("checkpoint_requested")) >= len(r.events_of("checkpoint"))


def test_stable_storage_writes_complete_sets_and_keeps_the_newest_two(tmp_path):
    r = ft.run(RFHeat, 3, transport="local", kwargs={"iterations": 14},
               checkpoint_interval=4, checkpoint_storage="stable", checkpoint_dir=str(tmp_path))
    assert positions(r, "checkpoint") == [(0, 4), (0, 8), (0, 12)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"run-{r.run_id}"]  # its own folder
    sets = tmp_path / f"run-{r.run_id}"
    assert sorted(p.name for p in sets.iterdir()) == ["ckpt-000009", "ckpt-000013"]
    for s in sets.iterdir():  # the manifest makes a set complete
        assert sorted(os.listdir(s)) == ["MANIFEST", "rank-00000", "rank-00001", "rank-00002"]


def test_bad_options_fail_before_anything_starts():
    for bad, msg in [({"checkpoint_storage": "tape"}, "checkpoint_storage"),
                     ({"checkpoint_interval": 0}, "checkpoint_interval"),
                     ({"checkpoint_interval_s": -1}, "checkpoint_interval_s")]:
        with pytest.raises(ft.ConfigError, match=msg):
            ft.run(RFHeat, 2, transport="local", **bad)


def test_irecv_pending_across_a_safe_point_is_refused():
    class Leaky(ReadyMessageFlush, ft.Rank):
        async def main(self):
            req = None
            async for i in self.iterations(4):
                if req is None:
                    req = self.comm.irecv(source=(self.rank + 1) % self.size, tag=1)
            await self.comm.send(1, dest=(self.rank - 1) % self.size, tag=1)
            return await req.wait()

    with pytest.raises(ft.RankError, match="pending at the snapshot"):
        ft.run(Leaky, 2, transport="local", checkpoint_interval=2)


# ---------------------------------------------------- requests from the driver
def test_driver_checkpoint_then_lost_job_restarts_from_disk(tmp_path):
    """``await run.checkpoint()`` stores a set; the whole job is then lost (the driver
    stops it); ``restart_from`` starts a new job from that set and it verifies."""
    reference = ft.run(Heat1D, 4, transport="local", kwargs={"iterations": 400}).results

    async def first_job():
        run = await ft.launch(RFHeat, 4, transport="local", kwargs={"iterations": 400},
                              checkpoint_storage="both", checkpoint_dir=str(tmp_path))
        info = await run.checkpoint()
        run._task.cancel()  # power off
        with pytest.raises(asyncio.CancelledError):
            await run
        return info

    info = asyncio.run(first_job())
    assert info["position"][1] > 0 and info["bytes"] > 0
    r = ft.run(RFHeat, 4, transport="local", kwargs={"iterations": 400},
               restart_from=str(tmp_path))
    restored = r.events_of("restored")
    assert {tuple(e.detail["position"]) for e in restored} == {tuple(info["position"])}
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"]) and got["norms"] == want["norms"]


def test_corrupt_checkpoint_on_disk_is_refused(tmp_path):
    ft.run(RFHeat, 2, transport="local", kwargs={"iterations": 6}, checkpoint_interval=5,
           checkpoint_storage="stable", checkpoint_dir=str(tmp_path))
    (part,) = [p for p in tmp_path.rglob("rank-00001*")]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ft.CheckpointCorrupted):
        ft.run(RFHeat, 2, transport="local", kwargs={"iterations": 6},
               restart_from=str(tmp_path))


def test_launch_without_the_protocol_says_what_is_missing():
    async def go():
        run = await ft.launch(Heat1D, 2, transport="local", kwargs={"iterations": 50})
        with pytest.raises(ft.ProtocolError, match="ReadyMessageFlush"):
            await run.checkpoint()
        await run

    asyncio.run(go())


# ------------------------------------------------------------------- migration
@pytest.mark.parametrize("mover", [0, 3])
def test_migration_while_messages_flow(mover, flood_reference):
    """The moving rank's in-flight and held messages all reach its new incarnation."""
    async def go():
        run = await ft.launch(RFFlood, 5, transport="local",
                              kwargs=dict(FLOOD, iterations=40))
        info = await run.migrate(mover)
        return info, await run

    reference = ft.run(Flood, 5, transport="local", kwargs=dict(FLOOD, iterations=40)).results
    info, r = asyncio.run(go())
    assert [res["digest"] for res in r.results] == [x["digest"] for x in reference]
    assert info["partners"] == [p for p in range(5) if p != mover]
    assert r.events_of("migrated") and not r.events_of("rollback")
    assert [e.rank for e in r.events_of("respawned")] == [mover]


@pytest.mark.parametrize("stack", ["standby+ready-flush", "rs+ready-flush",
                                   "rs+standby+ready-flush"])
def test_a_rank_moves_in_every_stack_with_ready_flush(stack):
    """The mover's process held the other levels' rounds under way and their copies in
    memory: they move with it (``Protocol.moving_state``). Before, a stack with
    StandbyReplacement hung on the first move: a partner's marker of the backup round at
    the move's safe point had reached the old process only, and the new one sent the
    migration's handed-over state to its partner as a backup copy (a type error there).
    Then a failure after the move is recovered by the cheapest level."""
    from ftactors.tools.simcheck import setups
    setup = setups()[stack]
    cls = type("Moving", (*setup.mixins, Flood), {})
    kwargs = dict(FLOOD, iterations=40)

    async def go():
        run = await ft.launch(cls, setup.ranks, transport="local", spares=setup.spares,
                              kwargs=kwargs, chaos=ft.Chaos(kill=[(0, 30)]), timeout_s=60,
                              **setup.options)
        info = await run.migrate(2)
        return info, await run

    info, r = asyncio.run(go())
    reference = ft.run(Flood, setup.ranks, transport="local", kwargs=kwargs).results
    assert [res["digest"] for res in r.results] == [x["digest"] for x in reference]
    assert r.events_of("migrated") and info["rank"] == 2
    cheapest = "rs" if stack == "rs+ready-flush" else "standby"
    assert [e.detail["level"] for e in r.events_of("recovery_level")] == [cheapest]


@pytest.mark.parametrize("stack", ["ready-flush", "standby+ready-flush", "rs+ready-flush",
                                   "rs+standby+ready-flush"])
def test_a_failure_elsewhere_during_a_move_is_recovered_with_the_mover(stack):
    """Rank 4 dies while rank 2 hands its state over (its partners hold what they send
    it). The move is cut short; the mover, stopped in its old process and not started
    in its new one, is recovered with rank 4 by the cheapest level that can (alone,
    ReadyMessageFlush restarts every rank). Before: with a cheaper level the survivors,
    restored in place, kept holding what they sent rank 2 for a move that never ended,
    and the run hung; and the recovery asked the mover's new, unstarted process for its
    state (AttributeError)."""
    from ftactors.tools.simcheck import setups
    setup = setups()[stack]
    launched = {}

    class Moving(*setup.mixins, Flood):
        async def ft_rpc_ready_migrate_out(self, move, senders):
            c = launched["run"]._c
            await c.fabric.kill(c.handles[4], "chaos")
            return await super().ft_rpc_ready_migrate_out(move, senders)

    kwargs = dict(FLOOD, iterations=40)

    async def go():
        run = launched["run"] = await ft.launch(
            Moving, setup.ranks, transport="local", spares=setup.spares, kwargs=kwargs,
            timeout_s=60, **setup.options)
        await run.checkpoint()  # the levels have rounds before the move
        if "rs" in stack:  # RS encodes on its own: under load its first round came after
            # the kill in 3 of 25 runs, and then ready-flush rightly recovered instead
            hosts = [run._c.handles[r] for r in range(setup.ranks)]
            while not all(h.ep.events.counts.get("rs_encoded") for h in hosts):
                await asyncio.sleep(0.005)
        with pytest.raises(ft.ProtocolError, match="cut short by a failure"):
            await run.migrate(2)
        return await run

    r = asyncio.run(go())
    reference = ft.run(Flood, setup.ranks, transport="local", kwargs=kwargs).results
    assert [res["digest"] for res in r.results] == [x["digest"] for x in reference]
    assert not r.events_of("migrated")
    levels = [e.detail["level"] for e in r.events_of("recovery_level")]
    if stack == "ready-flush":  # one level: every rank restarts
        assert levels == [] and {e.rank for e in r.events_of("respawned")} == set(range(setup.ranks))
    else:  # one round recovers both, whether rank 2 joined it as a restart or was
        # found failed with rank 4 before it began (under load)
        assert [e.detail["failed"] for e in r.events_of("recovery_level")] == [[2, 4]]
        assert levels == ["rs" if stack == "rs+ready-flush" else "standby"]


@pytest.mark.parametrize("dies", ["starting", "promoted"])
def test_a_move_whose_new_actor_dies_is_refused_or_recovered(dies, flood_reference):
    """The target actor dies as it starts (the rank never stopped: the move is refused,
    the run goes on) or as it is set up (the rank had stopped: a failure, every rank
    restarts from the last checkpoint); either way ``run.migrate`` raises a
    ProtocolError, never the fabric's own exception, and the answer is right."""
    from ftactors.transports.local import LocalFabric
    from ftactors.runtime._deaths import RankDied

    async def go():
        run = await ft.launch(RFFlood, 5, transport="local", kwargs=dict(FLOOD, iterations=40))
        fabric = run._c.fabric
        if dies == "starting":
            async def spawn_spare(node=None):
                raise RankDied(-1, "could not start")
            fabric.spawn_spare = spawn_spare
        else:
            async def promote(spare, spec):
                raise RankDied(spec.rank, "could not start")
            fabric.promote = promote
        with pytest.raises(ft.ProtocolError):
            await run.migrate(2)
        if dies == "promoted":
            fabric.promote = LocalFabric.promote.__get__(fabric)  # the recovery's are fine
        return await run

    reference = ft.run(Flood, 5, transport="local", kwargs=dict(FLOOD, iterations=40)).results
    r = asyncio.run(go())
    assert [res["digest"] for res in r.results] == [x["digest"] for x in reference]
    assert bool(r.events_of("rollback")) == (dies == "promoted")


class ReturnsEarly(ReadyMessageFlush, ft.Rank):
    """Rank 0 returns at once, rank 1 two seconds later."""

    async def main(self):
        if self.rank == 1:
            await asyncio.sleep(2.0)
        return self.rank


def test_a_move_asked_after_the_rank_returned_is_refused_at_once():
    """No safe point is left to stop at: the move is refused as it is asked (it used to
    wait until the run ended)."""
    async def go():
        run = await ft.launch(ReturnsEarly, 2, transport="local")
        await asyncio.sleep(0.2)
        with pytest.raises(ft.ProtocolError, match="rank 0 finished before it could move"):
            await asyncio.wait_for(run.migrate(0), 1.0)
        return await run

    assert asyncio.run(go()).results == [0, 1]


def test_migration_then_failure_rolls_back_every_rank():
    reference = ft.run(Heat1D, 4, transport="local", kwargs={"iterations": 300}).results

    async def go():
        run = await ft.launch(RFHeat, 4, transport="local", kwargs={"iterations": 300},
                              checkpoint_interval=50, chaos=ft.Chaos(kill=[(2, 250)]))
        await run.migrate(1)
        return await run

    r = asyncio.run(go())
    # the kill strikes before the safe point at 250: its checkpoint never completes
    assert r.events_of("migrated") and positions(r, "rollback") == [(0, 200)]
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"])


def test_two_restores_replay_straight_line_messages_once():
    """HPL receives outside its loops (the grid's split, the step between its two
    loops). After a restore the code before the resume point consumes the replayed
    messages again; a second restore must not replay them twice (it did: the extra
    copies were matched by a later bcast)."""
    from ftactors.apps.hpl import HPL

    class RFHPL(ReadyMessageFlush, HPL):
        pass

    kw = {"n": 160, "nb": 16, "p": 2, "q": 2}
    plain = ft.run(HPL, ranks=4, transport="local", kwargs=kw).results
    chaos = ft.Chaos(kill=[(3, 9), ft.Kill(3, iteration=5, incarnation=1)])
    r = ft.run(RFHPL, ranks=4, transport="local", kwargs=kw, checkpoint_interval=4,
               chaos=chaos, timeout_s=60)
    assert positions(r, "rollback") == [(0, 8), (1, 4)]
    assert np.array_equal(r.results[0]["x"], plain[0]["x"])


def test_timer_checkpoints_go_on_after_a_rollback():
    """A failure while a timer request is in flight must not stop the timer: requests
    come every few microseconds of virtual time, so one is nearly always in flight."""
    reference = ft.run(Heat1D, 4, transport="sim", kwargs={"iterations": 80}).results
    r = ft.run(RFHeat, 4, transport="sim", kwargs={"iterations": 80},
               checkpoint_interval_s=3e-5, chaos=ft.Chaos(kill=[(2, 30)]))
    t_rollback = r.events_of("rollback")[0].time
    assert [e for e in r.events_of("checkpoint") if e.time > t_rollback]
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"])


# ----------------------------------------------- checkpoint_interval="auto" (Daly)
AUTO = dict(checkpoint_interval="auto", mtbf_s=2e-3, sim_latency_s=1e-5, sim_jitter_s=5e-6)


def _cost(r, position):
    """What the checkpoint at ``position`` held the job, from the timeline alone: the
    first rank's arrival there to the set being stored."""
    (done,) = [e for e in r.events_of("checkpoint") if tuple(e.detail["position"]) == position]
    parts = [e for e in r.events_of("checkpoint_part")
             if tuple(e.detail["position"]) == position]
    return done.time - min(p.detail["at"] for p in parts)


def test_auto_interval_is_dalys_for_each_measured_cost_and_is_kept():
    """On sim (virtual time, jittered latencies): the first checkpoint is requested at the
    start; after each one the coordinator picks Daly's interval for the cost it measured
    and requests the next exactly that long after the checkpoint was stored."""
    from ftactors.protocols.shared.intervals import daly, young

    kw = {"iterations": 300}
    reference = ft.run(Heat1D, 4, transport="sim", kwargs=kw).results
    r = ft.run(RFHeat, 4, transport="sim", kwargs=kw, seed=3, **AUTO)
    chosen = r.events_of("checkpoint_interval_chosen")
    requested = r.events_of("checkpoint_requested")
    assert len(chosen) >= 20 and r.events_of("checkpoint")
    assert requested[0].detail["notified_at"] == r.events_of("run_start")[0].time
    costs = []
    for ev in chosen:
        d, position = ev.detail, tuple(ev.detail["position"])
        assert d["mtbf_s"] == AUTO["mtbf_s"]
        assert d["cost_s"] == pytest.approx(_cost(r, position), rel=0, abs=1e-15)
        assert d["interval_s"] == daly(d["cost_s"], d["mtbf_s"])
        assert d["interval_s"] != pytest.approx(young(d["cost_s"], d["mtbf_s"]), rel=1e-3)
        costs.append(d["cost_s"])
    assert len(set(costs)) > len(costs) // 2  # measured each time, not once
    # each request comes the chosen interval after the checkpoint before it was stored
    for ev, nxt in zip(chosen, requested[1:]):
        assert nxt.detail["notified_at"] == pytest.approx(
            ev.time + ev.detail["interval_s"], rel=0, abs=1e-12)
    assert len(requested) == len(chosen) + (1 if requested[-1].time > chosen[-1].time else 0)
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"]) and got["norms"] == want["norms"]


def test_auto_timer_waits_out_a_rollback_and_restarts():
    """A rollback restarts the run from its checkpoint: no request is sent while it is
    under way (the slow network makes the restore outlast an interval), and the next one
    comes one chosen interval after the run resumed, not after the checkpoint before."""
    kw = {"iterations": 200}
    slow = dict(AUTO, sim_bandwidth_Bps=1e6)
    reference = ft.run(Heat1D, 4, transport="sim", kwargs=kw).results
    r = ft.run(RFHeat, 4, transport="sim", kwargs=kw, seed=1,
               chaos=ft.Chaos(kill=[(2, 100)]), **slow)
    (start,), (resumed,) = r.events_of("recovery_start"), r.events_of("resumed")
    before = [e for e in r.events_of("checkpoint_interval_chosen") if e.time <= start.time]
    after = [e for e in r.events_of("checkpoint_requested") if e.time > start.time]
    assert before and after
    interval = before[-1].detail["interval_s"]
    assert resumed.time - start.time > interval
    asked = [e for e in r.events if e.kind in ("checkpoint_requested", "checkpoint_skipped")]
    assert not [e for e in asked if start.time <= e.time <= resumed.time]
    assert after[0].detail["notified_at"] == pytest.approx(resumed.time + interval,
                                                           rel=0, abs=1e-12)
    # without the restart it would have come at before[-1].time + interval
    assert resumed.time - before[-1].time > 1e-5
    assert positions(r, "rollback")[0] == tuple(before[-1].detail["position"])
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"]) and got["norms"] == want["norms"]


def test_auto_first_request_waits_for_the_ranks_loop_with_a_doubling_retry():
    """Before its loop no rank can place a checkpoint: the first request is retried after
    FIRST_RETRY x mtbf_s, doubling up to RETRY_MAX x mtbf_s, until one is taken."""
    from ftactors.protocols.ready_flush.rank import FIRST_RETRY, RETRY_MAX

    class LateLoop(RFHeat):
        async def main(self, setup_s, **kw):
            await asyncio.sleep(setup_s)  # virtual: straight-line work before the loop
            return await super().main(**kw)

    mtbf, setup = AUTO["mtbf_s"], 1e-4
    r = ft.run(LateLoop, 3, transport="sim", kwargs={"setup_s": setup, "iterations": 30},
               **AUTO)
    skipped = [e.time for e in r.events_of("checkpoint_skipped")
               if e.time < r.events_of("checkpoint")[0].time]
    first = r.events_of("checkpoint_requested")[0].detail["notified_at"]
    tries = [*skipped, first]
    assert skipped and skipped[-1] < setup <= first
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    want = [min(FIRST_RETRY * mtbf * 2 ** k, RETRY_MAX * mtbf) for k in range(len(gaps))]
    assert gaps == pytest.approx(want, rel=1e-9)
    assert len(r.events_of("checkpoint_interval_chosen")) >= 2


@pytest.mark.parametrize("bad, msg", [
    ({"checkpoint_interval": "auto"}, "needs mtbf_s"),
    ({"checkpoint_interval": "auto", "mtbf_s": 0}, "mtbf_s must be"),
    ({"checkpoint_interval": "auto", "mtbf_s": -5.0}, "mtbf_s must be"),
    ({"checkpoint_interval": "auto", "mtbf_s": float("inf")}, "mtbf_s must be"),
    ({"checkpoint_interval": "auto", "mtbf_s": True}, "mtbf_s must be"),
    ({"checkpoint_interval": "auto", "mtbf_s": "3600"}, "mtbf_s must be"),
    ({"mtbf_s": 3600}, "only used with"),
    ({"checkpoint_interval": 5, "mtbf_s": 3600}, "only used with"),
    ({"checkpoint_interval": "auto", "mtbf_s": 60, "checkpoint_interval_s": 5}, "give one"),
    ({"checkpoint_interval": "Auto", "mtbf_s": 60}, "or 'auto'"),
])
def test_auto_bad_options_fail_before_anything_starts(bad, msg):
    with pytest.raises(ft.ConfigError, match=msg):
        ft.run(RFHeat, 2, transport="local", **bad)


def test_a_move_the_run_outlives_is_refused_and_leaves_no_unheard_error():
    """Moves asked one after another of a run that ends meanwhile: each is done or
    refused with a ProtocolError, and a move still under way when the run ends (its
    caller already told so) does not leave its own error for asyncio to print as
    "Task exception was never retrieved" on the user's terminal."""
    unheard = []

    async def go():
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: unheard.append(context["message"]))
        run = await ft.launch(RFFlood, 5, transport="local", kwargs=dict(FLOOD, iterations=1))
        said = []
        for rank in range(5):
            try:
                said.append((await run.migrate(rank))["rank"])
            except ft.ProtocolError as e:
                said.append(str(e))
        await run
        gc.collect()  # an unretrieved task error is reported when the task is freed
        await asyncio.sleep(0)
        return said

    said = asyncio.run(go())
    assert "the run ended before the request was served" in said  # the case meant
    assert all(s == r or "finished before it could move" in s or "run ended" in s
               for r, s in enumerate(said)), said
    assert unheard == []


def test_a_kill_of_a_life_a_move_replaced_never_fires_and_says_the_move():
    """A planned kill of rank 2's first life, which a move ended: not fired, and the
    reason names the move (it used to say a recovery replaced it, with none in the run)."""
    async def go():
        run = await ft.launch(RFFlood, 5, transport="local", kwargs=dict(FLOOD, iterations=40),
                              chaos=ft.Chaos(kill=[(2, 35)]))
        await run.migrate(2)
        return await run

    with pytest.warns(ft.KillNotFiredWarning):
        r = asyncio.run(go())
    assert not r.events_of("recovery_start")
    assert r.metrics["kills_unfired"] == [{
        "kill": {"rank": 2, "iteration": 35},
        "why": "incarnation 0 of rank 2 was moved to a new process (run.migrate) (as "
               "incarnation 1) before it reached iteration 35"}]


@pytest.mark.parametrize("stack", ["ready-flush", "standby+ready-flush", "rs+ready-flush",
                                   "rs+standby+ready-flush"])
def test_moves_one_after_another_with_a_kill_in_every_stack(stack):
    """Rank 4 moves, then rank 1, then rank 4 again from its new process; later rank 0
    is killed and the stack's cheapest level recovers it: the answer is the failure-free
    run's. A kill planned for rank 1's first life, which the move replaced, does not
    fire and says so. (Random moves and kills in these stacks: 160 of 160 right.)"""
    from ftactors.tools.simcheck import setups
    setup = setups()[stack]
    cls = type("Moving", (*setup.mixins, Flood), {})
    kwargs = dict(FLOOD, iterations=120)

    async def go():
        run = await ft.launch(cls, setup.ranks, transport="local", spares=setup.spares + 2,
                              kwargs=kwargs, chaos=ft.Chaos(kill=[(1, 100), (0, 100)]),
                              timeout_s=60, **setup.options)
        moved = [(await run.migrate(rank))["rank"] for rank in (4, 1, 4)]
        return moved, await run

    with pytest.warns(ft.KillNotFiredWarning, match="moved to a new process"):
        moved, r = asyncio.run(go())
    reference = ft.run(Flood, setup.ranks, transport="local", kwargs=kwargs).results
    assert [res["digest"] for res in r.results] == [x["digest"] for x in reference]
    assert moved == [4, 1, 4] and len(r.events_of("migrated")) == 3
    assert [k["kill"] for k in r.metrics["kills_unfired"]] == [{"rank": 1, "iteration": 100}]
    assert r.metrics["recoveries"] == 1
