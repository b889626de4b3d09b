"""Receive determinants: what a rank's nondeterministic receives took, so that a rank
restarted alone takes the same again (MPICH-V's determinants, made causal by
piggybacking, as in causal message logging).

Theory of operation
-------------------
A receive whose outcome its arguments do not fix is *nondeterministic*: ``recv`` /
``irecv`` / ``mprobe`` / ``probe`` with ``ANY_SOURCE`` or ``ANY_TAG`` (which message came
first), ``iprobe`` / ``improbe`` with wildcards that found a message, ``waitany`` /
``waitsome`` / ``testany`` / ``testsome`` of several active requests that completed
some (which ones). A *determinant* is its number ``k`` (the rank's k-th such event since
the start of the run, counted as ``sent`` is: part of the snapshot, and taken up again
at a restored rank's resume point) with its kind and outcome: ``(source, tag)`` for the
receives and probes, the request indices for the array calls. Named-source receives
record nothing and cost nothing.

Two uses, which protocols turn on (``enable``):

* *Re-execution to a cut.* A snapshot taken between safe points (``state_now``:
  DDVPiggyback's cut) is the last safe point's state plus the messages consumed since,
  which the restored rank receives again as it re-executes up to the cut. They are all
  queued at once, so a wildcard receive would still take them in their first order, but
  ``waitany`` would complete the first of its requests that any of them matches, not the
  one its first life did, and a poll would find one its first life had not yet: the rank
  would reach another state than its cut, whose sends its peers already hold. So such a
  snapshot keeps the rank's own determinants since that safe point (``since``), and the
  restored rank replays them. Nothing travels: DDVPiggyback's recovery line has no
  orphan message (a cluster that received a message sent after a rolled-back cluster's
  CLC rolls back too, HC3I section 3.4), so past the cut any order is consistent.
* *Causal logging* (``causal``), for protocols that restart part of the ranks and
  replay logged messages to them while the others go on, keeping what the restarted
  ranks had sent (GroupCoordination): there the restarted rank must take its wildcard
  receives in its first life's order past its checkpoint too, as long as any survivor's
  state depends on them. ``unit``: the ranks that always restart with this one (a
  group); they exchange none, since they never survive each other's restart.

Causal logging. Before a rank sends an application message to a rank outside its unit,
the message carries (``piggyback[DETS]``) the rank's determinants that peer was not
given yet and the rank's *floor* (below it, no restart line of the rank needs them).
Whatever a peer does after that message may depend on what this rank did after its
nondeterministic receives, and it holds their determinants (``held``) from then on: with
the message itself and in its snapshots; a resend from a log carries every determinant
since the floor (``resent``: its receiver rolled back, and may have lost what the first
copies carried). A recovery that restarts ranks asks every rank (survivors, and the
restarted ranks once their snapshots are installed: a snapshot may depend on another
restarted rank's receives) which determinants it holds of the restarted ranks, and hands
each restarted rank the union (``replay_from``) before its ``main()`` runs again. Each
holder holds a prefix of the rank's determinants (they travel in order on a FIFO
channel), so the union is the longest prefix any surviving state depends on; past it,
any outcome is consistent: no surviving state saw the effects of those receives.

Replaying. The k-th nondeterministic receive takes the recorded outcome: ``ANY_SOURCE``
/ ``ANY_TAG`` become the recorded source and tag, which by the non-overtaking rule of a
channel is the same message (waited for if it is not here yet); an array call completes
the recorded indices. Polls (``iprobe``, ``improbe``, ``testany``, ``testsome``) count
only when they find something; replayed, a poll finds only the recorded message or
requests (else nothing yet, as a poll may), so a polling loop takes the same messages in
the same order. The number of polls that found nothing is not replayed: a program that
changes its state between polls that found nothing is not piecewise deterministic. A
replay that diverges (the k-th event is of another kind than the first life's) raises
``ProtocolError`` naming both: never a silent wrong answer.

Garbage collection: a protocol sets the rank's floor (``set_floor``) to its count at
its oldest checkpoint a recovery may still restore; it travels on the next message to
each peer, which drops the rank's determinants below it.
"""
from __future__ import annotations

from typing import Any

from ..base import ProtocolError

DETS = "det"
"""The piggyback key of determinants: ``(floor, ((k, kind, outcome), ...))``."""

RECV, PROBE, IPROBE, ANY, SOME = "recv", "probe", "iprobe", "any", "some"
"""Kinds of nondeterministic events: a receive (``recv``, ``irecv``, ``mprobe``), a
blocking probe, a poll that found a message (``iprobe``, ``improbe``), a request of
several that completed (``waitany``, ``testany``) and requests that did (``waitsome``,
``testsome``)."""


class Determinants:
    """One rank's determinants: its own, those it holds of its peers, and those it
    replays after a restart (module docstring)."""

    __slots__ = ("on", "causal", "unit", "count", "floor", "held", "replay", "_log",
                 "_log_base", "changed", "told", "_sent_to", "_resume_count", "_paused")

    def __init__(self):
        self.on = False
        self.causal = False  # piggybacked to the peers outside the unit
        self.unit: frozenset[int] = frozenset()  # ranks that restart with this one
        self.count = 0          # nondeterministic events so far (snapshot)
        self.floor = 0          # own determinants below it are needed by no restart line
        self.held: dict[int, dict[int, tuple]] = {}  # peer -> {k: (kind, outcome)}
        self.replay: dict[int, tuple] = {}  # k -> (kind, outcome) to take again
        self._log: list[tuple] = []  # own (k, kind, outcome), in recording order
        self._log_base = 0      # recording number of ``_log[0]``
        # what each peer was given: ``told[peer] == changed`` means all of it (one dict
        # look-up on the send path, ``Outbox.send_app``); ``_sent_to[peer]`` the
        # recording number it has up to
        self.changed = 0        # own determinants recorded and floors set so far
        self.told: dict[int, int] = {}
        self._sent_to: dict[int, int] = {}
        self._resume_count: int | None = None  # a restored rank before its resume point
        self._paused = False    # ... which neither counts nor replays

    def enable(self, causal: bool = False, unit=()) -> None:
        """Record from now on (module docstring); ``causal``: piggyback them to the
        ranks not in ``unit`` (the ranks that always restart with this one)."""
        self.on = True
        self.causal = causal
        self.unit = frozenset(unit)

    # ------------------------------------------------------------- recording
    def active(self) -> bool:
        """Whether this rank's nondeterministic events count now (on, and not re-running
        the code before a resume point, whose receives the snapshot serves again)."""
        return self.on and not self._paused

    def next(self, kind: str) -> tuple[int, Any]:
        """A blocking event (or an ``irecv``) starts: its number, and the outcome to take
        (None: free)."""
        k = self.count
        self.count += 1
        return k, self._forced(k, kind)

    def poll(self, kind: str) -> Any:
        """A poll starts: the outcome it must find (None: free). It counts only if it
        finds something (``found``)."""
        return self._forced(self.count, kind)

    def found(self, kind: str, outcome: Any, k: int | None = None) -> None:
        """Event ``k`` (None: a poll that found something, numbered now) took
        ``outcome``."""
        if k is None:
            k = self.count
            self.count += 1
        if self.replay.pop(k, None) is None:  # a replayed one is in the log already
            self._log.append((k, kind, outcome))
            self.changed += 1

    def _forced(self, k: int, kind: str) -> Any:
        rec = self.replay.get(k)
        if rec is None:
            return None
        if rec[0] != kind:
            raise ProtocolError(
                f"the replay of nondeterministic receive {k} diverged: its first life's was "
                f"a {rec[0]} that took {rec[1]!r}, this one is a {kind}; the program does "
                f"not run the same code from the same state and messages (piecewise "
                f"determinism)")
        return rec[1]

    # ---------------------------------------------------------- piggybacking
    def outgoing(self, dst: int) -> tuple | None:
        """What a message to ``dst`` carries: ``(floor, new determinants)``, or None when
        ``dst`` has all of them (or restarts with this rank)."""
        if self.told.get(dst, 0) == self.changed:
            return None
        self.told[dst] = self.changed
        if dst in self.unit:
            return None
        start = max(self._sent_to.get(dst, self._log_base) - self._log_base, 0)
        self._sent_to[dst] = self._log_base + len(self._log)
        return self.floor, tuple(self._log[start:])

    def resent(self, dst: int) -> tuple:
        """What the first of the messages resent to ``dst`` from a log carries: every
        determinant since the floor (``dst`` rolled back: it may have lost what the
        first copies carried)."""
        self.told[dst] = self.changed
        self._sent_to[dst] = self._log_base + len(self._log)
        return self.floor, tuple(self._log)

    def incoming(self, src: int, data: tuple) -> None:
        """A message from ``src`` carried ``data`` (``outgoing``)."""
        floor, dets = data
        held = self.held.get(src)
        if held is None:
            held = self.held[src] = {}
        for k, kind, outcome in dets:
            if k >= floor:
                held[k] = (kind, outcome)
        if floor and held and min(held) < floor:  # the floor moved: a new checkpoint
            for k in [k for k in held if k < floor]:
                del held[k]

    def at_safe_point(self) -> None:
        """A safe point: without causal logging, no snapshot needs the determinants
        before it any more."""
        if not self.causal and self._log:
            self._log_base += len(self._log)
            self._log = []

    def since(self, count: int) -> list[tuple]:
        """This rank's own determinants numbered ``count`` and later: what a snapshot
        taken between safe points replays, from the safe point's count."""
        return [d for d in self._log if d[0] >= count]

    def set_floor(self, floor: int) -> None:
        """No restart line of this rank needs its determinants below ``floor`` any more:
        forget them, and tell the peers on the next message to each."""
        if floor <= self.floor:
            return
        self.floor = floor
        self.changed += 1
        keep = [d for d in self._log if d[0] >= floor]
        self._log_base += len(self._log) - len(keep)
        self._log = keep

    def held_of(self, ranks) -> dict[int, dict[int, tuple]]:
        """The determinants this rank holds of ``ranks``: {rank: {k: (kind, outcome)}}."""
        return {r: dict(self.held[r]) for r in ranks if self.held.get(r)}

    # ---------------------------------------------------------------- restore
    def state(self) -> dict:
        """What a snapshot keeps beside the count (which is the safe point's): the
        determinants held of peers."""
        return {p: dict(d) for p, d in self.held.items() if d}

    def restored(self, count: int, held: dict | None, own: list | None, resume: bool) -> None:
        """A restore to a snapshot whose count was ``count``, whose held determinants
        were ``held`` and which replays ``own`` (``since``). ``resume``: the snapshot has
        a resume point, before which the code runs again with its first life's messages
        (neither counted nor replayed); ``resumed`` takes the count up there."""
        self.held = {int(p): dict(d) for p, d in (held or {}).items()}
        self._log, self._log_base = [], 0
        self.replay = {}
        self.replay_from({k: (kind, outcome) for k, kind, outcome in own or ()}, count)
        self.told.clear()
        self._sent_to.clear()
        self.floor = 0
        self._paused = resume
        self._resume_count = count if resume else None
        self.count = 0 if resume else count

    def resumed(self) -> None:
        """The restored rank reached its resume point: count from the snapshot's count."""
        if self._resume_count is not None:
            self.count, self._resume_count = self._resume_count, None
        self._paused = False

    def replay_from(self, dets: dict, start: int | None = None) -> None:
        """Determinants of this rank, {k: (kind, outcome)} (gathered by the recovery, or
        kept by its snapshot): take them again; those below ``start`` (default: its
        restored count) are inside its state."""
        if start is None:
            start = self.count if self._resume_count is None else self._resume_count
        new = {int(k): tuple(rec) for k, rec in dets.items()
               if int(k) >= start and int(k) not in self.replay}
        self.replay.update(new)
        # they are this rank's: piggybacked (peers may lack some: they restarted too) and
        # kept by a snapshot taken before they are all taken again
        self._log.extend((k, *new[k]) for k in sorted(new))
        self.changed += len(new)

