"""Checkpoint interval advice: Young's and Daly's formulas against hand-computed values,
Daly's interval minimising his own wall-time model, and the command line."""
import math

import pytest

from ftactors.tools import cli
from ftactors.protocols.shared.intervals import daly, expected_wall, young
from ftactors.tools.advise import advice


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


def _results_dir(tmp_path):
    """Two chaos runs: ready-flush checkpoints that cost 2 s and 4 s and a 10 s recovery;
    standby backups of 1 + 0.5 s."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import ftactors as ft
    from ftactors.tools.run_metrics import RESULT_SCHEMA, events_table
    (tmp_path / "events").mkdir()
    runs = {"r000": ("rf", 10.0, [ft.Event(1.0, "checkpoint", -1, {"cost_s": 2.0}),
                                  ft.Event(2.0, "checkpoint", -1, {"cost_s": 4.0})]),
            "r001": ("standby", None, [ft.Event(1.0, "backup", 0, {"flush_s": 1.0,
                                                                   "save_s": 0.5})])}
    rows = []
    for run_id, (protocol, recover_s, events) in runs.items():
        pq.write_table(events_table(events), tmp_path / "events" / f"{run_id}.parquet")
        row = {name: None for name in RESULT_SCHEMA.names}
        row.update(run_id=run_id, protocol=protocol, recover_s=recover_s,
                   events_path=f"events/{run_id}.parquet")
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows, RESULT_SCHEMA), tmp_path / "results.parquet")
    return tmp_path


def test_costs_measured_by_chaos_runs(tmp_path, capsys):
    from ftactors.tools.advise import measured_costs
    d = str(_results_dir(tmp_path))
    assert measured_costs(d, "rf") == {"checkpoint_s": 3.0, "checkpoints": 2, "runs": 1,
                                       "restart_s": 10.0, "recoveries": 1}
    assert measured_costs(d)["checkpoint_s"] == pytest.approx((2 + 4 + 1.5) / 3)
    assert cli.main(["advise", "--mtbf", "3600", "--results", d, "--protocol", "rf"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint cost 3 s, restart cost 10 s" in out
    assert f"checkpoint every {daly(3.0, 3600):.1f} s of work" in out
    assert cli.main(["advise", "--mtbf", "3600", "--results", d, "--protocol", "groups"]) == 2
    assert "no checkpoint cost was measured in protocol 'groups'" in capsys.readouterr().err
    assert cli.main(["advise", "--mtbf", "3600", "--results", str(tmp_path / "nope")]) == 2
    assert cli.main(["advise", "--mtbf", "3600"]) == 2
    assert "give --checkpoint-cost, or --results" in capsys.readouterr().err
