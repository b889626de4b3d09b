"""A node lost for real under one stack of each family, on a local multi-node Ray whose
nodes share no temp root.

``ftactors bench nodes`` does the work in a subprocess that starts and stops its own
``ray.cluster_utils.Cluster`` (a head and 4 worker nodes, 8 ranks, two per worker; one
cluster for every cell here), so nothing is shared with the session's Ray. In each cell
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
nodes' sockets must not answer. Nothing here is timed.
"""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

# stack, app, the workers removed, the level that must recover them (none passed over)
CELLS = [("rs+ready-flush", "hpl", "0+2", "rs"), ("rs+standby", "hpl", "1", "standby"),
         ("standby+groups", "hpl", "1", "standby"), ("rs+hc3i", "hpl", "1", "rs")]
IDS = [f"{s}-{a}-w{w}" for s, a, w, _ in CELLS]
LOST = {"1": [2, 3], "0+2": [0, 1, 4, 5]}  # two ranks per worker, in blocks
# RSBackup's ring of groups of 2 over w0..w3 (ranks 2w, 2w+1 on worker w): G0 = (0, 2),
# G1 = (4, 6), G2 = (1, 3), G3 = (5, 7); sectors {w0, w1} and {w2, w3}
RING = [[0, 2], [4, 6], [1, 3], [5, 7]]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    out = tmp_path_factory.mktemp("nodes") / "nodes.json"
    cmd = [sys.executable, "-m", "ftactors", "bench", "nodes", "--json", str(out),
           "--cells", ",".join(f"{stack}:{app}:{w}" for stack, app, w, _ in CELLS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.exists(), (f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n"
                          f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    return {(c["stack"], c["app"], "+".join(map(str, c["removed_workers"]))): c
            for c in json.loads(out.read_text())["cells"]}


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
