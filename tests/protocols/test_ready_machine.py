"""ReadyMessageFlush's machine (``protocols/ready_flush/machine.py``) step by step: where a
rank checkpoints and where a requested checkpoint is placed, with no transport (the
whole-run tests are in ``test_ready_flush.py``)."""
from __future__ import annotations

import pytest

from ftactors.protocols.ready_flush.machine import ReadyRank
from ftactors.protocols.shared.flush import checkpoint_position


@pytest.mark.parametrize("nexts, position", [
    ([(0, 3), (0, 5), (0, 4)], (0, 5)),   # the furthest: every rank can still reach it
    ([(1, 0), (0, 9)], (1, 0)),           # a later loop beats a later iteration
    ([[0, 2], [0, 2]], (0, 2)),           # positions that travelled as lists
    ([(0, 3), None], None)])              # a rank left its loop: no position for all
def test_a_requested_checkpoint_is_at_the_furthest_next_safe_point(nexts, position):
    assert checkpoint_position(nexts) == position


def test_a_rank_checkpoints_at_its_interval_and_once_per_position():
    r = ReadyRank(interval=3)
    assert [r.at_safe_point(i, (0, i))[0] for i in range(7)] == [
        False, False, False, True, False, False, True]
    r.taken((0, 6))
    assert r.at_safe_point(6, (0, 6)) == (False, set())  # restored at it: taken already
    assert r.at_safe_point(9, (0, 9)) == (True, set())


def test_the_levels_plan_overrides_the_interval_but_not_a_taken_position():
    r = ReadyRank(interval=3)
    assert r.at_safe_point(2, (0, 2), planned=True) == (True, set())
    assert r.at_safe_point(3, (0, 3), planned=False) == (False, set())
    r.taken((0, 4))
    assert r.at_safe_point(4, (0, 4), planned=True) == (False, set())


def test_a_decided_position_is_taken_once_and_one_passed_is_abandoned():
    r = ReadyRank(interval=None)
    r.decided([(0, 5), None, (0, 2)])
    assert r.at_safe_point(1, (0, 1)) == (False, set())
    assert r.at_safe_point(2, (0, 2)) == (True, set())
    assert r.at_safe_point(2, (0, 2)) == (False, set())   # reached: no longer a target
    assert r.at_safe_point(0, (1, 0)) == (False, {(0, 5)})  # a new loop began before it
