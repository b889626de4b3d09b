"""Buffer messages of the uppercase API: datatypes, ``IN_PLACE``, and mpi4py's message
conventions turned into numpy views.

Theory of operation: a buffer message names memory the program owns. mpi4py accepts
``buf``, ``[buf, type]``, ``[buf, count]``, ``[buf, (count, displ)]``, ``[buf, count,
type]``, ``[buf, count, displ, type]`` (``message``) and, for the v-collectives,
``[buf, counts]``, ``[buf, (counts, displs)]``, ``[buf, counts, displs, type]`` with
counts and displacements in entries of the type (``vector``); ``[buf, counts, displs]``
(no type) is taken too. Here each becomes a
1-D numpy view of the entries the message covers, in the buffer's own memory, so a send
packs just those entries (``engine._payload``: the array goes in the payload as a numpy
array; 100 KiB and more out of band) and a receive copies what arrived into them
(``deliver``): the data lands in the program's array, writable and its own, whatever the
transport handed over (large arrays arrive read-only).

A buffer is anything with the buffer protocol (numpy arrays, ``bytes``, ``bytearray``,
``array.array``, ``memoryview``) whose memory is contiguous; a type may be an ``ft``
datatype (``ft.DOUBLE``), a numpy dtype or a typecode string (``"d"``), as mpi4py takes
typecodes. A type that differs from the buffer's dtype reinterprets its bytes, as MPI does.
"""
from __future__ import annotations

import numbers
import pickletools
from typing import Any

import numpy as np

from ..engine import Synchronous
from ._datatypes import (  # noqa: F401 (the predefined types are ft's, through here)
    BYTE, CHAR, SIGNED_CHAR, SHORT, INT, LONG, LONG_LONG, UNSIGNED_CHAR, UNSIGNED_SHORT,
    UNSIGNED, UNSIGNED_LONG, UNSIGNED_LONG_LONG, FLOAT, DOUBLE, LONG_DOUBLE, C_BOOL,
    C_FLOAT_COMPLEX, C_DOUBLE_COMPLEX, C_LONG_DOUBLE_COMPLEX, INT8_T, INT16_T, INT32_T,
    INT64_T, UINT8_T, UINT16_T, UINT32_T, UINT64_T, Datatype)


class _InPlace:
    """``ft.IN_PLACE``: a collective's send buffer is its receive buffer (MPI_IN_PLACE)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "ft.IN_PLACE"

    def __reduce__(self):
        return (_InPlace, ())


IN_PLACE = _InPlace()


def in_place(sendbuf) -> bool:
    """Whether a collective's send buffer says "in place": ``ft.IN_PLACE`` or None, as in
    mpi4py."""
    return sendbuf is None or sendbuf is IN_PLACE


def dtype_of(datatype) -> np.dtype:
    """The numpy dtype of a datatype argument: an ``ft`` datatype, a numpy dtype or type,
    or a typecode string."""
    if isinstance(datatype, Datatype):
        return datatype.dtype
    try:
        return np.dtype(datatype)
    except TypeError:
        raise TypeError(f"message: {datatype!r} is not a datatype (an ft datatype such as "
                        f"ft.DOUBLE, a numpy dtype or a typecode string)") from None


def _flat(buf, writable: bool) -> np.ndarray:
    """The buffer as a 1-D numpy array over its own memory."""
    if isinstance(buf, np.ndarray):
        arr = buf
    else:
        try:
            arr = np.asarray(memoryview(buf))
        except TypeError:
            raise TypeError(f"message: expecting a buffer (a numpy array, bytes, bytearray, "
                            f"...) or a list/tuple, got {type(buf).__name__}") from None
    if arr.dtype.hasobject:
        raise TypeError("message: a buffer of Python objects (dtype object) cannot be sent "
                        "by the buffer API; use the lowercase methods")
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise ValueError(f"message: the buffer is not contiguous (shape {arr.shape}, "
                         f"strides {arr.strides}): pass a contiguous array "
                         f"(np.ascontiguousarray, then copy a received one back)")
    if writable and not arr.flags.writeable:
        raise ValueError("message: the receive buffer is read-only")
    return arr.reshape(-1, order="A")


def _as_type(flat: np.ndarray, datatype) -> np.ndarray:
    dtype = dtype_of(datatype)
    if dtype == flat.dtype:
        return flat
    raw = flat.view(np.uint8)
    if raw.size % dtype.itemsize:
        raise ValueError(f"message: a buffer of {raw.size} bytes is not a whole number of "
                         f"{dtype} entries ({dtype.itemsize} bytes each)")
    return raw.view(dtype)


def _index(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"message: {what} must be an int, got {type(value).__name__} "
                        f"{value!r}")
    if value < 0:
        raise ValueError(f"message: negative {what} {value}")
    return int(value)


def _is_type(value) -> bool:
    return isinstance(value, (Datatype, str, np.dtype, type))


def _unpack(msg, vector: bool):
    """``(buf, count(s), displ(s), type)`` from mpi4py's message forms, and
    ``[buf, count(s), displ(s)]`` (a third item that is not a type)."""
    count = displ = datatype = None
    if isinstance(msg, (list, tuple)):
        if len(msg) == 2:
            buf, count = msg
            if _is_type(count):
                count, datatype = None, count
            elif isinstance(count, tuple) or (isinstance(count, list) and not vector):
                count, displ = count
        elif len(msg) == 3:
            buf, count, datatype = msg
            if not _is_type(datatype):
                displ, datatype = datatype, None
            elif isinstance(count, tuple) or (isinstance(count, list) and not vector):
                count, displ = count
        elif len(msg) == 4:
            buf, count, displ, datatype = msg
        else:
            raise ValueError(f"message: expecting 2 to 4 items, got {len(msg)}")
    else:
        buf = msg
    return buf, count, displ, datatype


def _entries(buf, datatype, writable: bool) -> np.ndarray:
    if buf is None:  # mpi4py's [None, 0, type]: no memory, so no entries
        return np.empty(0, dtype_of(np.uint8 if datatype is None else datatype))
    flat = _flat(buf, writable)
    return flat if datatype is None else _as_type(flat, datatype)


def _simple(msg, writable: bool) -> np.ndarray | None:
    """``message``'s answer for its two usual forms, a 1-D array and ``[array, count,
    ft type]`` of the array's dtype, checked at once (they are on every send and
    receive); None for any other form, which ``message`` reads in full."""
    if type(msg) is list and len(msg) == 3:
        buf, count, datatype = msg
        if type(datatype) is not Datatype or type(count) is not int or not datatype.is_predefined:
            return None
        dtype = datatype.dtype
    elif type(msg) is np.ndarray:
        buf, count, dtype = msg, msg.size, msg.dtype
    else:
        return None
    if (type(buf) is np.ndarray and buf.ndim == 1 and buf.dtype == dtype
            and 0 <= count <= buf.size and buf.flags.c_contiguous and not dtype.hasobject
            and (buf.flags.writeable or not writable)):
        return buf[:count]
    return None


class Scattered(np.ndarray):
    """The bytes a receive of a derived datatype covers, gathered from its buffer:
    ``deliver`` fills them and writes them back where they belong (``put``)."""

    @classmethod
    def of(cls, raw: np.ndarray, index: np.ndarray) -> "Scattered":
        out = raw[index].view(cls)
        out._home = (raw, index)
        return out

    def __array_finalize__(self, obj):
        self._home = getattr(obj, "_home", None)

    def put(self, nbytes: int) -> None:
        """Write the first ``nbytes`` received back into the buffer."""
        raw, index = self._home
        raw[index[:nbytes]] = self.view(np.ndarray)[:nbytes]


def _derived(buf, count, displ, datatype: Datatype, writable: bool) -> np.ndarray:
    """The bytes of a message of a derived datatype: gathered (a send), or a
    ``Scattered`` copy that ``deliver`` writes back (a receive)."""
    raw = (np.empty(0, np.uint8) if buf is None
           else _flat(buf, writable).view(np.uint8))
    extent = datatype.extent
    start = 0 if displ is None else _index(displ, "displacement") * extent
    if count is None:
        count = (raw.size - start) // extent if extent > 0 else 0
    index = datatype.byte_index(_index(count, "count"), start)
    if index.size and (index.min() < 0 or index.max() >= raw.size):
        raise ValueError(f"message: {count} of {datatype!r} from byte {start} reach bytes "
                         f"{index.min()}..{index.max()} of a buffer of {raw.size}")
    return Scattered.of(raw, index) if writable else raw[index]


def message(msg, writable: bool = False, blocks: int = 0,
            derived: bool = False) -> np.ndarray:
    """The entries a simple message covers, as a 1-D view of its buffer.

    ``blocks``: for a collective's buffer of one block per rank, the count inferred from
    the buffer is per block (the buffer must split evenly). ``derived``: the caller
    takes derived datatypes (point-to-point calls and ``Bcast``): their bytes, gathered
    (``_derived``).

    Raises:
        TypeError: not a buffer or message list, or a bad type.
        ValueError: a count or displacement past the buffer, a buffer that does not split
            into ``blocks``, a non-contiguous buffer, a read-only receive buffer.
    """
    fast = _simple(msg, writable) if not blocks else None
    if fast is not None:
        return fast
    buf, count, displ, datatype = _unpack(msg, vector=False)
    if isinstance(datatype, Datatype) and not datatype.is_predefined:
        if not derived or blocks:
            raise TypeError(_NOT_DERIVED)
        return _derived(buf, count, displ, datatype, writable)
    flat = _entries(buf, datatype, writable)
    start = 0 if displ is None else _index(displ, "displacement")
    if start > flat.size:
        raise ValueError(f"message: displacement {start} is past the buffer's {flat.size} "
                         f"entries")
    if count is None:
        count = flat.size - start
        if blocks > 1:
            if count % blocks:
                raise ValueError(f"message: {count} entries do not split into {blocks} "
                                 f"blocks (one per rank)")
            count //= blocks
    else:
        count = _index(count, "count")
        room = flat.size - start
        if count * max(blocks, 1) > room:
            raise ValueError(f"message: count {count}"
                             f"{f' x {blocks} blocks' if blocks > 1 else ''} is more than "
                             f"the buffer's {room} entries")
    return flat[start:start + count * max(blocks, 1)]


_NOT_DERIVED = ("message: a derived datatype is taken by the point-to-point calls (Send, "
                "Recv, their nonblocking, persistent and Sendrecv forms) and Bcast; the "
                "other collectives take predefined types")


def vector(msg, blocks: int, writable: bool = False
           ) -> tuple[np.ndarray, list[int], list[int]]:
    """The buffer of a v-collective (``Gatherv``, ...) and one count and displacement (in
    entries) per rank. Counts: a list, one int for every rank, or None (the buffer split
    as evenly as it goes, the first ranks one more); displacements: a list, one int
    (a stride), or None (packed in rank order).

    Raises:
        ValueError: a wrong number of counts or displacements, or a block past the buffer.
    """
    buf, counts, displs, datatype = _unpack(msg, vector=True)
    if isinstance(datatype, Datatype) and not datatype.is_predefined:
        raise TypeError(_NOT_DERIVED)
    flat = _entries(buf, datatype, writable)
    if counts is None:
        counts = [flat.size // blocks + (flat.size % blocks > i) for i in range(blocks)]
    elif isinstance(counts, numbers.Integral):
        counts = [_index(counts, "count")] * blocks
    else:
        counts = [_index(c, "count") for c in counts]
    if displs is None:
        displs = [sum(counts[:i]) for i in range(len(counts))]
    elif isinstance(displs, numbers.Integral):
        displs = [_index(displs, "displacement") * i for i in range(blocks)]
    else:
        displs = [_index(d, "displacement") for d in displs]
    if len(counts) != blocks or len(displs) != blocks:
        raise ValueError(f"message: {blocks} counts and displacements needed (one per "
                         f"rank), got {len(counts)} counts and {len(displs)} displacements")
    for i, (c, d) in enumerate(zip(counts, displs)):
        if c and d + c > flat.size:
            raise ValueError(f"message: block {i} (displacement {d}, count {c}) is past "
                             f"the buffer's {flat.size} entries")
    return flat, counts, displs


def blocks_of(flat: np.ndarray, counts, displs) -> list[np.ndarray]:
    """The per-rank views of a vector message."""
    return [flat[d:d + c] for c, d in zip(counts, displs)]


def even_blocks(entries: np.ndarray, blocks: int) -> list[np.ndarray]:
    """``entries`` (a whole number of equal blocks) cut into ``blocks`` views."""
    n = entries.size // max(blocks, 1)
    return [entries[i * n:(i + 1) * n] for i in range(blocks)]


def arrived(value: Any, what: str) -> np.ndarray:
    """A received buffer message's entries (the sender sent a numpy array)."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{what}: the message holds a {type(value).__name__}, not buffer "
                        f"entries (was it sent with the lowercase send?)")
    return value.reshape(-1)


def deliver(value: Any, into: np.ndarray, what: str, exact: bool = False) -> int:
    """Copy a received message's entries into ``into`` (a receive buffer's view); the
    number of bytes received.

    A point-to-point receive may get fewer entries than its buffer holds (MPI fills the
    front); a collective (``exact``) must get as many. Entries of another dtype are
    refused unless one side is bytes (``ft.BYTE``): then the bytes are copied.

    Raises:
        ValueError: more entries than the buffer holds (MPI's truncation error), or
            fewer in a collective.
        TypeError: a dtype that does not match the buffer's.
    """
    data = arrived(value, what)
    if data.dtype != into.dtype:
        if np.uint8 not in (data.dtype, into.dtype):
            raise TypeError(f"{what}: {data.size} entries of {data.dtype} arrived for a "
                            f"buffer of {into.dtype}")
        data, into = data.view(np.uint8), into.view(np.uint8)
    if data.size > into.size or (exact and data.size != into.size):
        raise ValueError(f"{what}: {data.size} entries arrived for a buffer of "
                         f"{into.size} (message {'size mismatch' if exact else 'truncated'})")
    into[:data.size] = data
    if isinstance(into, Scattered):
        into.put(data.nbytes)
    return data.nbytes


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two views start at the same address (mpi4py takes a send buffer that is
    the receive buffer as ``IN_PLACE``)."""
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


_REBUILDERS = {("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
               ("ftactors.engine._payload", "_array")}
"""The functions that rebuild one array from its buffer: numpy's (numpy 2, numpy 1) and the
payload's own (``_payload._reduce_array``), each called with the buffer first."""
_IN_BAND = ("BYTEARRAY8", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8")


def array_bytes(payload) -> int | None:
    """The data bytes of a payload that is one contiguous numpy array (what a buffer
    ``Send`` sends; a synchronous send wraps it in ``Synchronous``), read from its pickle's
    opcodes without rebuilding it (its out-of-band buffer may still be a reference to
    fetch); None for any other object.

    Why: a probe reports this as its count, so that ``Probe`` + ``Get_count(datatype)``
    sizes the buffer for ``Recv`` as in mpi4py. The pickled size, a hundred bytes and
    more above it, made that buffer longer than the message, and a ``Recv`` into it left
    its tail as ``np.empty`` made it, without a word."""
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(payload.data)
           if op.name not in ("PROTO", "FRAME", "MEMOIZE")]
    names = [name for name, _ in ops]
    wrapped = ([arg for _, arg in ops[:2]] == [Synchronous.__module__, Synchronous.__name__]
               and names[2:3] == ["STACK_GLOBAL"])
    head = ops[3:8] if wrapped else ops[:5]
    tail = ["REDUCE", "TUPLE1", "REDUCE", "STOP"] if wrapped else ["REDUCE", "STOP"]
    if len(head) < 5 or names[-len(tail):] != tail:
        return None
    buffers = sum(name in _IN_BAND or name == "NEXT_BUFFER" for name in names)
    (_, module), (_, function), (call, _), (mark, _), (data, arg) = head
    if ((module, function) not in _REBUILDERS or call != "STACK_GLOBAL"
            or mark != "MARK" or buffers != 1):
        return None
    if data == "NEXT_BUFFER":
        return payload.nbytes - len(payload.data)
    return len(arg) if data in _IN_BAND else None
