"""``ftactors advise``: how often to checkpoint, and what it costs.

``ftactors advise --mtbf 3600 --checkpoint-cost 12`` (or ``--results DIR``: the costs
measured in a chaos experiment's runs) prints Young's and Daly's intervals
(``protocols/_intervals.py``; also in iterations with ``--iteration-s``) for
``checkpoint_interval`` / ``checkpoint_interval_s``, with the expected waste (wall time
over work, minus one) of each in Daly's model.
"""
from __future__ import annotations

import sys
from statistics import fmean

from ..protocols._intervals import daly, expected_wall, young
from .report_data import read_events, read_results
from .run_metrics import CHECKPOINT_KINDS


def advice(mtbf_s: float, checkpoint_s: float, restart_s: float = 0.0,
           iteration_s: float | None = None) -> dict:
    """Both intervals, their expected waste, and (with ``iteration_s``) in iterations."""
    rows = {}
    for name, tau in (("young", young(checkpoint_s, mtbf_s)),
                      ("daly", daly(checkpoint_s, mtbf_s))):
        row = {"interval_s": tau,
               "waste": expected_wall(1.0, tau, checkpoint_s, restart_s, mtbf_s) - 1.0}
        if iteration_s:
            row["interval_iterations"] = max(1, round(tau / iteration_s))
        rows[name] = row
    return {"mtbf_s": mtbf_s, "checkpoint_s": checkpoint_s, "restart_s": restart_s,
            "iteration_s": iteration_s, **rows}


def measured_costs(results_dir: str, protocol: str | None = None) -> dict:
    """The mean checkpoint and recovery costs that the runs of a chaos results directory
    measured (only ``protocol``'s runs, when given): a checkpoint's ``cost_s`` where its
    protocol records one, else its ``flush_s + save_s``; a recovery's start to end.

    Raises:
        ValueError: unreadable results, or no run that measured a checkpoint.
    """
    rows = [r for r in read_results(results_dir) if protocol in (None, r["protocol"])]
    costs = []
    for row in rows:
        for ev in read_events(results_dir, row["events_path"]):
            d = ev["detail"]
            if ev["kind"] in CHECKPOINT_KINDS and ("cost_s" in d or "flush_s" in d):
                costs.append(d["cost_s"] if "cost_s" in d else d["flush_s"] + d.get("save_s", 0.0))
    if not costs:
        which = f"protocol {protocol!r}'s runs" if protocol else "any run"
        raise ValueError(f"no checkpoint cost was measured in {which} of {results_dir}")
    recoveries = [r["recover_s"] for r in rows if r["recover_s"] is not None]
    return {"checkpoint_s": fmean(costs), "checkpoints": len(costs), "runs": len(rows),
            "restart_s": fmean(recoveries) if recoveries else 0.0,
            "recoveries": len(recoveries)}


def add_advise(sub) -> None:
    p = sub.add_parser("advise", help="optimal checkpoint intervals (Young, Daly)",
                       description="Young's and Daly's optimal checkpoint intervals for a "
                                   "checkpoint cost and a mean time between failures, and "
                                   "the expected waste of each (Daly's model).")
    p.add_argument("--mtbf", type=float, required=True, metavar="SECONDS",
                   help="mean time between failures of the whole job")
    p.add_argument("--checkpoint-cost", type=float, default=None, metavar="SECONDS",
                   help="time a checkpoint holds the job (e.g. from ftactors bench checkpoint)")
    p.add_argument("--restart-cost", type=float, default=None, metavar="SECONDS",
                   help="time a recovery takes (default 0, or measured with --results)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="take the costs not given from the runs of a chaos results directory")
    p.add_argument("--protocol", default=None,
                   help="with --results: only this protocol's runs (a matrix protocol name)")
    p.add_argument("--iteration-s", type=float, default=None, metavar="SECONDS",
                   help="seconds per iteration, to give the interval in iterations")
    p.set_defaults(func=_cmd_advise)


def _cmd_advise(args) -> int:
    checkpoint_s, restart_s = args.checkpoint_cost, args.restart_cost
    try:
        if args.results is not None:
            m = measured_costs(args.results, args.protocol)
            print(f"measured in {args.results}: {m['checkpoints']} checkpoint(s) and "
                  f"{m['recoveries']} recover(ies) in {m['runs']} run(s)")
            checkpoint_s = m["checkpoint_s"] if checkpoint_s is None else checkpoint_s
            restart_s = m["restart_s"] if restart_s is None else restart_s
        elif checkpoint_s is None:
            raise ValueError("give --checkpoint-cost, or --results DIR to measure it")
        a = advice(args.mtbf, checkpoint_s, restart_s or 0.0, args.iteration_s)
    except ValueError as exc:  # ReportError too
        print(f"ftactors advise: {exc}", file=sys.stderr)
        return 2
    print(f"MTBF {a['mtbf_s']:g} s, checkpoint cost {a['checkpoint_s']:g} s, restart cost "
          f"{a['restart_s']:g} s")
    for name, label in (("young", "Young (1974)"), ("daly", "Daly (2006)")):
        row = a[name]
        every = (f" = every {row['interval_iterations']} iterations"
                 if "interval_iterations" in row else "")
        print(f"  {label:13} checkpoint every {row['interval_s']:.1f} s of work{every}; "
              f"expected waste {row['waste']:.1%}")
    return 0
