"""Nodes lost and moved between for real, on one local multi-node Ray cluster for all of
this module (``nodes_script.py`` starts it once in a process of its own: a head and 4
worker nodes whose nodes share no temp root, nothing shared with the session's Ray).

A node lost under one stack of each family (``ftactors bench nodes`` on it): in each cell
worker 1 (ranks 2 and 3), or the workers the cell names, is removed without grace while
every rank waits at iteration 8, and the answer must equal the failure-free run's bit for
bit. Every cell runs HPL, the shortest app here (`bench nodes` runs CG and HPL
under all ten stacks). The families: a global-cut stack (ReadyMessageFlush) losing two nodes of different
sectors, workers 0 and 2, which its RS level decodes in memory (each RS group lost one
member); partner copies (RSBackup over StandbyReplacement: the cheapest level serves);
and the stacks whose consistency protocol hands its parts to the levels
(GroupCoordination's groups and DDVPiggyback's clusters are one node each, so the whole
unit goes; its parts come back from the next unit's partner copies, or are decoded from
the next unit's parity). Every node's Ray processes have a temp root of their own
(``TMPDIR``), as on a cluster that shares no ``/tmp``: the direct plane's socket
directory must be each node's own, gone on the survivors at the end, and the removed
nodes' sockets must not answer.

Then ReadyMessageFlush migration (``ftactors bench migrate --address``, a driver of its
own joining the cluster): a rank holding registered state moves to other nodes while
messages flow, and the run still equals the failure-free one bit for bit. Last, a chaos
node kill (``ftactors chaos``' experiment with ``cluster: {nodes: 2}``, its two workers
added to the cluster): a worker node is removed without grace while the stencil runs on
it, StandbyReplacement rebuilds its two ranks from their partners' copies, and the answer
equals the failure-free run's. Nothing here is timed: performance is the benches' job.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = pytest.mark.ray

# stack, app, the workers removed, the level that must recover them (none passed over)
CELLS = [("rs+ready-flush", "hpl", "0+2", "rs"), ("rs+standby", "hpl", "1", "standby"),
         ("standby+groups", "hpl", "1", "standby"), ("rs+hc3i", "hpl", "1", "rs")]
IDS = [f"{s}-{a}-w{w}" for s, a, w, _ in CELLS]
LOST = {"1": [2, 3], "0+2": [0, 1, 4, 5]}  # two ranks per worker, in blocks
# RSBackup's ring of groups of 2 over w0..w3 (ranks 2w, 2w+1 on worker w): G0 = (0, 2),
# G1 = (4, 6), G2 = (1, 3), G3 = (5, 7); sectors {w0, w1} and {w2, w3}
RING = [[0, 2], [4, 6], [1, 3], [5, 7]]


MIB = 1 << 20
MIGRATE = ["--sizes-mib", "1,4", "--moves", "2", "--repeat", "1"]  # two sizes: a fit
CHAOS = {
    "name": "nodes", "transport": "ray", "cluster": {"nodes": 2}, "timeout_s": 300,
    "matrix": {"app": "stencil", "protocol": "standby", "ranks": 4, "schedule": "node",
               "seed": 0},
    # long enough to outlast the kill at 1.5 s: on the direct plane 400 iterations did not;
    # 3,000 went on 6.6 s past it at full speed (a run the kill misses is NOT TESTED)
    "apps": {"stencil": {"ny": 96, "nx": 96, "iterations": 2000}},
    # partners are r + n/2: ranks 2, 3 (worker 1) keep their copies on ranks 0, 1 (worker 0)
    "protocols": {"standby": {"spares": 2, "backup_interval": 5}},
    "schedules": {"node": {"node_kills": [[1, 1.5]]}},
}


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    """The three parts' outputs (a directory) and what the script said, from one cluster."""
    out = tmp_path_factory.mktemp("nodes")
    experiment = out / "chaos.yaml"
    experiment.write_text(yaml.safe_dump(CHAOS))
    cmd = [sys.executable, str(Path(__file__).with_name("nodes_script.py")), str(out),
           ",".join(f"{stack}:{app}:{w}" for stack, app, w, _ in CELLS), str(experiment),
           *MIGRATE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    said = (f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n"
            f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    assert (out / "parts.json").exists(), said
    return out, json.loads((out / "parts.json").read_text()), said


@pytest.fixture(scope="module")
def cells(cluster_run):
    out, _, said = cluster_run
    assert (out / "nodes.json").exists(), said
    return {(c["stack"], c["app"], "+".join(map(str, c["removed_workers"]))): c
            for c in json.loads((out / "nodes.json").read_text())["cells"]}


@pytest.fixture(scope="module")
def bench(cluster_run):
    """``bench migrate``'s results."""
    out, parts, said = cluster_run
    assert parts.get("migrate") == 0 and (out / "migrate.json").exists(), said
    return json.loads((out / "migrate.json").read_text())


@pytest.mark.parametrize("stack, app, workers, level", CELLS, ids=IDS)
def test_the_node_is_survived_by_the_expected_level_with_the_failure_free_answer(
        cells, stack, app, workers, level):
    cell = cells[(stack, app, workers)]
    assert cell["error"] == "" and cell["verified"] is True and cell["identical"] is True
    assert cell["lost_ranks"] == LOST[workers]
    # the node's ranks were declared failed (a group restarted whole needs one of them)
    # and every one runs in a new process
    assert cell["detected"] and set(cell["detected"]) <= set(LOST[workers])
    assert set(LOST[workers]) <= set(cell["replaced"])
    assert cell["levels"] == [level] and cell["passed_over"] == []
    if stack.endswith(("groups", "hc3i")):  # the parts came from that level, not Ray's store
        assert cell["part_sources"] == [level]
        assert {cell["rank_sources"][str(r)] for r in LOST[workers]} == {level}
    # the ranks on different nodes talked over TCP, unharmed by the loss; no frame was
    # malformed and no proof was wrong (a peer on the removed node, or a handshake its
    # sender abandoned under load, may hang up mid-handshake: ``handshake_lost``, not this)
    direct = cell["direct"]
    assert direct["tcp_connections"] > 0 and direct["bad_frame"] == 0
    assert direct["auth_failed"] == 0, direct


@pytest.mark.parametrize("stack, app, workers", [c[:3] for c in CELLS], ids=IDS)
def test_socket_files_are_per_node_and_none_is_left(cells, stack, app, workers):
    """Each worker's two ranks listened in its own temp root; after the run the
    survivors' directories are gone (their ranks, or a task, removed them) and the
    removed nodes' sockets refuse connections (their listeners died with them)."""
    sockets = cells[(stack, app, workers)]["sockets"]
    assert sockets["at_gate"] == [2, 2, 2, 2]
    assert sockets["left_on_survivors"] == {}
    assert sockets["removed_sockets"] == len(LOST[workers])
    assert sockets["removed_listening"] == 0


@pytest.mark.parametrize("stack, app, workers", [c[:3] for c in CELLS if "rs" in c[0]],
                         ids=[i for i, c in zip(IDS, CELLS) if "rs" in c[0]])
def test_rs_groups_span_the_nodes_and_encoded_rounds(cells, stack, app, workers):
    cell = cells[(stack, app, workers)]
    assert cell["parity_blocks"] > 0
    if "hc3i" not in stack:  # RSBackup's own rounds: its groups come from the real nodes
        placement = cell["placement"]
        assert placement["virtual"] is False and placement["groups"] == RING
        assert placement["sectors"] == [0, 1, 0, 1]


def test_two_nodes_of_different_sectors_are_decoded_in_memory(cells):
    """w0 and w2: every RS group loses a member, and the global sets on stable storage
    are not needed; the blocks used depend on whether Ray reports the four deaths in one
    recovery round or two, so only their count is fixed."""
    cell = cells[("rs+ready-flush", "hpl", "0+2")]
    assert cell["decoded"] == [0, 1, 4, 5]
    assert sorted(cell["decode_blocks"]) == ["0", "1", "2", "3"]
    assert all(len(b) == 2 for b in cell["decode_blocks"].values())  # k of each group
    assert set(cell["rs_sources"]) == {"memory"}
    assert cell["nr_states"] == []  # no NR-MPI machine without StandbyReplacement


def test_stacked_on_standby_the_partner_copies_serve_and_nothing_is_decoded(cells):
    """w1 (ranks 2, 3): their partners 6, 7 live on w3, so the cheapest level recovers
    it, and RSBackup, the next level, is not needed."""
    cell = cells[("rs+standby", "hpl", "1")]
    assert cell["partner_copies"] > 0 and cell["decoded"] == []
    assert {"FAILURE", "RECOVER", "REPLACE_RECOVER", "RUNNING"} <= set(cell["nr_states"])


# ------------------------------------------------- ReadyMessageFlush migration
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


# ------------------------------------------------------------- a chaos node kill
def test_a_removed_node_is_survived_and_recorded(cluster_run):
    root, parts, said = cluster_run
    assert parts.get("chaos") == 0, said
    out = root / "chaos"
    (row,) = pq.read_table(out / "results.parquet").to_pylist()
    assert row["cluster"] == "nodes:2" and row["verified"] and row["identical"]
    events = pq.read_table(out / row["events_path"]).to_pylist()
    kinds = [e["kind"] for e in events]
    (node,) = [json.loads(e["detail"]) for e in events if e["kind"] == "node_killed"]
    assert node == {"node": 1, "ranks": [2, 3]}
    # the node went while the run did: both ranks were detected and replaced
    assert kinds.index("node_killed") < kinds.index("run_end")
    assert sorted(e["rank"] for e in events if e["kind"] == "replaced") == [2, 3]
    assert row["kills"] == 2 and row["failures"] == 2 and row["recoveries"] >= 1
