"""The run's warm spares (``ft.run(spares=k)``): started in the background, watched, and
replaced as soon as one dies, so that ``k`` means ``k`` usable spares.

A spare counts only once it answered a ping (a process that died as it started is never
handed out). Each ready spare is watched (``Fabric.watch``: on Ray a call that never
answers and fails when the actor dies); a spare that dies while it waits is dropped and
another one started at once. Promotion (``take``) prefers a ready spare and, when only
spares that are still starting are left, waits for the first of them. Spares are numbered
in the order the run asks for them (refills included), which is how chaos names them
(``ft.Kill(spare=i, moment=...)``). A spare that cannot be started ``START_ATTEMPTS`` times
in a row is not asked for again until the next refill: a cluster that cannot start
processes is not hammered.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ._deaths import RankDied

START_ATTEMPTS = 3
"""Spare starts that may fail in a row before the pool stops asking (until a refill)."""


class SparePool:
    """The coordinator's spares; ``coordinator`` provides ``fabric``, ``events``,
    ``helper(coro)`` (background work stopped with the run); each moment of a spare's
    life is handed to ``chaos.reached`` (chaos may strike there: ``ChaosFabric``)."""

    def __init__(self, coordinator, size: int):
        self.c = coordinator
        self.size = size
        self.ready: list[Any] = []
        self.index: dict[Any, int] = {}  # spare -> its number (chaos names spares by it)
        self.starting = 0
        self.asked = 0  # spares asked for so far
        self._failures = 0  # starts that failed in a row
        self._watchers: dict[Any, asyncio.Task] = {}
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self.ready)

    def fill(self) -> None:
        """Start, in the background, as many spares as are missing."""
        self._failures = 0
        self._top_up()

    def _top_up(self) -> None:
        for _ in range(self.size - len(self.ready) - self.starting):
            self.starting += 1
            self.c.helper(self._start(self.asked))
            self.asked += 1

    async def _start(self, index: int) -> None:
        c = self.c
        try:
            spare = await c.fabric.spawn_spare()
            await c.chaos.reached(spare, spare=index, moment="starting")
            await c.fabric.ping(spare)  # it counts once it answers
        except RankDied as died:
            self.starting -= 1
            self._failures += 1
            c.events.record("spare_lost", spare=index, moment="starting", reason=died.reason)
            if self._failures < START_ATTEMPTS:
                self._top_up()
            self._changed.set()
            return
        self.starting -= 1
        self._failures = 0
        self.index[spare] = index
        self.ready.append(spare)
        self._watchers[spare] = c.helper(self._watch(spare, index))
        c.events.record("spare_ready", spare=index)
        self._changed.set()
        await c.chaos.reached(spare, spare=index, moment="idle")

    async def _watch(self, spare, index: int) -> None:
        await self.c.fabric.watch(spare)
        if spare in self.ready:
            self.ready.remove(spare)
            self._watchers.pop(spare, None)
            self.c.events.record("spare_lost", spare=index, moment="idle",
                                 spares_left=len(self.ready))
            self._top_up()
            self._changed.set()

    def take_ready(self) -> Any | None:
        """A ready spare (no longer watched here: it becomes a rank), or None."""
        if not self.ready:
            return None
        spare = self.ready.pop(0)
        watcher = self._watchers.pop(spare, None)
        if watcher is not None:
            watcher.cancel()
        self.c.events.record("spare_taken", spare=self.index.get(spare),
                             spares_left=len(self.ready))
        return spare

    async def take(self) -> Any | None:
        """A ready spare, else the first of those still starting to be ready; None when
        there is neither."""
        while not self.ready and self.starting:
            self._changed.clear()
            await self._changed.wait()
        return self.take_ready()
