"""The per-rank message engine that every communicator and protocol goes through.

Theory of operation
-------------------
An ``Endpoint`` is one rank's messaging state and services, the one object protocols
(as ``self.ft``), the facade and the host use. It is built from five parts, one idea
each, in modules of their own:

* the outbox (``_outbox``): application numbers, channel stamps, per-destination batches
  and when they are flushed, destinations held while they move;
* receiving (``_receiving``): batches from the transport put in channel order and in
  application order, handed to the protocols and the matcher; receives and probes;
* positions (``_positions``): loops and safe points, the delivery logs a snapshot
  replays, and a restored rank's way back to its resume point (``_reentry``);
* snapshots (``_snapshots``): the recoverable state taken, sealed, loaded and installed;
* waits (``_waits``): what the rank's tasks are blocked on and what went over the wire,
  read only when the coordinator asks (a deadlock, a progress report).

They are mixins rather than objects the endpoint calls, for two reasons. The send and
receive paths cross them (a receive logs what it takes for the positions and flushes the
outbox before it waits; a restore starts every part again), so separate objects would
each hold a reference back to the others or copies of ``epoch``, ``sent`` and
``received`` kept in step. And those paths are the hot path (``send_app`` ->
``transmit`` -> ``_flush_one`` -> the link; ``deliver`` -> ``_dispatch`` ->
``_accept_app`` -> ``Matcher.arrive``; ``receive``): as mixins they are the endpoint's
own methods, with no delegating call per message. Each part sets its own state in its
``_init_*`` and its module docstring says what it reads from the others. What is
everyone's (the rank, its incarnation, the peers' incarnations, the link, the protocol
stack, the event log) is set here.

``Link`` is what an endpoint needs from its transport.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ..base import EventLog
from ._determinants import Determinants
from ._envelope import Envelope
from ._outbox import Outbox
from ._payload import LARGE_BUFFER_BYTES, Payload
from ._positions import Positions
from ._receiving import Receiving
from ._snapshots import Snapshots, blank_snapshot  # noqa: F401 (the coordinator imports it here)
from ._synchronous import SyncAcks
from ._vector import RankVector
from ._waits import Waits


class Link:
    """What an endpoint needs from its transport (one per rank).

    ``send`` must not block and must not run receiver code synchronously.
    """

    cheap_messages = False
    """Whether a message costs little more than the wake-up it causes (the direct data
    plane): then allreduce and allgather prefer fewer hops to fewer messages."""

    large_bytes = LARGE_BUFFER_BYTES
    """Buffers at least this large travel out of band (``put_large``), and a message
    holding one is sent without waiting for the batch."""

    def send(self, dst: int, envs: list[Envelope]) -> None:
        raise NotImplementedError

    def congested(self, dst: int) -> Awaitable | None:
        """None when the link to ``dst`` takes more now; else an awaitable that completes
        once it does (the sender writes faster than ``dst`` reads). Default: never."""
        return None

    def put_large(self, view: memoryview, dst: int | None = None) -> Any:
        """Store one large buffer for shipping (to world rank ``dst``, when the payload
        has one destination); default: an immutable copy."""
        return bytes(view)

    async def resolve(self, payload: Payload) -> Payload:
        """Fetch a payload's out-of-band references (identity where there are none)."""
        return payload

    def share(self, data: bytes | tuple) -> Any:
        """Make ``data`` (a snapshot blob or an ``Endpoint.transfer`` pair) fetchable by
        another rank through a small handle; the data stays owned by this rank."""
        return data

    async def fetch(self, handle: Any) -> bytes:
        """The data behind a ``share`` handle or a fabric's ``call_kept`` handle."""
        return handle

    def report(self, event) -> None:
        """Tell the coordinator (an event that must outlive this rank)."""
        raise NotImplementedError

    def cut(self, peers: list[int] | None, seconds: float) -> None:
        """Chaos: end this rank's connections with ``peers`` (None: every peer), as a
        network fault would; none is made again for ``seconds``. Default: nothing to cut."""

    async def report_now(self, event) -> None:
        """``report`` and wait until the coordinator has it (before dying)."""
        self.report(event)

    def clock(self) -> float:
        raise NotImplementedError


class Endpoint(Outbox, Receiving, Positions, Snapshots, Waits):
    """Messaging state and services of one rank; protocols reach it as ``self.ft``."""

    def __init__(self, rank: int, size: int, link: Link, owner, *, epoch: int = 0,
                 trace=None, record_deliveries: bool = False):
        self.rank = rank
        self.size = size
        self.epoch = epoch
        self.link = link
        self.owner = owner
        # one entry per rank, kept for the peers this rank talked to only (``_vector``)
        self.peer_epochs = RankVector(size)  # its own entry is its own epoch (self-sends)
        self.peer_epochs[rank] = epoch
        self._loop = asyncio.get_running_loop()
        self.events = EventLog(link.clock, rank)
        self.trace = trace
        self.sync = SyncAcks(self)  # acknowledgements of synchronous sends
        self.logged_bytes = 0  # payload bytes protocols kept in sender logs (a footprint)
        # what nondeterministic receives took (off unless a protocol replays them)
        self.determinants = Determinants()
        self._init_outbox()
        self._init_receiving()
        self._init_positions(record_deliveries)
        self._init_snapshots()
        self._init_waits()
        # set by the host: protocol tasks, chaos kills at safe points
        self.spawn: Callable[[Any], asyncio.Task] | None = None
        # the tasks of the program's nonblocking operations (a nonblocking collective, a
        # send waiting for room): they belong to main()'s execution, so a pause for a
        # restore cancels them with it (they would wait for ever on receives the
        # restore dropped)
        self.program_tasks: set[asyncio.Task] = set()
        self.strikes: dict[int, Callable[[], Awaitable]] = {}  # iteration -> chaos there

    def option(self, name: str, default: Any) -> Any:
        """The value of the run's option ``name`` (``default``: its declared default,
        when the run did not give it)."""
        return getattr(self.owner, "options", {}).get(name, default)

    def doubling_collectives(self) -> bool:
        """Whether allreduce/allgather use recursive doubling (option ``collectives``:
        ``"auto"``, the default, follows ``Link.cheap_messages``)."""
        choice = self.option("collectives", "auto")
        return choice == "doubling" or (choice == "auto" and self.link.cheap_messages)

    def report(self, kind: str, **detail) -> None:
        """Record an event in the coordinator's timeline rather than this rank's, so it
        survives this rank."""
        self.link.report(self.events.make(kind, **detail))

    def stats(self) -> dict:
        return {
            "sent": self.sent.total(), "received": self.received.total(),
            "duplicates_dropped": self.duplicates_dropped,
            "resends_suppressed": self.resends_suppressed,
            "stale_dropped": self._in.stale, "channel_duplicates": self._in.duplicates,
            "logged_bytes": self.logged_bytes,
        }
