"""Start-up and wiring: how a rank gets a host and how its host is watched
(docs/architecture/recovery.md, "Deaths at every moment").

The start-up gives every rank a host (a new one; later ones may be warm spares) and
wires them (every rank gets every peer's address). A host that dies before its rank
first runs (as it starts, or while the ranks are wired) held nothing: the rank gets
another host and the wiring is done again, up to ``START_ATTEMPTS`` lost hosts of one
rank (``Arbiter.lost_at_start``). Every host a rank is given, at the start-up or by a
recovery's respawn, is watched (``Fabric.watch``) from then on; what its death means is
the arbiter's decision (``Arbiter.host_died``)."""
from __future__ import annotations

import asyncio
from typing import Any

from ._arbiter import START_ATTEMPTS, Verdict
from ._deaths import RankDied
from ..base import RankFailed


class Hosts:
    """The ranks' hosts; ``c`` is the ``Coordinator`` (its fabric, handles, arbiter,
    spares, chaos points and ``fail``)."""

    def __init__(self, c):
        self.c = c
        self.watchers: dict[int, asyncio.Task] = {}  # rank -> the watcher of its host
        self.lost_at_start: dict[int, Any] = {}  # rank -> its host that died before it ran

    async def start(self) -> None:
        """Give every rank a host and wire them. A host that dies before its rank runs
        (as it starts, or while the ranks are wired) held nothing: the rank gets another
        one (a warm spare, else a new host) and the wiring is done again.

        Raises:
            RankFailed: a rank lost ``START_ATTEMPTS`` hosts before it could run.
        """
        c = self.c
        await _all([self.host(rank) for rank in range(c.n)])
        while True:
            try:
                await _all([c.fabric.wire(c.handles), c.all_reached_moment("wire")])
            except RankDied as died:
                await self.host(died.rank, died.reason)
                continue
            dead = [r for r, h in sorted(self.lost_at_start.items()) if h is c.handles[r]]
            self.lost_at_start.clear()
            if not dead:
                c.pool.fill()  # spares the start-up used
                c.arbiter.wired()
                return
            for rank in dead:  # died after its wiring call answered
                await self.host(rank, "its process died")

    async def host(self, rank: int, died: str | None = None) -> None:
        """A (new) host for rank ``rank``, which has not run yet; ``died``: why the last
        one is gone."""
        c = self.c
        while True:
            if died is not None:
                lost = c.arbiter.lost_at_start(rank)
                c.events.record("start_failed", rank=rank, reason=died, attempt=lost)
                if lost >= START_ATTEMPTS:
                    raise RankFailed([rank], f"its host died {lost} times before the "
                                             f"rank could run (last: {died})")
                old = c.handles[rank]
                if old is not None:
                    self.unwatch(rank)
                    await c.fabric.kill(old, "ray.kill")
            try:
                await self.new_host(rank, c.pool.take_ready() if died is not None else None)
                return
            except RankDied as exc:
                died = exc.reason or "its process died"

    async def new_host(self, rank: int, spare: Any | None) -> None:
        """Rank ``rank``'s host from now on: ``spare`` promoted, else a new host (chaos
        may strike either as it starts)."""
        c = self.c
        if spare is not None:
            await c.chaos.reached(spare, spare=c.pool.index.get(spare), moment="promoted")
            handle = await c.fabric.promote(spare, c.spec(rank))
        else:
            handle = await c.fabric.spawn(c.spec(rank))
        self.install(rank, handle)
        await c.reached_moment(rank, "start")

    def install(self, rank: int, handle: Any) -> None:
        """``handle`` is rank ``rank``'s host from now on: it is watched."""
        self.unwatch(rank)
        self.c.handles[rank] = handle
        self.watchers[rank] = self.c.helper(self._watch(rank, handle))

    def unwatch(self, rank: int) -> None:
        """Rank ``rank``'s host's death is no longer watched (it is being replaced)."""
        watcher = self.watchers.pop(rank, None)
        if watcher is not None:
            watcher.cancel()

    async def _watch(self, rank: int, handle: Any) -> None:
        """Rank ``rank``'s host ``handle`` died: before the rank runs, the start-up gives
        it another; after, it is a failure (unless replaced meanwhile)."""
        c = self.c
        await c.fabric.watch(handle)
        verdict = c.arbiter.host_died(rank, current=c.handles[rank] is handle)
        if verdict is Verdict.START_AGAIN:
            self.lost_at_start[rank] = handle
        elif verdict is Verdict.ARBITRATE:
            c.fail(rank, "its process died")


async def _all(aws: list) -> list:
    """``asyncio.gather`` that stops the others when one fails: nothing goes on starting
    hosts once the start-up gave up or starts again."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
