"""Snapshots: a rank's recoverable state taken, sealed, shipped and put back.

Theory of operation
-------------------
State that survives failures (``snapshot``): the registered application state, the
safe-point position, the ``sent``/``received`` counters, the messages that arrived but
were not yet received, the log of messages received outside ``iterations()`` loops
(straight-line code runs again after a restore and must get the same messages back),
and each protocol's own state. Restoring (``restore``) puts the logged and queued
messages back in front of the matcher, so receives are served first from them, in their
original order, then from the network (CoCheck, section 4), and sends the rank to its
resume point (``_positions``).

A snapshot at a safe point needs nothing else. One between safe points is the last safe
point's state (``keep_base``: kept at every safe point and at every loop's end,
``_take_base``, its registered arrays' bytes copied into buffers reused from one base to
the next, since most bases are never used) plus the messages received since, which a
restore replays; ``state_now`` takes one at any moment, even while ``main()`` waits in a
receive (HC3I's forced checkpoints, ReadyMessageFlush's rounds joined by a blocked or
finished rank). A ``transfer`` is a safe point's state for a move to another process,
its large buffers left out of band. A
*blank* snapshot is the start of the run; restoring it gives the protocols back their
state right after ``on_start`` (``started``).

``Snapshots`` is a mixin of ``Endpoint`` (``_endpoint``): a snapshot reads every part of
the endpoint, and a restore has each part start again (the outbox's
``_restart_outbox``, the receiving side's ``_restart_receiving``, the positions'
``_resume_at``). Its own state is set in ``_init_snapshots``. From the rest of the
endpoint it reads ``rank``, ``size``, ``owner`` (the registered attributes and the
protocols' state), ``sent``, ``received``, ``matcher``, the positions' ``position``,
``registered``, loop and log state, and the receiving side's ``_in_flight``; a restore
sets ``epoch`` and this rank's own entry of ``peer_epochs``.
"""
from __future__ import annotations

import pickle

import cloudpickle

from ..base import storage
from ..base import ProtocolError
from ._vector import RankVector


class Snapshots:
    """Taking, sealing, loading and installing snapshots (module docstring)."""

    def _init_snapshots(self) -> None:
        self.keep_base = False  # a protocol that snapshots between safe points sets it
        self._base: dict | None = None  # the last safe point's state (keep_base)
        self._base_buffers: list[bytearray] = []  # its registered values' buffers
        self._posted_at_base: list = []  # receives pending at the base's safe point
        self.restored_from: tuple | None = None  # (position, blob) of the last restore
        self.restored_line: tuple | None = None  # its recovery line (parts may be behind it)
        self.restore_notes: dict = {}  # what the recovery policy sent with that restore
        self._start_protocols: bytes | None = None  # what a blank snapshot restores (started)

    def _take_base(self) -> None:
        """At a safe point (``keep_base``): keep its state, which a snapshot between this
        safe point and the next starts from (``_from_base``).

        It runs at every safe point and loop end, and most bases are never used, so the
        registered values' large buffers (the data of contiguous numpy arrays, which
        pickle protocol 5 hands out) are not pickled: their bytes are copied into the
        last base's buffers where the sizes match (a memcpy, no allocation) and the
        pickle refers to them out of band. The rest (views that are not contiguous,
        object arrays, lists, scalars, ...) is pickled in band, as in a snapshot. Either
        way the base is the values as they were here, whatever the program writes into
        them later."""
        kept, reusable = [], self._base_buffers

        def keep(buffer: pickle.PickleBuffer) -> bool:
            try:
                raw = buffer.raw()
            except BufferError:
                return True  # not contiguous: pickled in band
            i = len(kept)
            if i < len(reusable) and len(reusable[i]) == raw.nbytes:
                memoryview(reusable[i])[:] = raw  # a memcpy (a bytearray's own is slower)
                kept.append(reusable[i])
            else:
                kept.append(bytearray(raw))
            return False

        self._base = self._snapshot_parts(keep)
        self._base_buffers = kept
        self._posted_at_base = self.matcher.posted_receives()

    def _from_base(self) -> dict:
        """The parts of the last base, for a snapshot: with copies of its buffers (the
        next ``_take_base`` overwrites them, and a ``state_now`` is sealed later), which
        ``load`` hands to the restore with the pickle that refers to them."""
        parts = dict(self._base)
        if self._base_buffers:
            parts["buffers"] = [bytearray(b) for b in self._base_buffers]
        return parts

    def _snapshot_parts(self, buffer_callback=None, registered: bool = True) -> dict:
        """The snapshot parts read from the endpoint now; ``buffer_callback``: pickle's,
        for the registered values' buffers; ``registered=False``: no registered values."""
        names = self.registered if registered else ()
        values = {name: getattr(self.owner, name) for name in names}
        return {
            "rank": self.rank,
            "position": self.position,
            "registered": cloudpickle.dumps(values, protocol=5,
                                            buffer_callback=buffer_callback),
            "sent": RankVector.of(self.sent),
            "received": RankVector.of(self.received),
            "prefix_log": list(self._prefix_log),
            "derived": dict(self.derived),
            "nondet": self.determinants.count,  # the safe point's, as ``sent``
        }

    def snapshot(self, protocol_state: dict | None = None,
                 cut: dict[int, int] | None = None) -> bytes:
        """The rank's recoverable state now, as a sealed blob (see module docstring).

        ``cut`` {peer: n}: count only the first n messages from each of these peers as
        received, and leave the later ones out of the queued messages (a channel flush's
        cut: they were sent after the peer's own snapshot, which will send them again).

        Taken at a safe point it needs nothing else. Taken between safe points (only when
        ``keep_base`` is on) it is the last safe point's state plus the messages received
        since, which a restore replays. A receive posted before the safe point and still
        pending (an ``irecv`` not waited for yet) cannot be saved: the code that posted it
        does not run again after a restore, so that is a ProtocolError.
        """
        return storage.dumps(self._state(protocol_state, cut=cut))

    def received_at(self, cut: dict[int, int]) -> RankVector:
        """``received`` as a snapshot cut at ``cut`` {peer: n} counts it."""
        received = RankVector.of(self.received)
        for src, n in cut.items():
            received[src] = n
        return received

    def snapshot_now(self, protocol_state: dict | None = None, *,
                     unreceived: dict[int, int] | None = None) -> bytes:
        """The rank's state at this very moment, between safe points, as a sealed blob:
        for a protocol that must checkpoint "now" (an HC3I forced checkpoint, taken from a
        control-message handler while ``main()`` may be blocked in a receive). Needs
        ``keep_base`` from the start and a stack that records deliveries. Same as
        ``seal_state(state_now(unreceived=...), protocol_state)``."""
        return self.seal_state(self.state_now(unreceived=unreceived),
                               self.owner.protocol_state() if protocol_state is None
                               else protocol_state)

    def state_now(self, *, unreceived: dict[int, int] | None = None,
                  global_cut: bool = False) -> dict:
        """The state of ``snapshot_now``, not sealed yet (``seal_state`` finishes it, maybe
        later, adding messages that were in transit at this moment).

        Inside a loop it is the last safe point's state plus every message consumed
        since (replayed on restore, in order); after a loop (or once ``main()`` has
        returned) it is the state at the loop's end plus every message consumed since:
        a restore skips the finished loop and runs the code after it again with those
        messages; before the first loop it is the start of the run plus every message
        consumed so far, with no message counted as sent, so re-running ``main()``
        sends them again with their original numbers. Either way a
        restore re-executes the code since that point and the receivers drop what they
        already have (piecewise determinism). Receives posted since that point and still
        pending are posted again by the re-execution, so they are no obstacle; an
        ``irecv`` still pending from before the safe point is (ProtocolError).

        Args:
            unreceived: ``{source: k}``: the last ``k`` messages accepted from ``source``
                are held back by the protocol and not delivered; the state does not count
                them as received (after a rollback their senders send them again).
            global_cut: the part belongs to a cut that every rank rolls back to together
                (a global round's flush: what this rank sent before its marker is in its
                receiver's part of the same round, received or queued). The re-execution
                then does not send those messages again (``sent_at_cut``: ``send_app``
                drops sends numbered below it), so no receiver drops a duplicate: a
                duplicate on such a line would be an orphan.

        Raises:
            ProtocolError: while a restored rank re-runs the code before its resume
                point (see ``can_snapshot_now``), or an irecv from before the safe point
                is still pending.
        """
        if not self.keep_base or not self._record:
            raise ProtocolError("snapshot_now() needs keep_base = True from the start and "
                                "a protocol that records deliveries")
        if self._in_loop or self._after_loop():
            posted = self.matcher.posted_receives()
            if any(p is q for p in posted for q in self._posted_at_base):
                raise ProtocolError(
                    f"rank {self.rank}: an irecv posted before the last safe point is still "
                    f"pending at the snapshot; complete irecv requests before the next "
                    f"safe point")
        if self._in_loop:
            parts = self._from_base()
            replay = parts["prefix_log"] + list(self._since_safe_point) + self._in_flight
        elif self.position is None and self._resume is None:
            parts = self._snapshot_parts(registered=False)
            parts["sent"] = RankVector(self.size)
            parts["nondet"] = 0
            # what a blocked receive got is received before the loop too: a restore
            # hands both to the code before the loop again (``_reentry``)
            parts["prefix_log"] = parts["prefix_log"] + self._in_flight
            replay = list(parts["prefix_log"])
        elif self._after_loop():
            # the base was taken as the loop ended; what the code after it consumed since
            # is in the prefix log past the base's, and is served again from the queue
            # once the resumed (finished) loop is skipped
            parts = self._from_base()
            replay = list(self._prefix_log) + self._in_flight
        else:
            raise ProtocolError(f"rank {self.rank}: no snapshot now while it re-runs the "
                                f"code before its resume point (position {self.position})")
        received = RankVector.of(self.received)
        for src, k in (unreceived or {}).items():
            received[src] -= k
        parts["received"] = received
        parts["replay"] = replay + self.matcher.queued()
        if global_cut:
            parts["sent_at_cut"] = RankVector.of(self.sent)
        parts["determinants"] = self.determinants.state()
        # re-executed up to now, its nondeterministic receives take what they took
        parts["own_determinants"] = self.determinants.since(parts["nondet"])
        return parts

    def seal_state(self, parts: dict, protocol_state: dict, late=()) -> bytes:
        """Seal a ``state_now`` with the protocols' state. ``late``: messages that were
        in transit when the state was taken and arrived since (in arrival order): they
        are added as received and not consumed yet."""
        parts = dict(parts)
        received = RankVector.of(parts["received"])
        for env in late:
            received[env.src] += 1
        parts["received"] = received
        parts["replay"] = parts["replay"] + list(late)
        parts["protocols"] = protocol_state
        return storage.dumps(parts)

    def can_snapshot_now(self, after_loop: bool = False) -> bool:
        """Whether ``snapshot_now`` can capture this moment: inside a loop or before the
        first one; with ``after_loop``, also after a loop (``keep_base`` took a base as
        it ended; ``main()`` may have returned: ReadyMessageFlush takes that state, HC3I
        closes the cluster instead). Never while a restored rank re-runs the code
        before its resume point."""
        return (self._in_loop or (self.position is None and self._resume is None)
                or (after_loop and self._after_loop()))

    def _after_loop(self) -> bool:
        """Past the end of a loop, with the base taken there (``exit_loop``)."""
        return (not self._in_loop and self._resume is None and self._base is not None
                and self._base["position"] == self.position)

    def transfer(self, protocol_state: dict | None = None) -> tuple[bytes, list]:
        """The rank's state at this safe point for a move to another process, as
        ``(pickle, buffers)``: the registered values' large buffers (numpy arrays) are
        left out of the pickle, as views, so the transport ships them with no copy of ours
        (``Link.share``) and ``load`` takes the pair. Not sealed: it goes from memory to
        memory and is never stored (checkpoints use ``snapshot``); the rank must not
        change its registered state until the pair is shipped."""
        buffers: list = []
        parts = self._state(protocol_state, buffers)
        parts["buffers"] = len(buffers)
        return cloudpickle.dumps(parts, protocol=5), [b.raw() for b in buffers]

    def _state(self, protocol_state: dict | None, buffers: list | None = None,
               cut: dict[int, int] | None = None) -> dict:
        """What ``snapshot`` and ``transfer`` save; ``buffers`` collects the registered
        values' out-of-band buffers (a safe point only); ``cut``: see ``snapshot``."""
        if self.matcher.pending():
            raise ProtocolError(
                f"rank {self.rank}: {self.matcher.pending()} receive(s) still pending at the "
                f"snapshot; complete irecv requests before the next safe point")
        if self._in_loop and self._consumed_since:
            if self._base is None or self._since_safe_point is None or buffers is not None:
                raise ProtocolError(
                    "a snapshot between safe points (after receiving since the last one) "
                    "needs keep_base = True from the start and a protocol that records "
                    "deliveries; a transfer needs a safe point")
            parts = self._from_base()
            parts["received"] = RankVector.of(self.received)
            replay = parts["prefix_log"] + list(self._since_safe_point)
            parts["own_determinants"] = self.determinants.since(parts["nondet"])
        else:
            parts = self._snapshot_parts(None if buffers is None else buffers.append)
            replay = list(parts["prefix_log"])
        queued = self.matcher.queued()
        if cut:
            queued = [e for e in queued if e.src not in cut or e.app_seq < cut[e.src]]
            parts["received"] = self.received_at(cut)
        parts["replay"] = replay + queued
        parts["determinants"] = self.determinants.state()
        parts["protocols"] = self.owner.protocol_state() if protocol_state is None else protocol_state
        return parts

    def blank_snapshot(self, rank: int) -> bytes:
        """See ``blank_snapshot`` (module level)."""
        return blank_snapshot(rank, self.size)

    def load(self, blob: bytes | tuple) -> dict:
        """Check and decode a snapshot blob (raises CheckpointCorrupted), or take a
        ``transfer`` pair."""
        if isinstance(blob, tuple):
            data, buffers = blob
            parts = pickle.loads(data)
            if parts.get("buffers") != len(buffers):
                raise ProtocolError(f"a transfer of rank {parts.get('rank')} came with "
                                    f"{len(buffers)} buffers, not {parts.get('buffers')}")
            # writable: the program may write into its registered arrays (a transport
            # that fetched them as writable copies already is not copied again)
            parts["buffers"] = [b if type(b) is bytearray else bytearray(b) for b in buffers]
        else:
            parts = storage.loads(blob)
        if parts.get("rank") != self.rank:
            raise ProtocolError(f"snapshot of rank {parts.get('rank')} given to rank {self.rank}")
        return parts

    def restore(self, parts: dict, epoch: int) -> None:
        """Install a decoded snapshot and become incarnation ``epoch``.

        ``main()`` must be (re)started afterwards; it resumes at the saved position. The
        code before that position runs again with the registered values of the snapshot
        and the messages it received in its first life (the first ``len(prefix_log)`` of
        the replayed ones); ``_reentry`` checks that it takes them again and sets the
        registered attributes back when the resumed loop is reached.
        """
        replay = list(parts["replay"])
        self._resume_at(parts, replay[:len(parts["prefix_log"])])
        self._sent_at_cut = parts.get("sent_at_cut")
        self._base = None
        self.epoch = epoch
        self.peer_epochs[self.rank] = epoch  # the channel to self reaches this incarnation
        self._restart_outbox()
        # closed until the host has run ``on_restored`` (``open``)
        self._restart_receiving(epoch, parts["received"], replay)
        protocols = parts["protocols"]
        if protocols is None and self._start_protocols is not None:
            protocols = pickle.loads(self._start_protocols)  # a blank snapshot: the start
        if protocols is not None:
            self.owner.restore_protocol_state(protocols)

    def started(self) -> None:
        """The protocols have started (``on_start`` ran): keep their state as it is now,
        which a blank snapshot restores. A rank restored to the start of the run is often
        a survivor (non-stop recovery rolls everyone back in place); without this it would
        go on with the state of the execution it abandoned, e.g. the next backup round it
        had agreed on, and wait in another round than the others."""
        self._start_protocols = cloudpickle.dumps(self.owner.protocol_state())


def blank_snapshot(rank: int, size: int) -> bytes:
    """The state of rank ``rank`` before ``main()`` first ran: restoring it re-runs the
    program from the start, with the protocols' state of the start (``Endpoint.started``)."""
    return storage.dumps({
        "rank": rank, "position": None, "registered": cloudpickle.dumps({}),
        "sent": RankVector(size), "received": RankVector(size), "prefix_log": [],
        "replay": [], "protocols": None})
