"""Group-based checkpoint/restart (GroupCoordination): NORM, GP1, GP4 and GP compared.

The paper's comparison (Ho, Wang & Lau 2008, Figures 5-9) with four group formations:
NORM (one group: global coordination, nothing logged), GP1 (one rank per group: no
coordination, every message logged), GP4 (four groups of consecutive ranks) and GP (the
groups Algorithm 2 finds in a trace of a failure-free run, ``protocols/shared/units.py``).

Workload (``GridWorkload``): ranks on a P x Q grid, row-major (rank = i * Q + j), like
HPL's process grid. Every iteration a rank "computes" for ``--compute-ms`` times
(1 + ``--jitter`` x a seeded uniform draw per rank and iteration: the uneven progress of
real ranks); in its process column (a ``split`` communicator) a panel of
``--heavy-kib`` is broadcast from a rotating root and a pivot is found by ``allreduce``,
as in HPL's panel factorisation (heavy traffic, and the column moves in step); and it
sends ``--light-kib`` to its right neighbour in its row, which that neighbour receives
one iteration later (loose coupling between columns). Q is the largest power of two <= sqrt(n) that divides n, so 32 ranks are HPL's
8 x 4 grid of the paper's Table 1 and GP finds its four columns.

Per rank count and formation, two runs of ``class _(GroupCoordination, GridWorkload)``
with every group checkpointing every ``--interval`` iterations (all groups at the same
iterations, like the paper's checkpoint signal):

* **failure-free**: per process, *coordination* = arrival at the checkpoint's safe point
  to the last ready message of its group (``flush_s`` of ``group_checkpoint_part``, on
  the run clock: virtual on ``sim``) and *save* (``save_s``: snapshot, on this CPU); their
  sum is the paper's checkpoint time, reported as mean per process per checkpoint and
  summed over processes (Figure 6a). *Logged*: inter-group messages and bytes the
  senders logged (``group_log_total``). *Overhead*: the run's time (run clock) over the
  same workload without the protocol, run just before it (the baseline).
* **one kill** (rank n/2 + 1, between the first and second checkpoint): *restart* per
  restarted process = its new incarnation's start to holding every message resent to it
  (``group_caught_up``): the paper's "from the recreation of the process to its return
  to normal execution", mean and summed over the restarted processes (Figure 6b); it
  includes fetching the snapshot (on ``sim`` it costs its size over the network) and the
  coordinator's rounds; *resent* volume and count (Figures 7 and 8).

The targets of the issue: GP coordination at least 80% below NORM at 32 simulated ranks
and beyond, GP restart (per restarted process) within 1.5 x NORM. Ranks: real ones on Ray
(``--ray-ranks``, the embedded local Ray), simulated ones on ``sim`` (``--sim-ranks``).
NORM's flush is all-to-all inside its one group: n(n - 1) ready messages per checkpoint,
so 1024 simulated ranks take minutes of wall time per run.
"""
from __future__ import annotations

import asyncio
import math
import random
import statistics
import tempfile
from pathlib import Path

import numpy as np

import ftactors as ft
from ftactors.protocols import GroupCoordination
from ftactors.protocols.shared.units import load_groups, pairs_from_trace, suggest_groups

from ._harness import add_rank_counts, add_sim_network, rank_plan, sim_network, usage_error, write_results

KIB = 1024
ROW = 4  # tag
FORMATIONS = ("NORM", "GP1", "GP4", "GP")


def grid_shape(n: int) -> tuple[int, int]:
    """(P rows, Q columns): Q the largest power of two <= sqrt(n) dividing n."""
    q = 1
    while (q * 2) ** 2 <= n and n % (q * 2) == 0:
        q *= 2
    return n // q, q


class GridWorkload(ft.Rank):
    """HPL's pattern: a panel broadcast and a pivot allreduce inside each process
    column (heavy, and a synchronisation of the column), a light message along rows
    received an iteration later (loose coupling between columns)."""

    async def main(self, iterations: int, compute_s: float, jitter: float, heavy: int,
                   light: int, state: int, seed: int = 0) -> dict:
        comm, r, n = self.comm, self.rank, self.size
        p, q = grid_shape(n)
        i, j = divmod(r, q)
        column = await comm.split(color=j, key=i)
        right, left = i * q + (j + 1) % q, i * q + (j - 1) % q
        self.register("state", np.full(max(1, state // 8), float(r)))
        panel, small = np.full(max(1, heavy // 8), float(r)), np.full(max(1, light // 8), 1.0)
        async for it in self.iterations(iterations):
            if it > 0 and q > 1:
                self.state[0] += (await comm.recv(source=left, tag=ROW))[0]
            draw = random.Random(seed * 1_000_003 + r * 10_007 + it).random()
            await asyncio.sleep(compute_s * (1 + jitter * draw))
            if p > 1:
                root = it % p
                got = await column.bcast(panel if i == root else None, root=root)
                pivot = await column.allreduce(float(got[0]) + i, op=ft.MAX)
                self.state[1 % self.state.size] += pivot
            if q > 1 and it < iterations - 1:
                await comm.send(small, dest=right, tag=ROW)
        return {"checksum": float(self.state.sum())}


class GroupedWorkload(GroupCoordination, GridWorkload):
    """The workload under GroupCoordination."""


def formation(name: str, n: int, trace_groups: list[list[int]]):
    """The ``groups`` option of a formation."""
    return {"NORM": "one", "GP1": "single", "GP4": f"fixed:{math.ceil(n / 4)}",
            "GP": trace_groups}[name]


def _where(row: dict) -> str:
    o = f"o={row['send_overhead_us']:g}us" if row["transport"] == "sim" else ""
    return f"{row['transport']:4} {row['ranks']:5} {o:8}"


def _mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def checkpoint_figures(result) -> dict:
    """Per-process checkpoint time (coordination + save) and what was logged."""
    parts = result.events_of("group_checkpoint_part")
    logged = result.events_of("group_log_total")
    return {"coordination_s": _mean(e.detail["flush_s"] for e in parts),
            "save_s": _mean(e.detail["save_s"] for e in parts),
            "checkpoint_s": _mean(e.detail["flush_s"] + e.detail["save_s"] for e in parts),
            "summed_s": sum(e.detail["flush_s"] + e.detail["save_s"] for e in parts)
            / max(1, len({tuple(e.detail["position"]) for e in parts})),
            "logged_messages": sum(e.detail["messages"] for e in logged),
            "logged_bytes": sum(e.detail["bytes"] for e in logged)}


def restart_figures(result) -> dict:
    """Per restarted process: its new incarnation's start to holding every message
    resent to it (``group_caught_up``)."""
    restarted = {e.rank for e in result.events_of("respawned")}
    starts = {e.rank: e.time for e in result.events_of("start")
              if e.rank in restarted and e.detail.get("incarnation", 0) > 0}
    caught_up = {e.rank: e.time for e in result.events_of("group_caught_up")}
    if not restarted or set(caught_up) != restarted:
        raise RuntimeError(f"restarted {sorted(restarted)}, caught up {sorted(caught_up)}")
    times = [caught_up[r] - starts[r] for r in restarted]
    resent = result.events_of("group_resent")
    return {"restarted": len(restarted), "restart_s": _mean(times), "restart_summed_s": sum(times),
            "resent_messages": sum(e.detail["messages"] for e in resent),
            "resent_bytes": sum(e.detail["bytes"] for e in resent)}


def _run_time(result) -> float:
    finishes = [e.time for e in result.events_of("finish")]
    starts = [e.time for e in result.events_of("start")]
    return max(finishes) - min(starts)


def measure(transport: str, n: int, args, options: dict) -> list[dict]:
    """Every formation at ``n`` ranks on ``transport``: one row each."""
    kw = {"iterations": args.iterations, "compute_s": args.compute_ms / 1e3,
          "jitter": args.jitter, "heavy": int(args.heavy_kib * KIB),
          "light": int(args.light_kib * KIB), "state": int(args.state_kib * KIB),
          "seed": args.seed}
    run = dict(transport=transport, seed=args.seed, kwargs=kw, timeout_s=args.timeout_s,
               **options)
    with tempfile.TemporaryDirectory(prefix="ftactors-bench-groups-") as tmp:
        trace = Path(tmp) / "trace.parquet"
        traced = ft.run(GridWorkload, n, trace=trace, **run)
        p, _ = grid_shape(n)
        found = suggest_groups(pairs_from_trace(trace), p, n)
    reference = [x["checksum"] for x in traced.results]
    victim = n // 2 + 1
    kill_at = args.interval + max(1, args.interval // 2)
    rows = []
    for name in FORMATIONS:
        groups = formation(name, n, found)
        plain = ft.run(GridWorkload, n, **run)
        free = ft.run(GroupedWorkload, n, groups=groups,
                      group_checkpoint_interval=args.interval, **run)
        hit = ft.run(GroupedWorkload, n, groups=groups, group_checkpoint_interval=args.interval,
                     chaos=ft.Chaos(kill=[(victim, kill_at)]), **run)
        for r in (plain, free, hit):
            if [x["checksum"] for x in r.results] != reference:
                raise RuntimeError(f"{name} at {n} ranks on {transport}: wrong answer")
        row = {"transport": transport, "ranks": n, "formation": name,
               "send_overhead_us": options.get("sim_send_overhead_s", 0) * 1e6,
               "groups": len(load_groups(groups, n).groups),
               **checkpoint_figures(free), **restart_figures(hit),
               "overhead": _run_time(free) / _run_time(plain)}
        rows.append(row)
        print(f"  {_where(row)} {name:5} groups {row['groups']:4}  ckpt "
              f"{row['checkpoint_s'] * 1e3:9.3f} ms (coord {row['coordination_s'] * 1e3:9.3f}, "
              f"save {row['save_s'] * 1e3:7.3f})  restart {row['restart_s'] * 1e3:9.3f} ms x "
              f"{row['restarted']:4}  resent {row['resent_messages']:6} msgs "
              f"{row['resent_bytes'] / KIB:9.1f} KiB  logged {row['logged_messages']:7}  "
              f"overhead {row['overhead']:.3f}", flush=True)
    norm = rows[0]
    for row in rows:
        row["coordination_vs_norm"] = row["coordination_s"] / norm["coordination_s"]
        row["restart_vs_norm"] = row["restart_s"] / norm["restart_s"]
    return rows


def add_arguments(parser) -> None:
    add_rank_counts(parser, ray="8,16", sim="32,128,256", sim_note=", up to 1024 takes minutes")
    parser.add_argument("--iterations", type=int, default=12, help="iterations (default 12)")
    parser.add_argument("--interval", type=int, default=4,
                        help="iterations between group checkpoints (default 4)")
    parser.add_argument("--compute-ms", type=float, default=10.0,
                        help="modelled compute per iteration, an asyncio.sleep (default 10)")
    parser.add_argument("--jitter", type=float, default=0.5,
                        help="compute varies by up to this fraction, per rank and iteration "
                             "(default 0.5)")
    parser.add_argument("--heavy-kib", type=float, default=64.0,
                        help="message to each column neighbour, KiB (default 64)")
    parser.add_argument("--light-kib", type=float, default=1.0,
                        help="message to the row neighbour, KiB (default 1)")
    parser.add_argument("--state-kib", type=float, default=256.0,
                        help="registered state per rank, KiB (default 256)")
    add_sim_network(parser, latency_us=10.0, bandwidth_gbps=10.0)
    parser.add_argument("--sim-send-overhead-us", default="5,50",
                        help="sim: a sender's time per message, one at a time, microseconds; "
                             "a comma-separated list runs each (default 5,50: a fast NIC, "
                             "and TCP over Gigabit Ethernet as in the paper's cluster)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="per run (default 600)")


def main(args) -> int:
    try:
        overheads = [float(x) for x in args.sim_send_overhead_us.split(",") if x.strip()]
        counts = rank_plan(args)
    except ValueError:
        return usage_error("groups", "rank and overhead lists are comma-separated numbers")
    # sim: every count at every sender overhead
    plan = ([(t, n, {}) for t, n in counts if t != "sim"]
            + [("sim", n, {**sim_network(args), "sim_send_overhead_s": o * 1e-6})
               for o in overheads for t, n in counts if t == "sim"])
    if any(n < 4 for _, n, _ in plan) or args.interval < 1 or args.iterations <= args.interval * 2:
        return usage_error("groups", "needs ranks >= 4, --interval >= 1 and --iterations "
                           "> 2 x --interval (a checkpoint before and after the kill)")
    print(f"bench groups: GroupCoordination NORM / GP1 / GP4 / GP, checkpoint every "
          f"{args.interval} of {args.iterations} iterations, {args.compute_ms:g} ms compute "
          f"(+ up to {args.jitter:.0%}), {args.heavy_kib:g} KiB in columns, "
          f"{args.light_kib:g} KiB along rows, {args.state_kib:g} KiB state", flush=True)
    rows = []
    for transport, n, options in plan:
        rows += measure(transport, n, args, options)
    print("\n  ratios to NORM (target: GP coordination <= 0.2 at >= 32 sim ranks, "
          "GP restart <= 1.5)")
    for row in rows:
        if row["formation"] != "NORM":
            print(f"  {_where(row)} {row['formation']:5} coordination "
                  f"{row['coordination_vs_norm']:6.3f}  restart {row['restart_vs_norm']:6.3f}")
    write_results(args, "groups", {
        "settings": {k: v for k, v in vars(args).items() if k != "func"}, "rows": rows})
    return 0
