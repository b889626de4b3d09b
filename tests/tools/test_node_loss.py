"""A node lost as a machine is: its raylet's processes (Ray's workers: ranks, spares)
are stopped before the node is removed and dead once it is, not left running until each
notices its raylet gone (``tools/node_loss.py``). A fake raylet with a worker child
stands in for a Ray node: no Ray is started."""
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from ftactors.tools.node_loss import remove_node
from ftactors.tools.procs import state

# a "raylet" that starts a "worker" (its child, which computes on), says its pid, waits
RAYLET = ("import subprocess, sys, time\n"
          "w = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
          "print(w.pid, flush=True)\n"
          "time.sleep(600)\n")


class FakeCluster:
    """``remove_node`` as Ray's: kills the raylet (not its workers), and notes the
    worker's state when called."""

    def __init__(self, worker: int):
        self.worker = worker
        self.seen = None

    def remove_node(self, node, allow_graceful):
        assert allow_graceful is False
        self.seen = state(self.worker)
        raylet = node.all_processes["raylet"][0].process
        raylet.kill()
        raylet.wait()


def test_the_workers_stop_before_the_node_goes_and_die_with_it():
    raylet = subprocess.Popen([sys.executable, "-c", RAYLET], stdout=subprocess.PIPE, text=True)
    worker = int(raylet.stdout.readline())
    try:
        node = SimpleNamespace(all_processes={"raylet": [SimpleNamespace(process=raylet)]})
        cluster = FakeCluster(worker)
        remove_node(cluster, node)
        assert cluster.seen == "T"  # stopped: it ran no further once the loss began
        deadline = time.monotonic() + 10  # the kernel delivers the SIGKILL sent
        while state(worker) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state(worker) in (None, "Z")
    finally:
        for pid in (worker, raylet.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raylet.wait()
