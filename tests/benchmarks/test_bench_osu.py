"""``ftactors bench osu`` at its smallest sizes: every way runs every test and the JSON
has each figure, its ratios and the targets' verdicts. Performance is never asserted
here (the machine is shared); only the shape of the results and what OSU defines."""
import json

import pytest

from benchmarks import osu
from ftactors.tools.cli import main

pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"),
              pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]


def test_the_plan_has_osus_sizes_and_scaled_counts():
    plan = osu.plan_of(osu.TESTS, None, 0.1)
    rows = plan["tests"]
    assert [size for size, _, _ in rows["latency"]][:3] == [0, 1, 2]
    assert rows["latency"][-1] == [4 * osu.MIB, 1, 10]
    assert rows["bw"][0] == [1, 1, 10] and rows["bw"][-1] == [4 * osu.MIB, 1, 2]
    assert rows["allreduce"][0][0] == 4 and rows["bcast"][-1][0] == osu.MIB
    assert rows["bcast"][0] == [1, 100, 1000]
    assert plan["max_bytes"] == 4 * osu.MIB
    only = osu.plan_of(["bw"], {8, 3}, 1.0)  # 3 is no OSU size
    assert only == {"tests": {"bw": [[8, 10, 100]]}, "max_bytes": 8}


def test_figures_follow_osus_definitions():
    assert osu.figure("latency", 8, 10, [2e-3, 0.0]) == pytest.approx(100.0)  # us one way
    assert osu.figure("bw", 1000, 10, [0.64, 0.0]) == pytest.approx(1.0)  # MB/s
    assert osu.figure("bibw", 1000, 10, [0.64, 9.0]) == pytest.approx(2.0)  # both ways
    assert osu.figure("bcast", 8, 10, [1e-3, 3e-3]) == pytest.approx(200.0)  # mean of ranks


def test_osu_bench_runs_every_way_at_the_smallest_sizes(tmp_path, ray_session):
    out = tmp_path / "osu.json"
    ways = "asyncio,ftactors" + (",mpi4py" if osu.mpiexec() else "")
    assert main(["bench", "osu", "--sizes", "4,8", "--scale", "0.001", "--repetitions", "1",
                 "--ways", ways, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "osu" and data["ranks"] == 2
    figures = data["figures"]
    assert set(figures) == set(osu.TESTS)
    assert set(figures["latency"]) == set(figures["bw"]) == {"4", "8"}
    for test, cells in figures.items():
        for cell in cells.values():
            for way in ways.split(","):
                assert cell[way] > 0
            assert cell["ftactors/asyncio"] == pytest.approx(cell["ftactors"] / cell["asyncio"])
    judged = {(t["test"], t["size"]) for t in data["targets"]}
    assert judged == {("latency", 8), ("bw", 8)}
    assert data["machine"]["load_avg_1m"] >= 0


def test_osu_bench_rejects_bad_options():
    assert main(["bench", "osu", "--tests", "pingpong"]) == 2
    assert main(["bench", "osu", "--ranks", "3"]) == 2
    assert main(["bench", "osu", "--sizes", "big"]) == 2
