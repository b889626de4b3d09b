"""RSBackup's coordinator side: recovery planning (pure), placement and stable sets,
recovery rounds. The theory of operation is in ``rank.py``'s docstring."""
from __future__ import annotations

import asyncio
from typing import Any

from ftactors.runtime import (LevelExhausted, LowerLevel, NewFailure, RankDied, position_index,
                              prune_sets, seal_set)
from ftactors.base import RankFailed, open_store

from .machine import RecoveryPlan, Undecodable, choose_recovery
from .placement import Placement, place, virtual_nodes
from .rank import RSBackup
from .options import KEEP_STABLE, NAME, rs_settings


class RSRecovery(LowerLevel):
    """Coordinator side: placement, stable sets, and recovery rounds (``rank.py``'s
    docstring; the decision is ``machine.choose_recovery``)."""

    def __init__(self, ctx):
        self.c = ctx
        self.settings = rs_settings(ctx.options)
        stable = self.settings["stable"]
        self.store = None if stable is None else open_store(stable)
        self.placement: Placement | None = None
        self._placing = asyncio.Lock()
        self.stored: dict[tuple, set[int]] = {}
        self.sealing = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------- placement
    async def ensure_placement(self) -> Placement:
        async with self._placing:
            if self.placement is None:
                c, s = self.c, self.settings
                if s["ranks_per_node"] is not None:
                    nodes, virtual = virtual_nodes(c.n, s["ranks_per_node"]), True
                else:
                    nodes = await asyncio.gather(*(self._node(r) for r in range(c.n)))
                    virtual = len(set(nodes)) == 1  # one node: rank failures only
                    if virtual:
                        nodes = list(range(c.n))
                self.placement = place(nodes, s["group_size"], interleave=s["interleave"],
                                       parity=s["parity"])
                c.events.record("rs_placement", virtual=virtual, **self.placement.as_dict())
        return self.placement

    async def _node(self, rank: int):
        try:
            return await self.c.node_of(self.c.handle(rank))
        except RankDied:
            return ("gone", rank)

    async def service(self) -> None:
        """At the start: place the ranks and tell them; after ``restart_from``, have every
        group encode the restored round again."""
        c = self.c
        await c.wired.wait()
        placement = await self.ensure_placement()
        try:
            await asyncio.gather(*(self._tell(r, placement) for r in range(c.n)))
            if c.restore is not None:
                restored = await c.call(0, RSBackup.ft_rpc_rs_restored)
                if restored is not None:
                    await self._reencode(restored, self._everything())
        except NewFailure:
            return  # the recovery round tells the ranks it restarts

    async def _tell(self, rank: int, placement: Placement) -> None:
        await self.c.call(rank, "ready")
        await self.c.call(rank, RSBackup.ft_rpc_rs_placement, placement)

    def _everything(self) -> dict:
        p = self.placement
        return {g: list(range(p.m(g))) for g in range(len(p.groups))}

    async def _reencode(self, round_id, reencode: dict) -> None:
        c = self.c
        for phase in ("drop", "send"):  # nobody holds stale blocks when new ones come
            await asyncio.gather(*(
                c.call(r, RSBackup.ft_rpc_rs_reencode, round_id, reencode, phase)
                for r in range(c.n)))

    # ------------------------------------------------------------ stable sets
    def on_report(self, event) -> None:
        if event.kind != "rs_stored":
            return
        pos = tuple(event.detail["position"])
        line = event.detail.get("line")
        ranks = self.stored.setdefault(pos, set())
        ranks.add(event.rank)
        if len(ranks) == self.c.n:
            del self.stored[pos]
            task = asyncio.ensure_future(self._seal(pos, pos if line is None else line))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _seal(self, pos: tuple, line) -> None:
        async with self.sealing:
            try:
                await asyncio.to_thread(seal_set, self.store, self.c.identity,
                                        position_index(pos), self.c.n,
                                        {"position": list(pos), "protocol": NAME,
                                         "line": list(line)})
            except KeyError as missing:  # a part is gone from the store
                self.c.events.record("stable_checkpoint_failed", position=pos,
                                     reason=str(missing))
                return
            await asyncio.to_thread(prune_sets, self.store, self.c.identity, KEEP_STABLE)
        self.c.stored(pos)
        self.c.events.record("stable_checkpoint", position=pos)

    async def finish(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks)

    # --------------------------------------------------------------- recovery
    async def recover(self, failed: set[int]) -> None:
        c = self.c
        placement = await self.ensure_placement()
        survivors = [r for r in range(c.n) if r not in failed]
        await asyncio.gather(*(c.call(r, "pause") for r in survivors))
        answers = await asyncio.gather(
            *(c.call(r, RSBackup.ft_rpc_rs_failure, sorted(failed)) for r in survivors))
        await c.phase("notified")
        inventories = dict(zip(survivors, answers))
        plan, source, line = await self._plan(placement, failed, inventories)
        c.events.record("rs_recovery", position=plan.round, failed=sorted(failed),
                        source="memory" if isinstance(source, str) else "stable",
                        reencode=plan.reencode,
                        decode={g: [placement.groups[g][i] for i in d["lost"]]
                                for g, d in plan.decode.items()})
        for rank in sorted(failed):
            await (c.replace(rank) if c.spares else c.respawn(rank))
        for rank in survivors:
            c.epochs[rank] = c.next_epoch()
        await c.rewire()
        await c.phase("repaired")
        handles = await self._snapshots(plan, source, survivors)

        waits = []
        for rank in range(c.n):
            spec = c.restore_spec(handles[rank], line=line)
            if rank in survivors and c.running(rank):
                waits.append(c.call(rank, "resume", spec, c.epochs[rank]))
            else:
                c.start_rank(rank, spec)
                waits.append(c.call(rank, "ready"))
        await asyncio.gather(*waits)
        if plan.round is not None and plan.reencode:
            await self._reencode(plan.round, plan.reencode)
        c.events.record("resumed", position=plan.round)
        c.refill_spares()

    def restore_notes(self) -> dict:
        """Every restored rank learns the placement (a promoted spare has none)."""
        return {} if self.placement is None else {NAME: {"placement": self.placement}}

    async def _plan(self, placement, failed, inventories) -> tuple[RecoveryPlan, Any, Any]:
        """The recovery plan from memory, else from stable storage (``source`` is then
        the blobs of the newest complete set), and its line (the round's furthest part:
        ranks that joined it out of step took their parts where they were). A plan to
        restart from the start of the run (nothing known in memory: the whole job was
        lost) also prefers a stable set.
        """
        try:
            plan = choose_recovery(placement, failed, inventories)
            if plan.round is not None:
                line = next((inv["lines"][plan.round] for inv in inventories.values()
                             if inv["lines"].get(plan.round) is not None), plan.round)
                return plan, "memory", line
            lost = None
        except Undecodable as exc:
            lost = exc
        stable = await self._load_stable()
        if stable is not None:
            if lost is not None:
                self.c.events.record("rs_undecodable", groups=lost.groups,
                                     position=lost.round, fallback="stable")
            position, blobs, line = stable
            return RecoveryPlan(position, {}, self._everything()), blobs, line
        if lost is None and self.escalates:
            raise LevelExhausted(sorted(failed), "no encoded round is complete yet")
        if lost is None:
            return plan, "memory", None
        groups = ", ".join(f"{g} (ranks {list(placement.groups[g])})" for g in lost.groups)
        raise RankFailed(sorted(failed), f"RSBackup cannot rebuild group(s) {groups}: too "
                                         f"few blocks survive and there is no stable copy "
                                         f"(rs_stable_store)")

    async def _load_stable(self):
        """``(position, blob per rank)`` of this run's newest complete stable set (never
        another run's, nor one past what this run stored), or None."""
        if self.store is None:
            return None
        async with self.sealing:  # not while a set is being sealed or pruned
            return await self.c.newest_stable_set(self.store, "stable set")

    async def _snapshots(self, plan: RecoveryPlan, source, survivors: list[int]) -> list:
        """A snapshot handle per rank: own copies, decoded ones, stable blobs or blanks."""
        c, placement = self.c, self.placement
        if not isinstance(source, str):
            return list(source)
        if plan.round is None:
            return [c.blank(r) for r in range(c.n)]
        handles: list = [None] * c.n
        decoded = await asyncio.gather(*(self._decode(g, d, plan.round)
                                         for g, d in plan.decode.items()))
        for g, out in zip(plan.decode, decoded):
            for i, handle in out.items():
                handles[placement.groups[g][i]] = handle
        shared = await asyncio.gather(*(c.call(r, RSBackup.ft_rpc_rs_share, plan.round, ("own",))
                                        for r in range(c.n) if handles[r] is None))
        for r, handle in zip([r for r in range(c.n) if handles[r] is None], shared):
            handles[r] = handle
        return handles

    async def _decode(self, g: int, decode: dict, round_id) -> dict:
        """Group ``g``'s lost snapshots, decoded by one live rank holding a source."""
        c, placement = self.c, self.placement
        k, members = placement.k(g), placement.groups[g]
        sources, lengths = {}, {}
        for idx, rank in decode["sources"].items():
            if idx < k:
                sources[idx] = await c.call(rank, RSBackup.ft_rpc_rs_share, round_id, ("own",))
            else:
                sources[idx], lengths = await c.call(rank, RSBackup.ft_rpc_rs_share, round_id,
                                                     ("parity", g, idx - k))
        decoder = next(iter(decode["sources"].values()))
        return await c.call(decoder, RSBackup.ft_rpc_rs_decode, round_id, g, k, placement.m(g),
                            sources, lengths, list(members), decode["lost"])
