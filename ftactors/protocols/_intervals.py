"""Young's and Daly's optimal checkpoint intervals, and Daly's expected wall time.

Young (1974): with checkpoint cost C and mean time between failures M, the compute time
between checkpoints that minimises the expected run time is about sqrt(2 C M) (first
order, C << M). Daly (2006, "A higher order estimate of the optimum checkpoint interval
for restart dumps") adds the next terms of the expansion:

    tau = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C     for C < 2M
    tau = M                                                        otherwise

and models the expected wall time of a job of T_s seconds of work with restart cost R as
M e^(R/M) (e^((tau + C)/M) - 1) T_s / tau (exponential failures).

ReadyMessageFlush's ``checkpoint_interval="auto"`` calls ``daly`` after every checkpoint
with the cost it measured; ``ftactors advise`` prints both intervals and their waste.
"""
from __future__ import annotations

import math


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
