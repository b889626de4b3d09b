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
``Pacer`` turns an interval in seconds into the iteration of the next round for the
protocols whose rounds all ranks must take at one iteration (StandbyReplacement,
RSBackup): one rank decides and its flush marker carries the decision.
"""
from __future__ import annotations

import math
from typing import Callable


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


class Pacer:
    """"About every ``seconds``" in iterations, from the time per iteration measured
    since the last round (on the run's clock: virtual on sim)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.last_t, self.last_it = clock(), 0

    def next_after(self, iteration: int, seconds: float) -> int:
        """The iteration of the round after the one at ``iteration``."""
        done = iteration - self.last_it
        if done <= 0:
            return iteration + 1  # nothing measured yet: look again after one iteration
        per_iteration = (self.clock() - self.last_t) / done
        return iteration + max(1, round(seconds / max(per_iteration, 1e-9)))

    def mark(self, iteration: int) -> None:
        """A round was taken at ``iteration``, now."""
        self.last_t, self.last_it = self.clock(), iteration
