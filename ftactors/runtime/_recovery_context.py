"""What a protocol's coordinator side may use of the run: ``RecoveryContext``.

A recovery policy (``protocols/<name>/coordinator.py``), a level that keeps another
protocol's parts, and the stack's helpers are handed this context, not the
``Coordinator``: it names every request and fact of the run they may use, so that a
reader sees the boundary in one place and the coordinator's other state (its tasks,
chaos, liveness, the fabric) stays its own. ``tests/test_layers.py`` checks that no
protocol module reads anything else of it.

Requests to a rank are named by their handler, not by a string: ``ctx.call(rank,
StandbyReplacement.ft_rpc_standby_share, ...)``, so that a handler's callers are found by
its name. The rank's host answers four requests of its own (``HOST_CALLS``), named as
strings.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..base import ProtocolError
from ._checkpoints import load_own
from ._deaths import NewFailure, RankDied

__all__ = ["HOST_CALLS", "NewFailure", "RankDied", "RecoveryContext", "rpc_name"]

RPC_PREFIX = "ft_rpc_"
"""A protocol's coordinator request ``X`` is its mixin's method ``ft_rpc_X``."""
HOST_CALLS = frozenset({"pause", "resume", "ready", "finalize"})
"""The requests the rank's host answers itself (``RankHost.call``)."""


def rpc_name(handler: Callable | str) -> str:
    """The request name that travels to the rank for ``handler``: a mixin's
    ``ft_rpc_<name>`` method, or one of ``HOST_CALLS``."""
    if isinstance(handler, str):
        if handler not in HOST_CALLS:
            raise ProtocolError(f"a protocol's request is named by its handler "
                                f"(Mixin.{RPC_PREFIX}{handler}), not by the string {handler!r}")
        return handler
    name = getattr(handler, "__name__", "")
    if not name.startswith(RPC_PREFIX):
        raise ProtocolError(f"{handler!r} is not a coordinator request handler "
                            f"(a method named {RPC_PREFIX}<name>)")
    return name[len(RPC_PREFIX):]


class RecoveryContext:
    """The coordinator as a protocol's coordinator side sees it (see the module
    docstring). Every member delegates to the run's ``Coordinator`` or its fabric."""

    __slots__ = ("_c",)

    def __init__(self, coordinator):
        self._c = coordinator

    # ----------------------------------------------------------- facts of the run
    @property
    def n(self) -> int:
        """The number of ranks."""
        return self._c.n

    @property
    def events(self):
        """The run's timeline (``EventLog``)."""
        return self._c.events

    @property
    def epochs(self):
        """Rank -> the epoch of its current incarnation (a policy sets a rank's new one)."""
        return self._c.epochs

    @property
    def incarnations(self) -> list[int]:
        return self._c.incarnations

    @property
    def options(self) -> dict:
        """The run's options."""
        return self._c.options

    @property
    def identity(self):
        """The job's fingerprint, under which its checkpoint sets are stored."""
        return self._c.identity

    @property
    def restore(self):
        """The set the run was started from (``restart_from``), or None."""
        return self._c.config.restore

    @property
    def wired(self):
        """Set once every rank is started and wired (an ``asyncio.Event``)."""
        return self._c.wired

    @property
    def spares(self) -> list:
        """The spares ready now."""
        return self._c.spares

    @property
    def part_levels(self):
        """The levels that keep a ``hands_parts`` protocol's parts (``PartLevels``), or
        None."""
        return self._c.part_levels

    def unstarted(self) -> set[int]:
        return self._c.unstarted()

    def running(self, rank: int) -> bool:
        return self._c.supervisor.running(rank)

    def clock(self) -> float:
        """The run's clock (virtual on sim)."""
        return self._c.fabric.clock()

    async def sleep(self, seconds: float) -> None:
        await self._c.fabric.sleep(seconds)

    # -------------------------------------------------------- requests to ranks
    async def call(self, rank: int, handler: Callable | str, *args) -> Any:
        """Ask rank ``rank`` (its current incarnation); a dead rank raises
        ``NewFailure``."""
        return await self._c.call(rank, rpc_name(handler), *args)

    async def call_kept(self, rank: int, handler: Callable | str, *args) -> Any:
        """``call``, the (bytes) answer kept by the coordinator: it outlives the rank."""
        return await self._c.call_kept(rank, rpc_name(handler), *args)

    def handle(self, rank: int) -> Any:
        """Rank ``rank``'s current incarnation, to ask later even if it is replaced
        meanwhile (``call_handle``)."""
        return self._c.handles[rank]

    async def call_handle(self, handle: Any, handler: Callable | str, *args) -> Any:
        """Ask the incarnation ``handle``; a dead one raises ``RankDied``."""
        return await self._c.supervisor.asking(self._c.fabric.call(handle, rpc_name(handler), *args))

    async def call_handle_kept(self, handle: Any, handler: Callable | str, *args) -> Any:
        """``call_handle``, the answer kept by the coordinator."""
        return await self._c.supervisor.asking(self._c.fabric.call_kept(handle, rpc_name(handler),
                                                             *args))

    async def node_of(self, handle: Any):
        return await self._c.fabric.node_of(handle)

    async def available(self, handles: list) -> bool:
        """Whether every object-store handle in ``handles`` can still be read."""
        return await self._c.fabric.available(handles)

    # ------------------------------------------------------------ a recovery
    async def phase(self, name: str) -> None:
        """A recovery reached phase ``name`` (chaos may strike here)."""
        await self._c.phase(name)

    def fail(self, rank: int, reason: str) -> None:
        self._c.fail(rank, reason)

    async def replace(self, rank: int) -> None:
        await self._c.replace(rank)

    async def respawn(self, rank: int, *args, **kwargs):
        return await self._c.respawn(rank, *args, **kwargs)

    async def spawn_spare(self, node=None):
        """A new process for a rank to move to (``node``: where)."""
        return await self._c.fabric.spawn_spare(node)

    async def kill(self, handle: Any, method: str) -> None:
        await self._c.fabric.kill(handle, method)

    def refill_spares(self) -> None:
        self._c.refill_spares()

    def next_epoch(self) -> int:
        return self._c.next_epoch()

    async def rewire(self) -> None:
        await self._c.rewire()

    def start_rank(self, rank: int, restore: Any = None) -> None:
        self._c.supervisor.start_rank(rank, restore)

    def restore_spec(self, snapshot: Any, notes: dict | None = None, **kwargs):
        return self._c.restore_spec(snapshot, notes, **kwargs)

    def blank(self, rank: int) -> bytes:
        return self._c.blank(rank)

    def stored(self, position) -> None:
        self._c.stored(position)

    async def collect_events(self) -> None:
        await self._c.collect_events()

    async def newest_stable_set(self, store, what: str) -> tuple[tuple, list, tuple] | None:
        """``(position, blob per rank, line)`` of this run's newest complete checkpoint
        set in ``store`` (never another run's, nor one past what this run reached:
        ``what`` names it in that error), or None. ``line``: the set's recovery line, its
        position, or the manifest's ``line`` when its parts resume at different
        positions (the furthest of them: a round joined by ranks in other places)."""
        own = await asyncio.to_thread(load_own, store, self._c.identity, self._c.n)
        if own is None:
            return None
        prefix, blobs, meta = own
        self._c.check_reached(meta["position"], f"{what} {prefix!r}")
        return tuple(meta["position"]), blobs, tuple(meta.get("line") or meta["position"])
