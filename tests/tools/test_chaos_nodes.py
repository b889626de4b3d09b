"""A chaos node kill on a local multi-node Ray: a worker node is removed without grace
while the stencil runs on it, StandbyReplacement rebuilds its two ranks from their
partners' copies, and the answer equals the failure-free run's.

``ftactors chaos`` runs in a subprocess: it starts and stops its own
``ray.cluster_utils.Cluster``, so nothing is shared with the test session's Ray.
"""
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = pytest.mark.ray

EXPERIMENT = {
    "name": "nodes", "transport": "ray", "cluster": {"nodes": 2}, "timeout_s": 300,
    "matrix": {"app": "stencil", "protocol": "standby", "ranks": 4, "schedule": "node",
               "seed": 0},
    "apps": {"stencil": {"ny": 96, "nx": 96, "iterations": 400}},
    # partners are r + n/2: ranks 2, 3 (worker 1) keep their copies on ranks 0, 1 (worker 0)
    "protocols": {"standby": {"spares": 2, "backup_interval": 5}},
    "schedules": {"node": {"node_kills": [[1, 1.5]]}},
}


def test_a_removed_node_is_survived_and_recorded(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    out = tmp_path / "res"
    cmd = [sys.executable, "-m", "ftactors", "chaos", str(path), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (f"{' '.join(cmd)} exited with {proc.returncode}\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
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
