"""RSBackup placement: groups, sectors and the virtual ring (Bautista Gomez et al.,
section IV.B-C), and where the parity of another protocol's unit is held (``unit_code``,
``unit_holder``). Pure functions of the node topology; no I/O.

Theory of operation
-------------------
A node failure kills every rank on it at once. If those ranks were in one encoding group,
that group would lose several blocks to one failure; spread over different groups, each
group loses one (IV.B). So, for ``P`` nodes running ``H`` ranks each and a group size
``M`` (the number of simultaneously failing nodes to be tolerated, set by the user):

* the nodes are cut into *sectors* of ``M`` nodes (balanced when ``M`` does not divide
  ``P``: sizes differ by at most one);
* inside a sector, group ``h`` is made of the ``h``-th rank of every node of the sector,
  so the ranks of one node are all in different groups and the members of one group are
  all on different nodes;
* the groups form a *virtual ring*; the parity of group ``G_i`` is held by the ranks of
  ``G_{i+1}`` (IV.A), so losing all of ``G_i`` leaves its parity intact. The ring takes
  the groups of the sectors in turn (IV.C, ``G1 G3 G2 G4`` for two sectors of two
  groups), so a node failure, which hits the groups of one sector, never hits a group and
  the holder of its parity together (as long as there are two sectors or more).

A group of ``k`` members encodes ``m = k`` parity blocks (or fewer, ``parity``): parity
``j`` of group ``g`` is held by member ``j`` (modulo its size) of the next group.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence


@dataclass(frozen=True)
class Placement:
    """Groups on the virtual ring, in ring order.

    Attributes:
        groups: ``groups[g]`` = the ranks of group ``g``; a rank's index in its group is
            its column of the Cauchy matrix (its data block's index).
        sectors: ``sectors[g]`` = the sector of group ``g``.
        nodes: ``nodes[r]`` = the node label of rank ``r`` used to build the groups.
        parity: parity blocks per group (``None``: as many as members).
    """

    groups: tuple[tuple[int, ...], ...]
    sectors: tuple[int, ...]
    nodes: tuple[Hashable, ...]
    parity: int | None = None

    def group_of(self, rank: int) -> tuple[int, int]:
        """``(group, index in the group)`` of ``rank``."""
        for g, members in enumerate(self.groups):
            if rank in members:
                return g, members.index(rank)
        raise KeyError(f"rank {rank} is in no group")

    def k(self, g: int) -> int:
        """Data blocks of group ``g``."""
        return len(self.groups[g])

    def m(self, g: int) -> int:
        """Parity blocks of group ``g``."""
        k = self.k(g)
        return k if self.parity is None else min(self.parity, k)

    def holder(self, g: int, j: int) -> int:
        """The rank that holds parity block ``j`` of group ``g``."""
        nxt = self.groups[(g + 1) % len(self.groups)]
        return nxt[j % len(nxt)]

    def held_by(self, rank: int) -> list[tuple[int, int]]:
        """The ``(group, parity index)`` blocks ``rank`` holds."""
        return [(g, j) for g in range(len(self.groups)) for j in range(self.m(g))
                if self.holder(g, j) == rank]

    def as_dict(self) -> dict:
        """A plain form for events and JSON."""
        return {"groups": [list(g) for g in self.groups], "sectors": list(self.sectors),
                "parity": self.parity}


def place(nodes: Sequence[Hashable], group_size: int, *, interleave: bool = True,
          parity: int | None = None) -> Placement:
    """Groups and ring for ranks on ``nodes`` (``nodes[r]`` = node of rank ``r``).

    Nodes are taken in order of their first rank; a node's ranks in rank order. With
    ``interleave=False`` the ring lists the groups sector by sector (the layout section
    IV.C warns against, kept to measure the difference).

    Raises:
        ValueError: ``group_size`` < 1 or no ranks.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group size must be an int >= 1, got {group_size!r}")
    if not nodes:
        raise ValueError("no ranks to place")
    by_node: dict[Hashable, list[int]] = {}
    for rank, node in enumerate(nodes):
        by_node.setdefault(node, []).append(rank)
    order = list(by_node)
    n_sectors = -(-len(order) // group_size)
    base, extra = divmod(len(order), n_sectors)
    sector_groups: list[list[tuple[int, ...]]] = []
    at = 0
    for s in range(n_sectors):
        size = base + (1 if s < extra else 0)
        sector_nodes = order[at:at + size]
        at += size
        depth = max(len(by_node[nd]) for nd in sector_nodes)
        sector_groups.append([tuple(by_node[nd][h] for nd in sector_nodes
                                    if h < len(by_node[nd])) for h in range(depth)])
    if interleave:
        ring = [(s, grp[h]) for h in range(max(len(grp) for grp in sector_groups))
                for s, grp in enumerate(sector_groups) if h < len(grp)]
    else:
        ring = [(s, g) for s, grp in enumerate(sector_groups) for g in grp]
    return Placement(tuple(g for _, g in ring), tuple(s for s, _ in ring), tuple(nodes),
                     parity)


def virtual_nodes(ranks: int, ranks_per_node: int) -> list[int]:
    """A topology for transports without nodes: rank ``r`` on node ``r // ranks_per_node``."""
    return [r // ranks_per_node for r in range(ranks)]


def lost_blocks(placement: Placement, dead: set[int]) -> dict[int, tuple[int, int]]:
    """For each group, ``(data blocks lost, parity blocks lost)`` when ranks ``dead`` fail."""
    out = {}
    for g, members in enumerate(placement.groups):
        data = sum(1 for r in members if r in dead)
        parity = sum(1 for j in range(placement.m(g)) if placement.holder(g, j) in dead)
        out[g] = (data, parity)
    return out


def undecodable_groups(placement: Placement, dead: set[int]) -> list[int]:
    """Groups whose lost data cannot be rebuilt when ranks ``dead`` fail at once (fewer
    than ``k`` of their ``k + m`` blocks left)."""
    return [g for g, (data, parity) in lost_blocks(placement, dead).items()
            if data and placement.k(g) + placement.m(g) - data - parity < placement.k(g)]


# ------------------------------------------- parity of another protocol's units
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
