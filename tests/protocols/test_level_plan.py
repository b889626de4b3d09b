"""``level_intervals="auto"`` (issue 17): the intervals of every level of a stack chosen
together at run time from the costs the run measures. On sim the virtual clock makes the
costs deterministic, so the plan chosen must be exactly ``_multilevel``'s for the costs
the timeline shows, and the levels must then checkpoint at exactly its iterations."""
import pytest

import ftactors as ft
from ftactors.protocols import LevelPlanWarning, ReadyMessageFlush, StandbyReplacement
from ftactors.protocols.shared.level_plan import FIRST
from ftactors.protocols.shared.multilevel import FailureKind, Level, optimal_plan

from .programs import Heat1D
from .test_rs_backup import TOPOLOGY, assert_same, reference
from .test_stacks import PartnerStable, ThreeLevels

ITERATIONS = 60
MTBF = {"standby": 0.003, "pair@rs": 0.03, "job@ready-flush": 0.3}
"""Virtual seconds: a sim iteration of Heat1D here takes about 60 us."""
LEVELS = {"standby": "backup", "rs": "rs_checkpoint", "ready_flush": "checkpoint"}
"""Each level's checkpoint event (rank 0's, or the coordinator's)."""


class PartnerOnly(StandbyReplacement, Heat1D):
    pass


def run(cls, tmp_path, transport="sim", kills=(), **kw):
    options = {k: v for k, v in TOPOLOGY.items() if k != "rs_interval"}
    options.update({"checkpoint_storage": "stable", "checkpoint_dir": str(tmp_path / "stable"),
                    "level_intervals": "auto", "level_mtbf_s": MTBF, **kw})
    names = [p.protocol_name for p in cls.__mro__ if "protocol_name" in vars(p)]
    if "rs" not in names:
        options = {k: v for k, v in options.items() if not k.startswith("rs_")}
    if "ready_flush" not in names:
        options = {k: v for k, v in options.items() if not k.startswith("checkpoint")}
    return ft.run(cls, ranks=8, spares=3, transport=transport,
                  kwargs={"iterations": ITERATIONS}, chaos=ft.Chaos(kill=list(kills)),
                  **options)


def chosen(r) -> list[dict]:
    return [e.detail for e in r.events_of("level_intervals_chosen")]


def positions(r, level: str) -> list[int]:
    kind = LEVELS[level]
    return sorted({e.detail["position"][1] for e in r.events
                   if e.kind == kind and e.rank in (0, -1)})


def replan(plan: dict) -> dict:
    """What ``_multilevel`` gives for the costs and failures a plan event recorded."""
    names = [row["level"] for row in plan["levels"]]
    levels = [Level(row["level"], row["checkpoint_s"], row["restart_s"])
              for row in plan["levels"]]
    kinds = [FailureKind(k["kind"], k["mtbf_s"], names.index(k["level"]))
             for k in plan["failures"]]
    try:
        best = optimal_plan(levels, kinds)
    except ValueError as exc:  # no finite plan: every level at every iteration
        assert plan["fallback"] == str(exc) and plan["waste"] == float("inf")
        return {"tau_s": plan["iteration_s"], "every": [1] * len(names),
                "intervals_iterations": [1] * len(names)}
    assert "fallback" not in plan
    first = max(1, round(best.tau_s / plan["iteration_s"]))
    every, iterations = 1, []
    for k in best.every:
        every *= k
        iterations.append(first * every)
    return {"tau_s": best.tau_s, "every": list(best.every), "intervals_iterations": iterations}


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return run(ThreeLevels, tmp_path_factory.mktemp("three"))


def test_the_first_plan_is_made_from_the_costs_measured_at_the_first_checkpoints(three):
    first = chosen(three)[0]
    assert first["reason"] == "first costs measured"
    reports = [e.detail for e in three.events_of("level_cost")
               if e.detail["position"] == (0, FIRST)]
    total = 0.0
    for row in first["levels"]:
        mine = [d for d in reports if d["level"] == row["level"]]
        assert len(mine) == 8  # every rank reported its stall at iteration 1
        stall = max(d["end"] for d in mine) - min(d["at"] for d in mine)
        total += stall
        assert row["stall_s"] == stall and row["checkpoint_s"] == pytest.approx(total)
        assert row["restart"] == "estimated" and row["restart_s"] == row["checkpoint_s"]
    times = [d["iteration_s"] for d in reports if d["iteration_s"] is not None]
    assert first["iteration_s"] == max(times) > 0
    assert [f["mtbf_s"] for f in first["failures"]] == [0.003, 0.03, 0.3]


def test_every_plan_chosen_is_the_optimal_plan_for_its_costs(three):
    plans = chosen(three)
    assert plans
    for plan in plans:
        expected = replan(plan)
        assert plan["tau_s"] == expected["tau_s"] and plan["every"] == expected["every"]
        assert plan["intervals_iterations"] == expected["intervals_iterations"]
    # what this sim measures (a flush waits for its root's count of markers: two hops
    # more; a message sent at once schedules no flush behind it, so less loop time)
    assert plans[0]["intervals_iterations"] == [6, 18, 54]


def test_the_levels_checkpoint_at_the_planned_iterations(three):
    plans = chosen(three)
    bounds = [p["position"][1] for p in plans] + [ITERATIONS]
    for i, level in enumerate(LEVELS):
        expected = {FIRST}
        for plan, start, end in zip(plans, bounds, bounds[1:]):
            every = plan["intervals_iterations"][i]
            expected |= {it for it in range(start, end) if it % every == 0}
        assert positions(three, level) == sorted(expected), level
    assert positions(three, "standby") != [FIRST]  # the plan had something to apply


def test_a_sim_run_chooses_the_same_plans_every_time(three, tmp_path):
    assert chosen(run(ThreeLevels, tmp_path)) == chosen(three)


@pytest.mark.filterwarnings("ignore::ftactors.protocols.LevelPlanWarning")
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_run_with_auto_intervals_recovers_bit_identically(tmp_path, transport):
    r = run(ThreeLevels, tmp_path, transport, kills=[(2, 20), (5, 41)])
    assert_same(r.results, reference(8, ITERATIONS))
    assert [e.detail["level"] for e in r.events_of("recovery_level")] == ["standby", "standby"]
    plans = chosen(r)
    assert plans and all(p["intervals_iterations"] == replan(p)["intervals_iterations"]
                         for p in plans)
    if transport == "sim":  # the plan is agreed again after each round, with the cost measured
        after = [p for p in plans if p["reason"] == "after a recovery"]
        assert after and after[-1]["levels"][0]["restart"] == "measured"


def test_costs_that_no_plan_survives_take_every_level_at_every_iteration(tmp_path):
    """MTBFs far below the costs measured (a loaded machine, MTBFs meant for another
    scale): the run warns and protects every iteration instead of going on measuring,
    which took no checkpoint after iteration 1."""
    tiny = {"standby": 1e-7, "pair@rs": 1e-6, "job@ready-flush": 1e-5}
    with pytest.warns(LevelPlanWarning, match="no plan has a finite expected run time"):
        r = run(ThreeLevels, tmp_path, level_mtbf_s=tiny)
    assert_same(r.results, reference(8, ITERATIONS))
    [plan] = chosen(r)
    assert plan["fallback"] and plan["intervals_iterations"] == [1, 1, 1]
    assert replan(plan)["intervals_iterations"] == [1, 1, 1]
    start = plan["position"][1]
    for level in LEVELS:
        assert set(range(start, ITERATIONS)) <= set(positions(r, level)), level


def test_two_levels_and_one_level_plan_too(tmp_path):
    r = run(PartnerStable, tmp_path, level_mtbf_s={"standby": 0.003, "ready-flush": 0.3})
    assert_same(r.results, reference(8, ITERATIONS))
    [first, *_] = chosen(r)
    assert [row["level"] for row in first["levels"]] == ["standby", "ready_flush"]
    one = run(PartnerOnly, tmp_path, level_mtbf_s={"standby": 0.003})
    plan = chosen(one)[0]
    assert plan["every"] == [1] and plan["intervals_iterations"] == replan(plan)[
        "intervals_iterations"]  # one level: Daly's model
    assert_same(one.results, reference(8, ITERATIONS))


@pytest.mark.parametrize("options, message", [
    ({"level_mtbf_s": None}, "needs level_mtbf_s"),
    ({"level_mtbf_s": {"standby": 10, "ready-flush": 100}},
     "no failure that level 'rs' is the lowest to recover"),
    ({"level_mtbf_s": {**MTBF, "groups": 5}}, "'groups' is not a level of this stack"),
    ({"level_mtbf_s": {**MTBF, "standby": -1}}, "must be a number of seconds > 0"),
    ({"level_restart_s": {"rs": -2}}, "level_restart_s 'rs' must be a number of seconds >= 0"),
    ({"level_intervals": "sometimes"}, "level_intervals must be 'auto'"),
    ({"rs_interval": 4}, "chooses every level's interval: drop rs_interval"),
    ({"checkpoint_interval": "auto", "mtbf_s": 5},
     "drop checkpoint_interval, mtbf_s"),
])
def test_bad_auto_settings_are_refused_before_anything_starts(tmp_path, options, message):
    with pytest.raises(ft.ConfigError, match=message):
        run(ThreeLevels, tmp_path, **options)


def test_mtbfs_without_auto_are_refused(tmp_path):
    with pytest.raises(ft.ConfigError, match="only apply with level_intervals='auto'"):
        ft.run(PartnerOnly, ranks=2, transport="sim", level_mtbf_s={"standby": 5})


def test_an_mtbf_for_a_level_outside_the_stack_names_the_stacks_levels(tmp_path):
    with pytest.raises(ft.ConfigError, match=r"'rs' is not a level of this stack \(its "
                                             r"levels: standby, ready_flush\)"):
        run(PartnerStable, tmp_path, level_mtbf_s={"standby": 1, "ready-flush": 9, "rs": 3})


def test_the_single_level_auto_of_ready_flush_still_works(tmp_path):
    class Ckpt(ReadyMessageFlush, Heat1D):
        pass
    r = ft.run(Ckpt, ranks=4, transport="sim", kwargs={"iterations": 30},
               checkpoint_interval="auto", mtbf_s=0.01)
    assert r.events_of("checkpoint_interval_chosen")
    assert not r.events_of("level_intervals_chosen")
    assert_same(r.results, reference(4, 30))


def test_auto_is_refused_where_the_levels_keep_another_protocols_parts():
    from ftactors.protocols import GroupCoordination

    class GroupsOnSpares(StandbyReplacement, GroupCoordination, Heat1D):
        pass
    with pytest.raises(ft.ConfigError, match="with GroupCoordination the levels keep its "
                                             "parts"):
        ft.run(GroupsOnSpares, ranks=4, transport="sim", level_intervals="auto",
               level_mtbf_s={"standby": 5})
