"""ReadyMessageFlush's process migration (CoCheck section 5.2, the optimised protocol) for
one rank, in plain Python, no I/O: events in, effects out. The mixin (``rank.py``)
performs the effects; the coordinator (``coordinator.py``) carries the phases; the
pair-of-machines tests (``tests/protocols/test_ready_migration_machine.py``) step the
moving rank and a partner with no transport.

Only the migrating process (MP) stops. At its next safe point it sends a ready message
(RM) to every rank it has sent to (its channels to them may hold its messages), and says
to whom. Every other rank that has ever sent to MP sends it an RM (the paper has only
MP's partners answer its RM; a rank MP never sent to can still have sent to MP), and from
then on keeps everything for MP (``Hold``); a rank MP sent to waits for MP's RM, so
MP's last messages have arrived before its new incarnation exists (whose first envelope
makes the old one's stale). MP waits for the RMs of the ranks that sent to it, so every
message sent to its old location is in its snapshot, which becomes its new incarnation;
then each other rank learns the new incarnation and sends what it kept (``Release``):
nothing was sent to the old location after MP's snapshot, nothing is lost, nothing is
received twice. A move MP cannot stop for (its ``main()`` ended) is refused.

The phases are a literal table (``TRANSITIONS``); an event outside it is a protocol error.
"""
from __future__ import annotations

import enum
from typing import Iterable, NamedTuple

from ftactors.base import ProtocolError


class Phase(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"    # MP: asked to stop at its next safe point
    STOPPED = "stopped"      # MP: stopped, its RMs sent; waits for the others'
    MOVED = "moved"          # MP: its state handed over; this process is done
    HOLDING = "holding"      # another rank: keeps what it sends to MP until the move ends


TRANSITIONS = {
    (Phase.RUNNING, "stop_asked"): Phase.STOPPING,
    (Phase.STOPPING, "at_safe_point"): Phase.STOPPED,
    (Phase.STOPPING, "finished"): Phase.RUNNING,   # no safe point left: refused
    (Phase.STOPPED, "hand_over"): Phase.MOVED,
    (Phase.RUNNING, "notice"): Phase.HOLDING,
    (Phase.HOLDING, "done"): Phase.RUNNING,
}
"""(phase, event) -> phase; ``finished`` elsewhere changes no phase (a rank whose
``main()`` returned still keeps and releases messages for a mover)."""


class Marker(NamedTuple):
    """Send the RM of move ``move`` to rank ``to``."""

    to: int
    move: int


class WaitMarkers(NamedTuple):
    """Wait for the RMs of move ``move`` from ``ranks``."""

    move: int
    ranks: tuple[int, ...]


class Hold(NamedTuple):
    """Keep everything for rank ``rank`` from now on (``Endpoint.hold``)."""

    rank: int


class Release(NamedTuple):
    """Send rank ``rank`` (now incarnation ``epoch``) what was kept for it. A move cut
    short never ends here: the restore that abandons it drops what was kept."""

    rank: int
    epoch: int


class Stopped(NamedTuple):
    """MP's answer to the coordinator: where it stopped and to whom it sent an RM
    (``where`` None: it could not stop, the move is refused)."""

    where: dict | None


class Move:
    """One rank's side of the moves (see the module docstring): the mover's, or another
    rank's for the mover it keeps messages for."""

    __slots__ = ("rank", "phase", "move", "mover", "ended")

    def __init__(self, rank: int):
        self.rank = rank
        self.phase = Phase.RUNNING
        self.ended = False              # main() returned: no safe point is left
        self.move: int | None = None    # the move under way
        self.mover: int | None = None   # the rank that moves

    def _fire(self, event: str) -> None:
        phase = TRANSITIONS.get((self.phase, event))
        if phase is None:
            raise ProtocolError(f"migration: {event} while {self.phase.value} (rank "
                                f"{self.rank}, move {self.move})")
        self.phase = phase

    @property
    def stopping(self) -> bool:
        """MP must stop at this safe point."""
        return self.phase is Phase.STOPPING

    # ------------------------------------------------------------- the mover
    def stop_asked(self, move: int) -> list:
        """The coordinator moves this rank: it stops at its next safe point (refused at
        once when none is left)."""
        if self.ended:
            return [Stopped(None)]
        self._fire("stop_asked")
        self.move, self.mover = move, self.rank
        return []

    def at_safe_point(self, position: tuple, sent_to: Iterable[int]) -> list:
        """MP is at its safe point ``position`` and has sent to ``sent_to``: an RM to
        each of them (itself aside), and the answer."""
        self._fire("at_safe_point")
        out = sorted(r for r in set(sent_to) if r != self.rank)
        return [*(Marker(r, self.move) for r in out),
                Stopped({"position": position, "out": out})]

    def hand_over(self, senders: Iterable[int]) -> list:
        """MP hands its state over once the RMs of ``senders`` (the ranks that sent to
        it) have arrived."""
        self._fire("hand_over")
        return [WaitMarkers(self.move, tuple(sorted(senders)))]

    # ------------------------------------------------------------ other ranks
    def notice(self, move: int, mover: int, sent_to_mover: bool,
               mover_sent_here: bool) -> tuple[bool, list]:
        """Rank ``mover`` moves; this rank has (``sent_to_mover``) or has not sent to it,
        and it has (``mover_sent_here``) or has not sent here. Returns whether this rank
        sends it an RM, and the effects."""
        if mover == self.rank:
            raise ProtocolError(f"migration: rank {mover} noticed of its own move")
        self._fire("notice")
        self.move, self.mover = move, mover
        effects = [Marker(mover, move)] if sent_to_mover else []
        effects.append(Hold(mover))
        if mover_sent_here:
            effects.append(WaitMarkers(move, (mover,)))
        return sent_to_mover, effects

    def done(self, move: int, mover: int, epoch: int) -> list:
        """The move ``move`` of rank ``mover`` is over: it runs as incarnation ``epoch``."""
        if (move, mover) != (self.move, self.mover):
            raise ProtocolError(f"migration: the move {move} of rank {mover} ended, not the "
                                f"one under way ({self.move} of rank {self.mover})")
        self._fire("done")
        return [Release(self.mover, epoch)]

    # -------------------------------------------------------------- both sides
    def finished(self) -> list:
        """``main()`` returned: a stop asked for can never happen (refused)."""
        self.ended = True
        if self.phase is not Phase.STOPPING:
            return []
        self._fire("finished")
        return [Stopped(None)]

    def restored(self) -> None:
        """The rank was rolled back: the move under way was abandoned with its execution."""
        self.phase, self.move, self.mover, self.ended = Phase.RUNNING, None, None, False
