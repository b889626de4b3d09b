"""Multi-level checkpointing: the three-level stack's cost, and recovery per level.

The stack is RSBackup + StandbyReplacement + ReadyMessageFlush on CG: partner copies
every ``--partner-every`` iterations, RS-encoded rounds every ``--rs-every``, global sets
on stable storage every ``--stable-every``. Measured in one invocation (Ray by default,
``--transport`` for a dry run elsewhere):

1. *Failure-free overhead*: CG's solve time (``time_s``, excluding actor start-up) with
   the stack against the bare app, runs interleaved and repeated, medians.
2. *Recovery by level*: one SIGKILLed rank, recovered online from the partner copies;
   a partner pair killed together, recovered from the RS blocks; and, as the baseline,
   the same single kill under the stable level alone (ReadyMessageFlush: a global restart
   of every rank from stable storage) twice: in new actors, as a job restarted from its
   stable sets would (the target's baseline, as in ``bench recovery``), and on a warm
   spare per rank (its best case: no actor starts). Each figure is detection to every
   rank restored (the kill's own timestamp to the last rank's ``restored`` event of the
   round; the coordinator's ``recovery_end`` comes later, once the resumed ranks, busy
   computing, answer it), with the level the timeline names.

Targets (issue 17, CG W on 8 Ray ranks): failure-free overhead at most 10%; a single kill
recovered online at least 10x faster than the global restart from stable storage.
"""
from __future__ import annotations

import statistics
import tempfile

import ftactors as ft
from ftactors.apps.cg import CG
from ftactors.protocols import ReadyMessageFlush, RSBackup, StandbyReplacement
from ftactors.protocols.standby.machine import partner

from ._harness import add_repetitions, table, write_results


def add_arguments(parser) -> None:
    parser.add_argument("--partner-every", type=int, default=2,
                        help="iterations between partner copies (default 2)")
    parser.add_argument("--rs-every", type=int, default=5,
                        help="iterations between RS-encoded rounds (default 5)")
    parser.add_argument("--stable-every", type=int, default=10,
                        help="iterations between global sets on stable storage (default 10)")
    add_cg_kill_arguments(parser)


def add_cg_kill_arguments(parser) -> None:
    """The options of a bench that runs CG failure-free, then with a kill (levels, parts)."""
    parser.add_argument("--class", dest="problem_class", default="W", type=str.upper)
    parser.add_argument("--ranks", type=int, default=8)
    add_repetitions(parser, 3, "failure-free runs per configuration; figures are medians",
                    flag="--repeat")
    parser.add_argument("--kill-iteration", type=int, default=7,
                        help="iteration the first rank is killed at (default 7)")
    parser.add_argument("--transport", default="ray", choices=("ray", "local", "sim"))
    parser.add_argument("--quick", action="store_true", help="class S, 4 ranks, 1 repeat")


def apply_quick(args) -> None:
    """``--quick``: the smallest run that still shows every figure."""
    if args.quick:
        args.problem_class, args.ranks, args.repetitions = "S", 4, 1


class ThreeLevelCG(RSBackup, StandbyReplacement, ReadyMessageFlush, CG):
    """The stack measured (its intervals come as options)."""


class StableCG(ReadyMessageFlush, CG):
    """The baseline: the stable level alone."""


def _run(cls, args, store: str, kills=(), spares: int = 0, **options):
    r = ft.run(cls, ranks=args.ranks, spares=spares, transport=args.transport,
               timeout_s=900, kwargs={"problem_class": args.problem_class},
               chaos=ft.Chaos(kill=list(kills)) if kills else None,
               checkpoint_interval=args.stable_every, checkpoint_storage="stable",
               checkpoint_dir=tempfile.mkdtemp(dir=store), **options)
    assert all(res["verified"] for res in r.results), "CG did not verify"
    return r


def _stack_options(args) -> dict:
    return {"backup_interval": args.partner_every, "rs_interval": args.rs_every,
            "rs_group_size": min(4, args.ranks // 2)}


def measure_overhead(args, store: str) -> dict:
    bare, stacked = [], []
    for _ in range(args.repetitions):
        r = ft.run(CG, ranks=args.ranks, transport=args.transport, timeout_s=900,
                   kwargs={"problem_class": args.problem_class})
        bare.append(max(res["time_s"] for res in r.results))
        r = _run(ThreeLevelCG, args, store, **_stack_options(args))
        stacked.append(max(res["time_s"] for res in r.results))
    return {"bare_s": statistics.median(bare), "stack_s": statistics.median(stacked),
            "ratio": statistics.median(stacked) / statistics.median(bare)}


def recovery_figures(r) -> dict:
    """Detection to every rank restored, and the level that recovered (the last round)."""
    detected = [e for e in r.events if e.kind == "failure_detected"]
    end = [e for e in r.events if e.kind == "recovery_end"][-1]
    restored = max(e.time for e in r.events if e.kind == "restored"
                   and detected[0].time <= e.time <= end.time)
    level = [e.detail["level"] for e in r.events if e.kind == "recovery_level"]
    detection = detected[0].detail.get("detection_s", 0.0)
    return {"detection_to_restored_s": detection + restored - detected[0].time,
            "level": level[-1] if level else "ready_flush",
            "passed_over": [e.detail["level"] for e in r.events if e.kind == "level_exhausted"]}


def measure_recoveries(args, store: str) -> dict:
    k, victim = args.kill_iteration, 1
    single = _run(ThreeLevelCG, args, store, kills=[(victim, k)], spares=2,
                  **_stack_options(args))
    pair = _run(ThreeLevelCG, args, store, spares=2, **_stack_options(args),
                kills=[(victim, k), ft.Kill(partner(victim, args.ranks), recovery_round=0)])
    restart = _run(StableCG, args, store, kills=[(victim, k)])
    warm = _run(StableCG, args, store, kills=[(victim, k)], spares=args.ranks)
    return {"partner": recovery_figures(single), "rs": recovery_figures(pair),
            "global_restart": recovery_figures(restart),
            "global_restart_warm": recovery_figures(warm)}


def main(args) -> int:
    apply_quick(args)
    print(f"bench levels: CG class {args.problem_class}, {args.ranks} ranks on "
          f"{args.transport}; partner copies every {args.partner_every}, RS every "
          f"{args.rs_every}, stable every {args.stable_every} iterations", flush=True)
    with tempfile.TemporaryDirectory(prefix="ftactors-bench-levels-") as store:
        overhead = measure_overhead(args, store)
        recoveries = measure_recoveries(args, store)
    online = recoveries["partner"]["detection_to_restored_s"]
    speedup = recoveries["global_restart"]["detection_to_restored_s"] / online
    targets = {"overhead_le_10pct": overhead["ratio"] <= 1.10,
               "online_ge_10x_faster_than_global_restart": speedup >= 10.0}
    print(f"\n  failure-free solve time (median of {args.repetitions}): bare "
          f"{overhead['bare_s']:.3f} s, three levels {overhead['stack_s']:.3f} s, "
          f"x{overhead['ratio']:.3f}")
    names = {"partner": "one rank killed", "rs": "a partner pair killed",
             "global_restart": "one rank, stable level alone (new actors)",
             "global_restart_warm": "one rank, stable level alone (warm spares)"}
    print(table([("failure", "recovered by", "passed over", "detection to restored s")]
                + [(names[key], rec["level"], ",".join(rec["passed_over"]) or "-",
                    f"{rec['detection_to_restored_s']:.3f}")
                   for key, rec in recoveries.items()]))
    warm = recoveries["global_restart_warm"]["detection_to_restored_s"] / online
    print(f"\n  global restart / online recovery: x{speedup:.1f} (on warm spares x{warm:.1f})")
    for name, ok in targets.items():
        print(f"  target {name}: {'met' if ok else 'NOT met'}")
    write_results(args, "levels", {
        "app": "cg", "problem_class": args.problem_class, "ranks": args.ranks,
        "transport": args.transport, "repeat": args.repetitions,
        "intervals": {"partner": args.partner_every, "rs": args.rs_every,
                      "stable": args.stable_every},
        "overhead": overhead, "recoveries": recoveries,
        "global_restart_over_online": speedup, "warm_global_restart_over_online": warm,
        "targets": targets})
    return 0
