"""ReadyMessageFlush's decisions in plain Python, no I/O: where a checkpoint is taken
(CoCheck section 4), and which checkpoint a recovery can still complete from the parts
the survivors hold (``salvage``). A rank checkpoints at a safe point when its interval (or the levels'
plan) says so, or at a position the coordinator decided for a request: every rank told
the coordinator its next safe point, and the checkpoint is at the furthest of them, which
every rank can still reach (``shared/flush.checkpoint_position``, which the levels' planner
uses too; none when a rank has left its loop). ``ReadyRank`` keeps one rank's side of it;
the mixin (``rank.py``) flushes, saves and waits, and the coordinator side
(``coordinator.py``) asks and tells.
"""
from __future__ import annotations

from typing import Callable, Iterable


class ReadyRank:
    """When one rank checkpoints: at its interval's iterations (or the levels' plan), and
    at the positions decided for requests; never twice at one position."""

    __slots__ = ("interval", "targets", "last")

    def __init__(self, interval: int | None):
        self.interval = interval
        self.targets: set[tuple] = set()  # decided positions not reached yet
        self.last: tuple | None = None    # the position of the last checkpoint taken

    def decided(self, positions: Iterable[tuple | None]) -> None:
        """The coordinator decided these positions (None: a request not taken)."""
        self.targets |= {p for p in positions if p is not None}

    def at_safe_point(self, iteration: int, position: tuple,
                      planned: bool | None = None) -> tuple[bool, set[tuple]]:
        """This rank is at ``position`` (``iteration`` of its loop); ``planned``: the
        levels' plan says whether a checkpoint is due (None: no plan, the interval
        decides). Returns ``(checkpoint here, passed)``: ``passed`` are decided positions
        this rank went past without reaching them (a new loop began): abandoned."""
        due = planned
        if due is None:
            due = bool(self.interval) and iteration > 0 and iteration % self.interval == 0
        if self.last is not None and position <= self.last:
            due = False  # restored here: this position's checkpoint was taken already
        here = due or position in self.targets
        self.targets.discard(position)
        return here, {k for k in self.targets if k < position}

    def taken(self, position: tuple) -> None:
        """This rank joined the checkpoint round of ``position`` (rounds other ranks
        began may be joined out of order: the newest counts)."""
        if self.last is None or position > self.last:
            self.last = position


def salvage(n: int, own: dict[int, set], copies: dict[int, set], taken: dict[tuple, set],
            latest: tuple | None, holder: Callable[[int, int], int]
            ) -> tuple[tuple, dict[int, int]] | None:
    """The newest checkpoint past ``latest`` (the newest complete one) that the live ranks
    can still give whole, and where each part the coordinator lacks comes from: ``{rank:
    source}``, the rank itself (its own part, not taken yet) or its holder (the copy a
    rank hands over before it goes on). None: no newer one can be completed (a rank and
    its holder both lost), or the newest is complete already (being sealed).

    ``own[r]``: the positions of the parts live rank ``r`` still holds; ``copies[h]``:
    the ``(rank, position)`` copies live holder ``h`` keeps; ``taken[p]``: the ranks
    whose parts of ``p`` the coordinator holds; ``holder(r, n)``: who keeps ``r``'s copy.
    """
    candidates = {p for ps in own.values() for p in ps}
    candidates |= {p for cs in copies.values() for _, p in cs}
    candidates |= {p for p, ranks in taken.items() if len(ranks) < n}
    for pos in sorted(candidates, reverse=True):
        if latest is not None and pos <= latest:
            return None
        have = taken.get(pos, set())
        sources = {}
        for r in (r for r in range(n) if r not in have):
            if pos in own.get(r, ()):
                sources[r] = r
            elif (r, pos) in copies.get(holder(r, n), ()):
                sources[r] = holder(r, n)
            else:
                break
        else:
            return (pos, sources) if sources else None
    return None
