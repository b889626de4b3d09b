"""How often to checkpoint: Young's and Daly's optimal intervals, and what they cost.

Young (1974): with checkpoint cost C and mean time between failures M, the compute time
between checkpoints that minimises the expected run time is about sqrt(2 C M) (first
order, C << M). Daly (2006, "A higher order estimate of the optimum checkpoint interval
for restart dumps") adds the next terms of the expansion:

    tau = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C     for C < 2M
    tau = M                                                        otherwise

and models the expected wall time of a job of T_s seconds of work with restart cost R as
M e^(R/M) (e^((tau + C)/M) - 1) T_s / tau (exponential failures), from which the advice
reports the expected waste (wall time over work, minus one) at each interval.

``ftactors advise --mtbf 3600 --checkpoint-cost 12`` prints both intervals (also in
iterations with ``--iteration-s``) for ``checkpoint_interval`` / ``checkpoint_interval_s``;
ReadyMessageFlush's ``checkpoint_interval="auto"`` calls ``daly`` itself after every
checkpoint, with the cost it measured.
"""
from __future__ import annotations

import math
import sys


def _check(checkpoint_s: float, mtbf_s: float) -> None:
    if not (checkpoint_s > 0 and mtbf_s > 0 and math.isfinite(checkpoint_s)
            and math.isfinite(mtbf_s)):
        raise ValueError(f"checkpoint cost and MTBF must be positive seconds, got "
                         f"{checkpoint_s!r} and {mtbf_s!r}")


def young(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimal compute time between checkpoints (s)."""
    _check(checkpoint_s, mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def daly(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimal compute time between checkpoints (s)."""
    _check(checkpoint_s, mtbf_s)
    if checkpoint_s >= 2 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2 * mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - checkpoint_s


def expected_wall(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                  mtbf_s: float) -> float:
    """Daly's expected wall time of ``work_s`` seconds of work checkpointed every
    ``interval_s`` seconds of work, under exponential failures."""
    _check(checkpoint_s, mtbf_s)
    if interval_s <= 0 or work_s < 0 or restart_s < 0:
        raise ValueError("interval must be > 0, work and restart cost >= 0")
    return (mtbf_s * math.exp(restart_s / mtbf_s)
            * math.expm1((interval_s + checkpoint_s) / mtbf_s) * work_s / interval_s)


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


def add_advise(sub) -> None:
    p = sub.add_parser("advise", help="optimal checkpoint intervals (Young, Daly)",
                       description="Young's and Daly's optimal checkpoint intervals for a "
                                   "checkpoint cost and a mean time between failures, and "
                                   "the expected waste of each (Daly's model).")
    p.add_argument("--mtbf", type=float, required=True, metavar="SECONDS",
                   help="mean time between failures of the whole job")
    p.add_argument("--checkpoint-cost", type=float, required=True, metavar="SECONDS",
                   help="time a checkpoint holds the job (e.g. from ftactors bench checkpoint)")
    p.add_argument("--restart-cost", type=float, default=0.0, metavar="SECONDS",
                   help="time a recovery takes (default 0)")
    p.add_argument("--iteration-s", type=float, default=None, metavar="SECONDS",
                   help="seconds per iteration, to give the interval in iterations")
    p.set_defaults(func=_cmd_advise)


def _cmd_advise(args) -> int:
    try:
        a = advice(args.mtbf, args.checkpoint_cost, args.restart_cost, args.iteration_s)
    except ValueError as exc:
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
