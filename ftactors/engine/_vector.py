"""One integer per rank of the run, kept only for the ranks it is not zero for.

Why: every rank keeps several such vectors (messages sent to and received from each peer,
each peer's incarnation). As lists they cost every rank O(ranks) memory and every rank's
start O(ranks) time, so a run costs O(ranks^2) in both: 1.3 MB per rank at 10,000
simulated ranks in one process, where each rank talks to a few dozen peers at most (a
ring, the trees and doublings of the collectives). A ``RankVector`` reads like the list
it replaces (``len``, indexing, iteration, ``==`` with a list, ``v[:]``), so protocols that
walk every rank still can, and its cost follows the peers a rank has talked to.
"""
from __future__ import annotations

from typing import Iterable, Iterator


class RankVector:
    """A list of ``size`` ints, zero unless set, stored sparsely (see module docstring)."""

    __slots__ = ("_size", "_values", "_total")

    def __init__(self, size: int, values: dict[int, int] | None = None):
        self._size = size
        self._values: dict[int, int] = {}
        self._total = 0
        for i, v in (values or {}).items():
            self[i] = v

    @classmethod
    def of(cls, items: Iterable[int]) -> "RankVector":
        """A vector holding ``items`` (a list, or another vector), one per rank."""
        if isinstance(items, RankVector):  # a copy of its table, not a pass per entry
            v = cls(items._size)
            v._values, v._total = dict(items._values), items._total
            return v
        items = list(items)
        return cls(len(items), {i: v for i, v in enumerate(items) if v})

    def __len__(self) -> int:
        return self._size

    def _index(self, i) -> int:
        if type(i) is not int:
            i = i.__index__()  # a numpy integer, a bool (TypeError for anything else)
        if not 0 <= i < self._size:
            if -self._size <= i < 0:
                return i + self._size
            raise IndexError(f"rank {i} out of range for {self._size} ranks")
        return i

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        return self._values.get(self._index(i), 0)

    def __setitem__(self, i, value: int) -> None:
        i = self._index(i)
        old = self._values.pop(i, 0)
        if value:
            self._values[i] = value
        self._total += value - old

    def __iter__(self) -> Iterator[int]:
        get = self._values.get
        return (get(i, 0) for i in range(self._size))

    def __eq__(self, other) -> bool:
        if isinstance(other, RankVector):
            return self._size == other._size and self._values == other._values
        if isinstance(other, (list, tuple)):
            return len(other) == self._size and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable, like the list it stands for

    def __repr__(self) -> str:
        return f"RankVector({self._size}, {dict(sorted(self._values.items()))})"

    def __reduce__(self):
        return (RankVector, (self._size, self._values))

    def get(self, i: int) -> int:
        """Rank ``i``'s entry, for an int ``i`` known to be in range (no checks: the
        channels read one per arriving envelope)."""
        return self._values.get(i, 0)

    def bump(self, i: int) -> int:
        """Add one to rank ``i``'s entry (an int in range); returns the entry before."""
        if not 0 <= i < self._size:
            raise IndexError(f"rank {i} out of range for {self._size} ranks")
        old = self._values.get(i, 0)
        self._values[i] = old + 1
        self._total += 1
        return old

    def total(self) -> int:
        """The sum of every rank's entry (``sum(v)`` without a pass over every rank)."""
        return self._total

    def nonzero(self) -> list[tuple[int, int]]:
        """``(rank, value)`` for every rank whose entry is not zero, in rank order."""
        return sorted(self._values.items())
