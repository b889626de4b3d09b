"""Cartesian process grids: the arithmetic behind ``Create_cart`` and ``ft.compute_dims``.

A grid of ``dims`` (row-major: the last dimension varies fastest, as in MPI) numbers its
ranks ``0 .. prod(dims) - 1``; ``periods[d]`` says whether dimension ``d`` wraps around.
Everything here is plain arithmetic on ranks and coordinates; the communicator
(``_comm.Cartcomm``) adds the messages.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

from ..engine import PROC_NULL

CART = "cart"
"""``Cartcomm.topology``: a Cartesian grid (mpi4py's ``MPI.CART``)."""


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """MPI_Dims_create: a grid of ``nnodes`` ranks in ``dims`` dimensions (an int, or a
    list where nonzero entries are fixed and zeros are to be chosen), as square as
    possible: the free entries, in non-increasing order, are the lexicographically
    smallest such list (``compute_dims(12, 2) == [4, 3]``,
    ``compute_dims(6, [0, 3, 0]) == [2, 3, 1]``).

    Raises:
        ValueError: ``nnodes`` < 1, a negative entry, or fixed entries whose product
            does not divide ``nnodes``.
    """
    nnodes = _count(nnodes, "nnodes")
    if nnodes < 1:
        raise ValueError(f"compute_dims needs nnodes >= 1, got {nnodes}")
    out = [0] * _count(dims, "ndims") if isinstance(dims, numbers.Integral) else [
        _count(d, "a dims entry") for d in dims]
    if any(d < 0 for d in out):
        raise ValueError(f"dims entries must be >= 0 (0: to be chosen), got {out}")
    fixed = math.prod(d for d in out if d)
    if nnodes % fixed:
        raise ValueError(f"the fixed dims {out} (product {fixed}) do not divide "
                         f"nnodes {nnodes}")
    free = [i for i, d in enumerate(out) if d == 0]
    if not free:
        if fixed != nnodes:
            raise ValueError(f"dims {out} make {fixed} ranks, not {nnodes}")
        return out
    for i, d in zip(free, _balanced(nnodes // fixed, len(free), nnodes)):
        out[i] = d
    return out


def _balanced(m: int, k: int, most: int) -> list[int]:
    """The lexicographically smallest non-increasing list of ``k`` factors of ``m``, each
    at most ``most``; [] if there is none."""
    if k == 1:
        return [m] if m <= most else []
    for d in range(max(1, math.ceil(round(m ** (1 / k), 9))), min(m, most) + 1):
        if m % d == 0:
            rest = _balanced(m // d, k - 1, d)
            if rest:
                return [d, *rest]
    return []


class CartTopology:
    """``dims`` and ``periods`` of a Cartesian grid, and its rank arithmetic."""

    def __init__(self, dims: Sequence[int], periods: Sequence[bool]):
        self.dims = [int(d) for d in dims]
        self.periods = [bool(p) for p in periods]

    @classmethod
    def checked(cls, dims, periods, size: int) -> "CartTopology":
        """A topology from ``Create_cart``'s arguments, checked against a communicator of
        ``size`` ranks. ``periods``: None (none wrap), one bool for all, or one per
        dimension."""
        dims = [_count(d, "a dims entry") for d in dims]
        if any(d < 1 for d in dims):
            raise ValueError(f"Create_cart dims must be >= 1, got {dims}")
        if math.prod(dims) > size:
            raise ValueError(f"Create_cart dims {dims} need {math.prod(dims)} ranks, the "
                             f"communicator has {size}")
        if periods is None or isinstance(periods, (bool, numbers.Integral)):
            periods = [bool(periods)] * len(dims)
        periods = list(periods)
        if len(periods) != len(dims):
            raise ValueError(f"Create_cart needs one period per dimension: dims {dims}, "
                             f"periods {periods}")
        return cls(dims, periods)

    @property
    def nnodes(self) -> int:
        return math.prod(self.dims)

    def coords(self, rank: int) -> list[int]:
        """The coordinates of ``rank`` (row-major)."""
        if not 0 <= rank < self.nnodes:
            raise ValueError(f"rank {rank} is not in the grid {self.dims}")
        out = []
        for d in reversed(self.dims):
            rank, c = divmod(rank, d)
            out.append(c)
        return out[::-1]

    def rank(self, coords: Sequence[int]) -> int:
        """The rank at ``coords``; periodic dimensions wrap, others must be in range."""
        coords = list(coords)
        if len(coords) != len(self.dims):
            raise ValueError(f"coords {coords} do not have {len(self.dims)} entries")
        rank = 0
        for c, d, p in zip(coords, self.dims, self.periods):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise ValueError(f"coordinate {c} is outside the non-periodic dimension of "
                                 f"size {d}")
            rank = rank * d + c
        return rank

    def shift(self, rank: int, direction: int, disp: int) -> tuple[int, int]:
        """``(source, dest)``: the ranks ``disp`` steps before and after ``rank`` along
        ``direction``; PROC_NULL past a non-periodic edge."""
        if not 0 <= direction < len(self.dims):
            raise ValueError(f"direction {direction} is not a dimension of the grid "
                             f"{self.dims}")
        here = self.coords(rank)
        return self._step(here, direction, -disp), self._step(here, direction, disp)

    def _step(self, here: list[int], direction: int, disp: int) -> int:
        c = here[direction] + disp
        if not self.periods[direction] and not 0 <= c < self.dims[direction]:
            return PROC_NULL
        there = list(here)
        there[direction] = c
        return self.rank(there)

    def neighbors(self, rank: int) -> list[int]:
        """Per dimension, the ranks one step before and one after (MPI's neighbour
        order of a Cartesian topology), PROC_NULL past non-periodic edges."""
        return [r for d in range(len(self.dims)) for r in self.shift(rank, d, 1)]

    def sub(self, remain_dims: Sequence[bool]) -> tuple["CartTopology", list[bool]]:
        """The topology kept by ``Sub(remain_dims)``, and ``remain_dims`` checked."""
        remain = [bool(r) for r in remain_dims]
        if len(remain) != len(self.dims):
            raise ValueError(f"Sub needs one flag per dimension: {len(self.dims)}, got "
                             f"{remain}")
        kept = [d for d, r in zip(range(len(self.dims)), remain) if r]
        return CartTopology([self.dims[d] for d in kept],
                            [self.periods[d] for d in kept]), remain

    def sub_color(self, rank: int, remain: list[bool]) -> int:
        """Which sub-grid ``rank`` falls in: its coordinates in the dropped dimensions,
        as one number."""
        color = 0
        for c, d, r in zip(self.coords(rank), self.dims, remain):
            if not r:
                color = color * d + c
        return color
