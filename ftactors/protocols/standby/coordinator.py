"""StandbyReplacement's coordinator side: one NR-MPI recovery round (section 1.3: the
survivors stay, standby ranks take the failed ones' places from partner copies), and the
partner copies of another protocol's parts (``PartnerCopies``)."""

from __future__ import annotations

import asyncio
from typing import Any

from ftactors.runtime import LevelExhausted, LowerLevel

from .machine import INITIAL, choose_round, part_holder, partner
from .rank import StandbyReplacement


class StandbyRecovery(LowerLevel):
    """Coordinator side: one NR-MPI recovery round (see ``rank.py``'s docstring)."""

    def __init__(self, ctx):
        self.c = ctx

    async def recover(self, failed: set[int]) -> None:
        c = self.c
        survivors = [r for r in range(c.n) if r not in failed]
        await asyncio.gather(*(c.call(r, "pause") for r in survivors))
        answers = await asyncio.gather(
            *(c.call(r, StandbyReplacement.ft_rpc_standby_failure, sorted(failed))
              for r in survivors))
        inventories = dict(zip(survivors, answers))
        await c.phase("notified")
        round_id = choose_round(c.n, failed, inventories)
        if round_id is INITIAL and self.escalates:
            raise LevelExhausted(sorted(failed), "no partner copy is held yet")
        c.events.record("recovery_line", position=round_id, failed=sorted(failed))
        for rank in sorted(failed):
            if self.escalates and not c.spares and rank not in c.unstarted():
                await c.respawn(rank)  # a new actor: cheaper than every rank going back
            else:
                await c.replace(rank)
        for rank in survivors:
            c.epochs[rank] = c.next_epoch()
        await c.rewire()
        c.events.record("repaired", failed=sorted(failed))
        await c.phase("repaired")
        if round_id is INITIAL:  # no rank's copy is needed, and every rank may be new
            handles = [c.blank(rank) for rank in range(c.n)]
        else:
            sources = [partner(rank, c.n) if rank in failed else rank for rank in range(c.n)]
            handles = await asyncio.gather(
                *(c.call(src, StandbyReplacement.ft_rpc_standby_share, rank, round_id)
                  for rank, src in enumerate(sources)))

        # the furthest part's position (a rank that joined the round out of step took its
        # part where it was: before or past the round's name)
        line = None if round_id is INITIAL else next(
            (inv["lines"][round_id] for inv in inventories.values()
             if inv["lines"].get(round_id) is not None), round_id)

        def restore(rank):
            return c.restore_spec(handles[rank], line=line)

        waits = []
        for rank in survivors:
            if c.running(rank):
                waits.append(c.call(rank, "resume", restore(rank), c.epochs[rank]))
            else:
                c.start_rank(rank, restore(rank))
                waits.append(c.call(rank, "ready"))
        for rank in sorted(failed):
            c.start_rank(rank, restore(rank))
            waits.append(c.call(rank, "ready"))
        await asyncio.gather(*waits)
        c.events.record("resumed", position=round_id)


class PartnerCopies:
    """Coordinator side of the partner copies of a ``hands_parts`` protocol's parts
    (``PartLevels``)."""

    def __init__(self, ctx):
        self.c = ctx
        self.rescued: dict[int, dict] = {}  # rank -> {key: (holder, handle)}, until forget

    async def rescue(self, holders: list[int]) -> None:
        """``holders`` are about to be restarted: pull every copy they hold into the
        driver's object store first (a cascade may still need them)."""
        c = self.c
        kept = await asyncio.gather(*(
            c.call(h, StandbyReplacement.ft_rpc_standby_parts) for h in holders))
        pulls = [(h, r, key) for h, held in zip(holders, kept)
                 for r, keys in held.items() for key in keys]
        handles = await asyncio.gather(*(
            c.call_kept(h, StandbyReplacement.ft_rpc_standby_part, r, key)
            for h, r, key in pulls))
        for (h, r, key), handle in zip(pulls, handles):
            self.rescued.setdefault(r, {})[key] = (h, handle)

    async def find(self, wanted: dict[int, Any], units, gone: set[int]) -> dict[int, Any]:
        """Handles to the copies held of ``wanted`` {rank: part key}, pulled into the
        driver's object store (they outlive their holder's process)."""
        c = self.c
        rescued = {r: self.rescued.get(r, {}).get(key) for r, key in wanted.items()}
        found = {r: pulled[1] for r, pulled in rescued.items()
                 if pulled is not None and pulled[0] not in gone}  # its node may be gone
        holders = {r: part_holder(units, r) for r in wanted if r not in found}
        empty = set(gone) | c.unstarted()
        live = sorted({h for r, h in holders.items() if h != r and h not in empty})
        kept = dict(zip(live, await asyncio.gather(*(
            c.call(h, StandbyReplacement.ft_rpc_standby_parts) for h in live))))
        take = {r: h for r, h in holders.items() if wanted[r] in kept.get(h, {}).get(r, ())}
        handles = await asyncio.gather(*(
            c.call_kept(h, StandbyReplacement.ft_rpc_standby_part, r, wanted[r])
            for r, h in take.items()))
        return {**found, **dict(zip(take, handles))}

    async def reprotect(self, restarted: set[int], parts: dict[int, dict], units) -> None:
        """Holders among ``restarted`` lost the copies they held with their old lives:
        give them again the parts ``parts`` {rank: {key: handle}} of the ranks that went
        on, which a later recovery may still restore (until then a rank's only other copy
        is on its own node)."""
        c = self.c
        given = {}
        for r, kept in parts.items():
            h = part_holder(units, r)
            if h in restarted and h != r and kept:
                given[r] = h
        done = await asyncio.gather(*(
            c.call(h, StandbyReplacement.ft_rpc_standby_part_keep, r, parts[r])
            for r, h in given.items()), return_exceptions=True)
        lost = {r: repr(x) for r, x in zip(given, done) if isinstance(x, BaseException)}
        if given:  # a failure here is the next round's: the copy is just missing then
            c.events.record("part_copies_restored", holders={r: given[r] for r in sorted(given)
                                                             if r not in lost}, failed=lost)

    async def forget(self, after: dict[int, Any], units) -> None:
        c = self.c
        self.rescued.clear()
        by_holder: dict[int, dict] = {}
        empty = set(after) | c.unstarted()
        for r, key in after.items():
            h = part_holder(units, r)
            if h not in empty:  # a restarted holder holds nothing any more
                by_holder.setdefault(h, {})[r] = key
        await asyncio.gather(*(c.call(h, StandbyReplacement.ft_rpc_standby_part_drop, keys)
                               for h, keys in by_holder.items()))
