"""The multi-level interval planner: one level is Daly's model, the analytic expected time
agrees with a seeded Monte-Carlo run of the same failure semantics, and the plan found by
search beats its neighbours and an exhaustive grid."""
import math
import random
from statistics import fmean, stdev

import pytest

from ftactors.protocols.shared.intervals import daly, expected_wall, young
from ftactors.protocols.shared.multilevel import (FailureKind, Level, _best_tau,
                                            expected_period_s, optimal_plan, top_level_plan,
                                            waste)

EXAMPLE_LEVELS = [Level("partner", 0.05, 0.2), Level("rs", 0.3, 1.0), Level("stable", 4.0, 20.0)]
EXAMPLE_KINDS = [FailureKind("process", 3600, 0), FailureKind("node", 86400, 1),
                 FailureKind("job", 604800, 2)]


def simulate_periods(levels, kinds, tau_s, every, periods, seed):
    """Wall times of ``periods`` top-level periods, simulated event by event: segment i
    (1-based) is tau of work and the checkpoint of the highest level whose spacing divides
    i; a failure needing level l rolls back to just after the last checkpoint of level >= l
    and pays that level's restart; a failure during a restart starts it again at the
    higher of the two levels (rolled back further if that level needs it)."""
    rng = random.Random(seed)
    spans = [math.prod(every[:i + 1]) for i in range(len(every))]
    top = len(levels) - 1

    def closing(i):  # level of the checkpoint that ends segment i (0: the last period's)
        return top if i % spans[top] == 0 else max(L for L in range(top + 1) if i % spans[L] == 0)

    def rollback(i, level):  # first segment to do again when segment i needs ``level``
        m = i - 1
        while m > 0 and closing(m) < level:
            m -= 1
        return m + 1

    rates = [1 / k.mtbf_s for k in kinds]
    total = sum(rates)
    times = []
    for _ in range(periods):
        t, seg, restoring = 0.0, 1, None  # restoring: (first segment to redo, level)
        while seg <= spans[top]:
            d = (levels[restoring[1]].restart_s if restoring
                 else tau_s + levels[closing(seg)].checkpoint_s)
            gap = rng.expovariate(total)
            if gap >= d:
                t += d
                seg, restoring = (restoring[0], None) if restoring else (seg + 1, None)
                continue
            t += gap
            level = rng.choices(kinds, weights=rates)[0].level
            if restoring:
                level = max(level, restoring[1])
                restoring = (rollback(restoring[0], level), level)
            else:
                restoring = (rollback(seg, level), level)
        times.append(t)
    return times


def test_one_level_is_dalys_model():
    lv, kind = [Level("stable", 12.0, 30.0)], [FailureKind("any", 3600, 0)]
    for tau in (50.0, 286.0, 2000.0):
        assert expected_period_s(lv, kind, tau, [1]) == pytest.approx(
            expected_wall(tau, tau, 12, 30, 3600), rel=1e-12)
    plan = optimal_plan(lv, kind)
    # Daly's interval is his second-order estimate of this optimum; Young's the first order
    assert plan.tau_s == pytest.approx(daly(12, 3600), rel=1e-4)
    assert abs(plan.tau_s - young(12, 3600)) > abs(plan.tau_s - daly(12, 3600))
    assert plan.waste <= expected_wall(1.0, daly(12, 3600), 12, 30, 3600) - 1.0
    assert plan.waste == pytest.approx(expected_wall(1.0, daly(12, 3600), 12, 30, 3600) - 1,
                                       rel=1e-6)


@pytest.mark.parametrize("levels, kinds, tau, every", [
    ([Level("a", 1.0, 20.0), Level("b", 5.0, 60.0)],
     [FailureKind("p", 60, 0), FailureKind("n", 600, 1)], 10.0, (1, 4)),
    ([Level("a", 0.5, 6.0), Level("b", 2.0, 15.0), Level("c", 6.0, 40.0)],
     [FailureKind("p", 40, 0), FailureKind("p2", 200, 0), FailureKind("n", 300, 1),
      FailureKind("j", 1500, 2)], 8.0, (1, 3, 4)),
], ids=["2-level", "3-level"])
def test_analytic_expected_time_matches_monte_carlo(levels, kinds, tau, every):
    times = simulate_periods(levels, kinds, tau, every, periods=20000, seed=17)
    analytic = expected_period_s(levels, kinds, tau, every)
    mc, err = fmean(times), stdev(times) / math.sqrt(len(times))
    failure_free = tau * math.prod(every) + sum(
        levels[max(L for L in range(len(every)) if i % math.prod(every[:L + 1]) == 0)].checkpoint_s
        for i in range(1, math.prod(every) + 1))
    # failures are frequent and restarts long here, so the test weighs what failures cost
    # (failures during restarts included: leaving them out moves the analytic time by 8
    # and 10 standard errors of these runs), not just the work
    assert analytic - failure_free > 0.15 * failure_free
    assert abs(mc - analytic) < 4 * err
    assert (mc - failure_free) == pytest.approx(analytic - failure_free, rel=0.03)


def test_the_plan_beats_its_neighbours():
    plan = optimal_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS)
    for factor in (0.99, 1.01):
        assert waste(EXAMPLE_LEVELS, EXAMPLE_KINDS, plan.tau_s * factor, plan.every) > plan.waste
    for L in (1, 2):
        for d in (-1, 1):
            near = list(plan.every)
            near[L] += d
            assert _best_tau(EXAMPLE_LEVELS, EXAMPLE_KINDS, tuple(near))[0] > plan.waste


def test_the_plan_is_the_minimum_of_an_exhaustive_grid():
    grid = min((_best_tau(EXAMPLE_LEVELS, EXAMPLE_KINDS, (1, k2, k3))[0], (1, k2, k3))
               for k2 in range(1, 25) for k3 in range(1, 25))
    plan = optimal_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS)
    assert plan.every == grid[1]
    assert plan.waste == pytest.approx(grid[0], rel=1e-9)


def test_levels_beat_the_top_level_alone():
    plan = optimal_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS)
    alone = top_level_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS)
    assert alone.every == (1,)
    rate = sum(1 / k.mtbf_s for k in EXAMPLE_KINDS)  # every kind restarts from the top
    assert alone.tau_s == pytest.approx(daly(4.0, 1 / rate), rel=1e-3)
    assert plan.waste < alone.waste / 3
    assert plan.every[1] > 1 and plan.every[2] > 1
    spans = plan.intervals_s
    assert spans == pytest.approx([plan.tau_s * k for k in (1, plan.every[1],
                                                            plan.every[1] * plan.every[2])])
    # per hour of work: exactly-level-L checkpoints, the top ones counted once
    assert sum(plan.per_hour()) == pytest.approx(3600 / spans[0])
    assert plan.per_hour()[2] == pytest.approx(3600 / spans[2])


def test_rarer_failures_space_their_level_out():
    often = optimal_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS)
    rare = optimal_plan(EXAMPLE_LEVELS, EXAMPLE_KINDS[:2] + [FailureKind("job", 6048000, 2)])
    assert rare.intervals_s[2] > 2 * often.intervals_s[2]
    assert rare.intervals_s[0] == pytest.approx(often.intervals_s[0], rel=0.05)


@pytest.mark.parametrize("levels, kinds, match", [
    ([], [], "at least one checkpoint level"),
    ([Level("a", -1.0)], [FailureKind("p", 60, 0)], "level 'a': checkpoint cost must be positive"),
    ([Level("a", 1.0, -2.0)], [FailureKind("p", 60, 0)], "restart cost must be >= 0"),
    ([Level("a", 1.0)], [FailureKind("p", 0, 0)], "'p': MTBF must be positive"),
    ([Level("a", 1.0)], [FailureKind("p", math.inf, 0)], "'p': MTBF must be positive"),
    ([Level("a", 1.0)], [FailureKind("p", 60, 1)], "names level 1, but there are 1 level"),
    ([Level("a", 1.0), Level("b", 2.0)], [FailureKind("p", 60, 0)],
     "no failure kind needs level 'b'"),
    ([Level("a", 5.0, 1000.0), Level("b", 10.0, 1e5)],
     [FailureKind("p", 30, 0), FailureKind("n", 100, 1)], "no plan has a finite expected"),
    ([Level("a", 1e-9), Level("b", 1e9)], [FailureKind("p", 1, 0), FailureKind("n", 1e12, 1)],
     "level 'b' is worth less than one checkpoint in 1000000 of level 'a'"),
])
def test_bad_input_is_refused(levels, kinds, match):
    with pytest.raises(ValueError, match=match):
        optimal_plan(levels, kinds)


def test_bad_plan_shape_is_refused():
    with pytest.raises(ValueError, match="one whole k >= 1 per level"):
        expected_period_s(EXAMPLE_LEVELS, EXAMPLE_KINDS, 10.0, (1, 0, 3))
    with pytest.raises(ValueError, match="one whole k >= 1 per level"):
        expected_period_s(EXAMPLE_LEVELS, EXAMPLE_KINDS, 10.0, (1, 3))
