"""RSBackup's recovery decision in plain Python, no I/O (Bautista Gomez et al., section
IV.D-E): from the survivors' inventories, the newest round every rank can restore and how
(``choose_recovery``: own copies, a decode from ``k`` blocks of each hit group, or the
start of the run); ``Undecodable`` when a group lost more than its parity covers. The
coordinator side (``coordinator.py``) asks for the inventories and performs the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .placement import Placement


@dataclass
class RecoveryPlan:
    """What a recovery round does (``choose_recovery``).

    Attributes:
        round: the position every rank restores (None: the start of the run).
        decode: ``{group: {"lost": [member index], "sources": {block index: rank}}}``:
            ``k`` blocks to decode from (data ``0..k-1``, parity ``k..k+m-1``).
        reencode: ``{group: [parity index]}``: parity blocks of the round no live holder
            has complete, to be encoded again by the group.
    """

    round: tuple | None
    decode: dict = field(default_factory=dict)
    reencode: dict = field(default_factory=dict)


class Undecodable(Exception):
    """No round can be rebuilt; ``groups``: those that fail for the newest round."""

    def __init__(self, groups: list[int], round_id):
        super().__init__(groups, round_id)
        self.groups = groups
        self.round = round_id


def choose_recovery(placement: Placement, failed: set[int], inventories: dict) -> RecoveryPlan:
    """The newest round every group can restore, and how.

    ``inventories[r]`` (survivors only): ``{"own": [rounds], "held": [(group, parity
    index, round)]}`` with complete parity blocks only.

    Raises:
        Undecodable: a round was committed (``_committed``) yet no round is decodable
            in every group.
    """
    rounds = sorted({tuple(r) for inv in inventories.values() for r in inv["own"]},
                    reverse=True)
    first_failure = None
    for round_id in rounds:
        plan, bad = _plan_round(placement, round_id, inventories)
        if not bad:
            return plan
        if first_failure is None:
            first_failure = bad
    if _committed(placement, inventories):
        raise Undecodable(first_failure or list(range(len(placement.groups))),
                          rounds[0] if rounds else None)
    return RecoveryPlan(None)  # no round was ever committed: the start of the run


def _committed(placement: Placement, inventories: dict) -> bool:
    """Whether the survivors show a round whose encoding completed in every group: each
    group's parity of that round is held, complete, by a live holder, or no holder of it
    lives to say. A failure during the first round's encoding leaves a group whose live
    holders hold none of its parity: nothing was committed, and the start of the run is
    the line, not a loss beyond repair."""
    done: dict[tuple, set] = {}
    for inv in inventories.values():
        for g, _, rnd in inv["held"]:
            done.setdefault(tuple(rnd), set()).add(g)
    silent = {g for g in range(len(placement.groups))
              if not any(placement.holder(g, j) in inventories for j in range(placement.m(g)))}
    return any(len(gs | silent) == len(placement.groups) for gs in done.values())


def _plan_round(placement: Placement, round_id: tuple, inventories: dict):
    """``(plan, groups that cannot be rebuilt)`` for one round."""
    own = {r: {tuple(x) for x in inv["own"]} for r, inv in inventories.items()}
    parity: dict[tuple[int, int], int] = {}
    for holder, inv in sorted(inventories.items()):
        for g, j, rnd in inv["held"]:
            if tuple(rnd) == round_id:
                parity.setdefault((g, j), holder)
    plan, bad = RecoveryPlan(round_id), []
    for g, members in enumerate(placement.groups):
        k, m = placement.k(g), placement.m(g)
        data = {i: r for i, r in enumerate(members) if round_id in own.get(r, ())}
        have = {j: parity[(g, j)] for j in range(m) if (g, j) in parity}
        lost = [i for i in range(k) if i not in data]
        if lost:
            blocks = {**data, **{k + j: r for j, r in have.items()}}
            if len(blocks) < k:
                bad.append(g)
                continue
            plan.decode[g] = {"lost": lost, "sources": dict(sorted(blocks.items())[:k])}
        missing = [j for j in range(m) if j not in have]
        if missing:
            plan.reencode[g] = missing
    return plan, bad
