"""ReadyMessageFlush's machine (``protocols/ready_flush/machine.py``) step by step: where a
rank checkpoints, where a requested checkpoint is placed and which one a recovery
completes, with no transport (the whole-run tests are in ``test_ready_flush.py``); and
that its machines (``machine.py``, ``handoff.py``, ``migration.py``) do no I/O."""
from __future__ import annotations

import ast
import pathlib

import pytest

import ftactors.protocols.ready_flush as package
from ftactors.protocols.ready_flush.machine import ReadyRank, salvage
from ftactors.protocols.standby.machine import partner as holder
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


# salvage: 4 ranks, each rank's copy at holder (r + 2) % 4; rank 1 died
P1, P2 = (0, 4), (0, 8)


def test_a_dead_ranks_part_not_taken_comes_from_its_holders_copy():
    own = {0: {P2}, 2: {P2}, 3: set()}         # rank 3's part of P2 was taken already
    copies = {0: set(), 2: set(), 3: {(1, P2)}}  # rank 3 holds rank 1's copy
    assert salvage(4, own, copies, {P1: {0, 1, 2, 3}, P2: {3}}, P1, holder) == (
        P2, {0: 0, 1: 3, 2: 2})


def test_a_part_lost_with_its_holder_falls_back_to_an_older_checkpoint():
    own = {0: {P1, P2}, 2: {P1, P2}, 3: {P1, P2}}  # rank 1 died, and no copy of its P2
    copies = {3: {(1, P1)}}
    assert salvage(4, own, copies, {}, None, holder) == (P1, {0: 0, 1: 3, 2: 2, 3: 3})
    assert salvage(4, own, copies, {}, P1, holder) is None  # nothing newer than complete


def test_a_checkpoint_the_coordinator_holds_whole_is_left_to_its_sealing():
    own = {0: {P2}}
    assert salvage(4, own, {}, {P2: {0, 1, 2, 3}}, P1, holder) is None
    assert salvage(4, {}, {}, {}, None, holder) is None  # no checkpoint at all


def test_the_newest_checkpoint_that_can_be_completed_wins():
    own = {0: {P1, P2}, 2: {P1, P2}, 3: {P1, P2}}
    copies = {3: {(1, P1), (1, P2)}}
    assert salvage(4, own, copies, {}, None, holder)[0] == P2


@pytest.mark.parametrize("module", ["machine", "handoff", "migration"])
def test_the_machines_import_no_io(module):
    """The decisions are plain Python: no event loop, no Ray, no transport, no runtime."""
    path = pathlib.Path(package.__file__).with_name(f"{module}.py")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    io = ("asyncio", "ray", "ftactors.transports", "ftactors.runtime", "ftactors.engine")
    assert not [n for n in names if n.split(".")[0] in io or n.startswith(io)], names
