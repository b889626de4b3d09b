"""A part taken off a safe point on a global round (a rank that joined while blocked, or
after ``main()`` returned) is re-executed from its base after a rollback; what it sent
before its marker is in its receivers' parts of the same round, so the re-execution does
not send it again (``Endpoint.state_now(global_cut=True)``, ``send_app``'s ``_cut_sent``).
Else every receiver drops those messages as duplicates, which on a global cut is the mark
of an orphan, and sim-check fails the run as a fault of ftactors."""
from __future__ import annotations

from pathlib import Path

from ftactors.tools.programs import resolve
from ftactors.tools.simcheck import sim_check

FARM = resolve(f"{Path(__file__).with_name('shapes.py')}:Farm",
               check="tests.programs.wildcards:farm_check")


def test_a_farm_rolled_back_to_parts_taken_while_blocked_drops_no_duplicate():
    """Seeds 0, 12 and 16 of ``sim-check --app shapes.py:Farm --protocol ready-flush
    --ranks 4`` each dropped 1-3 duplicates before: a worker's part, taken as it waited
    for its next task, sent its last READY again after the rollback."""
    for seed in (0, 12, 16):
        outcomes = sim_check("ready-flush", 1, seed, program=FARM, ranks=4)
        assert [o.problem for o in outcomes if not o.ok] == [], seed
