"""Rank processes kept between the runs of one driver (``transports/ray/warm``): the next
run takes the processes a completed run left, never those of a run that failed or that
chaos touched, and a kept process that died meanwhile is passed over."""
import asyncio
import gc
import os
import signal

import pytest

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.transports.ray.warm import WARM, Warm

pytestmark = pytest.mark.ray


class Pids(ft.Rank):
    """Each rank's process id, after a ring exchange (messages still flow)."""

    async def main(self, fail_rank=-1):
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        await self.comm.send(self.rank, dest=right, tag=1)
        got = await self.comm.recv(source=left, tag=1)
        assert got == left
        if self.rank == fail_rank:
            raise ValueError("the program failed")
        return os.getpid()


class StandbyPids(StandbyReplacement, Pids):
    backup_interval = 1

    async def main(self, iterations=4, pause_s=0.0):
        self.register("acc", 0)
        async for it in self.iterations(iterations):
            self.acc += await self.comm.allreduce(it)
            await asyncio.sleep(pause_s)
        return os.getpid(), self.acc


class Frozen(ft.Rank):
    async def main(self):
        return gc.get_freeze_count()


@pytest.fixture(autouse=True)
def empty_pool(ray_session):
    """No process kept by earlier tests of this worker: each test sees its own runs'.
    Those processes are set aside meanwhile and given back afterwards (killed only if
    the pool is full then), so the worker's later Ray tests need not start them again
    (a process start costs about a second of CPU)."""
    import ray
    aside = []
    while (warm := WARM.take(_job(), None)) is not None:
        aside.append(warm)
    yield
    for warm in aside:
        if not WARM.give(_job(), warm):
            ray.kill(warm.actor, no_restart=True)


def _pids(result) -> set[int]:
    return {p if isinstance(p, int) else p[0] for p in result.results}


def test_the_next_run_takes_the_processes_a_completed_run_left(ray_session):
    first = _pids(ft.run(Pids, 4))
    second = _pids(ft.run(Pids, 4))
    assert second == first  # no process started: the same four, serving a new run
    assert _pids(ft.run(Pids, 4, reuse_processes=False)).isdisjoint(first)


def test_a_run_that_failed_leaves_nothing_to_reuse(ray_session):
    kept = _pids(ft.run(Pids, 3))
    with pytest.raises(ft.RankError):
        ft.run(Pids, 3, args=(1,))  # takes the three kept processes, then fails
    assert _pids(ft.run(Pids, 3)).isdisjoint(kept)


def test_a_process_chaos_touched_is_not_kept_and_a_dead_kept_one_is_passed_over(ray_session):
    """Rank 2's process is stalled for a moment (it goes on and returns): chaos touched
    it, so it is not kept (a stall's SIGCONT may still be on its way); the other three
    are."""
    r = ft.run(StandbyPids, 4, spares=1, kwargs={"iterations": 40, "pause_s": 0.05},
               chaos=ft.Chaos(kill_at=[(2, 0.3)], method="stall", stall_s=0.2))
    assert [acc for _, acc in r.results] == [3120] * 4  # 4 ranks x (0+1+...+39)
    assert not r.metrics["recoveries"]
    ranks = [pid for pid, _ in r.results]
    idle = []
    while (warm := WARM.take(_job(), None)) is not None:
        idle.append(warm)
    pids = [_pid(w) for w in idle]
    # ranks 0, 1 and 3, and the spare never used
    assert ranks[2] not in pids and set(ranks[:2] + ranks[3:]) < set(pids) and len(pids) == 4
    for warm in idle:
        WARM.give(_job(), warm)
    os.kill(pids[0], signal.SIGKILL)  # dies while it waits for a run
    again = _pids(ft.run(Pids, 4))
    assert set(pids[1:]) < again and pids[0] not in again  # passed over; one new


def _job() -> str:
    import ray
    return ray.get_runtime_context().get_job_id()


def _pid(warm: Warm) -> int:
    import ray
    return ray.get(warm.actor.__ray_call__.remote(lambda self: os.getpid()))


def test_a_kept_process_that_hangs_is_killed_and_passed_over(ray_session, monkeypatch):
    """A kept process that cannot answer (stopped) does not hang the next run: after
    ``WARM_START_S`` it is killed and a new process takes its place."""
    import ftactors.transports.ray.fabric as ray_transport
    monkeypatch.setattr(ray_transport, "WARM_START_S", 2.0)
    first = sorted(_pids(ft.run(Pids, 2)))
    os.kill(first[0], signal.SIGSTOP)
    try:
        again = _pids(ft.run(Pids, 2, timeout_s=120))
    finally:
        try:
            os.kill(first[0], signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed, as it should be
    assert first[1] in again and first[0] not in again


def test_a_run_that_reserves_cpus_per_rank_keeps_no_process(ray_session):
    """An idle kept process would hold the CPUs it reserved from other work."""
    first = _pids(ft.run(Pids, 2, rank_num_cpus=0.5))
    assert WARM.take(_job(), None) is None
    assert _pids(ft.run(Pids, 2)).isdisjoint(first)


def test_a_rank_runs_with_its_start_up_objects_frozen_out_of_the_collector(ray_session):
    """Ray's and the rank's start-up objects are frozen (``gc.freeze``) before ``main()``,
    so no full collection walks them at every few thousand messages (``actors``); a
    kept process frees what its last run left, then freezes again."""
    for plane in ("direct", "ray", "direct"):  # the third: a warm process, a new run
        frozen = ft.run(Frozen, 2, data_plane=plane).results
        assert min(frozen) > 10_000, (plane, frozen)
