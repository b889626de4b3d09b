"""ft.run's contract: validation before anything starts, sim determinism and scale,
traces, the timeline, and errors in the user's words."""
import threading
import time

import pyarrow.parquet as pq
import pytest

import ftactors as ft
from ftactors.runtime._trace import read_trace

from . import bodies as b


class NoMain(ft.Rank):
    pass


class SyncMain(ft.Rank):
    def main(self):
        return 1


class LockResult(ft.Rank):
    """Rank 1 returns what cannot be pickled."""

    async def main(self):
        await self.comm.barrier()
        return threading.Lock() if self.rank == 1 else self.rank


@pytest.mark.parametrize("bad, match", [
    (dict(ranks=0), "ranks must be an int >= 1"),
    (dict(ranks=-2), "ranks must be an int >= 1"),
    (dict(ranks=2.5), "ranks must be an int >= 1"),
    (dict(ranks=2, transport="mpi"), "unknown transport 'mpi'"),
    (dict(ranks=2, spares=1), "no protocol .* promotes spares"),
    (dict(ranks=2, bogus_option=3), "unknown option.*bogus_option"),
    (dict(ranks=2, timeout_s=0), "timeout_s must be > 0"),
    (dict(ranks=2, transport="ray", rank_nodes=["a"]),
     "rank_nodes must list one Ray node id per rank"),
    (dict(ranks=2, transport="ray", spare_nodes=[]),
     "spare_nodes must list at least one Ray node id"),
    (dict(ranks=2, transport="ray", spare_nodes="node-a"),
     "spare_nodes must be of type list, got 'node-a'"),
    (dict(ranks=2, transport="ray", data_plane="carrier-pigeon"),
     "data_plane must be 'direct' or 'ray', got 'carrier-pigeon'"),
    (dict(ranks=2, transport="ray", poll_spin_us=-1), "poll_spin_us must be >= 0"),
    (dict(ranks=2, transport="ray", poll_spin_us=0.5), "poll_spin_us must be of type int"),
])
def test_bad_run_arguments_fail_before_start(bad, match):
    with pytest.raises(ft.ConfigError, match=match):
        ft.run(b.Ring, args=(1,), **{"transport": "local", **bad})


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("option", [dict(data_plane="direct"), dict(data_plane="ray"),
                                    dict(rank_num_cpus=1), dict(rank_nodes=["a", "b"]),
                                    dict(spare_nodes=["a"]), dict(poll_spin_us=0)])
def test_ray_only_options_are_refused_elsewhere(transport, option):
    """Taken and ignored on local or sim, they would promise what the run does not do."""
    name = next(iter(option))
    with pytest.raises(ft.ConfigError, match=f"{name} apply to the ray transport only; "
                                             f"transport '{transport}'"):
        ft.run(b.Ring, ranks=2, args=(1,), transport=transport, **option)


def test_bad_classes_fail_before_start():
    with pytest.raises(TypeError, match="must define 'async def main"):
        ft.run(NoMain, ranks=2, transport="local")
    with pytest.raises(TypeError, match="must define 'async def main"):
        ft.run(SyncMain, ranks=2, transport="local")
    with pytest.raises(TypeError, match="subclass of ft.Rank"):
        ft.run(object, ranks=2, transport="local")


def test_chaos_naming_missing_rank_fails_before_start():
    with pytest.raises(ValueError, match="rank 7, but the run has ranks 0..3"):
        ft.run(b.Ring, ranks=4, args=(1,), transport="local", chaos=ft.Chaos(kill=[(7, 1)]))


def test_sim_same_seed_same_run_and_seed_matters():
    def once(seed):
        r = ft.run(b.Collectives, ranks=6, transport="sim", seed=seed)
        return r.results, [(e.time, e.kind, e.rank, e.detail) for e in r.events]

    res1, ev1 = once(5)
    res2, ev2 = once(5)
    _, ev3 = once(6)
    assert ev1 == ev2 and len(ev1) > 12
    assert repr(res1) == repr(res2)
    assert ev1 != ev3  # the seed drives the network jitter, so timings differ


def test_sim_runs_1024_ranks():
    r = ft.run(b.Iterating, ranks=1024, transport="sim", args=(3,), timeout_s=600)
    assert r.results == [1024 * sum(range(3))] * 1024
    assert r.metrics["sent"] == r.metrics["received"] > 1024 * 3


def test_timeline_records_starts_and_finishes():
    r = ft.run(b.Ring, ranks=3, args=(2,), transport="local")
    kinds = [e.kind for e in r.events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    assert sorted(e.rank for e in r.events_of("start")) == [0, 1, 2]
    assert sorted(e.rank for e in r.events_of("finish")) == [0, 1, 2]
    times = [e.time for e in r.events]
    assert times == sorted(times)


def test_event_times_count_seconds_from_the_start_of_the_run(transport):
    """The same meaning on every transport (Ray stamped epoch seconds): no event before
    the run started, none after ft.run returned."""
    before = time.perf_counter()
    r = ft.run(b.Iterating, ranks=2, args=(3,), transport=transport, timeout_s=120)
    elapsed = time.perf_counter() - before
    end = r.metrics["wall_s"] if transport == "sim" else elapsed  # sim's clock is virtual
    assert {"run_start", "start", "finish", "run_end"} <= {e.kind for e in r.events}
    assert all(0.0 <= e.time <= end for e in r.events), [e for e in r.events if e.time > end]


def test_an_unpicklable_result_is_a_rank_error_naming_the_rank(transport):
    """Ray must pickle a result to return it; local and sim check the same, so the
    error is the same plain RankError everywhere (on Ray it was a RayTaskError)."""
    with pytest.raises(ft.RankError, match=r"^rank 1 raised TypeError: main\(\) returned a "
                       r"lock that cannot be pickled \(cannot pickle '_thread.lock' object\)"
                       ) as info:
        ft.run(LockResult, ranks=2, transport=transport, timeout_s=120)
    assert info.value.rank == 1
    assert "\x1b[" not in str(info.value)  # no terminal colour codes


def test_rank_failed_event_is_in_the_timeline_on_sim():
    with pytest.raises(ft.RankFailed) as info:
        ft.run(b.Iterating, ranks=3, transport="sim", args=(10,), chaos=ft.Chaos(kill=[(2, 4)]))
    assert "rank 2 failed" in str(info.value)


def test_trace_written_to_parquet(tmp_path, transport):
    path = tmp_path / "run.parquet"
    r = ft.run(b.Stacked, ranks=3, transport=transport, trace=str(path), timeout_s=120)
    table = read_trace(path)
    assert table.num_rows == r.metrics["trace_rows"] == r.metrics["received"]
    cols = table.to_pydict()
    assert set(cols["kind"]) == {"app", "coll"}
    assert all((k == "coll") == c.endswith("/c") for k, c in zip(cols["kind"], cols["comm"]))
    assert {"w", "w/c"} <= set(cols["comm"])
    assert all(t_recv >= t_send for t_send, t_recv in zip(cols["t_send"], cols["t_recv"]))
    assert set(cols["source"]) == set(cols["dest"]) == {0, 1, 2}
    assert pq.read_schema(path).names[:3] == ["t_send", "t_recv", "source"]


async def test_run_async_on_local_and_sim():
    for transport in ("local", "sim"):
        r = await ft.run_async(b.Ring, ranks=3, args=(4,), transport=transport)
        assert r.results == [12, 10, 11]


def test_hung_rank_without_protocol_fails_the_run_instead_of_hanging():
    with pytest.raises(ft.RankFailed, match="no heartbeat"):
        ft.run(b.Iterating, ranks=3, transport="local", args=(10**7,), timeout_s=60,
               chaos=ft.Chaos(kill_at=[(1, 0.05)], method="sigstop"),
               heartbeat_interval_s=0.05, heartbeat_timeout_s=0.2)
