"""Positions: where ``main()`` is (loops and their safe points), what it took since, and
a restored rank's way back to its resume point.

Theory of operation
-------------------
A position is ``(loop index, iteration)``: the n-th ``iterations()`` loop ``main()``
entered and the safe point it offered last (``at_safe_point``; a finished loop's
position is its count). Snapshots are taken at positions, so what the code since a
position received is logged, in order (``_consumed``): straight-line code outside loops
runs again after a restore and must get the same messages back (the *prefix log*,
``_prefix_log``, part of every snapshot), and a snapshot between safe points replays
what was received since the last one (``_since_safe_point``; only for stacks that record
deliveries).

A restore (``_resume_at``) re-enters ``main()`` from the top with the snapshot's position
as the *resume point*: loops that had finished are skipped, the running one resumes at
the saved iteration (``enter_loop``). While ``main()`` re-runs the code before the
resume point, its sends are suppressed (they happened before the snapshot, and the flush
that made the snapshot consistent delivered them: ``_replay_sent``), its receives must
take the messages it received there in its first life again, and the registered
attributes are set back to the snapshot's at the resume point (``_reentry``); from the
resume point on, messages sent again get their original numbers and their receivers drop
the ones they have. This is correct under the piecewise-determinism assumption: from the
same state and the same received messages, a rank sends the same messages.

The communicators a program derives (``split``, ``dup``, ``Create_cart``) are named by
their parent's id and how many the parent had derived (``derived``), so every member names
the new one alike without a message. Those counts are part of a snapshot and taken up
again at the resume point, as ``sent`` is: a rank restored while others went on (a group
or a cluster rolled back alone) must name the communicators a loop derives at every
iteration as the others do, though the code that derived them before its checkpoint did
not run again (else the restored rank's collectives waited on contexts nobody else used).

``Positions`` is a mixin of ``Endpoint`` (``_endpoint``). Its own state is set in
``_init_positions``; ``sent`` (the outbox's counts) is set back here on a restore and
taken up again at the resume point. From the rest of the endpoint it reads ``rank``,
``owner`` (the registered attributes live on it) and, at a safe point, ``keep_base`` and
``_take_base`` (``_snapshots``), and it calls the outbox's ``_flush_before_wait`` there: a
safe point begins a step, whose first message to each destination goes at once.
"""
from __future__ import annotations

from typing import Any

from ._envelope import Envelope
from ._reentry import Reentry
from ._vector import RankVector


class Positions:
    """Loops, safe points, registered attributes, the delivery logs and the resume point
    (module docstring)."""

    def _init_positions(self, record_deliveries: bool) -> None:
        self.registered: list[str] = []
        self.position: tuple[int, int] | None = None
        self._loop_count = 0
        self._in_loop = False
        self._loop_n = 0
        self._consumed_since = 0  # messages received since the last safe point
        # the delivery logs (see module docstring); ``_log`` is the one in use
        self._record = record_deliveries
        self._prefix_log: list[Envelope] = []
        self._since_safe_point: list[Envelope] | None = None
        self._log: list[Envelope] | None = self._prefix_log if record_deliveries else None
        # a restored rank before its resume point
        self._resume: tuple[int, int] | None = None
        self.resumed_at: tuple[int, int] | None = None  # the last restore's position
        self._reentry: Reentry | None = None
        self.unfilled: dict[str, tuple[str, Any]] = {}
        """At the resumed loop: registered names whose program object could not take the
        checkpoint's value in place (``Reentry.unfilled``), for the runtime to name."""
        self._replay_sent: RankVector | None = None  # its sends are suppressed
        self._restored = False
        self.derived: dict[str, int] = {}  # communicator id -> communicators derived
        self._resume_derived: dict[str, int] = {}  # ``derived`` at the resume point

    def _consumed(self, env: Envelope) -> Envelope:
        """The program took ``env``: count it since the safe point, log it for replay."""
        self._consumed_since += 1
        if self._log is not None:
            self._log.append(env)
        return env

    def _received_again(self, env: Envelope | None, source: int, tag: int) -> None:
        """A receive of a restored rank before its resume point found ``env`` queued:
        it must be one of the messages that code received in its first life (see
        ``_reentry``; raises ProtocolError)."""
        if self._reentry.took(env, source, tag):
            self._reentry = None

    def enter_loop(self, n: int) -> int:
        """Start an ``iterations(n)`` loop; returns the iteration to start from."""
        if self._in_loop:
            raise RuntimeError("iterations() loops cannot be nested")
        index = self._loop_count
        self._loop_count += 1
        start = 0
        if self._resume is not None:
            r_index, r_iter = self._resume
            if index < r_index:
                start = n  # finished before the snapshot: run no iteration of it again
            elif index == r_index:
                start = min(r_iter, n)
                self._resume = None
                self.sent, self._replay_sent = self._replay_sent, None  # caught up
                self.derived = self._resume_derived
                self.determinants.resumed()
        if self._reentry is not None and self._resume is None:
            self._reentered()
        self._in_loop = True
        self._loop_n = n
        self._since_safe_point = [] if self._record else None
        self._log = self._since_safe_point
        return start

    def _reentered(self) -> None:
        """The resumed loop is reached: the registered attributes are the checkpoint's
        again, whatever the code before it did to them (``Reentry.at_loop`` raises if that
        code did not receive again what it received in its first life). Attributes that
        were registered inside the loop are registered again here, since the code that
        registered them may not run again."""
        values = self._reentry.at_loop()
        self.unfilled = self._reentry.unfilled
        self._reentry = None
        for name, value in values.items():
            if name not in self.registered:
                self.registered.append(name)
            setattr(self.owner, name, value)

    def at_safe_point(self, iteration: int) -> None:
        self.position = (self._loop_count - 1, iteration)
        self._consumed_since = 0
        self._flush_before_wait()
        self.determinants.at_safe_point()
        if self._since_safe_point:
            self._since_safe_point.clear()
        if self.keep_base:
            self._take_base()

    def exit_loop(self, n: int) -> None:
        self.position = (self._loop_count - 1, n)
        self._in_loop = False
        self._since_safe_point = None
        self._log = self._prefix_log if self._record else None
        if self.keep_base and self._resume is None:
            self._take_base()  # the code after the loop can be captured "now" from here

    def next_safe_point(self) -> tuple[int, int] | None:
        """The position of the next safe point this rank will offer, if it is inside a
        loop that has one left; else None."""
        if not self._in_loop:
            return None
        index = self._loop_count - 1
        if self.position is None or self.position[0] != index:
            return None  # entering the loop: its first iteration is not known yet
        nxt = self.position[1] + 1
        return (index, nxt) if nxt < self._loop_n else None

    def register(self, name: str, initial: Any) -> Any:
        """Add ``name`` to the registered state; returns its value: before a restored
        rank's resume point the checkpoint's, written into ``initial`` in place where it
        can take it (``Reentry.value``), else ``initial``."""
        if name not in self.registered:
            self.registered.append(name)
        return initial if self._reentry is None else self._reentry.value(name, initial)

    @property
    def restored(self) -> bool:
        """True while ``main()`` runs again after a restore to a safe point or with
        registered state (not after a restore to the start of the run)."""
        return self._restored

    def _resume_at(self, parts: dict, again: list[Envelope]) -> None:
        """A restore: resume at the snapshot's position, with its registered values, its
        ``sent`` counts and ``again`` (the messages the code before that position received
        in its first life) to receive again first."""
        self._resume = self.resumed_at = parts["position"]
        self._reentry = None
        self.unfilled = {}
        if self._resume is not None or again:
            self._reentry = Reentry(self.rank, self._resume, again, parts["registered"],
                                    parts.get("buffers"))
        values = {} if self._reentry is None else self._reentry.values
        self.registered = list(values)
        self._restored = bool(values) or self._resume is not None
        self.sent = RankVector.of(parts["sent"])
        self._replay_sent = None if self._resume is None else self.sent
        self.derived, self._resume_derived = {}, dict(parts.get("derived", {}))
        self.determinants.restored(parts.get("nondet", 0), parts.get("determinants"),
                                   parts.get("own_determinants"),
                                   resume=self._resume is not None)
        # re-running the code before the resume point consumes (and logs) the replayed
        # prefix messages again: starting from the saved log would hold them twice, and
        # the next snapshot would replay the extra copies into later receives
        self._prefix_log = []
        self._loop_count = 0
        self._in_loop = False
        self._since_safe_point = None
        self._log = self._prefix_log if self._record else None
