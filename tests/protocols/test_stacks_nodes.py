"""A node lost for real under one stack of each family, on a local multi-node Ray whose
nodes share no temp root.

``ftactors bench nodes`` does the work in a subprocess that starts and stops its own
``ray.cluster_utils.Cluster`` (a head and 4 worker nodes, 8 ranks, two per worker; one
cluster for every cell here), so nothing is shared with the session's Ray. In each cell
worker 1 (ranks 2 and 3) is removed without grace while every rank waits at iteration 8,
and the answer must equal the failure-free run's bit for bit. The families: a global-cut
stack (ReadyMessageFlush, whose RS level decodes the two ranks: each RS group lost one
member), partner copies (RSBackup over StandbyReplacement: the cheapest level serves),
and the stacks whose consistency protocol hands its parts to the levels
(GroupCoordination's groups and DDVPiggyback's clusters are one node each, so the whole
unit goes; its parts come back from the next unit's partner copies, or are decoded from
the next unit's parity). Every node's Ray processes have a temp root of their own
(``TMPDIR``), as on a cluster that shares no ``/tmp``: the direct plane's socket
directory must be each node's own, gone on the survivors at the end, and the removed
node's sockets must not answer. Nothing here is timed.
"""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

# stack, app, the level that must recover the node (no level passed over)
CELLS = [("rs+ready-flush", "hpl", "rs"), ("rs+standby", "cg", "standby"),
         ("standby+groups", "hpl", "standby"), ("rs+hc3i", "hpl", "rs")]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    out = tmp_path_factory.mktemp("nodes") / "nodes.json"
    cmd = [sys.executable, "-m", "ftactors", "bench", "nodes", "--json", str(out),
           "--cells", ",".join(f"{stack}:{app}" for stack, app, _ in CELLS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.exists(), (f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout\n"
                          f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    return {(c["stack"], c["app"]): c for c in json.loads(out.read_text())["cells"]}


@pytest.mark.parametrize("stack, app, level", CELLS, ids=[f"{s}-{a}" for s, a, _ in CELLS])
def test_the_node_is_survived_by_the_expected_level_with_the_failure_free_answer(
        cells, stack, app, level):
    cell = cells[(stack, app)]
    assert cell["error"] == "" and cell["verified"] is True and cell["identical"] is True
    assert cell["lost_ranks"] == [2, 3] and cell["failed"] == [2, 3]
    assert cell["levels"] == [level] and cell["passed_over"] == []
    if stack.endswith(("groups", "hc3i")):  # the parts came from that level, not Ray's store
        assert cell["part_sources"] == [level]
    # the ranks on different nodes talked over TCP, unharmed by the loss
    direct = cell["direct"]
    assert direct["tcp_connections"] > 0 and direct["auth_failed"] == direct["bad_frame"] == 0


@pytest.mark.parametrize("stack, app", [c[:2] for c in CELLS],
                         ids=[f"{s}-{a}" for s, a, _ in CELLS])
def test_socket_files_are_per_node_and_none_is_left(cells, stack, app):
    """Each worker's two ranks listened in its own temp root; after the run the
    survivors' directories are gone (their ranks, or a task, removed them) and the
    removed node's two sockets refuse connections (their listeners died with it)."""
    sockets = cells[(stack, app)]["sockets"]
    assert sockets["at_gate"] == [2, 2, 2, 2]
    assert sockets["left_on_survivors"] == {}
    assert sockets["removed_sockets"] == 2 and sockets["removed_listening"] == 0
