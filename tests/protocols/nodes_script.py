"""Runs in its own Python process (see test_stacks_nodes.py): one local multi-node Ray
cluster for every node test, started once (a cluster start costs a head, its workers and a
driver's connection, and two clusters at once starve each other on a 2-core machine).

``python nodes_script.py OUT CELLS EXPERIMENT [MIGRATE_ARG ...]`` starts ``bench nodes``'
``NodeCluster`` (a head and 4 worker nodes, each node's Ray processes with a temp root of
their own) and runs on it, in turn:

- ``ftactors bench nodes --cells CELLS`` (removes and replaces its workers), to
  ``OUT/nodes.json``;
- ``ftactors bench migrate --address ...`` in a process of its own that joins the cluster,
  with ``MIGRATE_ARG``s, to ``OUT/migrate.json``;
- the chaos experiment file ``EXPERIMENT`` (``cluster: {nodes: N}``: its N workers are added
  to this cluster and removed after it), its results to ``OUT/chaos``.

A part that fails does not stop the others; ``OUT/parts.json`` maps each part to its exit
code (0: all verified) or its traceback, and the process exits 1 if any part failed.
"""
import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from ftactors.tools.bench import load_benchmarks
from ftactors.tools.chaos import run_experiment
from ftactors.tools.experiment import load_experiment

load_benchmarks()  # the checkout's benchmarks/, found as ``ftactors bench`` finds them
from benchmarks import nodes as bench_nodes  # noqa: E402 - importable once loaded


def _chaos(path: str, out: str, cluster) -> int:
    rows = asyncio.run(run_experiment(load_experiment(path), out, cluster=cluster))
    return 0 if rows and all(row["verified"] for row in rows) else 1


def main(out: str, cells: str, experiment: str, migrate: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    bench_nodes.add_arguments(parser)
    # HPL cells take seconds to a minute or two under load: a run stuck for 5 minutes
    # ends its cell with its error (bench nodes' own default is 15 minutes, for CG)
    args = parser.parse_args(["--json", os.path.join(out, "nodes.json"), "--cells", cells,
                              "--timeout-s", "300"])
    root = tempfile.mkdtemp(prefix="ftn-")  # short: Unix socket paths are limited
    t0 = time.perf_counter()
    nodes = bench_nodes.NodeCluster(args.workers, root)
    parts = {}
    try:
        address = nodes.connect()
        steps = {
            "nodes": lambda: bench_nodes.main(args, nodes),
            "migrate": lambda: subprocess.run(
                [sys.executable, "-m", "ftactors", "bench", "migrate", "--address", address,
                 "--json", os.path.join(out, "migrate.json"), *migrate], timeout=900).returncode,
            "chaos": lambda: _chaos(experiment, os.path.join(out, "chaos"), nodes.cluster),
        }
        print(f"nodes_script: cluster up in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)
        for name, step in steps.items():
            t0 = time.perf_counter()
            try:
                parts[name] = step()
            except Exception:  # noqa: BLE001 - reported to the test, the next part still runs
                parts[name] = traceback.format_exc()
                print(parts[name], file=sys.stderr, flush=True)
            print(f"nodes_script: {name} took {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    finally:
        with open(os.path.join(out, "parts.json"), "w") as f:
            json.dump(parts, f)
        nodes.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(rc == 0 for rc in parts.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
