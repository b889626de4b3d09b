"""``ftactors advise --level ...``: the multi-level plan on the command line, its
conventions for naming the level of each failure kind, and its refusals."""
import pytest

from ftactors.protocols.shared.intervals import daly, expected_wall
from ftactors.protocols.shared.multilevel import (FailureKind, Level, optimal_plan, top_level_plan,
                                            waste)
from ftactors.tools import cli
from ftactors.tools.advise import multilevel_advice, parse_failure, parse_level

LEVELS = ["--level", "partner:cost=0.05,restart=0.2", "--level", "rs:cost=0.3,restart=1",
          "--level", "stable:cost=4,restart=20"]
KINDS = ["--mtbf", "process@partner=3600", "--mtbf", "node@rs=86400",
         "--mtbf", "job@stable=604800"]
PLAN_LEVELS = [Level("partner", 0.05, 0.2), Level("rs", 0.3, 1.0), Level("stable", 4.0, 20.0)]
PLAN_KINDS = [FailureKind("process", 3600, 0), FailureKind("node", 86400, 1),
              FailureKind("job", 604800, 2)]


def test_cli_prints_the_plan_and_the_top_level_alone(capsys):
    assert cli.main(["advise", *LEVELS, *KINDS, "--iteration-s", "0.1"]) == 0
    out = capsys.readouterr().out
    plan = optimal_plan(PLAN_LEVELS, PLAN_KINDS)
    alone = top_level_plan(PLAN_LEVELS, PLAN_KINDS)
    first = round(plan.tau_s / 0.1)
    assert "failures: process every 3600 s -> partner, node every 86400 s -> rs, " \
           "job every 604800 s -> stable" in out
    spans, rates = plan.intervals_s, plan.per_hour()
    for i, (name, multiple) in enumerate((("partner", 1), ("rs", plan.every[1]),
                                          ("stable", plan.every[1] * plan.every[2]))):
        row = next(line.split() for line in out.splitlines() if line.split()[:1] == [name])
        assert row[3:] == [str(plan.every[i]), f"{spans[i]:.1f}", str(first * multiple),
                           f"{rates[i]:.2f}"]
    assert f"expected waste {100 * plan.waste:.3g}% (" in out
    assert (f"stable alone (every failure recovered from it), every {alone.tau_s:.1f} s of "
            f"work: expected waste {100 * alone.waste:.3g}%; the levels waste "
            f"{alone.waste / plan.waste:.1f}x less") in out


def test_the_plan_in_iterations_is_what_would_run():
    a = multilevel_advice(PLAN_LEVELS, PLAN_KINDS, iteration_s=7.0)
    plan = optimal_plan(PLAN_LEVELS, PLAN_KINDS)
    first = a["levels"][0]["interval_iterations"]
    assert first == round(plan.tau_s / 7.0)
    assert [row["interval_iterations"] for row in a["levels"]] == [
        first, first * plan.every[1], first * plan.every[1] * plan.every[2]]
    assert a["waste_in_iterations"] == waste(PLAN_LEVELS, PLAN_KINDS, first * 7.0, plan.every)
    assert a["waste_in_iterations"] > a["waste"]  # 7 s iterations miss the optimum tau


def test_a_kind_named_after_its_level_and_kinds_sharing_a_level(capsys):
    # two kinds recovered by the same level add their rates: 2 x (1/7200) = 1/3600
    assert cli.main(["advise", *LEVELS, "--mtbf", "process@partner=7200",
                     "--mtbf", "disk@partner=7200", "--mtbf", "rs=86400",
                     "--mtbf", "stable=604800"]) == 0
    split = capsys.readouterr().out
    assert "process every 7200 s -> partner, disk every 7200 s -> partner, " \
           "rs every 86400 s -> rs" in split
    assert cli.main(["advise", *LEVELS, "--mtbf", "partner=3600", "--mtbf", "rs=86400",
                     "--mtbf", "stable=604800"]) == 0
    joined = capsys.readouterr().out
    assert split.splitlines()[1:] == joined.splitlines()[1:]


def test_one_level_is_dalys_interval(capsys):
    assert cli.main(["advise", "--level", "disk:cost=12,restart=30", "--mtbf", "disk=3600"]) == 0
    out = capsys.readouterr().out
    assert f"{daly(12, 3600):11.1f}" in out
    assert f"expected waste {100 * (expected_wall(1, daly(12, 3600), 12, 30, 3600) - 1):.3g}%" \
        in out
    assert "alone" not in out


def test_levels_that_cost_more_than_the_top_alone_say_so(capsys):
    # the lower level's checkpoint and restart both cost more than the top level's
    assert cli.main(["advise", "--level", "a:cost=100,restart=5", "--level",
                     "b:cost=1,restart=1", "--mtbf", "a=10", "--mtbf", "b=20"]) == 0
    out = capsys.readouterr().out
    a = multilevel_advice([Level("a", 100, 5), Level("b", 1, 1)],
                          [FailureKind("a", 10, 0), FailureKind("b", 20, 1)])
    assert a["levels"][1]["every"] == 1 and a["levels"][0]["per_hour"] == 0  # a never taken
    assert (f"the levels waste {a['waste'] / a['top_alone']['waste']:.1f}x more (a lower "
            f"level's restart costs more than the top's)") in out


def test_parsers():
    assert parse_level("rs:cost=0.3") == Level("rs", 0.3, 0.0)
    assert parse_level(" rs : restart=1, cost=2 ") == Level("rs", 2.0, 1.0)
    assert parse_failure("node@rs=86400", ["partner", "rs"]) == FailureKind("node", 86400, 1)
    assert parse_failure("rs=60", ["partner", "rs"]) == FailureKind("rs", 60, 1)


@pytest.mark.parametrize("argv, message", [
    (["--level", "a:cost=-1", "--mtbf", "a=5"], "level 'a': checkpoint cost must be positive"),
    (["--level", "a:cost=1,restart=-2", "--mtbf", "a=5"], "restart cost must be >= 0"),
    (["--level", "a:cost=1", "--mtbf", "x@b=5"], "no level 'b' (the levels are a)"),
    (["--level", "a:cost=1", "--mtbf", "b=5"], "no level 'b'"),
    (["--level", "a:cost=1", "--mtbf", "a=-5"], "'a': MTBF must be positive"),
    (["--level", "a:cost=1", "--mtbf", "a=soon"], "'soon' is not a number of seconds"),
    (["--level", "a:cost=1", "--level", "b:cost=3", "--mtbf", "a=5"],
     "no failure kind needs level 'b'"),
    (["--level", "a:cost=1,foo=2", "--mtbf", "a=5"], "not 'foo=2'"),
    (["--level", "a", "--mtbf", "a=5"], "expected NAME:cost=SECONDS[,restart=SECONDS]"),
    (["--level", "a:restart=1", "--mtbf", "a=5"], "cost=SECONDS is required"),
    (["--level", "a:cost=1", "--level", "a:cost=2", "--mtbf", "a=5"], "two levels share a name"),
    (["--level", "a:cost=1", "--mtbf", "3600"], "with --level, expected KIND@LEVEL=SECONDS"),
    (["--level", "a:cost=1", "--mtbf", "a=5", "--checkpoint-cost", "3"],
     "--checkpoint-cost: single-level options"),
    (["--level", "a:cost=1", "--mtbf", "a=5", "--iteration-s", "0"],
     "--iteration-s must be positive"),
    (["--mtbf", "a=5", "--checkpoint-cost", "3"], "KIND@LEVEL=SECONDS once per failure kind "
                                                  "with the levels"),
    (["--mtbf", "5", "--mtbf", "6", "--checkpoint-cost", "3"], "give --mtbf SECONDS once"),
])
def test_bad_input_is_refused(argv, message, capsys):
    assert cli.main(["advise", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
