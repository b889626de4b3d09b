"""RSBackup on a local multi-node Ray cluster: whole nodes removed for real, with CG and
HPL compared bit for bit with failure-free runs.

Run by ``test_rs_backup_cluster.py`` in a subprocess (its own cluster, nothing shared
with the test session's Ray): ``python rs_cluster_script.py OUT.json``.

The cluster: a head (the driver, the coordinator's Inbox, the spares) and 4 worker nodes
running 2 ranks each (``rank_nodes``). Groups of 2 (``rs_group_size``): sectors
{w0, w1} and {w2, w3}; the ring is G0 = (0, 2), G1 = (4, 6), G2 = (1, 3), G3 = (5, 7).
A node is killed with ``Cluster.remove_node`` while every rank waits at iteration
``GATE`` (a gate actor on the head, so the kill hits a known iteration; after the kill
the gate stays open, and the survivors, paused by the recovery, pass it again later).
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ftactors as ft
from ftactors.apps.cg import CG
from ftactors.apps.hpl import HPL
from ftactors.protocols import RSBackup, StandbyReplacement

GATE = 8
OPTIONS = {"rs_group_size": 2, "rs_interval": 3, "rs_block_bytes": 64 << 10,
           "heartbeat_interval_s": None}
HPL_KW = {"n": 96, "nb": 8, "p": 2, "q": 4}


class Gate:
    """Holds the ranks at one iteration until the driver has killed what it wants."""

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
    """Mixin: wait at the gate (named ``gate_name``) at iteration GATE of the first loop."""

    gate_name: str | None = None

    async def on_safe_point(self, iteration: int) -> None:
        if self.gate_name and self.ft.position == (0, GATE):
            await ray.get_actor(self.gate_name).arrive.remote()
        await super().on_safe_point(iteration)


class GatedHPL(Gated, RSBackup, HPL):
    pass


class GatedStandbyCG(Gated, RSBackup, StandbyReplacement, CG):
    """RSBackup stacked on StandbyReplacement: partner copies, then encoded blocks."""

    backup_interval = 3


def outcome(r, app: str, reference) -> dict:
    if app.startswith("cg"):
        same = [o["zetas"] for o in r.results] == [o["zetas"] for o in reference]
    else:
        same = (np.array_equal(r.results[0]["x"], reference[0]["x"])
                and [o["fingerprint"] for o in r.results] == [o["fingerprint"] for o in reference])
    rec = r.events_of("rs_recovery")
    return {
        "identical": bool(same),
        "verified": all(o["verified"] for o in r.results),
        "decoded": sorted(rank for e in r.events_of("rs_decoded") for rank in e.detail["ranks"]),
        "decode_blocks": {str(e.detail["group"]): e.detail["blocks"]
                          for e in r.events_of("rs_decoded")},
        "sources": [e.detail["source"] for e in rec],
        "failed": sorted({rank for e in rec for rank in e.detail["failed"]}),
        "placement": r.events_of("rs_placement")[0].detail,
        "parity_blocks": len(r.events_of("rs_parity")),
        "recoveries": r.metrics["recoveries"],
        "partner_copies": sum(e.detail["partner"] is not None for e in r.events_of("backup")),
        "nr_states": sorted({e.detail["state"] for e in r.events_of("nr_state")}),
        "levels": [e.detail["level"] for e in r.events_of("recovery_level")],
        "passed_over": [[e.detail["level"], e.detail["reason"]]
                        for e in r.events_of("level_exhausted")],
        "direct": r.metrics.get("direct"),
    }


async def scenario(name, app, address, homes, head, *, remove, cluster, reference,
                   spare_nodes=None) -> dict:
    cls, kwargs = {"hpl": (GatedHPL, HPL_KW),
                   "cg+standby": (GatedStandbyCG, {"problem_class": "S"})}[app]
    cls = type(cls.__name__, (cls,), {"gate_name": f"gate-{name}"})
    gate = ray.remote(Gate).options(
        name=f"gate-{name}", num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    await gate.count.remote()
    opts = dict(OPTIONS, **({"spare_nodes": spare_nodes} if spare_nodes else {}))
    t0 = time.perf_counter()
    run = await ft.launch(cls, ranks=8, transport="ray", address=address, spares=2,
                          kwargs=kwargs, rank_nodes=homes, timeout_s=300, **opts)
    while await gate.count.remote() < 8:  # every rank waits at the gate
        await asyncio.sleep(0.05)
    await asyncio.gather(*(asyncio.to_thread(cluster.remove_node, node, False)
                           for node in remove))  # together, as far as threads go
    await gate.release.remote()
    r = await run
    out = outcome(r, app, reference)
    out.update(name=name, app=app, wall_s=time.perf_counter() - t0,
               removed=[n.node_id for n in remove])
    return out


async def main(path: str) -> None:
    reference = {
        "cg": (await ft.run_async(CG, ranks=8, transport="local",
                                  kwargs={"problem_class": "S"})).results,
        "hpl": (await ft.run_async(HPL, ranks=8, transport="local", kwargs=HPL_KW)).results}
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "object_store_memory": 256 << 20,
        "_system_config": {"health_check_initial_delay_ms": 0,
                           "health_check_period_ms": 200,
                           "health_check_timeout_ms": 500,
                           "health_check_failure_threshold": 5}})
    workers = [cluster.add_node(num_cpus=1, object_store_memory=128 << 20) for _ in range(4)]
    ray.init(address=cluster.address, logging_level="WARNING")
    cluster.wait_for_nodes()
    report = {"cluster_start_s": time.perf_counter() - t0, "runs": []}
    try:
        head = ray.get_runtime_context().get_node_id()

        def homes():
            return [w.node_id for w in workers for _ in range(2)]

        async def go(name, app, **kw):
            out = await scenario(name, app, cluster.address, homes(), head, cluster=cluster,
                                 reference=reference[app.split("+")[0]], **kw)
            out["nodes"] = homes()
            report["runs"].append(out)
            print(json.dumps(out), flush=True)

        # one whole node (w1: ranks 2, 3), then a fresh node takes its place; RSBackup
        # stacked on StandbyReplacement here: the partner copies (ranks 6, 7 on w3) bring
        # it back, on spares kept on the head node (one on w1 would go with it)
        await go("node", "cg+standby", remove=[workers[1]], spare_nodes=[head])
        workers[1] = cluster.add_node(num_cpus=1, object_store_memory=128 << 20)
        cluster.wait_for_nodes()
        # two nodes of different sectors (w0: ranks 0, 1; w2: ranks 4, 5)
        await go("two_nodes", "hpl", remove=[workers[0], workers[2]])
    finally:
        ray.shutdown()
        cluster.shutdown()
    report["wall_s"] = time.perf_counter() - t0
    with open(path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
