"""Reduction operations, named as in MPI.

An op is applied elementwise to numpy arrays and to plain numbers; any callable
``op(a, b)`` is accepted wherever an op is. Reductions combine operands in rank order with
a fixed bracketing (see ``_collectives``), so results never depend on message arrival
order; like MPI, an op is assumed associative, not commutative.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._buffers import message


@dataclass(frozen=True)
class Op:
    """A named binary reduction operation."""

    name: str
    array_fn: Callable[[Any, Any], Any]
    scalar_fn: Callable[[Any, Any], Any]

    def __call__(self, a, b):
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return self.array_fn(a, b)
        return self.scalar_fn(a, b)

    def __repr__(self):
        return f"ft.{self.name}"

    def Reduce_local(self, inbuf, inoutbuf) -> None:
        """``inoutbuf = inbuf op inoutbuf``, elementwise on two buffers (mpi4py's
        ``Op.Reduce_local``).

        Raises:
            ValueError: the buffers differ in entries or dtype.
        """
        reduce_local(self, inbuf, inoutbuf)

    def __reduce__(self):
        return (_op_by_name, (self.name,))


SUM = Op("SUM", np.add, operator.add)
PROD = Op("PROD", np.multiply, operator.mul)
MIN = Op("MIN", np.minimum, min)
MAX = Op("MAX", np.maximum, max)
LAND = Op("LAND", np.logical_and, lambda a, b: bool(a) and bool(b))
LOR = Op("LOR", np.logical_or, lambda a, b: bool(a) or bool(b))
BAND = Op("BAND", np.bitwise_and, operator.and_)
BOR = Op("BOR", np.bitwise_or, operator.or_)



def _maxloc(a, b):
    """MPI_MAXLOC on ``(value, index)`` pairs: the larger value, the smaller index on a tie."""
    return a if a[0] > b[0] or (a[0] == b[0] and a[1] <= b[1]) else b


def _minloc(a, b):
    """MPI_MINLOC on ``(value, index)`` pairs: the smaller value, the smaller index on a tie."""
    return a if a[0] < b[0] or (a[0] == b[0] and a[1] <= b[1]) else b


def _replace(a, b):
    return b


def _no_op(a, b):
    return a


MAXLOC = Op("MAXLOC", _maxloc, _maxloc)
MINLOC = Op("MINLOC", _minloc, _minloc)
REPLACE = Op("REPLACE", _replace, _replace)
"""The right operand: the highest rank's value (operands are combined in rank order)."""
NO_OP = Op("NO_OP", _no_op, _no_op)
"""The left operand: the lowest rank's value."""

_OPS = {op.name: op for op in (SUM, PROD, MIN, MAX, LAND, LOR, BAND, BOR, MAXLOC, MINLOC,
                               REPLACE, NO_OP)}


def _op_by_name(name: str) -> Op:
    return _OPS[name]


def reduce_local(op, inbuf, inoutbuf) -> None:
    """``inoutbuf = op(inbuf, inoutbuf)`` on two buffer messages of equal entries."""
    a, b = message(inbuf), message(inoutbuf, writable=True)
    if a.size != b.size or a.dtype != b.dtype:
        raise ValueError(f"Reduce_local: the buffers differ ({a.size} x {a.dtype} and "
                         f"{b.size} x {b.dtype})")
    b[...] = check_op(op)(a, b)


def check_op(op) -> Callable[[Any, Any], Any]:
    """Return ``op`` if it can reduce, else raise TypeError naming what was given."""
    if not callable(op):
        raise TypeError(f"op must be an ft op (ft.SUM, ...) or a callable op(a, b), got {op!r}")
    return op

