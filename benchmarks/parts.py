"""Levels that keep GroupCoordination's parts: their cost, and where a group restarts from.

GroupCoordination checkpoints one group at a time; in a stack, StandbyReplacement keeps a
copy of every part in the next group, or RSBackup encodes each group's parts with the
parity in the next group (``docs/architecture/protocols.md``, "Levels that keep another protocol's
parts"). Measured on CG (Ray by default, ``--transport`` for a dry run):

1. *Failure-free*: CG's solve time with GroupCoordination alone, with the partner copies
   and with the RS encoding beside it, runs interleaved and repeated, medians: what each
   level costs.
2. *Restart of a group*: one SIGKILLed rank, its group restarted on warm spares, with
   the parts from the partner copies, from the RS blocks (the killed rank's part decoded
   in the driver) and from the driver's object store (GroupCoordination alone), and a
   rank killed with the holder of its copies (that part from the object store). Each
   figure is detection to every restarted rank restored, with the sources the timeline
   names.
"""
from __future__ import annotations

import statistics

import ftactors as ft
from ftactors.apps.cg import CG
from ftactors.protocols import GroupCoordination, RSBackup, StandbyReplacement
from ftactors.protocols.shared.units import load_groups
from ftactors.protocols.standby.machine import part_holder

from ._harness import table, write_results
from .levels import add_cg_kill_arguments, apply_quick, recovery_figures


def add_arguments(parser) -> None:
    parser.add_argument("--groups", default="fixed:2",
                        help="GroupCoordination's groups (default fixed:2)")
    parser.add_argument("--every", type=int, default=3,
                        help="iterations between a group's checkpoints (default 3)")
    add_cg_kill_arguments(parser)


class GroupsCG(GroupCoordination, CG):
    """GroupCoordination alone: parts in the driver's object store only."""


class CopiedGroupsCG(StandbyReplacement, GroupCoordination, CG):
    """Partner copies of every part as well."""


class EncodedGroupsCG(RSBackup, GroupCoordination, CG):
    """Every group's parts RS-encoded, the parity in the next group."""


STACKS = {"groups alone": GroupsCG, "partner copies": CopiedGroupsCG,
          "RS blocks": EncodedGroupsCG}


def _run(cls, args, kills=(), spares: int = 0):
    r = ft.run(cls, ranks=args.ranks, spares=spares, transport=args.transport,
               timeout_s=900, kwargs={"problem_class": args.problem_class},
               chaos=ft.Chaos(kill=list(kills)) if kills else None,
               groups=args.groups, group_checkpoint_interval=args.every)
    assert all(res["verified"] for res in r.results), "CG did not verify"
    return r


def _sources(r) -> str:
    """Where the last recovery's parts came from, counted by source."""
    got = list(r.events_of("part_sources")[-1].detail["sources"].values()) \
        if r.events_of("part_sources") else []
    return ", ".join(f"{got.count(s)} {s}" for s in sorted(set(got))) or "object store"


def main(args) -> int:
    apply_quick(args)
    print(f"bench parts: CG class {args.problem_class}, {args.ranks} ranks on "
          f"{args.transport}; groups {args.groups}, a group checkpoint every {args.every} "
          f"iterations", flush=True)
    times: dict[str, list] = {name: [] for name in STACKS}
    for _ in range(args.repetitions):
        for name, cls in STACKS.items():
            times[name].append(max(x["time_s"] for x in _run(cls, args).results))
    solve = {name: statistics.median(t) for name, t in times.items()}
    alone = solve["groups alone"]
    victim, k = 1, args.kill_iteration
    holder = part_holder(load_groups(args.groups, args.ranks), victim)
    runs = {"partner copies": _run(CopiedGroupsCG, args, [(victim, k)], spares=args.ranks),
            "RS blocks": _run(EncodedGroupsCG, args, [(victim, k)], spares=args.ranks),
            "object store (groups alone)": _run(GroupsCG, args, [(victim, k)],
                                                spares=args.ranks),
            "copy holder lost too": _run(CopiedGroupsCG, args, spares=args.ranks, kills=[
                (victim, k), ft.Kill(holder, recovery_round=0)])}
    recoveries = {name: {**recovery_figures(r), "sources": _sources(r)}
                  for name, r in runs.items()}
    print(f"\n  failure-free solve time, median of {args.repetitions}:")
    print(table([("stack", "solve s", "vs groups alone")]
                + [(name, f"{t:.3f}", f"x{t / alone:.3f}") for name, t in solve.items()]))
    print(table([("restart of a group", "parts from", "detection to restored s")]
                + [(name, rec["sources"], f"{rec['detection_to_restored_s']:.3f}")
                   for name, rec in recoveries.items()]))
    write_results(args, "parts", {
        "app": "cg", "problem_class": args.problem_class, "ranks": args.ranks,
        "transport": args.transport, "repeat": args.repetitions, "groups": args.groups,
        "every": args.every, "solve_s": solve,
        "ratios": {name: t / alone for name, t in solve.items()}, "recoveries": recoveries})
    return 0
