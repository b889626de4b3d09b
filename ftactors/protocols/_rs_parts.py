"""RSBackup in a stack whose consistency protocol hands its parts to the levels
(GroupCoordination, DDVPiggyback: ``Protocol.hands_parts``): where the parity of a unit's
parts is held, and the coordinator side that finds (decodes) and forgets parts. The
theory of operation is in ``rs_backup``'s module docstring ("Keeping another protocol's
parts").
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from ftactors.protocols.erasure import RSCode

from ._rs_recovery import NAME, _options

PART_KEEP = 3
"""Checkpoints kept per unit, by its members (their own parts) and by the holders of its
parity: the consistency protocol's recovery line may go back to an older checkpoint than
the newest (an incomplete newer group set; a cascade to an older CLC)."""


def as_key(key):
    """A part key as ``on_part`` made it (a position tuple, or a CLC number)."""
    return tuple(key) if isinstance(key, list) else key


def unit_code(units, g: int, parity: int | None) -> tuple[int, int]:
    """``(k, m)`` of unit ``g``: a data block per member, ``m = k`` parity blocks
    (``rs_parity`` for fewer)."""
    k = len(units.groups[g])
    return k, k if parity is None else min(parity, k)


def unit_holder(units, g: int, j: int) -> int:
    """The rank that holds parity block ``j`` of unit ``g``: member ``j`` of the next
    unit (modulo its size), so a unit lost whole keeps its parity. With one unit there
    is no next one: member ``j`` of the unit itself holds it (a rank's loss is decoded;
    the unit's, not)."""
    nxt = units.groups[(g + 1) % len(units)]
    return nxt[j % len(nxt)]


class EncodedParts:
    """Coordinator side of RSBackup's blocks of a ``hands_parts`` protocol's parts
    (``runtime/_escalation.PartLevels``)."""

    def __init__(self, coordinator):
        self.c = coordinator
        self.parity = _options(coordinator.options)["parity"]

    def _code(self, units, g: int) -> tuple[int, int, list[int]]:
        """``(k, m, holders)`` of unit ``g``."""
        k, m = unit_code(units, g, self.parity)
        return k, m, [unit_holder(units, g, j) for j in range(m)]

    async def find(self, wanted: dict[int, Any], units, gone: set[int]) -> dict[int, Any]:
        """``wanted`` {rank: part key} as bytes, in the driver (they outlive a respawn):
        a live rank's own copy as it is, a lost one decoded from ``k`` blocks of its
        unit's checkpoint (live members' own parts and live holders' parity blocks).
        A block dropped since the inventory (the unit went on checkpointing) is missing
        like a lost one."""
        c = self.c
        by_unit: dict[tuple, list[int]] = {}
        for r, key in wanted.items():
            by_unit.setdefault((units.group_of(r), key), []).append(r)
        asked = sorted({x for g, _ in by_unit for x in (*units.groups[g], *self._code(units, g)[2])
                        if x not in gone})
        answers = await asyncio.gather(*(c.call(x, "rs_parts") for x in asked))
        inventory = dict(zip(asked, answers))
        found: dict[int, Any] = {}
        for (g, key), ranks in by_unit.items():
            found.update(await self._unit(units, g, key, ranks, inventory))
        return found

    async def _unit(self, units, g: int, key, ranks: list[int], inventory: dict) -> dict:
        c, members = self.c, units.groups[g]
        k, m, holders = self._code(units, g)
        data = {i: x for i, x in enumerate(members)
                if key in map(as_key, inventory.get(x, {}).get("own", ()))}
        parity = {}
        for j, h in enumerate(holders):
            for hg, hj, hkey, lengths in inventory.get(h, {}).get("held", ()):
                if (hg, hj, as_key(hkey)) == (g, j, key):
                    parity[j] = (h, {int(i): n for i, n in lengths.items()})
        live = [r for r in ranks if members.index(r) in data]
        own = dict(zip(live, await asyncio.gather(*(c.call(r, "rs_part", key) for r in live))))
        found = {r: blob for r, blob in own.items() if blob is not None}
        lost = [members.index(r) for r in ranks if r not in found]
        if not lost or len(data) + len(parity) < k:
            return found
        t0 = time.perf_counter()
        blocks = dict(sorted({**data, **{k + j: h for j, (h, _) in parity.items()}}.items())[:k])
        lengths = next(iter(parity.values()))[1]
        fetched = await asyncio.gather(*(
            c.call(x, "rs_part", key) if idx < k else c.call(x, "rs_part_parity", g, idx - k, key)
            for idx, x in blocks.items()))
        if any(blob is None for blob in fetched):  # dropped since the inventory: a newer part
            return found
        size = max(lengths.values())
        padded = {idx: _padded(blob, size) for idx, blob in zip(blocks, fetched)}
        decoded = await asyncio.to_thread(RSCode(k, m).decode, padded, size)
        for i in lost:
            found[members[i]] = decoded[i][:lengths[i]].tobytes()
        c.events.record("rs_decoded", position=key, group=g, ranks=[members[i] for i in lost],
                        blocks=sorted(blocks), bytes=size, decode_s=time.perf_counter() - t0)
        return found

    async def forget(self, after: dict[int, Any], units) -> None:
        """Units whose ranks ``after`` rolled back: every live member and parity holder
        drops what it keeps of their newer parts (restarted ranks keep nothing)."""
        c, drops = self.c, {}
        for r, key in after.items():
            drops[units.group_of(r)] = key
        keepers = {x for g in drops for x in (*units.groups[g], *self._code(units, g)[2])}
        await asyncio.gather(*(c.call(x, "rs_part_drop", drops)
                               for x in sorted(keepers - set(after) - c.unstarted())))

    def restore_notes(self, keys: dict[int, Any]) -> dict:
        """Every restored rank learns the key of the part it restores: it keeps it again,
        as a data block of its unit's code."""
        return {NAME: {"part_keys": keys}}


def _padded(blob: bytes, size: int) -> np.ndarray:
    b = np.frombuffer(blob, np.uint8)
    return b if b.size == size else np.concatenate([b, np.zeros(size - b.size, np.uint8)])
