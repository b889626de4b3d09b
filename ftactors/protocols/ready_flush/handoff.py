"""ReadyMessageFlush's hand-off of checkpoint parts (beyond the paper, issue 27) in plain
Python, no I/O: events in, effects out. The mixin (``rank.py``) performs the effects; the
pair-of-machines tests (``tests/protocols/test_ready_handoff_machine.py``) step a rank
and its holder with no transport.

Invariant: a rank past a checkpoint never holds the only copy of its part, so a failure
an instant after a checkpoint restarts from it. The coordinator's take and confirmation
are three control-plane hops, its holder's copy one data-plane round trip; so the rank
sends a copy of its part to its *holder* (rank ``(r + n // 2) % n``) and goes on once
the part is safe elsewhere: the holder acknowledged the copy, or the coordinator
confirmed that it holds the part (whichever comes first; with one rank there is no
holder and only the confirmation counts). The confirmation also lets the holder drop its
copy. A holder keeps the ``KEEP_COPIES`` newest copies of each rank, for a rank that
died after the coordinator took its part but before it could say so; what the survivors
hold then decides the checkpoint a recovery completes (``machine.salvage``).

Each rank plays both sides: it hands its own parts to its holder and keeps the copies
of the rank(s) it holds for. The control channel between two ranks delivers in order,
so a holder hears a copy before the drop that follows it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..standby.machine import partner

KEEP_COPIES = 2
"""Copies of one rank's parts a holder keeps at most: each is dropped once the coordinator
took the part, but a rank that died after the take cannot say so."""


class Send(NamedTuple):
    """Send ``op`` (``copy``, ``copied``, ``drop``) with ``data`` to rank ``to``."""

    to: int
    op: str
    data: Any


class GoOn(NamedTuple):
    """The rank may go on past ``position``: its part is safe outside its process."""

    position: tuple


def holder(rank: int, n: int) -> int | None:
    """Who keeps rank ``rank``'s copies (StandbyReplacement's partner); None: one rank."""
    h = partner(rank, n)
    return None if h == rank else h


class HandOff:
    """One rank's side of the hand-off: its own parts until they are safe, and the copies
    it keeps for other ranks (see the module docstring)."""

    __slots__ = ("holder", "waiting", "at_holder", "copies")

    def __init__(self, rank: int, n: int):
        self.holder = holder(rank, n)
        self.waiting: set[tuple] = set()     # own parts saved, the rank not gone on yet
        self.at_holder: set[tuple] = set()   # own parts copied, the copy not dropped yet
        self.copies: dict[tuple[int, tuple], Any] = {}  # (rank, position) -> its copy

    # ---------------------------------------------------------------- rank side
    def saved(self, position: tuple, blob: Any) -> list:
        """This rank saved its part at ``position``: copy it to the holder; the rank
        waits for a ``GoOn``."""
        self.waiting.add(position)
        if self.holder is None:
            return []
        self.at_holder.add(position)
        return [Send(self.holder, "copy", (position, blob))]

    def copied(self, position: tuple) -> list:
        """The holder has the copy of this rank's part at ``position``."""
        return self._safe(position)

    def kept(self, position: tuple) -> list:
        """The coordinator holds this rank's part at ``position``: the holder's copy is
        no longer needed."""
        effects = self._safe(position)
        if position in self.at_holder:
            self.at_holder.discard(position)
            effects.append(Send(self.holder, "drop", position))
        return effects

    def _safe(self, position: tuple) -> list:
        if position not in self.waiting:
            return []  # gone on already (or an execution left behind)
        self.waiting.discard(position)
        return [GoOn(position)]

    # -------------------------------------------------------------- holder side
    def copy_received(self, rank: int, position: tuple, blob: Any) -> list:
        """Rank ``rank``'s copy at ``position``: keep it (with the newest others of that
        rank, at most ``KEEP_COPIES``) and acknowledge it; a copy older than those is
        not kept, so not acknowledged."""
        self.copies[(rank, position)] = blob
        mine = sorted(p for r, p in self.copies if r == rank)
        for old in mine[:-KEEP_COPIES]:
            del self.copies[(rank, old)]  # its own confirmation was lost with it
        return [Send(rank, "copied", position)] if (rank, position) in self.copies else []

    def dropped(self, rank: int, position: tuple) -> list:
        """The coordinator holds rank ``rank``'s part at ``position``: forget the copy."""
        self.copies.pop((rank, position), None)
        return []

    def held(self) -> list[tuple[int, tuple]]:
        """The ``(rank, position)`` of the copies kept here (for ``salvage``)."""
        return list(self.copies)

    # -------------------------------------------------------------- both sides
    def restored(self) -> None:
        """The rank was rolled back: the parts and copies under way belong to the
        execution left."""
        self.waiting.clear()
        self.at_holder.clear()
        self.copies.clear()
