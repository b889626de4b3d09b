"""MPI datatypes: the predefined ones as numpy dtypes, and derived ones (mpi4py's
``Create_contiguous``, ``Create_vector``, ``Create_hvector``, ``Create_indexed``,
``Create_hindexed``, ``Create_indexed_block``, ``Create_struct``, ``Create_resized``) as
type maps.

Theory of operation: a derived type is its MPI type map, a sequence of (byte offset,
predefined type) entries, and its bounds (``lb``, ``ub``: the lowest and highest byte
its entries touch, unless ``Create_resized`` set them). A message of ``count`` of them
covers, in type-map order, the bytes of every entry of instance k placed at k extents
from the message's start (``byte_index``): a send gathers those bytes, a receive scatters
what arrives into them (``_buffers``), so a vector type sends a strided column and an
indexed one a triangle, as MPI does. What travels is those bytes, so the receiver may
take them with another type of the same size (a column sent as a vector, received as
plain DOUBLEs); its ``Status.Get_count(type)`` counts whole instances. ``Commit`` and
``Free`` have nothing to do.
"""
from __future__ import annotations

import numbers

import numpy as np


class Datatype:
    """An MPI datatype. A predefined one (``ft.DOUBLE``) is a numpy dtype
    (``.dtype``); a derived one (``ft.DOUBLE.Create_vector(3, 1, 2)``) a type map of
    byte offsets and predefined types, with ``.dtype`` a void type of its size. ``size``,
    ``extent``, ``lb``, ``ub``, ``Get_size()`` and ``Get_extent()`` as in mpi4py."""

    __slots__ = ("name", "dtype", "entries", "lb", "ub")

    def __init__(self, name: str | None, dtype=None, entries: tuple | None = None,
                 bounds: tuple[int, int] | None = None):
        self.name = name
        self.entries = entries
        """None for a predefined type, else the type map: ((byte offset, predefined
        type), ...)."""
        if entries is None:
            self.dtype = np.dtype(dtype)
            self.lb, self.ub = 0, self.dtype.itemsize
        else:
            self.dtype = np.dtype((np.void, sum(t.size for _, t in entries)))
            self.lb = min((o for o, _ in entries), default=0)
            self.ub = max((o + t.size for o, t in entries), default=0)
        if bounds is not None:
            self.lb, self.ub = bounds

    @property
    def size(self) -> int:
        """Bytes of data in one instance."""
        return self.dtype.itemsize

    @property
    def extent(self) -> int:
        """Bytes from one instance to the next in a message of several."""
        return self.ub - self.lb

    def Get_size(self) -> int:
        return self.size

    def Get_extent(self) -> tuple[int, int]:
        return self.lb, self.extent

    Get_true_extent = Get_extent

    @property
    def is_predefined(self) -> bool:
        return self.entries is None

    def _typemap(self) -> tuple:
        return ((0, self),) if self.entries is None else self.entries

    def _at(self, offsets) -> "Datatype":
        """A derived type of this one's instances at ``offsets`` (bytes)."""
        return Datatype(None, entries=tuple((o + e, t) for o in offsets
                                            for e, t in self._typemap()))

    def Create_contiguous(self, count: int) -> "Datatype":
        return self.Create_hvector(count, 1, self.extent)

    def Create_vector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """``count`` blocks of ``blocklength`` instances, ``stride`` extents apart."""
        return self.Create_hvector(count, blocklength, _int(stride, "stride") * self.extent)

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """``count`` blocks of ``blocklength`` instances, ``stride`` bytes apart."""
        count, blocklength = _count(count, "count"), _count(blocklength, "blocklength")
        return self._at(i * _int(stride, "stride") + j * self.extent
                        for i in range(count) for j in range(blocklength))

    def Create_indexed(self, blocklengths, displacements) -> "Datatype":
        """Blocks of ``blocklengths[i]`` instances at ``displacements[i]`` extents."""
        return self.Create_hindexed(blocklengths, [_int(d, "displacement") * self.extent
                                                   for d in displacements])

    def Create_hindexed(self, blocklengths, displacements) -> "Datatype":
        """Blocks of ``blocklengths[i]`` instances at ``displacements[i]`` bytes."""
        blocks = _pairs(blocklengths, displacements)
        return self._at(d + j * self.extent for b, d in blocks for j in range(b))

    def Create_indexed_block(self, blocklength: int, displacements) -> "Datatype":
        return self.Create_indexed([blocklength] * len(displacements), displacements)

    def Create_hindexed_block(self, blocklength: int, displacements) -> "Datatype":
        return self.Create_hindexed([blocklength] * len(displacements), displacements)

    @staticmethod
    def Create_struct(blocklengths, displacements, datatypes) -> "Datatype":
        """Blocks of ``blocklengths[i]`` instances of ``datatypes[i]`` at
        ``displacements[i]`` bytes."""
        if len(datatypes) != len(blocklengths):
            raise ValueError(f"Create_struct: {len(blocklengths)} block lengths and "
                             f"{len(datatypes)} datatypes")
        blocks = _pairs(blocklengths, displacements)
        return Datatype(None, entries=tuple(
            entry for (b, d), t in zip(blocks, datatypes)
            for entry in t._at(d + j * t.extent for j in range(b)).entries))

    def Create_resized(self, lb: int, extent: int) -> "Datatype":
        """This type with bounds ``lb`` and ``lb + extent``."""
        lb, extent = _int(lb, "lb"), _int(extent, "extent")
        return Datatype(self.name, self.dtype if self.entries is None else None,
                        self.entries, (lb, lb + extent))

    def Dup(self) -> "Datatype":
        return Datatype(self.name, self.dtype if self.entries is None else None,
                        self.entries, (self.lb, self.ub))

    def Commit(self) -> "Datatype":
        return self

    def Free(self) -> None:
        """Nothing to release (a derived type is a Python object)."""

    def byte_index(self, count: int, start: int = 0) -> np.ndarray:
        """The buffer bytes ``count`` instances cover from byte ``start``, in type-map
        order (the order they travel in)."""
        one = np.concatenate([np.arange(o, o + t.size) for o, t in self._typemap()] or
                             [np.empty(0, np.intp)])
        return (start + np.arange(count)[:, None] * self.extent + one[None, :]).reshape(-1)

    def __repr__(self):
        if self.entries is None:
            return f"ft.{self.name}"
        return f"ft.Datatype(derived: size {self.size}, extent {self.extent}, lb {self.lb})"

    def __reduce__(self):
        if DATATYPES.get(self.name) is self:
            return (_datatype_by_name, (self.name,))
        return (Datatype, (self.name, self.dtype if self.entries is None else None,
                           self.entries, (self.lb, self.ub)))


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _count(value, what: str) -> int:
    value = _int(value, what)
    if value < 0:
        raise ValueError(f"negative {what} {value}")
    return value


def _pairs(blocklengths, displacements) -> list[tuple[int, int]]:
    if len(blocklengths) != len(displacements):
        raise ValueError(f"{len(blocklengths)} block lengths and {len(displacements)} "
                         f"displacements")
    return [(_count(b, "blocklength"), _int(d, "displacement"))
            for b, d in zip(blocklengths, displacements)]


BYTE = Datatype("BYTE", np.uint8)
CHAR = Datatype("CHAR", np.int8)
SIGNED_CHAR = Datatype("SIGNED_CHAR", np.byte)
SHORT = Datatype("SHORT", np.short)
INT = Datatype("INT", np.intc)
LONG = Datatype("LONG", np.int_)
LONG_LONG = Datatype("LONG_LONG", np.longlong)
UNSIGNED_CHAR = Datatype("UNSIGNED_CHAR", np.ubyte)
UNSIGNED_SHORT = Datatype("UNSIGNED_SHORT", np.ushort)
UNSIGNED = Datatype("UNSIGNED", np.uintc)
UNSIGNED_LONG = Datatype("UNSIGNED_LONG", np.uint)
UNSIGNED_LONG_LONG = Datatype("UNSIGNED_LONG_LONG", np.ulonglong)
FLOAT = Datatype("FLOAT", np.single)
DOUBLE = Datatype("DOUBLE", np.double)
LONG_DOUBLE = Datatype("LONG_DOUBLE", np.longdouble)
C_BOOL = Datatype("C_BOOL", np.bool_)
C_FLOAT_COMPLEX = Datatype("C_FLOAT_COMPLEX", np.csingle)
C_DOUBLE_COMPLEX = Datatype("C_DOUBLE_COMPLEX", np.cdouble)
C_LONG_DOUBLE_COMPLEX = Datatype("C_LONG_DOUBLE_COMPLEX", np.clongdouble)
INT8_T = Datatype("INT8_T", np.int8)
INT16_T = Datatype("INT16_T", np.int16)
INT32_T = Datatype("INT32_T", np.int32)
INT64_T = Datatype("INT64_T", np.int64)
UINT8_T = Datatype("UINT8_T", np.uint8)
UINT16_T = Datatype("UINT16_T", np.uint16)
UINT32_T = Datatype("UINT32_T", np.uint32)
UINT64_T = Datatype("UINT64_T", np.uint64)

DATATYPES = {t.name: t for t in (
    BYTE, CHAR, SIGNED_CHAR, SHORT, INT, LONG, LONG_LONG, UNSIGNED_CHAR, UNSIGNED_SHORT,
    UNSIGNED, UNSIGNED_LONG, UNSIGNED_LONG_LONG, FLOAT, DOUBLE, LONG_DOUBLE, C_BOOL,
    C_FLOAT_COMPLEX, C_DOUBLE_COMPLEX, C_LONG_DOUBLE_COMPLEX, INT8_T, INT16_T, INT32_T,
    INT64_T, UINT8_T, UINT16_T, UINT32_T, UINT64_T,
)}
"""The datatypes ``ft`` exports, by MPI name."""


def _datatype_by_name(name: str) -> Datatype:
    return DATATYPES[name]
