"""Checkpoint interval advice: Young's and Daly's formulas against hand-computed values,
Daly's interval minimising his own wall-time model, and the command line."""
import math

import pytest

from ftactors import cli
from ftactors.advise import advice, daly, expected_wall, young


def test_young_and_daly_against_hand_computed_values():
    # C = 12 s, M = 1 h: sqrt(2 * 12 * 3600) = 293.939; Daly's correction with
    # C / 2M = 1/600: 293.939 * (1 + 0.0136083 + 0.0001852) - 12 = 285.993
    assert young(12, 3600) == pytest.approx(293.9388, rel=1e-6)
    assert daly(12, 3600) == pytest.approx(285.9930, rel=1e-5)
    assert daly(9000, 3600) == 3600  # C >= 2M: checkpoint once per MTBF


def test_daly_interval_is_near_the_minimum_of_his_wall_time_model():
    c, r, m = 30.0, 60.0, 7200.0
    best = min((expected_wall(1e6, t, c, r, m), t) for t in range(100, 2000))[1]
    assert abs(daly(c, m) - best) <= 2  # the 1-second grid's minimum
    assert abs(young(c, m) - best) > abs(daly(c, m) - best)


def test_advice_gives_iterations_and_waste():
    a = advice(3600, 12, restart_s=30, iteration_s=2.0)
    assert a["daly"]["interval_iterations"] == round(daly(12, 3600) / 2.0)
    assert 0 < a["daly"]["waste"] <= a["young"]["waste"] + 1e-12
    assert math.isclose(a["daly"]["waste"] + 1,
                        expected_wall(1.0, a["daly"]["interval_s"], 12, 30, 3600))


@pytest.mark.parametrize("bad", [(0, 12), (3600, -1), (float("inf"), 12)])
def test_bad_input_is_refused(bad):
    with pytest.raises(ValueError, match="positive"):
        young(bad[1], bad[0])


def test_cli(capsys):
    assert cli.main(["advise", "--mtbf", "3600", "--checkpoint-cost", "12",
                     "--iteration-s", "2"]) == 0
    out = capsys.readouterr().out
    assert "Young (1974)  checkpoint every 293.9 s of work = every 147 iterations" in out
    assert "Daly (2006)   checkpoint every 286.0 s of work = every 143 iterations" in out
    assert cli.main(["advise", "--mtbf", "0", "--checkpoint-cost", "12"]) == 2
    assert "must be positive" in capsys.readouterr().err
