"""A worker node of a local ``ray.cluster_utils.Cluster`` lost as a machine is lost.

``Cluster.remove_node(node, allow_graceful=False)`` kills the node's raylet, object store
and agents, but not the worker processes the raylet started: each lives on until its own
check of its raylet (Ray's ``raylet_death_check_interval_milliseconds``) ends it, 0.37 s
after the removal returned on an idle machine (``remove_node`` itself took 4 ms). A rank
process there keeps computing and talking to the others on the direct plane meanwhile,
so a short run (HPL on 8 ranks: 0.4 s whole, with ranks at full speed) finished on the
"removed" node and its loss was never seen: no rank detected, nothing recovered, the
answer right. A machine takes every process with it at once, so ``remove_node`` here
stops the raylet's processes first (``SIGSTOP``: they run no further, and the raylet,
still alive, sees no death to report), removes the node, then kills them (``SIGKILL``).
Only where ``/proc`` lists processes (Linux); elsewhere the workers linger as Ray leaves
them.
"""
from __future__ import annotations

import os
import signal
import time

from .procs import descendants, state

ROUNDS = 10
"""Times the raylet's processes are listed and stopped, in case it started one meanwhile."""
STOP_WAIT_S = 2.0
"""How long ``remove_node`` waits for the stopped processes to be stopped: ``SIGSTOP``
returns before the kernel has taken a running process off its CPU (on a loaded machine
one was still running when the node went)."""


def _signal(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # ended meanwhile


def remove_node(cluster, node) -> None:
    """Remove worker ``node`` of ``cluster`` (a ``ray.cluster_utils.Cluster``) without
    grace, its worker processes (ranks, spares, tasks) at the same instant as the rest."""
    from ray._private import ray_constants
    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    stopped: set[int] = set()
    for _ in range(ROUNDS):  # until the raylet has started (forked) none meanwhile
        new = descendants(raylet) - stopped
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        stopped |= new
    _wait_stopped(stopped)
    try:
        cluster.remove_node(node, False)
    finally:
        _signal(stopped, signal.SIGKILL)


def _wait_stopped(pids: set[int]) -> None:
    """Return once every one of ``pids`` is stopped or gone (at most ``STOP_WAIT_S``)."""
    deadline = time.monotonic() + STOP_WAIT_S
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {pid for pid in waiting if state(pid) not in (None, "T", "t", "Z", "X")}
        if waiting:
            time.sleep(0.001)


def shutdown_cluster(cluster) -> None:
    """Shut a local ``ray.cluster_utils.Cluster`` down, and Ray's default address file
    with it if the file still names this cluster.

    ``Cluster`` writes the file when its head starts (so that a plain ``ray.init()``
    joins it) and removes it at the end of ``shutdown``, from where Ray's default temp
    dir is *then*: ``$RAY_TMPDIR``, else ``$TMPDIR``, else ``/tmp``. A driver that
    changed ``TMPDIR`` meanwhile (``bench nodes`` gives each node a temp root of its
    own) had it removed from the wrong place, and the file left in ``/tmp/ray`` named a
    GCS that was gone: every plain ``ray.init()`` on the machine then waited minutes for
    it ("Failed to get cluster ID from GCS server"). So each place the file may be is
    looked at, and a file naming this cluster is removed; one naming another cluster is
    not ours to remove."""
    address = cluster.address
    try:
        cluster.shutdown()
    finally:
        roots = {os.environ.get("RAY_TMPDIR"), os.environ.get("TMPDIR"), "/tmp"} - {None, ""}
        for root in roots:
            path = os.path.join(root, "ray", "ray_current_cluster")
            try:
                with open(path) as f:
                    named = f.read().strip()
                if named == address:
                    os.remove(path)
            except OSError:
                pass  # no file there, or another process removed it meanwhile
