"""Turning Python objects into message payloads and back.

Theory of operation: every payload is pickled at send time (cloudpickle, protocol 5), so
the sender may reuse or mutate its object as soon as ``send`` returns, the receiver gets
its own copy, an unpicklable object fails at the sender as a ``TypeError`` naming its
type, and ``Status.count`` is the payload's size in bytes (a numpy array's data bytes for
a message that is one array: ``facade._buffers.array_bytes``).

Buffers of at least ``LARGE_BUFFER_BYTES`` (numpy array data and anything else that
hands pickle a ``PickleBuffer``; ``bytes`` are always pickled in-band) travel out-of-band:
the transport's ``put_large`` stores each one once (the Ray transport copies it for its
direct plane, to a rank on its node straight into the shared-memory segment the message
travels through, or puts it in the shared object store and ships only the reference), and
the receiver rebuilds the
object over that buffer. Such buffers are read-only where they are shared: on Ray from
``object_store_bytes`` on (zero-copy views of the object store) and on the local and sim
transports (immutable copies, as a payload there may reach several receivers). On Ray's
direct plane, below ``object_store_bytes``, each arrives in a buffer its receiver owns,
writable (``transports/direct``). Smaller buffers are pickled in-band and arrive
writable.

A payload may arrive with its buffers *lent* (``LentPayload``): views of memory its
lender, the direct plane's shared-memory segment, will reuse, so that a receive into the
program's buffer copies the bytes straight from there (one copy: ``unpack_lent``, then
the copy into the buffer, before the receiving code yields). Everything else reads
``buffers``, which gives a lent payload its own copies first; and the lender settles
(``own``) every lent payload still alive before it lets the memory go, so a message that
is queued, held or logged by a protocol keeps bytes of its own.

Plain data (built-in scalars, containers of them, numpy arrays and scalars of a
non-object dtype: see ``is_plain``) is pickled by the C pickler, which gives the same
bytes as cloudpickle several times faster; cloudpickle is needed, and used, only for
what it pickles differently: functions and classes by value, and whatever the standard
pickler cannot handle.

A message that is one contiguous numpy array (what every buffer ``Send`` sends) is
pickled with its dtype as a string (``_reduce_array``, rebuilt by ``_array``) rather than
by numpy's reducer, which pickles the dtype as an object: for a small array that was
most of the cost of its message (an 8-byte array: 5.5 us to pickle and 3.3 us to load,
against about 2 us each now). The stream has the shape of numpy's own (a function, then
the buffer, the dtype, the shape and the order), which ``facade._buffers.array_bytes``
reads for a probe's count.
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Callable

import cloudpickle
import numpy as np

LARGE_BUFFER_BYTES = 100 * 1024
"""Buffers at least this large go out-of-band (the object store on Ray)."""


class Payload:
    """A packed message body: the pickle stream plus its out-of-band buffers.

    ``buffers`` holds whatever the transport's ``put_large`` returned (an ObjectRef on Ray,
    immutable bytes elsewhere). A transport that must fetch references makes a resolved
    copy whose ``origin`` is the payload as it travelled, so a collective can forward the
    references instead of the data.

    A payload that is its own origin stores None rather than itself: a self-reference
    would make every payload cyclic garbage, freed only by the cycle collector, and on
    Ray the object-store buffers it references would stay pinned until then.
    """

    __slots__ = ("data", "buffers", "nbytes", "_origin", "__weakref__")

    def __init__(self, data: bytes, buffers: tuple = (), nbytes: int | None = None):
        self.data = data
        self.buffers = buffers
        self.nbytes = len(data) if nbytes is None else nbytes
        self._origin: Payload | None = None

    @property
    def origin(self) -> "Payload":
        """The payload as it travelled (with references): what to forward unchanged."""
        return self if self._origin is None else self._origin

    @origin.setter
    def origin(self, payload: "Payload") -> None:
        self._origin = None if payload is self else payload

    def __reduce__(self):
        return (Payload, (self.data, self.buffers, self.nbytes))

    def __repr__(self):
        return f"Payload({self.nbytes} bytes, {len(self.buffers)} out-of-band)"


_BUFFERS = Payload.__dict__["buffers"]
"""The ``buffers`` slot itself: how ``LentPayload`` reaches its lent buffers."""


class LentPayload(Payload):
    """A payload whose out-of-band buffers are lent: views of memory that its lender
    reuses once it has called ``own`` on every lent payload still alive (module
    docstring). Reading ``buffers`` (``unpack``, forwarding, pickling) takes the
    payload's own copies first and makes it a plain ``Payload``; only ``unpack_lent``
    reads the lent memory itself."""

    __slots__ = ()

    def __init__(self, data: bytes, buffers: tuple, nbytes: int):
        self.data = data
        _BUFFERS.__set__(self, buffers)
        self.nbytes = nbytes
        self._origin = None

    @property
    def buffers(self) -> tuple:
        self.own()
        return _BUFFERS.__get__(self)

    def own(self) -> None:
        """Copy the lent buffers into buffers of this payload's own (writable, as the
        direct plane's are); from then on it is a plain ``Payload``."""
        owned = []
        for buf in _BUFFERS.__get__(self):
            own = np.empty(memoryview(buf).nbytes, np.uint8)  # written whole: not zeroed
            own[:] = np.frombuffer(buf, np.uint8)
            owned.append(own)
        _BUFFERS.__set__(self, tuple(owned))
        self.__class__ = Payload


_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray})
_COLLECTIONS = frozenset({tuple, list, set, frozenset})
PLAIN_DEPTH = 4
"""How deep ``is_plain`` looks into nested containers before giving up (then: not plain)."""


def is_plain(obj: Any, depth: int = PLAIN_DEPTH) -> bool:
    """True when ``obj`` is plain data, which ``pickle`` and ``cloudpickle`` turn into the
    same bytes: None, bool, int, float, complex, str, bytes, bytearray; tuples, lists,
    sets and dicts of plain data (nested at most ``depth`` deep); numpy arrays and numpy
    scalars of a non-object dtype. Exact types only: a subclass may pickle differently."""
    t = type(obj)
    if t in _ATOMS:
        return True
    if t in _COLLECTIONS:
        return depth > 0 and all(is_plain(x, depth - 1) for x in obj)
    if t is dict:
        return depth > 0 and all(is_plain(k, depth - 1) and is_plain(v, depth - 1)
                                 for k, v in obj.items())
    if t is np.ndarray or isinstance(obj, np.generic):
        return not obj.dtype.hasobject
    return False


def _array(buf, dtype: str, shape: tuple, order: str) -> np.ndarray:
    """An array rebuilt from ``_reduce_array``'s pickle, as numpy's ``_frombuffer`` does
    (a view of ``buf``: writable when ``buf`` is)."""
    arr = np.frombuffer(buf, dtype=dtype)
    return arr if len(shape) == 1 else arr.reshape(shape, order=order)


_DTYPE_STR: dict[np.dtype, str | None] = {}
"""A dtype's string when that string gives the dtype back whole (no fields, subarray or
metadata) and its arrays export their buffer (not datetimes: numpy reduces those its own
way), else None; filled as dtypes are sent."""


def _dtype_str(dtype: np.dtype) -> str | None:
    text = _DTYPE_STR.get(dtype)
    if text is None and dtype not in _DTYPE_STR:
        faithful = (dtype.kind not in "OMm" and dtype.names is None and dtype.subdtype is None
                    and dtype.metadata is None and np.dtype(dtype.str) == dtype)
        text = _DTYPE_STR[dtype] = dtype.str if faithful else None
    return text


def _reduce_array(arr: np.ndarray):
    """``arr`` for the pickler: its buffer (out-of-band when large), dtype string, shape
    and order; numpy's own reduction for what a string cannot say (see ``_dtype_str``)."""
    dtype = _dtype_str(arr.dtype)
    flags = arr.flags
    if dtype is None or not (flags.c_contiguous or flags.f_contiguous):
        return arr.__reduce_ex__(5)
    return _array, (pickle.PickleBuffer(arr), dtype, arr.shape,
                    "C" if flags.c_contiguous else "F")


_ARRAYS = {np.ndarray: _reduce_array}


def _dumps_array(arr: np.ndarray, protocol: int, buffer_callback) -> bytes:
    """``pickle.dumps`` of one array, reduced by ``_reduce_array``."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol, buffer_callback=buffer_callback)
    pickler.dispatch_table = _ARRAYS
    pickler.dump(arr)
    return out.getvalue()


class _InBand:
    """An array whose buffer goes in-band, for ``pickle.dumps``: ``_reduce_array``'s
    reduction, whose ``PickleBuffer`` a pickler with no buffer callback writes in-band
    (a writable array's as a bytearray, a read-only one's as bytes), so the bytes are
    ``_dumps_array``'s without the ``Pickler``, ``BytesIO``, dispatch table and buffer
    callback a message of a few bytes paid for (half of packing an 8-byte array)."""

    __slots__ = ("arr",)

    def __init__(self, arr: np.ndarray):
        self.arr = arr

    def __reduce__(self):
        return _reduce_array(self.arr)


def _dumps_small(arr: np.ndarray) -> bytes | None:
    """``_dumps_array`` of an array with no out-of-band buffer, by ``_InBand``; None for
    one whose reduction is numpy's own (``_reduce_array``), which would pickle what it
    holds without ``_dumps_array``'s dispatch table."""
    flags = arr.flags
    if _dtype_str(arr.dtype) is None or not (flags.c_contiguous or flags.f_contiguous):
        return None
    return pickle.dumps(_InBand(arr), protocol=5)


def pack(obj: Any, put_large: Callable[[memoryview, int | None], Any] | None = None,
         large_bytes: int = LARGE_BUFFER_BYTES, dst: int | None = None) -> Payload:
    """Pickle ``obj``; buffers of ``large_bytes`` and more go through ``put_large``
    (the transport's threshold, ``Link.large_bytes``), told the payload's destination
    ``dst`` (None: several, or not known), where it may copy them straight to: each
    buffer is pickle's own view of the object's memory, copied once, by ``put_large``.

    Raises:
        TypeError: ``obj`` (or something inside it) cannot be pickled.
    """
    if type(obj) in _ATOMS:  # no out-of-band buffers possible
        return Payload(pickle.dumps(obj, protocol=5))
    if type(obj) is np.ndarray and obj.nbytes < large_bytes:  # nothing out of band
        data = _dumps_small(obj)
        if data is not None:
            return Payload(data)
    large: list = []
    total = 0

    def on_buffer(buf: pickle.PickleBuffer) -> bool:
        nonlocal total
        view = buf.raw()
        if view.nbytes < large_bytes:
            return True  # pickle in-band
        total += view.nbytes
        large.append(put_large(view, dst) if put_large else bytes(view))
        return False

    t = type(obj)
    dumps = (_dumps_array if t is np.ndarray else
             pickle.dumps if is_plain(obj) else cloudpickle.dumps)
    try:
        data = dumps(obj, protocol=5, buffer_callback=on_buffer)
    except Exception as exc:  # pickle raises many types (PicklingError, TypeError, ...)
        raise TypeError(
            f"cannot send an object of type {type(obj).__module__}.{type(obj).__qualname__}: "
            f"it is not picklable ({type(exc).__name__}: {exc})"
        ) from exc
    return Payload(data, tuple(large), len(data) + total)


def unpack(payload: Payload) -> Any:
    """Rebuild the object; out-of-band buffers must already be resolved to buffers (a
    ``LentPayload`` takes its own copies first)."""
    if not payload.buffers:
        return pickle.loads(payload.data)
    return pickle.loads(payload.data, buffers=payload.buffers)


def unpack_lent(payload: Payload) -> Any:
    """``unpack``, but over a ``LentPayload``'s lent memory as it is (no copy; read-only
    arrays). Only for a receive that copies the object's data into the program's buffer
    before its code yields: the lender may reuse that memory from then on."""
    buffers = _BUFFERS.__get__(payload)
    if not buffers:
        return pickle.loads(payload.data)
    return pickle.loads(payload.data, buffers=buffers)
