"""The run's arbitration of failures in plain Python, no I/O: the life of each rank
(``Life``, stepped by ``TRANSITIONS``), the recovery rounds (``Round``), and the decisions
the coordinator performs: what a death notice comes to (``Verdict``), whether a round
starts or the run gives up (``GiveUp``), which ranks a round cut short fails. The
coordinator (``_coordinator``) keeps the I/O (hosts, calls, events) and asks the
``Arbiter``; ``tests/runtime/test_arbiter.py`` steps it through the orders sim-check
found hard.

Theory of operation (NR-MPI section 1.2, docs/architecture/recovery.md). A rank's life:

    STARTING --wired--> WIRED --started--> RUNNING --returned--> RETURNED
    live --died--> FAILED                     (pending: a round recovers it)
    live --started--> RUNNING                 (run again, from a restore)
    live --respawn--> RESPAWNING --hosted--> REPLACED
    RESPAWNING --host_died--> FAILED          (its new host died as it started)
    RETURNED, LOST --lost--> LOST             (nothing can need it again)

where *live* is RUNNING, RETURNED, REPLACED or FAILED (a failed rank is restarted or
given a new host by its round).

A host that dies during start-up holds no state: the rank stays STARTING and gets
another host, up to ``START_ATTEMPTS``. Once supervised, a death is a failure: the rank
is *pending* (it waits for a round) until a round that recovers it ends. The arbiter
hands failures to recovery *rounds* one at a time, each with every failure pending when
it opens, so every survivor sees the same failures in the same order; a failure noticed
during a round cuts it short and the next round takes all failures so far (NR-MPI's
self-loops 2, 9 and 12).

What holds (asserted where it is decided):
- A pending rank's result is not in hand (``kept``): a failure drops it, and a round
  ends only when its ranks run again.
- A rank's result stays in hand until it runs again, even while a round gives it a new
  host (a restart runs a returned rank again; its new result replaces the old one).
- A rank that failed again on the host its round gave it stays pending past that
  round's end (``again``); the failure of a life already pending is a repeat.
- A rank lost after its return changes nothing: the run had its result and, with no
  recovery policy or every result in hand, nothing can ever need the rank again.
"""
from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

from ..base import ProtocolError

START_ATTEMPTS = 4
"""Hosts a rank may lose before it first runs (as they start, or while the ranks are
wired) before the run ends with ``RankFailed``: a death there loses no state, so the
rank simply gets another host, but a rank whose hosts keep dying is not started
forever."""


class Life(enum.Enum):
    """Where a rank's current life is."""

    STARTING = "starting"      # start-up: getting a host; the ranks are not wired yet
    WIRED = "wired"            # every rank wired; main() not started yet
    RUNNING = "running"        # main() started (under way, or ended and not taken yet)
    RETURNED = "returned"      # main() returned: its result is in hand
    LOST = "lost"              # returned, then died where nothing can need it again
    FAILED = "failed"          # its life is over (died, hung, failed a call)
    RESPAWNING = "respawning"  # a new incarnation number, its host still to come
    REPLACED = "replaced"      # a new host, main() not started: it holds no state


class On(enum.Enum):
    """What steps a rank's life."""

    WIRED = "wired"            # the start-up wired every rank
    STARTED = "started"        # its main() is (re)started
    RETURNED = "returned"      # its main() returned
    DIED = "died"              # its current life is found failed
    LOST = "lost"              # found dead after its return, with nothing to recover
    RESPAWN = "respawn"        # the next incarnation is being given a host
    HOSTED = "hosted"          # that host is up
    HOST_DIED = "host_died"    # that host died as it started


L = Life
_LIVE = (L.RUNNING, L.RETURNED, L.REPLACED, L.FAILED)
TRANSITIONS: dict[tuple[Life, On], Life] = {
    (L.STARTING, On.WIRED): L.WIRED,
    **{(life, On.STARTED): L.RUNNING for life in (L.WIRED, *_LIVE)},
    (L.RUNNING, On.RETURNED): L.RETURNED,
    **{(life, On.DIED): L.FAILED for life in _LIVE},
    (L.RETURNED, On.LOST): L.LOST,
    (L.LOST, On.LOST): L.LOST,
    **{(life, On.RESPAWN): L.RESPAWNING for life in _LIVE},
    (L.RESPAWNING, On.HOSTED): L.REPLACED,
    (L.RESPAWNING, On.HOST_DIED): L.FAILED,
}
"""(life, input) -> next life. An input with no entry is a ``ProtocolError``: the
coordinator asked for something no order of events can lead to."""


class Phase(enum.Enum):
    """What a host's death means now."""

    START_UP = "start_up"          # nothing ran yet: the rank gets another host
    SUPERVISING = "supervising"    # a failure, arbitrated
    ENDING = "ending"              # every result is in hand: recorded by the ending


class Verdict(enum.Enum):
    """What a death notice comes to."""

    IGNORE = "ignore"              # a repeat, or a host replaced (or being replaced)
    START_AGAIN = "start_again"    # before its rank ran: another host, the wiring again
    ARBITRATE = "arbitrate"        # its current life's host, supervised: ``died`` decides
    FAILURE = "failure"            # pending now: a round recovers it
    LOST_AFTER_RETURN = "lost_after_return"  # recorded only


class Status(enum.Enum):
    """How a recovery round stands."""

    OPEN = "open"
    DONE = "done"
    CUT = "cut"                    # cut short by a failure: the next round takes over


@dataclass
class Round:
    """One recovery round: its number (from 0) and the failures it recovers."""

    number: int
    failed: frozenset[int]
    status: Status = Status.OPEN


@dataclass(frozen=True)
class GiveUp:
    """No round can recover ``ranks``: the whole job was lost (``job_lost``: the
    coordinator raises ``JobLost``) or the stack has no recovery policy (``RankFailed``)."""

    ranks: list[int]
    job_lost: bool


class Arbiter:
    """The lives of ``n`` ranks and the run's recovery rounds; no I/O.

    ``recoverable``: the stack has a recovery policy (without one, a failure ends the
    run). Each input returns the decision the coordinator performs.
    """

    def __init__(self, n: int, recoverable: bool):
        self.n = n
        self.recoverable = recoverable
        self.phase = Phase.START_UP
        self.lives = [Life.STARTING] * n
        self.counts = Counter(self.lives)
        self.incarnations = [0] * n  # rank -> its current life's number
        self.kept: set[int] = set()  # ranks whose result is in hand
        self.pending: set[int] = set()  # failed ranks no round has recovered yet
        self.again: set[int] = set()  # failed again on the host their round gave them
        self.failed_life: dict[int, int] = {}  # rank -> the incarnation found failed
        self.round: Round | None = None  # the latest round
        self.start_losses = [0] * n  # hosts each rank lost before it first ran

    # ----------------------------------------------------------------- lives
    def _go(self, rank: int, inp: On) -> Life:
        life = self.lives[rank]
        try:
            nxt = TRANSITIONS[(life, inp)]
        except KeyError:
            raise ProtocolError(f"arbiter: rank {rank} has no transition from "
                                f"{life.value} on {inp.value}") from None
        self.counts[life] -= 1
        self.counts[nxt] += 1
        self.lives[rank] = nxt
        return nxt

    def life(self, rank: int) -> Life:
        return self.lives[rank]

    def wired(self) -> None:
        """The start-up wired every rank."""
        for rank in range(self.n):
            self._go(rank, On.WIRED)

    def supervising(self) -> None:
        """Every rank was started: a death from now on is a failure."""
        self.phase = Phase.SUPERVISING

    def ending(self) -> None:
        """Supervision is over (every result in hand, or the run gave up)."""
        self.phase = Phase.ENDING

    def started(self, rank: int) -> None:
        """Rank ``rank``'s ``main()`` is (re)started: a result in hand is the abandoned
        execution's until it returns again."""
        self._go(rank, On.STARTED)
        self.kept.discard(rank)

    def returned(self, rank: int) -> None:
        """Rank ``rank``'s ``main()`` returned: its result is in hand."""
        self._go(rank, On.RETURNED)
        assert rank not in self.pending, f"rank {rank} returned while failed"
        self.kept.add(rank)

    def over(self) -> bool:
        """Every result is in hand (so no failure waits for a round)."""
        assert not self.pending & self.kept, "a failed rank's result is in hand"
        return len(self.kept) == self.n

    def settled(self) -> bool:
        """No failure waits or is being recovered, no rank is between hosts or holds a
        host it has not started on (the coordinator's deadlock check needs this)."""
        return (not self.pending and not self.counts[Life.REPLACED]
                and not self.counts[Life.RESPAWNING])

    def watched(self, rank: int) -> bool:
        """Whether rank ``rank``'s current life is pinged: not while it is failed (its
        life is over until a round ends) or between hosts."""
        return rank not in self.pending and self.lives[rank] is not Life.RESPAWNING

    def unstarted(self) -> set[int]:
        """Ranks given a new host and not started on it: they hold no state."""
        return {r for r, life in enumerate(self.lives) if life is Life.REPLACED}

    # ---------------------------------------------------------------- deaths
    def lost_at_start(self, rank: int) -> int:
        """A host of rank ``rank`` died before the rank first ran: the number of hosts
        it lost so far (at ``START_ATTEMPTS`` the coordinator gives up)."""
        assert self.phase is Phase.START_UP and self.lives[rank] is Life.STARTING
        self.start_losses[rank] += 1
        return self.start_losses[rank]

    def host_died(self, rank: int, current: bool) -> Verdict:
        """A host of rank ``rank`` died (``current``: the rank's host now, not one it
        left)."""
        if not current or self.lives[rank] is Life.RESPAWNING:
            return Verdict.IGNORE  # replaced meanwhile, or its death is the respawn's
        if self.phase is Phase.START_UP:
            return Verdict.START_AGAIN
        if self.phase is Phase.ENDING:
            return Verdict.IGNORE
        return Verdict.ARBITRATE

    def died(self, rank: int) -> Verdict:
        """Rank ``rank``'s current life is found failed (its process died, it hung, a
        call to it failed)."""
        inc = self.incarnations[rank]
        if rank in self.pending:
            if self.failed_life.get(rank) == inc:
                return Verdict.IGNORE  # this life's failure is known
            self.again.add(rank)  # the host its round gave it died too
        if rank in self.kept and (not self.recoverable or len(self.kept) == self.n):
            self._go(rank, On.LOST)
            return Verdict.LOST_AFTER_RETURN
        self._go(rank, On.DIED)
        self.pending.add(rank)
        self.failed_life[rank] = inc
        self.kept.discard(rank)
        return Verdict.FAILURE

    # ---------------------------------------------------------------- rounds
    def open_round(self, job_lost: bool) -> Round | GiveUp:
        """The pending failures get a round, unless the job is lost (chaos loses every
        rank and the driver) or nothing can recover them."""
        assert self.pending, "a round with no failure"
        if job_lost or not self.recoverable:
            return GiveUp(sorted(self.pending), job_lost)
        number = 0 if self.round is None else self.round.number + 1
        self.round = Round(number, frozenset(self.pending))
        assert not self.round.failed & self.kept
        return self.round

    def round_done(self) -> None:
        """The round recovered its failures; a rank that failed again in it waits for
        the next."""
        rnd = self.round
        assert rnd is not None and rnd.status is Status.OPEN
        self.pending = (self.pending - rnd.failed) | self.again
        self.again.clear()
        rnd.status = Status.DONE

    def round_cut(self, more: set[int], rescued: bool) -> list[tuple[int, str, Verdict]]:
        """A failure of ``more`` cut the round short: the failures it comes to, in order
        (rank, reason, verdict). Ranks the round gave a new host and did not start hold
        no state (their old life was stopped): failed too, unless levels that keep parts
        rescued theirs first (``rescued``). Every pending rank waits for the next round."""
        rnd = self.round
        assert rnd is not None and rnd.status is Status.OPEN
        empty = sorted(r for r in self.unstarted() if r not in self.pending and r not in more)
        out = [(r, "failed during recovery", self.died(r)) for r in sorted(more - rnd.failed)]
        if not rescued:
            out += [(r, "given a new host in a round cut short: it holds no state",
                     self.died(r)) for r in empty]
        self.again.clear()
        rnd.status = Status.CUT
        return out

    # --------------------------------------------------------------- respawns
    def respawning(self, rank: int) -> int:
        """Rank ``rank`` gets its next incarnation (returned): its old host's death is no
        failure from now on."""
        self._go(rank, On.RESPAWN)
        self.incarnations[rank] += 1
        return self.incarnations[rank]

    def hosted(self, rank: int) -> None:
        """The new host is up. A failure of the rank's old life that the latest round
        does not recover is moot: whatever restores the rank now restores its new life."""
        self._go(rank, On.HOSTED)
        if self.round is None or rank not in self.round.failed:
            self.pending.discard(rank)

    def host_lost(self, rank: int) -> None:
        """The new host died (or its start was stopped) before it was up."""
        self._go(rank, On.HOST_DIED)
