"""RSBackup in a stack whose consistency protocol hands its parts to the levels
(GroupCoordination, DDVPiggyback: ``Protocol.hands_parts``): the coordinator side that
finds (decodes) and forgets parts (``EncodedParts``); where a unit's parity is held is in
``placement.py``. The theory of operation is in ``rank.py``'s docstring ("Keeping another
protocol's parts").
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from ftactors.protocols.rs.erasure import RSCode

from .placement import as_key, unit_code, unit_holder
from .rank import RSBackup
from .options import NAME, rs_settings



class EncodedParts:
    """Coordinator side of RSBackup's blocks of a ``hands_parts`` protocol's parts
    (``runtime/_escalation.PartLevels``)."""

    def __init__(self, ctx):
        self.c = ctx
        self.parity = rs_settings(ctx.options)["parity"]
        self.rescued: dict[int, dict] = {}  # rank -> its blocks (``_blocks``), until forget

    def _code(self, units, g: int) -> tuple[int, int, list[int]]:
        """``(k, m, holders)`` of unit ``g``."""
        k, m = unit_code(units, g, self.parity)
        return k, m, [unit_holder(units, g, j) for j in range(m)]

    async def _blocks(self, rank: int, fetch: bool) -> dict:
        """What ``rank`` keeps: ``{"own": {key: part}, "held": {(unit, j, key): (parity,
        member lengths)}}``, the parts and parity blocks themselves if ``fetch``, else
        None in their place (fetched once chosen: ``_fetch``)."""
        c = self.c
        inv = await c.call(rank, RSBackup.ft_rpc_rs_parts)
        own = [as_key(key) for key in inv["own"]]
        held = [(g, j, as_key(key), {int(i): n for i, n in lengths.items()})
                for g, j, key, lengths in inv["held"]]
        if not fetch:
            return {"own": dict.fromkeys(own), "held": {(g, j, key): (None, lengths)
                                                         for g, j, key, lengths in held}}
        blobs = await asyncio.gather(*(c.call(rank, RSBackup.ft_rpc_rs_part, key) for key in own))
        parity = await asyncio.gather(*(c.call(rank, RSBackup.ft_rpc_rs_part_parity, g, j, key)
                                        for g, j, key, _ in held))
        return {"own": {key: b for key, b in zip(own, blobs) if b is not None},
                "held": {(g, j, key): (b, lengths) for (g, j, key, lengths), b
                         in zip(held, parity) if b is not None}}

    async def rescue(self, holders: list[int]) -> None:
        """``holders`` are about to be restarted before the recovery line is known (DDV's
        cascade): pull their own parts and the parity blocks they hold into the driver."""
        kept = await asyncio.gather(*(self._blocks(h, fetch=True) for h in holders))
        self.rescued.update(zip(holders, kept))

    async def find(self, wanted: dict[int, Any], units, gone: set[int]) -> dict[int, Any]:
        """``wanted`` {rank: part key} as bytes, in the driver (they outlive a respawn):
        a live rank's own copy as it is, a lost one decoded from ``k`` blocks of its
        unit's checkpoint (members' own parts and holders' parity blocks: asked of the
        live ranks, or rescued from ranks restarted since, unless they failed since).
        A block dropped since the inventory (the unit went on checkpointing) is missing
        like a lost one."""
        c = self.c
        by_unit: dict[tuple, list[int]] = {}
        for r, key in wanted.items():
            by_unit.setdefault((units.group_of(r), key), []).append(r)
        empty = set(gone) | c.unstarted()
        asked = sorted({x for g, _ in by_unit for x in (*units.groups[g], *self._code(units, g)[2])
                        if x not in empty})
        blocks = {x: kept for x, kept in self.rescued.items() if x not in gone}
        blocks.update(zip(asked, await asyncio.gather(*(self._blocks(x, fetch=False)
                                                        for x in asked))))
        found: dict[int, Any] = {}
        for (g, key), ranks in by_unit.items():
            found.update(await self._unit(units, g, key, ranks, blocks))
        return found

    async def _fetch(self, rank: int, kept, *call) -> bytes | None:
        """A block ``rank`` keeps: as rescued, else asked of it (None: dropped since)."""
        return kept if kept is not None else await self.c.call(rank, *call)

    async def _unit(self, units, g: int, key, ranks: list[int], blocks: dict) -> dict:
        c, members = self.c, units.groups[g]
        k, m, holders = self._code(units, g)
        data = {i: x for i, x in enumerate(members) if key in blocks.get(x, {}).get("own", {})}
        parity = {j: (h, blocks[h]["held"][(g, j, key)]) for j, h in enumerate(holders)
                  if (g, j, key) in blocks.get(h, {}).get("held", {})}
        live = [r for r in ranks if members.index(r) in data]
        own = await asyncio.gather(*(
            self._fetch(r, blocks[r]["own"][key], RSBackup.ft_rpc_rs_part, key) for r in live))
        found = {r: blob for r, blob in zip(live, own) if blob is not None}
        lost = [members.index(r) for r in ranks if r not in found]
        if not lost or len(data) + len(parity) < k:
            return found
        t0 = time.perf_counter()
        sources = dict(sorted({**{i: (x, blocks[x]["own"][key], (RSBackup.ft_rpc_rs_part, key))
                                  for i, x in data.items()},
                               **{k + j: (h, blob, (RSBackup.ft_rpc_rs_part_parity, g, j, key))
                                  for j, (h, (blob, _)) in parity.items()}}.items())[:k])
        fetched = await asyncio.gather(*(self._fetch(x, kept, *call)
                                         for x, kept, call in sources.values()))
        if any(blob is None for blob in fetched):  # dropped since the inventory: a newer part
            return found
        lengths = next(iter(parity.values()))[1][1]
        size = max(lengths.values())
        padded = {idx: _padded(blob, size) for idx, blob in zip(sources, fetched)}
        decoded = await asyncio.to_thread(RSCode(k, m).decode, padded, size)
        for i in lost:
            found[members[i]] = decoded[i][:lengths[i]].tobytes()
        c.events.record("rs_decoded", position=key, group=g, ranks=[members[i] for i in lost],
                        blocks=sorted(sources), bytes=size, decode_s=time.perf_counter() - t0)
        return found

    async def forget(self, after: dict[int, Any], units) -> None:
        """Units whose ranks ``after`` rolled back: every live member and parity holder
        drops what it keeps of their newer parts (restarted ranks keep nothing)."""
        c, drops = self.c, {}
        self.rescued.clear()
        for r, key in after.items():
            drops[units.group_of(r)] = key
        keepers = {x for g in drops for x in (*units.groups[g], *self._code(units, g)[2])}
        await asyncio.gather(*(c.call(x, RSBackup.ft_rpc_rs_part_drop, drops)
                               for x in sorted(keepers - set(after) - c.unstarted())))

    def restore_notes(self, keys: dict[int, Any]) -> dict:
        """Every restored rank learns the key of the part it restores: it keeps it again,
        as a data block of its unit's code."""
        return {NAME: {"part_keys": keys}}


def _padded(blob: bytes, size: int) -> np.ndarray:
    b = np.frombuffer(blob, np.uint8)
    return b if b.size == size else np.concatenate([b, np.zeros(size - b.size, np.uint8)])
