"""ReadyMessageFlush migration on a local multi-node Ray cluster (``ray.cluster_utils``):
a rank holding registered state moves to other nodes while messages flow, and the run
still equals the failure-free one bit for bit.

The bench (``ftactors bench migrate``) does the work in a subprocess, which starts and
stops its own cluster (a head and two worker nodes), so this test shares no Ray state
with the rest of the session. Nothing here is timed: performance is the bench's job.
"""
import json
import math
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

MIB = 1 << 20


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("migrate") / "migrate.json"
    cmd = [sys.executable, "-m", "ftactors", "bench", "migrate", "--sizes-mib", "1,4",
           "--moves", "2", "--repeat", "1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and out.exists(), (
        f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-8000:]}")
    return json.loads(out.read_text())


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_every_run_verifies_against_the_failure_free_reference(bench):
    assert bench["verified"] is True
    assert [r["bytes"] for r in bench["runs"]] == [MIB, 4 * MIB]
    for run in bench["runs"]:
        assert run["verified"] is True and run["result_equals_reference"] is True
        assert run["iterations"] > 0


def test_the_rank_runs_on_each_target_node_and_ends_away_from_its_start(bench):
    nodes = set(bench["nodes"])
    assert len(nodes) >= 3  # a head and two workers
    for run in bench["runs"]:
        assert {run["start_node"], run["final_node"]} <= nodes
        assert run["final_node"] != run["start_node"]
        assert len(run["moves"]) == 2
        here = run["start_node"]
        for move in run["moves"]:
            assert move["from_node"] == here  # node_of before the move
            assert move["to_node"] != here and move["to_node"] != run["start_node"]
            assert move["on_node"] == move["to_node"] and move["on_target"] is True
            here = move["on_node"]
        assert here == run["final_node"]


def test_messages_flowed_through_the_move(bench):
    holder, ranks = bench["rank"], bench["ranks"]
    neighbours = {(holder - 1) % ranks, (holder + 1) % ranks}
    for run in bench["runs"]:
        for move in run["moves"]:
            assert move["rank"] == holder
            # the ring neighbours exchanged messages with the mover: their channels
            # were flushed by ready messages
            assert neighbours <= set(move["partners"])
            assert move["held"] >= 0


def test_the_figures_are_positive_and_finite(bench):
    for run in bench["runs"]:
        for move in run["moves"]:
            for key in ("spare_s", "stop_s", "state_s", "restore_s", "total_s"):
                assert positive(move[key]), (key, move[key])
            assert move["bytes"] >= run["bytes"]  # the snapshot holds the state
            assert move["total_s"] >= move["state_s"] + move["restore_s"]
            steps = move["steps"]
            assert steps is not None, "the ranks' own timings were not reported"
            assert positive(steps["put_s"]) and positive(steps["fetch_s"]), steps
            assert all(math.isfinite(v) for v in steps.values()), steps
    samples = bench["objectstore"]["samples"]
    assert {s["bytes"] for s in samples} == {MIB, 4 * MIB}
    assert all(positive(s["get_s"]) and positive(s["put_s"]) for s in samples)
    for fit in (bench["fit"], bench["objectstore"]["fit"]):
        assert math.isfinite(fit["a_s"]) and fit["B_Bps"] > 0  # inf: t did not grow with x
    assert bench["cocheck"] == {"a_s": 1.77, "B_Bps": 763e3}
