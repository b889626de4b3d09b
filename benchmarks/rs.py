"""RSBackup: encode cost per rank as groups are added, and failures tolerated with and
without the sector interleaving (paper: distributed-diskless-rs-checkpoint.txt, V.B, IV.C).

*Encode cost per rank* (the claim of section V.B: for a fixed group size and checkpoint
size, the star encoding's cost does not depend on the system size). A program whose
ranks hold ``--state-mib`` of state runs under RSBackup on the ``local`` transport with
1, 2, 4, ... groups of ``--group-size`` ranks (virtual nodes of one rank, so groups are
consecutive ranks), checkpointing ``--rounds`` times. Every rank is one task of one
event loop, so the time a rank spends in its own synchronous encoding steps (partial
products and sends: ``rs_encoded.work_s``) and accumulating the parity it holds
(``rs_parity.xor_s``) is exactly its work, free of the other ranks' (which a wall clock
would mix in on two shared cores). Reported: the mean per rank and round (the run with
the smallest mean of ``--repeat``), its ratio to
the one-group run (flat: ratio ~1), and beside it a ``memcpy`` of the same state per
rank measured in the same run.

*Failures tolerated.* For ``--nodes`` nodes of ``--ranks-per-node`` ranks and groups of
``--group-size``, ``--trials`` random sets of ``f`` failed nodes (the same sets for both
layouts, from ``--seed``) for every ``f`` up to half the nodes: the fraction where every
group is still decodable (``rs_placement.undecodable_groups``), with the ring interleaved
across sectors (IV.C) and with the groups of a sector side by side.
"""
from __future__ import annotations

import random
import statistics

import numpy as np

import ftactors as ft
from ftactors.protocols.rs.rank import RSBackup
from ftactors.protocols.rs.placement import place, undecodable_groups

from ._harness import add_repetitions, best_of, table, usage_error, write_results

MIB = 1 << 20


class _State(ft.Rank):
    """Ranks holding a fixed-size array; a ring exchange and an allreduce per iteration."""

    async def main(self, state_bytes: int, iterations: int):
        rng = np.random.default_rng(self.rank)
        self.register("x", rng.integers(0, 256, state_bytes, dtype=np.uint8))
        async for i in self.iterations(iterations):
            await self.comm.sendrecv(i, dest=(self.rank + 1) % self.size,
                                     source=(self.rank - 1) % self.size)
            await self.comm.allreduce(i)
        return int(self.x[:64].sum())


class _RSState(RSBackup, _State):
    pass


def encode_cost(groups: int, group_size: int, state_bytes: int, rounds: int,
                block_bytes: int) -> dict:
    """Per-rank encoding work for ``groups`` groups (one run on ``local``)."""
    ranks = groups * group_size
    r = ft.run(_RSState, ranks=ranks, transport="local",
               kwargs={"state_bytes": state_bytes, "iterations": rounds + 1},
               rs_group_size=group_size, rs_interval=1, rs_ranks_per_node=1,
               rs_block_bytes=block_bytes)
    work = {rank: 0.0 for rank in range(ranks)}
    for e in r.events_of("rs_encoded"):
        work[e.rank] += e.detail["work_s"]
    for e in r.events_of("rs_parity"):
        work[e.rank] += e.detail["xor_s"]
    per_rank = [w / rounds for w in work.values()]
    placed = r.events_of("rs_placement")[0].detail["groups"]
    return {"groups": groups, "ranks": ranks, "placed_groups": len(placed),
            "rounds": len({e.detail["position"] for e in r.events_of("rs_encoded")}),
            "encode_s_per_rank": statistics.mean(per_rank),
            "encode_s_max_rank": max(per_rank),
            "wall_s": r.metrics["wall_s"]}


def memcpy_s(state_bytes: int, repeat: int = 5) -> float:
    """Best time to copy one rank's state (the same-run baseline)."""
    src = np.ones(state_bytes, np.uint8)
    dst = np.empty_like(src)
    return best_of(lambda: np.copyto(dst, src), repeat)


def tolerance(nodes: int, per_node: int, group_size: int, trials: int, seed: int) -> list[dict]:
    """Fraction of random node-failure sets every group survives, per number of failed
    nodes, for the interleaved and the plain ring (same sets for both)."""
    labels = [n for n in range(nodes) for _ in range(per_node)]
    layouts = {"interleaved": place(labels, group_size),
               "plain": place(labels, group_size, interleave=False)}
    rng = random.Random(seed)
    rows = []
    for f in range(1, nodes // 2 + 1):
        sets = [rng.sample(range(nodes), f) for _ in range(trials)]
        row = {"failed_nodes": f}
        for name, p in layouts.items():
            ok = sum(not undecodable_groups(p, {r for r, nd in enumerate(labels) if nd in s})
                     for s in sets)
            row[name] = ok / trials
        rows.append(row)
    return rows


def add_arguments(parser) -> None:
    parser.add_argument("--groups", default="1,2,4,8,16",
                        help="numbers of groups (default 1,2,4,8,16)")
    parser.add_argument("--group-size", type=int, default=4, help="ranks per group (default 4)")
    parser.add_argument("--state-mib", type=float, default=4.0,
                        help="state per rank in MiB (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="checkpoints per run (default 3)")
    add_repetitions(parser, 2, "runs per number of groups, the least disturbed kept",
                    flag="--repeat")
    parser.add_argument("--block-kib", type=int, default=1024,
                        help="z, the star encoding's block in KiB (default 1024)")
    parser.add_argument("--nodes", type=int, default=16, help="tolerance: nodes (default 16)")
    parser.add_argument("--ranks-per-node", type=int, default=4,
                        help="tolerance: ranks per node (default 4)")
    parser.add_argument("--trials", type=int, default=2000,
                        help="tolerance: random failure sets per size (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="tolerance: seed (default 0)")
    parser.add_argument("--quick", action="store_true",
                        help="1, 2, 4 groups of 0.25 MiB, 2 rounds, 300 trials")


def main(args) -> int:
    if args.quick:
        args.groups, args.state_mib, args.rounds, args.trials = "1,2,4", 0.25, 2, 300
        args.repetitions = 1
    groups = [int(g) for g in args.groups.split(",") if g.strip()]
    state = int(args.state_mib * MIB)
    if (not groups or min(groups) < 1 or args.group_size < 1 or state < 1 or args.rounds < 1
            or args.repetitions < 1):
        return usage_error("rs", "needs groups >= 1, --group-size >= 1, state > 0, "
                           "--rounds >= 1, --repeat >= 1")
    base = memcpy_s(state)
    encode_cost(1, args.group_size, state, 1, args.block_kib << 10)  # warm-up: tables, imports
    runs = [min((encode_cost(g, args.group_size, state, args.rounds, args.block_kib << 10)
                 for _ in range(args.repetitions)), key=lambda run: run["encode_s_per_rank"])
            for g in groups]
    first = runs[0]["encode_s_per_rank"]
    for run in runs:
        run["ratio_to_first"] = run["encode_s_per_rank"] / first
        run["ratio_to_memcpy"] = run["encode_s_per_rank"] / base
    rows = tolerance(args.nodes, args.ranks_per_node, args.group_size, args.trials, args.seed)
    out = {"group_size": args.group_size, "state_bytes": state, "rounds": args.rounds,
           "block_bytes": args.block_kib << 10, "memcpy_s": base, "encode": runs,
           "tolerance": {"nodes": args.nodes, "ranks_per_node": args.ranks_per_node,
                         "group_size": args.group_size, "trials": args.trials,
                         "seed": args.seed, "rows": rows}}
    print(f"bench rs: encode work per rank and round, groups of {args.group_size}, "
          f"{args.state_mib:g} MiB per rank (memcpy of it: {base * 1e3:.2f} ms)")
    print(table([("groups", "ranks", "ms/rank", "max ms", "x first", "x memcpy")]
                + [(str(run["groups"]), str(run["ranks"]),
                    f"{run['encode_s_per_rank'] * 1e3:.2f}", f"{run['encode_s_max_rank'] * 1e3:.2f}",
                    f"{run['ratio_to_first']:.2f}", f"{run['ratio_to_memcpy']:.1f}")
                   for run in runs], left=0))
    print(f"bench rs: random node failures survived, {args.nodes} nodes x "
          f"{args.ranks_per_node} ranks, groups of {args.group_size}, {args.trials} trials")
    print(table([("failed", "interleaved", "plain ring")]
                + [(str(row["failed_nodes"]), f"{row['interleaved']:.3f}", f"{row['plain']:.3f}")
                   for row in rows], left=0))
    write_results(args, "rs", out)
    return 0
