"""``ftactors bench profile``: calls and CPU per message on each side, ftactors beside the
asyncio floor, at a tiny size. Performance is never asserted here (the machine is
shared); only what each figure counts and the shape of the results."""
import json

import pytest

from benchmarks import profile
from ftactors.tools.cli import main

pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"),
              pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]


def test_a_meter_counts_the_calls_and_messages_between_entering_and_leaving():
    sent = [0]

    def work(n):
        for _ in range(n):
            sent[0] += 1
            abs(-1)
    with profile.Meter(lambda: sent[0], profile=True, top=2) as meter:
        work(100)
    result = meter.result
    assert result["sent"] == 100
    assert 101 < result["calls"] < 120  # abs 100 times, work once, the meter's clocks
    assert result["cpu_s"] >= 0 and result["wall_s"] > 0
    first, second = result["top"]  # the two of most own time, the profiler's clock less
    assert first["own_s"] >= second["own_s"] >= 0 and first["calls"] >= 1 <= second["calls"]
    with profile.Meter(lambda: sent[0]) as unprofiled:
        work(3)
    assert unprofiled.result["sent"] == 3 and "calls" not in unprofiled.result


def test_figures_are_per_round_trip_a_side_and_per_message_sent():
    rank = {"cpu": {"sent": 40, "cpu_s": 2e-3, "thread_s": 1e-3, "wall_s": 4e-3},
            "profile": {"sent": 40, "calls": 8000}}
    ping = profile.per_unit("ping-pong", rank, round_trips=20)
    assert (ping["calls"], ping["cpu_us"]) == (400, pytest.approx(100.0))
    cg = profile.per_unit("cg", rank, round_trips=20)
    assert (cg["calls"], cg["cpu_us"]) == (200, pytest.approx(50.0))
    rows = profile.rows_of("cg", [rank, {**rank, "profile": {"calls": 4000}}], 0)
    assert rows == {"CG, mean of ranks": pytest.approx({**cg, "calls": 150})}
    assert list(profile.rows_of("ping-pong", [rank, rank], 20)) == [
        "ping-pong 8 B, rank 0", "ping-pong 8 B, rank 1"]


def test_profile_bench_measures_both_ways_on_both_shapes(tmp_path, ray_session):
    out = tmp_path / "profile.json"
    assert main(["bench", "profile", "--round-trips", "50", "--cg", "S:2", "--top", "3",
                 "--repetitions", "1", "--json", str(out)]) == 0  # CG verified on both
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert list(rows) == ["ping-pong 8 B, rank 0", "ping-pong 8 B, rank 1",
                          "CG, mean of ranks"]
    for label, cell in rows.items():
        for way in profile.WAYS:
            fig = cell[way]
            assert fig["calls"] > 1 and fig["cpu_us"] > 0 and fig["wall_us"] > 0
            assert fig["units"] == (50 if label.startswith("ping") else fig["sent"])
        assert cell["added"]["calls"] == pytest.approx(
            cell["ftactors"]["calls"] - cell["asyncio"]["calls"])
        assert cell["ratio"]["cpu_us"] == pytest.approx(
            cell["ftactors"]["cpu_us"] / cell["asyncio"]["cpu_us"])
    cg = rows["CG, mean of ranks"]
    assert cg["ftactors"]["sent"] == cg["asyncio"]["sent"] > 0  # one schedule: comparable
    assert [len(data["top"][case]) for case in ("ping-pong", "cg")] == [3, 3]
    assert all(t["calls"] > 0 and t["own_us"] >= 0 for t in data["top"]["ping-pong"])
    assert data["poll_spin_us"] == 0 and data["machine"]["load_avg_1m"] >= 0


def test_profile_bench_rejects_bad_options():
    assert main(["bench", "profile", "--cg", "S:3"]) == 2
    assert main(["bench", "profile", "--cg", "Q:2"]) == 2
    assert main(["bench", "profile", "--cg", "none", "--round-trips", "0"]) == 2
    assert main(["bench", "profile", "--poll-us", "-1"]) == 2
