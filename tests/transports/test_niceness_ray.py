"""Rank processes (and ``bench apps``'s numpy baseline) compute at the driver's niceness
(or ``rank_niceness``), not at the 15 Ray starts its workers at: every thread of the
process, since Linux niceness belongs to a thread and the one that runs a rank's code is
started after Ray's reset."""
import errno
import os

import pytest

import ftactors as ft
from ftactors.base._errors import ConfigError
from ftactors.transports import ray as ray_transport


class Niceness(ft.Rank):
    """Returns the niceness of every thread of its process."""

    async def main(self) -> list[int]:
        return [os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")]


@pytest.mark.ray
def test_every_thread_of_a_rank_runs_at_the_drivers_niceness_by_default(ray_session):
    (threads,) = ft.run(Niceness, 1, transport="ray", timeout_s=120).results
    assert len(threads) > 1 and set(threads) == {os.getpriority(os.PRIO_PROCESS, 0)}


@pytest.mark.ray
def test_rank_niceness_sets_every_thread(ray_session):
    result = ft.run(Niceness, 2, transport="ray", rank_niceness=19, timeout_s=120)
    assert [set(threads) for threads in result.results] == [{19}, {19}]


def test_rank_niceness_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="rank_niceness must be from -20 to 19"):
        ray_transport.RayFabric({"rank_niceness": 20}, None)


def test_a_niceness_that_cannot_be_lowered_says_why(monkeypatch):
    def refuse(which, who, value):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(os, "setpriority", refuse)
    assert "without CAP_SYS_NICE (Permission denied)" in ray_transport.set_niceness(0)


class _Actor:
    """A started actor whose process could not be reniced (what ``start`` answers)."""

    class start:  # noqa: N801 (an actor method: ``actor.start.remote(...)``)
        @staticmethod
        async def remote(niceness):
            return "worker", f"niceness 15 cannot be lowered to {niceness} without CAP_SYS_NICE"

    def options(self, **options):
        return self

    def remote(self):
        return self


async def test_a_refused_niceness_warns_once_a_run():
    fabric = ray_transport.RayFabric({"rank_niceness": 0}, None)
    fabric._cls, fabric._actor_options = _Actor(), {}
    with pytest.warns(ft.RankNicenessWarning, match="RAY_worker_niceness=0") as caught:
        await fabric._start_actor(None)
        await fabric._start_actor(None)
    assert len(caught) == 1 and len(fabric.actors) == 2


@pytest.mark.ray
def test_the_apps_bench_runs_its_numpy_baseline_at_the_drivers_niceness(ray_session):
    """``bench apps`` times its numpy baseline in a Ray task, against ranks that run at
    the driver's niceness: the task must too, not at Ray's 15."""
    import ray

    from benchmarks.apps import _reniced

    def probe():
        return {os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}

    driver = os.getpriority(os.PRIO_PROCESS, 0)
    assert ray.get(ray.remote(_reniced).remote(probe, driver, {})) == {driver}
