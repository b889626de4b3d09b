"""What a protocol's rank side may use of its rank: ``RankContext``.

A protocol's mixin (``protocols/<name>/rank.py``) reaches its rank's messaging state and
services as ``self.ft`` (the rank's ``Endpoint``), and through it the transport's
``LinkContext``. These two typed declarations name the part of them a protocol may use,
so that a reader sees the boundary in one place; the endpoint's other members (its
outbox, matching, channels, positions' internals) stay the engine's.
``tests/test_layers.py`` checks that no protocol module reads anything else of
``self.ft`` (or of an ``ft`` it was handed). The counterpart on the coordinator's side is
``RecoveryContext`` (``_recovery_context.py``).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..base import EventLog
from ..engine import Envelope, RankVector, Wait


class LinkContext(Protocol):
    """What a protocol may use of its rank's transport link (``self.ft.link``)."""

    def clock(self) -> float:
        """The run's clock (virtual on sim)."""

    def share(self, data: bytes | tuple) -> Any:
        """Make a snapshot (or a transfer pair) fetchable by another rank by a handle."""

    async def fetch(self, handle: Any) -> bytes:
        """The data behind a ``share`` handle or a coordinator-kept handle."""

    def report(self, event) -> None:
        """Tell the coordinator an event that must outlive this rank."""

    async def report_now(self, event) -> None:
        """``report`` and wait until the coordinator has it."""


class RankContext(Protocol):
    """What a protocol may use of its rank's endpoint (``self.ft``)."""

    rank: int
    events: EventLog
    """This rank's timeline (``record``; ``make`` for an event to ``link.report``)."""
    link: LinkContext
    position: tuple | None
    """The safe-point position this rank is at (None: outside every loop)."""
    sent: RankVector
    """Application messages sent, per peer (S_X)."""
    received: RankVector
    """Application messages received, per peer (R_X)."""
    logged_bytes: int
    """Bytes of messages a protocol keeps in a log (counted in the run's metrics)."""
    keep_base: Any
    blocked: list
    """The world sources of the receives and probes waiting now, and of the receive
    requests waited for (``on_blocked``; read from the wait records: ``engine/_waits``)."""
    restored_from: Any
    """The blob this rank was restored from (a protocol may drop it once not needed)."""
    restored_line: Any
    """The recovery line of the last restore (None: none given, or the start)."""
    sent_at_cut: Any
    """What this rank had sent when the state it was restored from was taken "now" (None:
    at a safe point, or never restored): its re-execution does not send those again."""
    restore_notes: dict
    """What the recovery policy sent with this rank's restore, by protocol name."""
    determinants: Any
    """What its nondeterministic receives took (``engine/_determinants``): ``enable``,
    ``count``, ``set_floor``, ``resent``, ``held_of``, ``replay_from``."""
    waiting: Wait | None
    """What the rank's own task (``main()``, or the host's task running ``on_start`` /
    ``on_finish``) is blocked on now: a receive or probe (source, tag, communicator), a
    request, a synchronous send's acknowledgement, a protocol's round
    (``engine/_waits``); None while it runs, computes or sleeps. Read-only; a protocol
    may take "blocked" as the moment a rank can join a round."""

    def waiting_on(self, wait: Wait) -> AbstractContextManager[None]:
        """``with ft.waiting_on(Wait("round", what=..., ranks=...)): await ...``: name a
        protocol's own wait for ``waiting`` and the deadlock watch. Only a wait that a
        message or a coordinator request ends may be named: a rank whose named wait a
        timer would end is not deadlocked, yet would look so."""

    def send_control(self, dst: int, protocol: str, op: str, data: Any = None) -> None: ...
    def send_control_all(self, dsts, protocol: str, op: str, data: Any = None) -> None: ...
    def control_data(self, env: Envelope) -> tuple[str, Any]: ...
    def transmit(self, env: Envelope) -> None: ...
    def deliver_now(self, env: Envelope) -> None: ...
    def hold(self, dst: int) -> None: ...
    def release(self, dst: int) -> int: ...
    def report(self, kind: str, **detail) -> None: ...
    def set_peer_epoch(self, rank: int, epoch: int) -> None: ...
    def snapshot(self, protocol_state: dict | None = None,
                 cut: dict[int, int] | None = None) -> bytes: ...
    def state_now(self, *, unreceived: dict[int, int] | None = None,
                  global_cut: bool = False) -> dict: ...
    def seal_state(self, parts: dict, protocol_state: dict, late=()) -> bytes: ...
    def blank_snapshot(self, rank: int) -> bytes: ...
    def can_snapshot_now(self, after_loop: bool = False) -> bool: ...
    def next_safe_point(self) -> tuple[int, int] | None: ...
    def received_at(self, cut: dict[int, int]) -> RankVector: ...
    def transfer(self, protocol_state: dict | None = None) -> tuple[bytes, list]: ...
