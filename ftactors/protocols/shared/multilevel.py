"""Multi-level checkpoint intervals: the plan of all levels chosen together.

Levels ``L = 1..n`` are ordered cheapest first (partner copies, RS blocks, the stable set).
A level-``L`` checkpoint costs ``C_L`` seconds of stall; recovering from level ``L`` costs
``R_L``. Each failure kind ``j`` strikes as a Poisson process of rate ``1/M_j`` and needs
level ``l(j)`` at least: a process loss is recovered from a partner copy, a partner pair
from the RS blocks, the whole job only from the stable set. The plan has the structure of
SCR (Moody et al., SC'10) and of Di et al. (IPDPS'14): a level-1 checkpoint after every
``tau`` seconds of work, and every ``k_L``-th checkpoint of level ``L-1`` is taken at
level ``L`` instead. ``k_2..k_n`` and ``tau`` are chosen together to minimise the expected
wall time per second of work (``waste`` = that, minus one); one level is Daly's model.

The model (assumptions, all of them):
- failures of every kind are independent Poisson processes, during work, checkpoints and
  recoveries alike; costs are constants;
- a failure of kind ``j`` loses the work since the last checkpoint of level >= ``l(j)``
  and costs ``R_l(j)``: a level-``L`` checkpoint leaves what every lower level restores
  from (as SCR's and FTI's levels do, the higher copy being made from the lower one), so
  ``C_L`` is the whole stall of a level-``L`` checkpoint, lower copies included;
- a failure during a recovery starts that recovery again, at the higher of the two levels
  (rolled back further if its level needs it);
- the run is many top-level periods long (the partial last period is ignored, as Daly
  ignores his last partial interval).

Derivation (exact under these assumptions, no expansion in C/M). Call a *level-L block*
the work between two checkpoints of level >= ``L``: a level-1 block is ``tau`` seconds of
work and its closing checkpoint, a level-``L`` block is ``k_L`` level-``(L-1)`` blocks, the
last of which closes with the block's own (higher) checkpoint. Failures that need a level
below ``L`` are repaired inside its sub-blocks; one that needs ``L`` restarts the block;
one that needs a higher level aborts it. Aborts come at rate ``s`` independently of the block's progress,
so the chance that a block of random duration ``X`` completes first is ``E[e^(-sX)]``, the
Laplace transform ``phi(s)`` of ``X``. For a block whose attempts take ``Y`` (transform
``psi``), restarted by rate-``lam`` failures after a recovery ``Z`` (transform ``zeta``),
splitting the first attempt by whether it ends before a failure gives

    phi(s) = psi(s + lam) / (1 - lam / (s + lam) * (1 - psi(s + lam)) * zeta(s)),

and the recovery (``R_L`` seconds, started again by any failure that needs a level <=
``L``, total rate ``Lam_L``) is the same construction with constant attempts
(``psi(s) = e^(-sR_L)``), rate ``Lam_L`` and nothing to recover in between (``zeta = 1``):
``zeta_L(s) = e^(-(s+Lam_L)R_L) / (1 - Lam_L/(s+Lam_L) (1 - e^(-(s+Lam_L)R_L)))``. A level-1
block's attempt is the constant ``tau + c``; a level-``L`` block's is the sum of its
independent sub-blocks, so ``psi_L = phi_{L-1}(.; C_{L-1})^(k_L - 1) phi_{L-1}(.; c)``
with ``c`` the block's closing cost. At the top level nothing aborts, and Wald's identity
over the geometric number of attempts gives the expected time of a period

    E = (1 - p) / p * (1 / lam_n + E[Z_n]),  p = psi_n(lam_n),  E[Z_n] = expm1(Lam_n R_n) / Lam_n

(with one level, ``E = M e^(R/M) (e^((tau+C)/M) - 1)``: Daly's expected time exactly).
The waste is ``E / (tau k_2 ... k_n) - 1``. Every transform is carried as its complement
``1 - phi`` (``expm1``/``log1p``) because rare failures put them within 1e-7 of one.

The search: for given ``k``, ``tau`` by golden section on ``log tau`` (taken to be
unimodal there: it was in every case tried, not proven); the whole ``k_L`` by coordinate
descent from the ratio of consecutive levels' Young intervals, each coordinate by doubling
steps and then bisection on the slope, until no coordinate moves. That finds a local
optimum; the tests compare it with its neighbours and with exhaustive search on a grid.

What is approximated, honestly. ``expected_period_s`` is exact for the assumptions above
(a seeded Monte-Carlo run of the same semantics agrees in the tests), but the assumptions
are a model: real failures are not exponential and not independent across kinds, costs
vary, failure detection time is not counted (fold it into ``R``), spare ranks never run
out, and a stack whose higher checkpoint does *not* leave the lower copies would make a
lower failure just after it pay the higher restart (the model then flatters the plan).
The model was derived here, not transcribed: Moody et al. solve an SCR Markov chain and
Di et al. optimise a first-order expected-time expression; they share this plan's
structure and the single-level limit, but their treatment of failures during checkpoints
and restarts differs, so their figures are anchors, not references this code reproduces.
A run that measures its costs as it goes (``auto``) gets the optimum for the costs
measured so far.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

_GOLDEN_STEPS = 64
_K_MAX = 1_000_000


@dataclass(frozen=True)
class Level:
    """One checkpoint level: its name, the stall of one checkpoint, the recovery from it."""
    name: str
    checkpoint_s: float
    restart_s: float = 0.0


@dataclass(frozen=True)
class FailureKind:
    """Failures that the level ``level`` (an index into the levels, 0 the cheapest) is the
    lowest to recover, with their mean time between failures."""
    name: str
    mtbf_s: float
    level: int


@dataclass(frozen=True)
class Plan:
    """Level 1 every ``tau_s`` seconds of work, level ``L`` every ``every[L]`` checkpoints
    of level ``L-1`` (``every[0]`` is 1), and the plan's expected waste."""
    levels: tuple[Level, ...]
    kinds: tuple[FailureKind, ...]
    tau_s: float
    every: tuple[int, ...]
    waste: float

    @property
    def intervals_s(self) -> list[float]:
        """Seconds of work between two checkpoints of level >= L, for each level L."""
        return [self.tau_s * k for k in _cumulative(self.every)]

    def per_hour(self) -> list[float]:
        """Checkpoints of exactly level L per hour of work (a checkpoint due at several
        levels is taken at the highest)."""
        spans = self.intervals_s
        return [3600 / span - (3600 / spans[i + 1] if i + 1 < len(spans) else 0.0)
                for i, span in enumerate(spans)]


def _cumulative(every: Sequence[int]) -> list[int]:
    out, product = [], 1
    for k in every:
        product *= k
        out.append(product)
    return out


def check(levels: Sequence[Level], kinds: Sequence[FailureKind]) -> None:
    """Refuse what the model cannot plan for, saying why.

    Raises:
        ValueError: no level, a cost not positive (checkpoint) or negative (restart), an
            MTBF not positive, a kind naming no level, or a level that no kind needs.
    """
    if not levels:
        raise ValueError("a plan needs at least one checkpoint level")
    for lv in levels:
        if not (lv.checkpoint_s > 0 and math.isfinite(lv.checkpoint_s)):
            raise ValueError(f"level {lv.name!r}: checkpoint cost must be positive seconds, "
                             f"got {lv.checkpoint_s!r}")
        if not (lv.restart_s >= 0 and math.isfinite(lv.restart_s)):
            raise ValueError(f"level {lv.name!r}: restart cost must be >= 0 seconds, "
                             f"got {lv.restart_s!r}")
    for kind in kinds:
        if not (kind.mtbf_s > 0 and math.isfinite(kind.mtbf_s)):
            raise ValueError(f"failure kind {kind.name!r}: MTBF must be positive seconds, "
                             f"got {kind.mtbf_s!r}")
        if not 0 <= kind.level < len(levels):
            raise ValueError(f"failure kind {kind.name!r} names level {kind.level}, but "
                             f"there are {len(levels)} level(s)")
    for i, lv in enumerate(levels):
        if not any(kind.level == i for kind in kinds):
            raise ValueError(f"no failure kind needs level {lv.name!r}: give it an MTBF "
                             f"or drop the level")


def _rates(levels, kinds) -> list[float]:
    lam = [0.0] * len(levels)
    for kind in kinds:
        lam[kind.level] += 1.0 / kind.mtbf_s
    return lam


def _retry_miss(psi_miss: float, s: float, lam: float, zeta_miss: float) -> float:
    """``1 - phi(s)`` of a block retried after each rate-``lam`` failure, from ``1 - psi``
    at ``s + lam`` and ``1 - zeta`` at ``s`` (the docstring's formula, rearranged)."""
    w = lam / (s + lam)
    zeta = 1.0 - zeta_miss
    return psi_miss * (s / (s + lam) + w * zeta_miss) / (1.0 - w * psi_miss * zeta)


def _recovery_miss(s: float, lam_le: float, restart_s: float) -> float:
    """``1 - zeta(s)``: a recovery of ``restart_s`` started again by rate-``lam_le`` failures."""
    return _retry_miss(-math.expm1(-(s + lam_le) * restart_s), s, lam_le, 0.0)


def _block_miss(L: int, s: float, closing_s: float, tau_s: float, every, levels,
                lam, lam_le) -> float:
    """``1 - phi_L(s)`` of a level-``L`` block closed by a checkpoint of ``closing_s``."""
    a = s + lam[L]
    if L == 0:
        psi_miss = -math.expm1(-a * (tau_s + closing_s))
    else:
        inner = levels[L - 1].checkpoint_s
        log_psi = ((every[L] - 1) * math.log1p(-_block_miss(L - 1, a, inner, tau_s, every,
                                                            levels, lam, lam_le))
                   + math.log1p(-_block_miss(L - 1, a, closing_s, tau_s, every, levels,
                                             lam, lam_le)))
        psi_miss = -math.expm1(log_psi)
    return _retry_miss(psi_miss, s, lam[L], _recovery_miss(s, lam_le[L], levels[L].restart_s))


def expected_period_s(levels: Sequence[Level], kinds: Sequence[FailureKind], tau_s: float,
                      every: Sequence[int]) -> float:
    """Expected wall time of one top-level period (``tau_s * prod(every)`` seconds of
    work) under the model of this module's docstring; ``inf`` when it overflows."""
    check(levels, kinds)
    if not (tau_s > 0 and len(every) == len(levels) and every[0] == 1
            and all(isinstance(k, int) and k >= 1 for k in every)):
        raise ValueError(f"need tau > 0 and one whole k >= 1 per level with k_1 = 1, got "
                         f"tau={tau_s!r}, every={tuple(every)!r}")
    lam = _rates(levels, kinds)
    lam_le = [sum(lam[:i + 1]) for i in range(len(lam))]
    top = len(levels) - 1
    try:
        # psi_n at lam_n is phi_n at 0 with the top level's own retries taken out.
        inner = levels[top - 1].checkpoint_s if top else 0.0
        if top == 0:
            q = -math.expm1(-lam[0] * (tau_s + levels[0].checkpoint_s))
        else:
            q = -math.expm1(
                (every[top] - 1) * math.log1p(-_block_miss(top - 1, lam[top], inner, tau_s,
                                                           every, levels, lam, lam_le))
                + math.log1p(-_block_miss(top - 1, lam[top], levels[top].checkpoint_s,
                                          tau_s, every, levels, lam, lam_le)))
        p = 1.0 - q
        if p <= 0.0:
            return math.inf
        restart = math.expm1(lam_le[top] * levels[top].restart_s) / lam_le[top]
        return q / p * (1.0 / lam[top] + restart)
    except (OverflowError, ValueError, ZeroDivisionError):
        return math.inf


def waste(levels: Sequence[Level], kinds: Sequence[FailureKind], tau_s: float,
          every: Sequence[int]) -> float:
    """Expected wall time per second of work, minus one."""
    work = tau_s * math.prod(every)
    return expected_period_s(levels, kinds, tau_s, every) / work - 1.0


def _best_tau(levels, kinds, every) -> tuple[float, float]:
    """(waste, tau) minimising the waste for fixed ``every``: golden section on log tau
    from a millionth of the cheapest checkpoint to a hundred times the shortest MTBF."""
    lo = math.log(levels[0].checkpoint_s * 1e-6)
    hi = math.log(min(k.mtbf_s for k in kinds) * 100)
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = (waste(levels, kinds, math.exp(x), every) for x in (x1, x2))
    for _ in range(_GOLDEN_STEPS):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = waste(levels, kinds, math.exp(x1), every)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = waste(levels, kinds, math.exp(x2), every)
    return (f1, math.exp(x1)) if f1 <= f2 else (f2, math.exp(x2))


def _int_argmin(f, k0: int) -> int:
    """A local minimum of ``f`` over 1.._K_MAX from ``k0``: doubling steps downhill until
    ``f`` rises, then bisection on the slope inside that bracket."""
    f0 = f(k0)
    if k0 < _K_MAX and f(k0 + 1) < f0:
        d = 1
    elif k0 > 1 and f(k0 - 1) < f0:
        d = -1
    else:
        return k0
    prev, cur, step = k0, k0 + d, 1
    while True:
        step *= 2
        nxt = min(max(cur + d * step, 1), _K_MAX)
        if nxt == cur or f(nxt) >= f(cur):
            break
        prev, cur = cur, nxt
    lo, hi = sorted((prev, nxt))
    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid + 1) < f(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def optimal_plan(levels: Sequence[Level], kinds: Sequence[FailureKind]) -> Plan:
    """The plan (``tau`` and every ``k_L``) of least expected waste.

    Raises:
        ValueError: see ``check``; the expected time overflows for every plan; or a level
            is worth taking less than once in ``_K_MAX`` checkpoints of the level below.
    """
    levels, kinds = tuple(levels), tuple(kinds)
    check(levels, kinds)
    lam = _rates(levels, kinds)
    young = [math.sqrt(2 * lv.checkpoint_s / r) for lv, r in zip(levels, lam)]
    every = [1] + [min(max(1, round(young[i] / young[i - 1])), _K_MAX)
                   for i in range(1, len(levels))]
    cache: dict[tuple[int, ...], tuple[float, float]] = {}

    def best(ks: tuple[int, ...]) -> tuple[float, float]:
        if ks not in cache:
            cache[ks] = _best_tau(levels, kinds, ks)
        return cache[ks]

    moved = True
    while moved:
        moved = False
        for i in range(1, len(levels)):
            k = _int_argmin(lambda k: best((*every[:i], k, *every[i + 1:]))[0], every[i])
            moved |= k != every[i]
            every[i] = k
    for i in range(1, len(levels)):
        if every[i] == _K_MAX:
            raise ValueError(f"level {levels[i].name!r} is worth less than one checkpoint in "
                             f"{_K_MAX} of level {levels[i - 1].name!r}: its cost is out of "
                             f"scale with the failures it recovers")
    w, tau = best(tuple(every))
    if not math.isfinite(w):
        raise ValueError("no plan has a finite expected run time: recoveries this long "
                         "hardly ever complete between failures this frequent")
    return Plan(levels, kinds, tau, tuple(every), w)


def top_level_plan(levels: Sequence[Level], kinds: Sequence[FailureKind]) -> Plan:
    """The best plan with the most costly level alone: every failure kind recovered from
    it (at its restart cost), as a single-level stack would."""
    top = levels[-1]
    return optimal_plan([top], [FailureKind(k.name, k.mtbf_s, 0) for k in kinds])
