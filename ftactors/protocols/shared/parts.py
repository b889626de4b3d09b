"""Checkpoint parts in the object store, owned by the coordinator (shared by the protocols).

A rank that saved its part holds it (``HeldParts``) until the coordinator has taken it.
DDVPiggyback waits until the coordinator says it holds the part (one more call: the
answer that hands the part over can be lost with the rank's process if the rank goes on
and dies before it arrives), so a rank past its checkpoint never holds the only copy of
its part (a failure just after it restarts from it); ReadyMessageFlush gets the same
guarantee sooner from a copy in another rank's process, which the coordinator takes when
the rank died before its own part was taken (see its "Hand-off"); GroupCoordination
reports and goes on at once (see its "Hand-off"). The coordinator
takes each reported part with ``Fabric.call_kept`` (``PartTaker``): on Ray
the part becomes an object owned by the driver, without a copy through the driver, so it
outlives the rank's process (not its node).
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Hashable

from ftactors.runtime import RankDied


GIVEN_GRACE_S = 2.0
"""How long a recovery lets the takes under way finish before it drops them."""


class HeldParts:
    """Rank side: parts waiting for the coordinator.

    ``confirmed``: the future of a part completes only once the coordinator says it holds
    it (``kept``), not when the part is handed over (``give``): the answer of the call
    that hands it over can still be lost with this rank's process if the rank went on and
    died before the answer reached the coordinator."""

    def __init__(self, confirmed: bool = False):
        self.confirmed = confirmed
        self._held: dict[Hashable, tuple[bytes, asyncio.Future]] = {}
        self._given: dict[Hashable, tuple[bytes, asyncio.Future]] = {}

    def hold(self, key: Hashable, blob: bytes) -> asyncio.Future:
        """Keep ``blob`` until ``give(key)``; the future completes then (``confirmed``:
        at ``kept(key)``)."""
        taken = asyncio.get_running_loop().create_future()
        self._held[key] = (blob, taken)
        return taken

    def give(self, key: Hashable) -> bytes:
        """The part for the coordinator (the answer of the protocol's ``ft_rpc_*``). A
        ``confirmed`` part is kept until ``kept``: the coordinator may ask for it again
        before then (a recovery salvaging parts while the first take is on its way)."""
        if key in self._given:
            return self._given[key][0]
        blob, taken = self._held.pop(key)
        if self.confirmed:
            self._given[key] = (blob, taken)
        else:
            taken.set_result(None)
        return blob

    def keys(self) -> list:
        """The parts held and not handed over yet."""
        return list(self._held)

    def kept(self, key: Hashable) -> None:
        """The coordinator holds part ``key`` (the protocol's ``ft_rpc_*_kept``)."""
        blob, taken = self._given.pop(key, (None, None))
        if taken is not None and not taken.done():
            taken.set_result(None)


class PartTaker:
    """Coordinator side: takes reported parts into the object store through the ranks'
    request ``give`` (a mixin's ``ft_rpc_*(key)`` handler); with ``kept``, tells the rank
    once its part is held (``HeldParts.kept``) through that request."""

    def __init__(self, ctx, give: Callable, kept: Callable | None = None):
        self.c = ctx
        self.give = give
        self.kept = kept
        self.tasks: dict[asyncio.Task, int | None] = {}  # task -> rank it fetches from

    def take(self, rank: int, key: Any, then: Callable[[Any], Awaitable[None]], *,
             fetch: bool = True) -> None:
        """Take rank ``rank``'s part ``key``, then ``await then(handle)``; a rank that died
        first leaves its part untaken (its checkpoint stays incomplete). ``fetch=False``:
        the part is kept elsewhere (stable storage), ``then(None)`` only."""
        host = self.c.handle(rank)  # the reporting incarnation, even if replaced meanwhile

        async def one():
            handle = None
            if fetch:
                try:
                    handle = await self.c.call_handle_kept(host, self.give, key)
                except RankDied:
                    return
                if self.kept is not None:  # ``then`` records the handle before the rank hears
                    await asyncio.gather(then(handle), self._tell_kept(host, key))
                    return
            await then(handle)
        task = asyncio.ensure_future(one())
        self.tasks[task] = rank if fetch else None
        task.add_done_callback(lambda t: self.tasks.pop(t, None))

    async def _tell_kept(self, host, key) -> None:
        try:
            await self.c.call_handle(host, self.kept, key)
        except RankDied:
            pass  # it died: nothing waits for the news any more

    def cancel(self, ranks=None) -> None:
        """Forget the parts being taken from ``ranks`` (default: all): they belong to an
        execution that is rolled back. A part kept elsewhere (``fetch=False``) is already
        safe, so its set may still complete."""
        for task, rank in list(self.tasks.items()):
            if rank is not None and (ranks is None or rank in ranks):
                task.cancel()

    async def let_finish(self, timeout_s: float = GIVEN_GRACE_S) -> None:
        """Let the takes under way finish for up to ``timeout_s``: a rank that gave its
        part goes on at once, so a failure found an instant later may find the take of a
        part already given still on its way back; it counts. (Calls to live or dead
        ranks end in milliseconds; only a hung rank's take waits out the bound.)"""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)

    async def settle(self) -> None:
        """Wait for the parts kept elsewhere that are being counted (no rank is asked, so
        this cannot hang on a dead or stopped one): a set whose every part was reported
        is complete once this returns."""
        local = [task for task, rank in self.tasks.items() if rank is None]
        if local:
            await asyncio.gather(*local, return_exceptions=True)

    async def finish(self) -> None:
        """Wait for every part being taken (the run is over)."""
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
