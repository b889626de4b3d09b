"""Coordinator side of DDVPiggyback (HC3I): the clusters' CLCs, rollback, garbage collection.

The coordinator keeps every member's part of every CLC a failure could still use (in the
object store, ``_parts``) with the CLC's DDV, which is all the paper's garbage collector
and rollback alerts need. A recovery round runs the alert cascade (``_ddv.cascade``) with the
surviving clusters' DDVs read after fencing them against the rolled-back incarnations;
a garbage collection runs Algorithm 8 (``_ddv.collectable``), by default whenever a
commit leaves a cluster with more than ``gc_clcs_max`` CLCs. See
``protocols/hc3i/rank.py`` for the theory of operation.
"""
from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field

from ftactors.base import ProtocolError

from . import machine as _ddv
from .options import NODE, hc3i_settings
from .rank import DDVPiggyback
from .storm import ForcedCheckpointStorm, StormWatch, message
from ..shared.parts import PartTaker
from ..shared.units import Groups, load_groups


@dataclass
class _Stored:
    """A committed CLC and its members' parts (rank -> object-store handle)."""

    clc: _ddv.Clc
    handles: dict = field(default_factory=dict)


class Hc3iRecovery:
    """Coordinator side of DDVPiggyback: CLC records, rollback of the clusters on the
    recovery line, centralized garbage collection (on commits, timer and memory pressure),
    forced-checkpoint storm warnings."""

    def __init__(self, ctx):
        self.c = ctx
        settings = hc3i_settings(ctx.options)
        spec = settings["clusters"]
        self.by_node = spec == NODE
        self.clusters: Groups | None = None
        self.clcs: dict[int, list[_Stored]] = {}
        if spec != NODE:
            self._set_clusters(load_groups(spec, ctx.n))
        self.gc_interval_s = settings["gc_interval_s"]
        self.gc_clcs_max = settings["gc_clcs_max"]
        self.gc_task: asyncio.Task | None = None  # the collection a commit started
        self.gc_again = False  # another commit asked for one while it ran
        self.storms = StormWatch()
        self.parts = PartTaker(ctx, DDVPiggyback.ft_rpc_hc3i_part,
                               DDVPiggyback.ft_rpc_hc3i_part_kept)
        self.parts_of: dict[tuple[int, int], dict] = {}  # (cluster, sn) -> handles
        self.lock = asyncio.Lock()  # one recovery or collection at a time
        self.stopping: set[int] = set()  # clusters being rolled back: their reports are moot
        self.busy: set[asyncio.Task] = set()

    def _set_clusters(self, groups: Groups) -> None:
        self.clusters = groups
        self.clcs = {k: [_Stored(_ddv.Clc(1, tuple(_ddv.initial_ddv(len(groups), k))))]
                     for k in range(len(groups))}

    # ----------------------------------------------------------- clusters
    async def service(self) -> None:
        """Resolve ``clusters="node"`` for the ranks; then the GC timer."""
        if self.clusters is None:
            await self._resolve_nodes()
        if self.gc_interval_s is None:
            return
        while True:
            await self.c.sleep(self.gc_interval_s)
            await self.collect("timer")

    async def _resolve_nodes(self) -> None:
        c = self.c
        nodes = await asyncio.gather(*(c.node_of(c.handle(r)) for r in range(c.n)))
        by_node: dict[str, list[int]] = {}
        for rank, node in enumerate(nodes):
            by_node.setdefault(node, []).append(rank)
        # one node: one cluster (two arbitrary halves would force a CLC per crossing message)
        spec = list(by_node.values()) if len(by_node) > 1 else "one"
        self._set_clusters(load_groups(spec, c.n))
        c.events.record("hc3i_clusters", clusters=self.clusters.groups,
                        by_node=len(by_node) > 1)
        await asyncio.gather(*(self._tell_clusters(r) for r in range(c.n)))

    async def _tell_clusters(self, rank: int) -> None:
        await self.c.call(rank, DDVPiggyback.ft_rpc_hc3i_clusters,
                          [list(g) for g in self.clusters.groups])

    # ------------------------------------------------------------- reports
    def on_report(self, event) -> None:
        kind, d = event.kind, event.detail
        if kind not in ("hc3i_part", "hc3i_commit", "hc3i_gc_request"):
            return
        if kind == "hc3i_gc_request":
            task = asyncio.ensure_future(self.collect("memory"))
            self.busy.add(task)
            task.add_done_callback(self.busy.discard)
            return
        if (d["incarnation"] != self.c.incarnations[event.rank]
                or self.clusters.group_of(event.rank) in self.stopping):
            return  # from an execution that is rolled back
        key = (d["cluster"], d["sn"])
        if kind == "hc3i_part":
            handles = self.parts_of.setdefault(key, {})

            async def keep(handle, rank=event.rank):
                handles[rank] = handle
            self.parts.take(event.rank, d["sn"], keep)
        elif d["sn"] == self.clcs[d["cluster"]][-1].clc.sn + 1:
            self.clcs[d["cluster"]].append(_Stored(
                _ddv.Clc(d["sn"], tuple(d["ddv"]), d["forced"]),
                self.parts_of.setdefault(key, {})))
            self._committed(d["cluster"], d.get("by", []))

    def _committed(self, cluster: int, by: list[int]) -> None:
        """A CLC of ``cluster`` committed: watch for a storm; collect when the cluster
        stores more CLCs than ``gc_clcs_max``."""
        storm = self.storms.commit(cluster, by)
        if storm is not None:
            self.c.events.record("hc3i_storm", **storm)
            warnings.warn_explicit(message(storm), ForcedCheckpointStorm, "ftactors", 0,
                                   module="ftactors.protocols.hc3i.rank")
        if self.gc_clcs_max is None or len(self.clcs[cluster]) <= self.gc_clcs_max:
            return
        if self.gc_task is not None:
            self.gc_again = True
            return
        self.gc_task = asyncio.ensure_future(self._collect_while_asked())
        self.busy.add(self.gc_task)
        self.gc_task.add_done_callback(self.busy.discard)

    async def _collect_while_asked(self) -> None:
        """Collections one after another while commits keep asking for one."""
        try:
            self.gc_again = True
            while self.gc_again:
                self.gc_again = False
                await self.collect("clcs")
        finally:
            self.gc_task = None

    async def _settle(self) -> None:
        """Let the parts being taken arrive (a commit may be reported before the
        coordinator's copy of its last part is recorded)."""
        if self.parts.tasks:
            await asyncio.gather(*self.parts.tasks, return_exceptions=True)

    # ------------------------------------------------------------ rollback
    async def recover(self, failed: set[int]) -> None:
        async with self.lock:
            await self._recover(failed)

    async def _recover(self, failed: set[int]) -> None:
        c, groups = self.c, self.clusters
        await self._settle()
        # a cluster respawned by a round cut short holds nothing: it restarts as if failed
        hit = sorted({groups.group_of(r) for r in failed | c.unstarted()})
        start = {k: self.clcs[k][-1].clc.sn for k in hit}
        rolled: set[int] = set()
        current: dict[int, list[int]] = {}
        line = _ddv.RecoveryLine(dict(start))
        while set(line.targets) - rolled:
            fresh = sorted(set(line.targets) - rolled)
            await self._stop(fresh, failed)
            rolled |= set(fresh)
            epochs = {r: c.epochs[r] for k in rolled for r in groups.groups[k]}
            survivors = [r for r in range(c.n) if groups.group_of(r) not in rolled]
            ddvs = await asyncio.gather(*(
                c.call(r, DDVPiggyback.ft_rpc_hc3i_fence, epochs) for r in survivors))
            for r, ddv in zip(survivors, ddvs):
                k = groups.group_of(r)
                current[k] = _ddv.merge([current.get(k, ddv), ddv])
            for k in range(len(groups)):
                current.setdefault(k, list(self.clcs[k][-1].clc.ddv))
            line = _ddv.cascade({k: [s.clc for s in v] for k, v in self.clcs.items()},
                                current, start)
        for a in line.alerts:
            c.events.record("hc3i_alert", sender=a.sender, sn=a.sn, cluster=a.cluster,
                            rolled_back_to=a.to)
        # a cluster stopped for a line that a later step of the cascade no longer rolls
        # back restarts from its newest CLC: it is stopped all the same
        targets = {**{k: self.clcs[k][-1].clc.sn for k in rolled}, **line.targets}
        await self._restart(targets, set(hit), failed)
        if c.part_levels is not None:
            c.part_levels.recovered(failed)

    async def _stop(self, clusters: list[int], failed: set[int]) -> None:
        """New incarnations (not started yet) for every rank of ``clusters``."""
        c = self.c
        ranks = [r for k in clusters for r in self.clusters.groups[k]]
        self.stopping |= set(clusters)
        await c.collect_events()  # their timeline so far is part of the run's
        await self._settle()  # parts of CLCs committed before are kept
        self.parts.cancel(set(ranks))
        if c.part_levels is not None:  # the copies they hold of others' parts
            await c.part_levels.rescue(ranks, failed)
        await asyncio.gather(*(c.respawn(r) for r in ranks))
        if self.by_node:
            await asyncio.gather(*(self._tell_clusters(r) for r in ranks))

    async def _restart(self, targets: dict[int, int], hit: set[int], failed: set[int]) -> None:
        c, groups = self.c, self.clusters
        ranks = sorted(r for k in targets for r in groups.groups[k])
        for k, sn in sorted(targets.items()):
            self.clcs[k] = [s for s in self.clcs[k] if s.clc.sn <= sn]
            for key in [key for key in self.parts_of if key[0] == k and key[1] > sn]:
                del self.parts_of[key]
            c.events.record("hc3i_rollback", cluster=k, sn=sn, failed=k in hit,
                            ranks=list(groups.groups[k]))
        await c.rewire()
        handles = await self._parts(ranks, failed)
        for r in ranks:  # the target's parts as found (a copy on a lost node is gone)
            target = self.clcs[groups.group_of(r)][-1]
            if target.clc.sn > 1:
                target.handles[r] = handles[r]
        if c.part_levels is not None:
            sns = {r: self.clcs[groups.group_of(r)][-1].clc.sn for r in ranks}
            await c.part_levels.forget({r: sn if sn > 1 else None for r, sn in sns.items()},
                                       groups)
        for r in ranks:
            c.start_rank(r, c.restore_spec(handles[r]))
        self.stopping -= set(targets)
        await asyncio.gather(*(c.call(r, "ready") for r in ranks))
        if c.part_levels is not None:
            await c.part_levels.reprotect(set(ranks), self._restorable(set(targets)), groups)
        epochs = {r: c.epochs[r] for r in ranks}
        ddvs = {k: list(self.clcs[k][-1].clc.ddv) for k in targets}
        resent = await asyncio.gather(*(
            c.call(r, DDVPiggyback.ft_rpc_hc3i_recovered, targets, ddvs, epochs)
            for r in range(c.n)))
        c.events.record("hc3i_recovered", targets=dict(sorted(targets.items())),
                        resent=sum(resent))
        c.refill_spares()

    def _restorable(self, restarted: set[int]) -> dict[int, dict]:
        """{rank: {sn: handle}}: the parts of the stored CLCs (a later recovery line may
        be any of them) but the start of the run; of the ``restarted`` clusters, the CLC
        they restarted from only (their older parts may have been on a lost node)."""
        parts: dict[int, dict] = {}
        for k, stored in self.clcs.items():
            for s in stored[-1:] if k in restarted else stored:
                if s.clc.sn > 1:
                    for r, handle in s.handles.items():
                        parts.setdefault(r, {})[s.clc.sn] = handle
        return parts

    async def _parts(self, ranks: list[int], gone: set[int]) -> dict:
        """What each restarted rank restores: its part of its cluster's target CLC (the
        start of the run for CLC 1), from the cheapest level of the stack that holds it,
        else the coordinator's copy (``gone``: the failed ranks)."""
        c, groups = self.c, self.clusters
        handles, kept = {}, {}
        for r in ranks:
            target = self.clcs[groups.group_of(r)][-1]
            if target.clc.sn == 1:
                handles[r] = c.blank(r)
            elif r in target.handles:
                kept[r] = target.handles[r]
            else:
                raise ProtocolError(f"rank {r}'s part of committed CLC {target.clc.sn} of "
                                    f"cluster {groups.group_of(r)} is missing")
        if c.part_levels is None:
            return {**handles, **kept}
        wanted = {r: self.clcs[groups.group_of(r)][-1].clc.sn for r in kept}
        return {**handles, **await c.part_levels.find(wanted, kept, groups, gone)}

    # ---------------------------------------------------- garbage collection
    async def collect(self, reason: str) -> dict | None:
        """Algorithm 8: drop the CLCs and log entries no single failure can need."""
        c = self.c
        if self.clusters is None:
            return None
        async with self.lock:
            await self._settle()
            lowest = _ddv.collectable({k: [s.clc for s in v] for k, v in self.clcs.items()})
            before = {k: len(v) for k, v in self.clcs.items()}
            for k, floor in lowest.items():
                self.clcs[k] = [s for s in self.clcs[k] if s.clc.sn >= floor]
                for key in [key for key in self.parts_of if key[0] == k and key[1] < floor]:
                    del self.parts_of[key]
            after = {k: len(v) for k, v in self.clcs.items()}
            floors = [lowest[k] for k in range(len(self.clusters))]
            logs = await asyncio.gather(*(c.call(r, DDVPiggyback.ft_rpc_hc3i_collect, floors)
                                          for r in range(c.n)), return_exceptions=True)
            logs = [x for x in logs if not isinstance(x, BaseException)]
            info = {"reason": reason, "lowest": lowest, "stored_before": before,
                    "stored_after": after, "log_before": sum(b for b, _ in logs),
                    "log_after": sum(a for _, a in logs),
                    "newest": {k: v[-1].clc.sn for k, v in self.clcs.items()},
                    "parts_kept": sum(len(h) for h in self.parts_of.values())}
            c.events.record("hc3i_gc", **info)
            return info

    async def finish(self) -> None:
        for task in list(self.busy):
            task.cancel()
        await self.parts.finish()
