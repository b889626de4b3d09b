"""HC3I (DDVPiggyback) in the paper's setting: forced and unforced CLCs, stored CLCs and GC.

Paper: hc3i-hierarchical-ddv.txt, section 6 (Table 1, Figures 6-9, Tables 2-3). The
real protocol runs on the ``sim`` transport, in virtual time: two clusters of 100 ranks
(``--ranks``), a SAN inside each cluster (Myrinet-like: 10 us, 80 Mb/s) and Ethernet
between them (150 us, 100 Mb/s, the sim's ``sim_sites``), 10 hours of application
(``--hours``).

The workload (``Federation``) is the paper's simulator's application file: each rank
draws, from a seed, exponential computation times and after each one sends a message to
a destination drawn from its cluster's communication pattern, then takes whatever has
arrived; the mean computation time and the pattern are set so that the expected message
counts over the run are those of Table 1 (intra-cluster 2920 and 2497, 145 from cluster
0 to 1, 11 from 1 to 0). The protocol acts when a message arrives, whenever the program
takes it. Every rank's loop lasts exactly the run, so no cluster stops checkpointing
before the end. No rank fails here (the receives poll, which recovery would not replay).

Reported, each from its own runs:

* Figures 6-7: forced and unforced CLCs of each cluster against cluster 0's unforced
  interval (cluster 1's is infinite); the baseline is the number of unforced CLCs a
  timer alone would take, hours / interval (the timer restarts at every commit, so
  there are fewer, as in the paper).
* Figure 8: cluster 0 at 30 minutes, cluster 1's interval from infinite to 15 minutes.
* Figure 9: both at 30 minutes, messages from cluster 1 to cluster 0 from 11 to 200.
* Table 2: the Figure 9 run with 103 messages, GC every 2 hours: stored CLCs per cluster
  before and after each collection, and logged messages.
* Table 3: three clusters (cluster 2 a clone of cluster 1, ~200 messages leaving each
  cluster), GC every 2 hours.
* Transitive DDV (the paper's future work, ``ddv_transitive``): forced CLCs of the Table
  3 and Table 2 settings with the whole DDV piggybacked, beside the SN-only counts.

Also the measured application messages per cluster pair (Table 1) and the wall time of
each run. Absolute counts depend on the seed; what the paper shows and what to compare
is how they move with the interval and the message rate.
"""
from __future__ import annotations

import asyncio
import random
import time

import ftactors as ft
from ftactors.protocols import DDVPiggyback

from ._harness import table, usage_error, write_results

SAN = {"sim_latency_s": 10e-6, "sim_bandwidth_Bps": 80e6 / 8}
ETHERNET = {"sim_wide_latency_s": 150e-6, "sim_wide_bandwidth_Bps": 100e6 / 8}
TABLE1 = {(0, 0): 2920, (1, 1): 2497, (0, 1): 145, (1, 0): 11}
MINUTE = 60.0
GC_S = 2 * 3600.0


class Federation(DDVPiggyback, ft.Rank):
    """The paper's simulated application: compute (an exponential virtual-time sleep),
    send one message to a peer drawn from the cluster's pattern, repeat until the end of
    the run. Returns how many messages it sent to each cluster."""

    async def main(self, horizon_s: float, gap_s: list, pattern: list, clusters: list,
                   seed: int = 0) -> list[int]:
        me = next(k for k, members in enumerate(clusters) if self.rank in members)
        rng = random.Random(seed * 100_003 + self.rank)
        peers = [[r for r in members if r != self.rank] for members in clusters]
        schedule, t = [], 0.0
        while True:
            gap = rng.expovariate(1.0 / gap_s[me])
            if t + gap >= horizon_s:
                break
            t += gap
            k = rng.choices(range(len(clusters)), weights=pattern[me])[0]
            schedule.append((gap, rng.choice(peers[k]), k))
        schedule.append((horizon_s - t, None, None))  # the loop lasts the whole run
        sent = [0] * len(clusters)
        async for i in self.iterations(len(schedule)):
            gap, dst, k = schedule[i]
            await asyncio.sleep(gap)
            if dst is not None:
                await self.comm.send(i, dest=dst, tag=1)
                sent[k] += 1
            while self.comm.iprobe(tag=1):  # take what arrived (polling: no failures here)
                await self.comm.recv(tag=1)
        return sent


def _setting(ranks: int, counts: dict, hours: float) -> dict:
    """Mean computation time and destination weights per cluster, so that the expected
    message counts over the run are ``counts[(from, to)]`` at full scale (100 ranks per
    cluster; fewer ranks send proportionally fewer)."""
    n = 1 + max(k for pair in counts for k in pair)
    clusters = [list(range(k * ranks, (k + 1) * ranks)) for k in range(n)]
    horizon = hours * 3600.0
    scale = ranks / 100 * hours / 10
    gap, pattern = [], []
    for k in range(n):
        total = sum(counts.get((k, j), 0) for j in range(n)) * scale
        gap.append(horizon * ranks / max(total, 1e-9))
        pattern.append([counts.get((k, j), 0) for j in range(n)])
    return {"horizon_s": horizon, "gap_s": gap, "pattern": pattern, "clusters": clusters}


def run_once(ranks: int, counts: dict, hours: float, intervals: dict, *, gc: bool = False,
             transitive: bool = False, seed: int = 0) -> dict:
    """One simulated run; returns CLC counts per cluster, GC rows and message counts."""
    kw = _setting(ranks, counts, hours)
    opts = {"clusters": kw["clusters"], "sim_sites": kw["clusters"], **SAN, **ETHERNET,
            "clc_interval_s": {k: (None if v is None else v * MINUTE)
                               for k, v in intervals.items()},
            "ddv_transitive": transitive}
    if gc:
        opts["gc_interval_s"] = GC_S * hours / 10
    t0 = time.perf_counter()
    r = ft.run(Federation, ranks * len(kw["clusters"]), transport="sim", seed=seed,
               kwargs={**kw, "seed": seed}, timeout_s=kw["horizon_s"] * 2, **opts)
    wall = time.perf_counter() - t0
    n = len(kw["clusters"])
    forced, unforced = [0] * n, [0] * n
    for e in r.events_of("hc3i_commit"):
        (forced if e.detail["forced"] else unforced)[e.detail["cluster"]] += 1
    messages = {f"{a}->{b}": 0 for a in range(n) for b in range(n)}
    for rank, sent in enumerate(r.results):
        a = rank // ranks
        for b, count in enumerate(sent):
            messages[f"{a}->{b}"] += count
    gcs = [{"before": [g.detail["stored_before"][k] for k in range(n)],
            "after": [g.detail["stored_after"][k] for k in range(n)],
            "log_before": g.detail["log_before"], "log_after": g.detail["log_after"]}
           for g in r.events_of("hc3i_gc")]
    return {"forced": forced, "unforced": unforced, "messages": messages, "gc": gcs,
            "aborted": len(r.events_of("hc3i_abort")), "wall_s": wall,
            "intervals_min": intervals, "transitive": transitive}


def add_arguments(parser) -> None:
    parser.add_argument("--ranks", type=int, default=100,
                        help="ranks per cluster (default 100, the paper's)")
    parser.add_argument("--hours", type=float, default=10.0,
                        help="virtual length of each run (default 10, the paper's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload and network")
    parser.add_argument("--quick", action="store_true",
                        help="fewer points per figure (a smoke run)")


def main(args) -> int:
    if args.ranks < 2 or args.hours <= 0:
        return usage_error("hc3i", "needs --ranks >= 2 and --hours > 0")
    t0 = time.perf_counter()
    runs: list[dict] = []

    def one(counts, intervals, **kw):
        runs.append(run_once(args.ranks, counts, args.hours, intervals, seed=args.seed, **kw))
        return runs[-1]

    print(f"HC3I on sim: clusters of {args.ranks} ranks, SAN inside, Ethernet between, "
          f"{args.hours:g} virtual hours per run, seed {args.seed}")
    x6 = [30, 120] if args.quick else [15, 30, 60, 120]
    fig67 = [dict(one(TABLE1, {0: x, 1: None}), interval_min=x) for x in x6]
    print("\nFigures 6-7: CLCs against cluster 0's unforced interval (cluster 1: infinite)")
    print(table([("interval", "timer only", "c0 unforced", "c0 forced", "c1 unforced",
                  "c1 forced")]
                + [(f"{row['interval_min']} m", f"{args.hours * 60 / row['interval_min']:.1f}",
                    str(row["unforced"][0]), str(row["forced"][0]), str(row["unforced"][1]),
                    str(row["forced"][1])) for row in fig67], left=0))
    x8 = [None, 15]  # the paper: cluster 1 at 15 minutes changes nothing for cluster 0
    at30 = next(row for row in fig67 if row["interval_min"] == 30)  # the same run
    fig8 = [dict(at30 if x is None else one(TABLE1, {0: 30, 1: x}), c1_interval_min=x)
            for x in x8]
    print("\nFigure 8: cluster 0 at 30 min, cluster 1's interval varies")
    print(table([("c1 interval", "c0 total", "c0 forced", "c1 total", "c1 forced")]
                + [("inf" if row["c1_interval_min"] is None else f"{row['c1_interval_min']} m",
                    str(row["forced"][0] + row["unforced"][0]), str(row["forced"][0]),
                    str(row["forced"][1] + row["unforced"][1]), str(row["forced"][1]))
                   for row in fig8], left=0))
    # the 103 point is Table 2's run: garbage collection changes no forcing decision
    table2 = one({**TABLE1, (1, 0): 103}, {0: 30, 1: 30}, gc=True)
    x9 = [11, 103] if args.quick else [11, 50, 103, 150, 200]
    fig9 = [dict(table2 if x == 103 else one({**TABLE1, (1, 0): x}, {0: 30, 1: 30}),
                 c1_to_c0=x) for x in x9]
    print("\nFigure 9: both clusters at 30 min, messages from cluster 1 to cluster 0 vary")
    print(table([("1->0 planned", "1->0 sent", "c0 forced", "c1 forced")]
                + [(str(row["c1_to_c0"]), str(row["messages"]["1->0"]), str(row["forced"][0]),
                    str(row["forced"][1])) for row in fig9], left=0))
    three = {(0, 0): 2920, (1, 1): 2497, (2, 2): 2497}  # cluster 2 a clone of cluster 1,
    three.update({(a, b): 100 for a in range(3) for b in range(3) if a != b})  # 200 out
    table3 = one(three, {0: 30, 1: 30, 2: 30}, gc=True)
    for name, t in (("Table 2", table2), ("Table 3", table3)):
        n = len(t["forced"])
        print(f"\n{name}: stored CLCs before / after each GC (every {2 * args.hours / 10:g} h), "
              f"{n} clusters; logged messages before / after")
        for g in t["gc"]:
            cells = "  ".join(f"c{k} {g['before'][k]:3d} / {g['after'][k]}" for k in range(n))
            print(f"  {cells}   log {g['log_before']} / {g['log_after']}")
    trans3 = one(three, {0: 30, 1: 30, 2: 30}, transitive=True)
    trans2 = one({**TABLE1, (1, 0): 103}, {0: 30, 1: 30}, transitive=True)
    print("\nTransitive DDV (whole DDV piggybacked): forced CLCs per cluster")
    for name, paper, trans in (("2 clusters, 103 1->0", table2, trans2),
                               ("3 clusters", table3, trans3)):
        print(f"  {name:22s} SN only {paper['forced']} (total {sum(paper['forced'])})   "
              f"whole DDV {trans['forced']} (total {sum(trans['forced'])})")
    print("\nTable 1 (messages sent in the first Figure 6-7 run): " +
          ", ".join(f"{k}: {v}" for k, v in fig67[0]["messages"].items()))
    wall = time.perf_counter() - t0
    print(f"\n{len(runs)} runs, {wall:.1f} s wall in all (slowest run "
          f"{max(r['wall_s'] for r in runs):.1f} s)")
    write_results(args, "hc3i", {
        "ranks_per_cluster": args.ranks, "hours": args.hours,
        "seed": args.seed, "quick": args.quick, "network": {**SAN, **ETHERNET},
        "fig6_7": fig67, "fig8": fig8, "fig9": fig9, "table2": table2, "table3": table3,
        "transitive": {"two_clusters": trans2, "three_clusters": trans3},
        "wall_s": wall,
    })
    return 0
