"""RSBackup on a local multi-node Ray cluster (4 worker nodes x 2 ranks) where nodes are
removed for real: a whole node (RSBackup stacked on StandbyReplacement there: the partner
copies bring it back), two nodes of different sectors (decoded); CG and HPL must equal
their failure-free runs bit for bit. Losses made by kills (a whole group, a loss beyond
the code's reach and its stable fallback) are the same code on every transport and are
tested on local and sim (``test_rs_backup.py``).

``rs_cluster_script.py`` does the work in a subprocess that starts and stops its own
``ray.cluster_utils.Cluster`` (nodes are removed for real), so this test shares no Ray
state with the session. Nothing here is timed.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

# the ring of groups of 2 over w0..w3 (ranks 2w, 2w+1 on node w): G0 = (0, 2),
# G1 = (4, 6), G2 = (1, 3), G3 = (5, 7); sectors {w0, w1} and {w2, w3}
RING = [[0, 2], [4, 6], [1, 3], [5, 7]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rs_cluster")
    out = tmp / "out.json"
    cmd = [sys.executable, str(Path(__file__).with_name("rs_cluster_script.py")), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and out.exists(), (
        f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
        f"\n--- stderr\n{proc.stderr[-8000:]}")
    return {r["name"]: r for r in json.loads(out.read_text())["runs"]}


def test_ranks_are_placed_by_node_on_the_interleaved_ring(runs):
    for run in runs.values():
        assert run["placement"]["virtual"] is False
        assert run["placement"]["groups"] == RING
        assert run["placement"]["sectors"] == [0, 1, 0, 1]
        nodes = run["nodes"]
        assert len(set(nodes)) == 4 and all(nodes[2 * w] == nodes[2 * w + 1] for w in range(4))


def test_two_nodes_decoded_in_memory_and_bit_identical(runs):
    """w0 and w2: every group loses a member; the blocks used depend on whether Ray
    reports the four deaths in one recovery round or two, so only their count is fixed."""
    run = runs["two_nodes"]
    assert run["app"] == "hpl"
    assert run["identical"] is True and run["verified"] is True
    assert run["failed"] == [0, 1, 4, 5] and run["decoded"] == [0, 1, 4, 5]
    assert sorted(run["decode_blocks"]) == ["0", "1", "2", "3"]
    assert all(len(b) == 2 for b in run["decode_blocks"].values())  # k of each group
    assert set(run["sources"]) == {"memory"}
    assert run["parity_blocks"] > 0


def test_stacked_on_standby_a_lost_node_comes_back_from_the_partner_copies(runs):
    """w1 (ranks 2, 3) is lost; their partners 6, 7 live on w3, so the cheapest level
    recovers it, and RSBackup, the next level, is not needed."""
    run = runs["node"]
    assert run["identical"] is True and run["verified"] is True
    assert run["levels"] == ["standby"] and run["passed_over"] == []
    assert run["partner_copies"] > 0 and run["decoded"] == [] and run["parity_blocks"] > 0
    assert {"FAILURE", "RECOVER", "REPLACE_RECOVER", "RUNNING"} <= set(run["nr_states"])
    assert runs["two_nodes"]["nr_states"] == []  # RSBackup alone has no NR-MPI machine


def test_node_kills_removed_real_nodes(runs):
    assert len(runs["node"]["removed"]) == 1 and len(runs["two_nodes"]["removed"]) == 2
    assert set(runs["two_nodes"]["removed"]) <= set(runs["two_nodes"]["nodes"])


@pytest.mark.parametrize("name", ["node", "two_nodes"])
def test_ranks_on_different_nodes_talk_over_tcp(runs, name):
    """The direct data plane between nodes is TCP (ranks are placed two per worker node),
    and it carried the runs that survived the node kills."""
    direct = runs[name]["direct"]
    assert direct["tcp_connections"] > 0 and direct["frames"] > 0
    assert direct["auth_failed"] == direct["bad_frame"] == 0
