"""Node loss under every stack that works: which level recovered, and the answer.

On a local multi-node Ray (``ray.cluster_utils.Cluster``: a head, which runs the driver
and the spares, and ``--workers`` worker nodes running ``--ranks`` ranks in blocks,
``rank_nodes``), each run removes worker ``--remove`` (or the cell's own workers, see
``--cells``) without grace (``tools/node_loss.remove_node``: its raylet, object store
and every process on it, the ranks too, go at once)
while every rank waits at iteration ``--gate`` of its first loop (a gate actor on the
head, so the loss hits a known iteration whatever the load; the survivors go on when the
node is gone). The cells are every stack of ``working_stacks`` (or ``--cells``) x CG
class S and HPL; fresh workers take the removed ones' places before the next cell.

Each stack keeps its state where a lost node does not take it: partner copies on the
rank half the job further on (standby, every 2 iterations), RS groups across nodes
(rs, every 3), global sets on stable storage (ready-flush, every 4), GroupCoordination's
groups and DDVPiggyback's clusters of 2 ranks, one per node, so the node's loss is a
whole unit's, with the levels keeping each unit's parts in the next one. Its table says
per cell the level that recovered (``recovery_level``; ``>`` after the levels passed
over), the sources of the restored parts where the consistency protocol hands its parts
to the levels, and whether the answer equals the failure-free run's (``transport=
"local"``, the same program) bit for bit.

Nodes that share no ``/tmp``: every node's Ray processes get a temp root of their own
(``TMPDIR``), as on a real cluster, and after each run the bench checks the direct
plane's socket files (``ray.run_dir``): the run's directory on every surviving node is
gone (its ranks or a task removed it), and the removed node's sockets refuse
connections (their listeners died with the node; its root is then deleted, as a lost
machine takes its disk with it). The table's ``sockets`` column says ``clean`` or what
was left. Nothing here is a timing claim: ``wall_s`` is printed for orientation only.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
import time

import ftactors as ft
from ftactors.tools.apps_cli import protocol_stack, working_stacks
from ftactors.tools.node_loss import remove_node, shutdown_cluster
from ftactors.tools.programs import app_module, same_answer

from ._harness import machine_info, table, usage_error, write_results

APPS = {"cg": {"problem_class": "S"}, "hpl": {"n": 96, "nb": 8, "p": 2, "q": 4}}
"""The apps and their settings (CG class S has 15 iterations, HPL 12 panels)."""

LEVEL_OPTIONS = {
    "standby": {"backup_interval": 2},
    "rs": {"rs_group_size": 2, "rs_interval": 3, "rs_block_bytes": 64 << 10},
    "ready-flush": {"checkpoint_interval": 4, "checkpoint_storage": "stable"},
    "groups": {"groups": "fixed:2", "group_checkpoint_interval": 3},
    "hc3i": {"clusters": "fixed:2"},
}
"""Each protocol's options in a stack."""

HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200,
          "health_check_timeout_ms": 500, "health_check_failure_threshold": 5}
"""The head's node health checks: a removed node is seen in about a second."""


class Gate:
    """Holds the ranks at one iteration until the driver has removed its node."""

    def __init__(self):
        self.arrived = 0
        self.open = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        await self.open.wait()

    def count(self) -> int:
        return self.arrived

    def release(self) -> None:
        self.open.set()


class Gated:
    """Mixin: wait at the gate ``gate_name`` at iteration ``gate_at`` of the first loop
    (a rank restored to an earlier point passes the open gate again)."""

    gate_name: str = ""
    gate_at: int = 0

    async def on_safe_point(self, iteration: int) -> None:
        if self.ft.position == (0, self.gate_at):
            import ray
            await ray.get_actor(self.gate_name).arrive.remote()
        await super().on_safe_point(iteration)


def stack_options(stack: list[str], checkpoint_dir: str) -> dict:
    """The ``ft.run`` options of ``stack`` (see ``LEVEL_OPTIONS``; beside a consistency
    protocol that hands its parts to the levels, a level's own-round options are left
    out: the options of role ``OWN_ROUNDS``)."""
    from ftactors.protocols import PROTOCOLS
    from ftactors.tools.options import OWN_ROUNDS, with_role
    parts = any(PROTOCOLS[name].hands_parts for name in stack)
    options = {}
    for name in stack:
        ignored = with_role([PROTOCOLS[name]], OWN_ROUNDS) if parts else ()
        options.update({k: v for k, v in LEVEL_OPTIONS[name].items() if k not in ignored})
    if "ready-flush" in stack:
        options["checkpoint_dir"] = checkpoint_dir
    return options


class NodeCluster:
    """A head and worker nodes, each node's Ray processes with a temp root of their own."""

    def __init__(self, workers: int, root: str):
        from ray.cluster_utils import Cluster
        self.root = root
        self.made = 0
        head_tmp = self._tmp("head")
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "include_dashboard": False, "object_store_memory": 256 << 20,
            "env_vars": {"TMPDIR": head_tmp}, "_system_config": HEALTH})
        # the driver shares its node's temp root (it removes the run's directory there)
        os.environ["TMPDIR"] = tempfile.tempdir = head_tmp
        self.tmp = {}  # node id -> its temp root
        self.workers = [self.add_worker() for _ in range(workers)]

    def _tmp(self, name: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(path, mode=0o700)
        return path

    def add_worker(self):
        self.made += 1
        tmp = self._tmp(f"w{self.made}")
        node = self.cluster.add_node(num_cpus=1, object_store_memory=128 << 20,
                                     env_vars={"TMPDIR": tmp})
        self.tmp[node.node_id] = tmp
        return node

    def connect(self) -> str:
        import ray
        ray.init(address=self.cluster.address, logging_level="WARNING")
        self.cluster.wait_for_nodes()
        self.tmp[ray.get_runtime_context().get_node_id()] = tempfile.gettempdir()
        return self.cluster.address

    def homes(self, ranks: int) -> list[str]:
        per = -(-ranks // len(self.workers))
        return [self.workers[r // per].node_id for r in range(ranks)]

    async def remove(self, indices: list[int]) -> list[str]:
        """Remove the workers ``indices`` without grace, together (as far as threads
        go); the removed nodes' ids."""
        gone = [self.workers[i] for i in indices]
        await asyncio.gather(*(asyncio.to_thread(remove_node, self.cluster, node)
                               for node in gone))
        return [node.node_id for node in gone]

    def replace(self, indices: list[int]) -> None:
        """Start fresh workers in the places of the workers ``indices`` (in the main
        thread: Ray's node start sets signal handlers)."""
        for i in indices:
            self.workers[i] = self.add_worker()
        self.cluster.wait_for_nodes()

    def shutdown(self) -> None:
        import ray
        ray.shutdown()
        shutdown_cluster(self.cluster)


def run_dirs(root: str) -> list[str]:
    """The direct plane's run directories under a node's temp root."""
    return sorted(d for d in os.listdir(root) if d.startswith("ftactors-")) if os.path.isdir(
        root) else []


def new_sockets(root: str, before: list[str]) -> list[str]:
    """The socket files under a node's temp root in run directories not in ``before``."""
    return [os.path.join(root, d, f) for d in run_dirs(root) if d not in before
            for f in os.listdir(os.path.join(root, d))]


def listening(path: str) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
    return True


def socket_check(nodes: NodeCluster, removed: list[str], before: dict[str, list[str]]) -> dict:
    """After a run: the run directories it left on surviving nodes (none expected), and
    on the removed nodes the socket files and those still listening (none expected)."""
    left = {}
    for node, tmp in nodes.tmp.items():
        new = sorted(set(run_dirs(tmp)) - set(before.get(node, [])))
        if node not in removed and new:
            left[node[:8]] = new
    gone = {node: nodes.tmp.pop(node) for node in removed}
    socks = [s for node, root in gone.items() for s in new_sockets(root, before.get(node, []))]
    alive = [s for s in socks if listening(s)]
    for root in gone.values():  # a lost machine takes its disk with it
        shutil.rmtree(root, ignore_errors=True)
    return {"left_on_survivors": left, "removed_sockets": len(socks),
            "removed_listening": len(alive)}


async def run_cell(stack: list[str], app: str, remove: list[int], nodes: NodeCluster, args,
                   reference: dict, head: str) -> dict:
    """One stack x app with the workers ``remove`` removed at the gate."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    mod = app_module(app)
    name = f"gate-{'+'.join(stack)}-{app}-{'+'.join(map(str, remove))}"
    cls = type(f"Gated{name.replace('-', '_').replace('+', '_')}",
               (Gated, protocol_stack(mod.RANK_CLASS, stack)),
               {"gate_name": name, "gate_at": args.gate, "__module__": __name__})
    gate = ray.remote(Gate).options(
        name=name, num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    await gate.count.remote()
    before = {node: run_dirs(tmp) for node, tmp in nodes.tmp.items()}
    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=nodes.root)
    homes = nodes.homes(args.ranks)
    t0 = time.perf_counter()
    run = await ft.launch(cls, args.ranks, transport="ray", address=nodes.cluster.address,
                          kwargs=APPS[app], spares=args.spares, rank_nodes=homes,
                          spare_nodes=[head], timeout_s=args.timeout_s,
                          **stack_options(stack, ckpt))
    ended = asyncio.ensure_future(run.result())
    while not ended.done() and await gate.count.remote() < args.ranks:
        await asyncio.sleep(0.05)
    reached = not ended.done()  # else it failed (or timed out) before the gate
    lost, at_gate, removed = [], [], []
    if reached:
        doomed = {nodes.workers[i].node_id for i in remove}
        lost = [r for r, home in enumerate(homes) if home in doomed]
        at_gate = [len(new_sockets(nodes.tmp[w.node_id], before.get(w.node_id, [])))
                   for w in nodes.workers]
        removed = await nodes.remove(remove)
        await gate.release.remote()
    error, result = "", None
    try:
        result = await ended
    except (ft.RankFailed, ft.RankError, ft.ProtocolError, TimeoutError) as exc:
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    if not reached:  # nothing was removed, so nothing was tested
        error, result = ("the run ended before its ranks reached the gate, no node was "
                         f"removed: {error or 'no error'}"), None
    wall = time.perf_counter() - t0
    ray.kill(gate)
    shutil.rmtree(ckpt, ignore_errors=True)
    out = {"stack": "+".join(stack), "app": app, "removed_workers": remove,
           "lost_ranks": lost, "error": error, "wall_s": wall,
           "sockets": {"at_gate": at_gate, **socket_check(nodes, removed, before)}
           if reached else {}}
    if result is None:
        return {**out, "levels": [], "passed_over": [], "verified": False, "identical": False}
    ok, _, record = mod.summarize(result)
    close, identical = same_answer(record, reference[app])
    detected = sorted({e.rank for e in result.events_of("failure_detected")})
    if not set(detected) & set(lost):  # the right answer, but no loss was survived
        ok, out["error"] = False, (
            f"NOT TESTED: no rank of the removed node ({lost}) was detected failed: they "
            f"returned before their node went, so nothing was recovered")
    levels = [e.detail["level"] for e in result.events_of("recovery_level")]
    if len(stack) == 1 and result.metrics["recoveries"]:
        levels = stack  # one protocol: its own recovery is the only level (no Escalation)
    return {**out, "verified": bool(ok and close), "identical": bool(identical),
            "levels": levels,
            "passed_over": [[e.detail["level"], e.detail["reason"]]
                            for e in result.events_of("level_exhausted")],
            "part_sources": sorted({str(s) for e in result.events_of("part_sources")
                                    for s in e.detail["sources"].values()}),
            # per restored rank, where its part came from (the last round's)
            "rank_sources": {str(r): str(src) for e in result.events_of("part_sources")
                             for r, src in e.detail["sources"].items()},
            # ranks declared failed (a group or cluster restarted whole declares the
            # first; the others' deaths are moot) and ranks given a new process
            "detected": detected,
            "replaced": sorted({e.rank for kind in ("replaced", "respawned")
                                for e in result.events_of(kind)}),
            "recoveries": result.metrics["recoveries"],
            "direct": result.metrics.get("direct"), **rs_and_standby(result)}


def rs_and_standby(result) -> dict:
    """What RSBackup and StandbyReplacement did: RS groups and sectors over the nodes
    (``placement``), parity rounds, the ranks decoded and from which blocks, where each
    RS recovery read its blocks, partner copies made and the NR-MPI states passed."""
    placement = result.events_of("rs_placement")
    return {
        "placement": placement[0].detail if placement else None,
        "parity_blocks": len(result.events_of("rs_parity")),
        "decoded": sorted(r for e in result.events_of("rs_decoded") for r in e.detail["ranks"]),
        "decode_blocks": {str(e.detail["group"]): e.detail["blocks"]
                          for e in result.events_of("rs_decoded")},
        "rs_sources": [e.detail["source"] for e in result.events_of("rs_recovery")],
        "partner_copies": sum(e.detail["partner"] is not None
                              for e in result.events_of("backup")),
        "nr_states": sorted({e.detail["state"] for e in result.events_of("nr_state")})}


def level_text(cell: dict) -> str:
    """The levels passed over, then the one that recovered (``standby>rs``)."""
    passed = [p[0] for p in cell.get("passed_over", [])]
    return ">".join(dict.fromkeys([*passed, *cell["levels"]])) or "-"


def lost_sources(cell: dict) -> str:
    """Where the lost ranks' parts came from, and the others' restored with them, where
    the consistency protocol hands its parts to the levels (``-`` elsewhere)."""
    by_rank = cell.get("rank_sources") or {}
    if not by_rank:
        return "-"
    lost = {str(r) for r in cell["lost_ranks"]}
    mine = sorted({by_rank[r] for r in lost if r in by_rank})
    others = sorted({s for r, s in by_rank.items() if r not in lost})
    return ",".join(mine) + (f" (others: {','.join(others)})" if others else "")


def socket_text(cell: dict) -> str:
    s = cell["sockets"]
    if not s:
        return "not checked"
    if not s["left_on_survivors"] and not s["removed_listening"]:
        return "clean"
    return (f"left {s['left_on_survivors']}" if s["left_on_survivors"] else "") + (
        f" {s['removed_listening']} removed still listening" if s["removed_listening"] else "")


def parse_cells(text: str | None, remove: int) -> list[tuple[list[str], str, list[int]]]:
    """``--cells``: ``STACK:APP[:W+W...],...`` (``rs+standby:cg``, ``rs:hpl:0+2``: the
    workers removed, default ``remove``); None: every working stack x every app.

    Raises:
        ValueError: an unknown app or a cell not of the form STACK:APP[:W+W...].
    """
    from ftactors.protocols import PROTOCOLS
    if text is None:
        return [(stack, app, [remove]) for stack in working_stacks(PROTOCOLS) for app in APPS]
    cells = []
    for item in (c.strip() for c in text.split(",") if c.strip()):
        stack, app, *workers = item.split(":")
        try:
            gone = [int(w) for w in workers[0].split("+")] if workers else [remove]
        except ValueError:
            gone = []
        if app not in APPS or len(workers) > 1 or not gone:
            raise ValueError(f"--cells: {item!r} is not STACK:APP[:W+W...] with APP in "
                             f"{sorted(APPS)}")
        cells.append((stack.split("+"), app, gone))
    return cells


def add_arguments(parser) -> None:
    parser.add_argument("--cells", default=None,
                        help="STACK:APP,... to run (default: every working stack x cg, hpl)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks (default 8)")
    parser.add_argument("--workers", type=int, default=4,
                        help="worker nodes; ranks go in blocks on them (default 4)")
    parser.add_argument("--remove", type=int, default=1,
                        help="the worker node removed in every run (default 1)")
    parser.add_argument("--gate", type=int, default=8,
                        help="the iteration at which the node goes (default 8)")
    parser.add_argument("--spares", type=int, default=2,
                        help="warm spares, on the head node (default 2)")
    parser.add_argument("--timeout-s", type=float, default=900.0,
                        help="per run (default 900: CG under DDVPiggyback took 190-293 s "
                             "on a loaded 2-core machine)")


def main(args, nodes: NodeCluster | None = None) -> int:
    """``ftactors bench nodes``; ``nodes``: a cluster this process already drives
    (connected, ``--workers`` workers), left running, instead of one of its own."""
    try:
        cells = parse_cells(args.cells, args.remove)
        for stack, _, _ in cells:
            protocol_stack(app_module("cg").RANK_CLASS, stack)
    except ValueError as exc:
        return usage_error("nodes", str(exc))
    if (args.workers < 2 or args.ranks < args.workers or args.ranks % args.workers
            or args.gate < 1 or any(not 0 <= w < args.workers or len(set(gone)) < len(gone)
                                    for _, _, gone in cells for w in gone)):
        return usage_error("nodes", "needs --workers >= 2, workers removed in 0..--workers-1 "
                           "(each once per cell), --ranks a multiple of --workers, --gate >= 1")
    machine = machine_info()
    out = asyncio.run(_bench(args, cells, nodes))
    rows = [["stack", "app", "lost ranks", "level that recovered", "lost ranks' parts from",
             "verified", "bit-identical", "sockets", "wall s"]]
    for c in out["cells"]:
        rows.append([c["stack"], c["app"], ",".join(map(str, c["lost_ranks"])), level_text(c),
                     lost_sources(c), str(c["verified"]),
                     str(c["identical"]), socket_text(c), f"{c['wall_s']:.1f}"])
    print(table(rows, left=8))
    for c in out["cells"]:
        if c["error"]:
            print(f"  {c['stack']} x {c['app']}: {c['error']}")
    ok = all(c["verified"] and c["identical"] and socket_text(c) == "clean"
             for c in out["cells"])
    print(f"  {sum(c['verified'] for c in out['cells'])} of {len(out['cells'])} cell(s) "
          f"verified; wall time {out['wall_s']:.1f} s (cluster start {out['cluster_start_s']:.1f}"
          f" s; load average {machine['load_avg_1m']:.1f} on {machine['cpus']} cpus)")
    write_results(args, "nodes", out, machine)
    return 0 if ok else 1


async def _bench(args, cells, nodes: NodeCluster | None = None) -> dict:
    import ray
    t_all = time.perf_counter()
    reference = {}
    for app in sorted({app for _, app, _ in cells}):
        mod = app_module(app)
        result = await ft.run_async(mod.RANK_CLASS, args.ranks, transport="local",
                                    kwargs=APPS[app])
        reference[app] = mod.summarize(result)[2]
    own = nodes is None
    if own:
        root = tempfile.mkdtemp(prefix="ftn-")  # short: Unix socket paths are limited
        nodes = NodeCluster(args.workers, root)
    elif len(nodes.workers) != args.workers:
        raise ValueError(f"the cluster given has {len(nodes.workers)} workers, not "
                         f"--workers {args.workers}")
    try:
        t0 = time.perf_counter()
        if own:
            nodes.connect()
        out = {"cluster_start_s": time.perf_counter() - t0, "cells": [],
               "ranks": args.ranks, "workers": args.workers,
               "gate": args.gate}
        head = ray.get_runtime_context().get_node_id()
        for i, (stack, app, remove) in enumerate(cells):
            cell = await run_cell(stack, app, remove, nodes, args, reference, head)
            if i < len(cells) - 1:  # the next cell finds every worker
                nodes.replace(remove)
            out["cells"].append(cell)
            print(f"  {cell['stack']} x {app}: {level_text(cell)}, verified {cell['verified']}"
                  f", identical {cell['identical']}, sockets {socket_text(cell)}, "
                  f"{cell['wall_s']:.1f} s" + (f" ({cell['error']})" if cell["error"] else ""),
                  file=sys.stderr, flush=True)
    finally:
        if own:
            nodes.shutdown()
            shutil.rmtree(nodes.root, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - t_all
    return out
