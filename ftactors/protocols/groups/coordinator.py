"""GroupCoordination's coordinator side (``GroupRecovery``): every group's checkpoint
sets as its members hand their parts, and the restart of a failed rank's group from its
newest set, with the messages logged across groups resent (Algorithm 1, recovery). The
rank side and the theory of operation are in ``rank.py``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ftactors.runtime import position_index
from ftactors.base import RankFailed

from ..shared.determinants import NOTE, hand_determinants
from ..shared.parts import PartTaker
from ..shared.units import load_groups
from .options import group_settings
from .rank import NAME, GroupCoordination


@dataclass
class _GroupSet:
    group: int
    position: tuple
    size: int
    handles: dict = field(default_factory=dict)
    received: dict = field(default_factory=dict)  # rank -> R_X in its part, for every X


class GroupRecovery:
    """Coordinator side: keeps every group's checkpoint parts, restarts failed groups."""

    def __init__(self, ctx):
        self.c = ctx
        self.groups = load_groups(group_settings(ctx.options)["groups"], ctx.n)
        self.pending: dict[tuple, _GroupSet] = {}   # (group, position) -> parts so far
        self.latest: dict[int, _GroupSet] = {}      # group -> newest complete set
        self.parts = PartTaker(ctx, GroupCoordination.ft_rpc_group_part)

    def on_report(self, event) -> None:
        if event.kind != "group_checkpoint_part":
            return
        g, pos = event.detail["group"], tuple(event.detail["position"])
        ck = self.pending.get((g, pos))
        if ck is None:
            ck = self.pending[(g, pos)] = _GroupSet(g, pos, len(self.groups.members(event.rank)))
        ck.received[event.rank] = event.detail["received"]
        self.parts.take(event.rank, pos, lambda handle: self._kept(ck, event.rank, handle))

    async def _kept(self, ck: _GroupSet, rank: int, handle) -> None:
        """Rank ``rank``'s part is kept; the group's set is complete with all of them."""
        c = self.c
        ck.handles[rank] = handle
        if len(ck.handles) < ck.size:
            return
        self.pending.pop((ck.group, ck.position), None)
        old = self.latest.get(ck.group)
        if old is None or ck.position > old.position:
            self.latest[ck.group] = ck
            for key in [k for k in self.pending if k[0] == ck.group and k[1] < ck.position]:
                del self.pending[key]  # older sets that never completed can never be used
        c.events.record("group_checkpoint", group=ck.group, position=ck.position,
                        index=position_index(ck.position))
        await asyncio.gather(*(
            c.call_handle(c.handle(r), GroupCoordination.ft_rpc_group_commit, ck.position)
            for r in ck.handles), return_exceptions=True)

    async def finish(self) -> None:
        await self.parts.finish()

    async def recover(self, failed: set[int]) -> None:
        c = self.c
        hit = sorted({self.groups.group_of(r) for r in failed})
        ranks = sorted(r for g in hit for r in self.groups.groups[g])
        self.parts.cancel(set(ranks))  # parts of the lost execution
        # while the holders of copies still run
        lines, handles = await self._restart_lines(hit, failed)
        c.events.record("group_rollback", groups=hit, ranks=ranks,
                        positions={g: ck and ck.position for g, ck in lines.items()},
                        from_levels=[g for g, ck in lines.items()
                                     if ck is not None and ck is not self.latest.get(g)])
        for key in [k for k in self.pending if k[0] in hit]:
            del self.pending[key]
        for g, ck in lines.items():  # the restored set is the group's complete one now
            if ck is not None:
                ck.handles = {r: handles[r] for r in self.groups.groups[g]}
                self.latest[g] = ck
        sets = {r: lines[self.groups.group_of(r)] for r in ranks}
        await asyncio.gather(*(c.respawn(r) for r in ranks))
        await c.rewire()
        epochs = {r: c.epochs[r] for r in ranks}
        others = [x for x in range(c.n) if x not in ranks]
        restored = {r: [0] * c.n if sets[r] is None else sets[r].received[r] for r in ranks}
        holds = dict(zip(others, await asyncio.gather(*(
            c.call(x, GroupCoordination.ft_rpc_group_fence, epochs,
                   {r: restored[r][x] for r in ranks})
            for x in others))))
        if c.part_levels is not None:
            await c.part_levels.forget({r: sets[r] and sets[r].position for r in ranks},
                                       self.groups)
        holds.update(restored)  # a restarted rank will hold what its part holds
        for r in ranks:
            held_from = {x: held[r] for x, held in holds.items() if x != r}
            c.start_rank(r, c.restore_spec(handles[r], {NAME: held_from, NOTE: True}))
        replayed = await hand_determinants(c, ranks)  # before they run: see its module
        await asyncio.gather(*(c.call(r, "ready") for r in ranks))
        if c.part_levels is not None:
            await c.part_levels.reprotect(set(ranks), self._restorable(), self.groups)
        got = await asyncio.gather(*(
            c.call(r, GroupCoordination.ft_rpc_group_received) for r in ranks))
        # every rank resends to the restarted ones what they lack; a restarted rank also
        # resends to the others what it had sent before its part but they never got (it
        # was in flight when the fence dropped its old life's traffic)
        lack = {x: {r: got[i][x] for i, r in enumerate(ranks)} for x in range(c.n)}
        for x in ranks:
            lack[x].update({s: holds[s][x] for s in others})
        resent = await asyncio.gather(*(
            c.call(x, GroupCoordination.ft_rpc_group_resend, lack[x]) for x in range(c.n)))
        await asyncio.gather(*(
            c.call(r, GroupCoordination.ft_rpc_group_expect,
                   {x: done["upto"][r] for x, done in enumerate(resent) if r in done["upto"]})
            for r in ranks))
        c.events.record("group_resumed", groups=hit,
                        resent=sum(done["messages"] for done in resent), determinants=replayed)
        if c.part_levels is not None:
            c.part_levels.recovered(failed)
        c.refill_spares()

    def _restorable(self) -> dict[int, dict]:
        """{rank: {position: handle}}: the parts a later recovery may restore that the
        coordinator holds (every group's complete set, and its newer reported ones)."""
        sets = [*self.latest.values(), *self.pending.values()]
        parts: dict[int, dict] = {}
        for ck in sets:
            for r, handle in ck.handles.items():
                parts.setdefault(r, {})[ck.position] = handle
        return parts

    def _lines(self, g: int) -> list[_GroupSet | None]:
        """Group ``g``'s restart lines, newest first: with levels that keep parts, the
        sets every member reported newer than its newest complete set (the levels may
        hold their parts though the coordinator has not taken all of them), then that
        set (None: the start)."""
        latest = self.latest.get(g)
        reported = []
        if self.c.part_levels is not None:
            reported = sorted((ck for (h, _), ck in self.pending.items()
                               if h == g and len(ck.received) == ck.size
                               and (latest is None or ck.position > latest.position)),
                              key=lambda ck: ck.position, reverse=True)
        return [*reported, latest]

    async def _restart_lines(self, hit: list[int], failed: set[int]) -> tuple[dict, dict]:
        """The set each group in ``hit`` restarts from (None: the start) and what each
        of its ranks restores: its part, from the cheapest level of the stack that holds
        it, else the coordinator's copy. A reported set some of whose parts no level
        holds gives way to the group's next line; its complete set's does not
        (``RankFailed``: that part is lost)."""
        c, lines = self.c, {g: self._lines(g) for g in hit}
        while True:
            sets = {r: lines[g][0] for g in hit for r in self.groups.groups[g]}
            kept = {r: ck.handles.get(r) for r, ck in sets.items() if ck is not None}
            found = kept
            if c.part_levels is not None:
                try:
                    found = await c.part_levels.find({r: sets[r].position for r in kept},
                                                     kept, self.groups, failed)
                except RankFailed as exc:
                    short = {self.groups.group_of(r) for r in exc.ranks}
                    if any(len(lines[g]) == 1 for g in short):
                        raise
                    for g in short:
                        lines[g].pop(0)
                    continue
            blank = {r: c.blank(r) for r, ck in sets.items() if ck is None}
            return {g: lines[g][0] for g in hit}, {**found, **blank}
