"""NAS Parallel Benchmarks CG: problem classes, matrix generator and serial kernel.

Theory of operation
-------------------
NPB CG (``thaisacs/NPB3.4-MPI:CG/cg.f``, ``GMAP/NPB-CPP:NPB-SER/CG/cg.cpp``)
estimates the smallest eigenvalue of a random sparse symmetric positive
definite matrix with the inverse power method.  Each outer iteration solves
``A z = x`` approximately with exactly 25 unpreconditioned CG steps
(:func:`conj_grad`), then sets ``zeta = shift + 1 / (x . z)`` and
``x = z / ||z||`` (:func:`power_step`).  The zeta of the last outer iteration
is compared with the official value at relative tolerance 1e-10
(:func:`verify_zeta`).

The matrix (``makea`` + ``sparse``) is, in closed form,
``A = sum_k ratio**k * v_k v_k^T + (rcond - shift) I`` where each ``v_k`` holds
``nonzer`` distinct random positions drawn by ``sprnvc`` from the NPB linear
congruential generator ``randlc`` (``common/randdp.f``) plus the value 0.5 at
position ``k`` (``vecset``).  The random draws are inherently sequential and
are done with Python integers; the outer products are then formed for all
``k`` at once with numpy.  Duplicate ``(row, col)`` triples are summed in the
order NPB generates them (outer iteration, then column, then row, diagonal
shift last), so every stored value is bit-identical to NPB's; entries that sum
to exactly zero are dropped, as ``sparse`` does.  Unlike NPB, the columns of a
row are stored in ascending order, which only changes the summation order
inside the matrix-vector product.

:func:`conj_grad` and :func:`power_step` only see the matrix through a
``matvec`` callable and the vector space through a ``dot`` callable, so the
distributed version reuses them with row-block vectors, a ``matvec`` that
gathers ``p`` and multiplies its :func:`row_block`, and a ``dot`` that
all-reduces partial sums.  Because a distributed ``matvec``/``dot`` must wait
for messages, the algorithm is written once as coroutines
(:func:`conj_grad_async`, :func:`power_step_async`) that await their
callables; the synchronous :func:`conj_grad` and :func:`power_step` drive the
same coroutines with plain callables (:func:`run_sync`: a coroutine that
never suspends finishes on its first step).  Element-wise arithmetic is in
NPB's order; the reductions use numpy's (or the caller's) summation order.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass

import numpy as np

RCOND = 0.1
CG_INNER_ITERATIONS = 25
VERIFY_EPSILON = 1e-10

RANDLC_SEED = 314159265
RANDLC_MULTIPLIER = 1220703125
_MASK46 = (1 << 46) - 1
_R46 = 2.0**-46


@dataclass(frozen=True)
class CGClass:
    """One NPB CG problem class (``sys/setparams.c`` and ``CG/cg.f``)."""

    name: str
    na: int
    nonzer: int
    niter: int
    shift: float
    zeta_verify: float


CG_CLASSES: dict[str, CGClass] = {
    c.name: c
    for c in (
        CGClass("S", 1400, 7, 15, 10.0, 8.5971775078648),
        CGClass("W", 7000, 8, 15, 12.0, 10.362595087124),
        CGClass("A", 14000, 11, 15, 20.0, 17.130235054029),
        CGClass("B", 75000, 13, 75, 60.0, 22.712745482631),
        CGClass("C", 150000, 15, 75, 110.0, 28.973605592845),
    )
}


@dataclass(frozen=True, eq=False)
class CSRMatrix:
    """Compressed sparse rows: row ``i`` holds ``values[rowptr[i]:rowptr[i+1]]``
    at columns ``colidx[rowptr[i]:rowptr[i+1]]`` (ascending); ``n`` is the
    number of columns (the order of the global matrix, also for row blocks)."""

    rowptr: np.ndarray
    colidx: np.ndarray
    values: np.ndarray
    n: int

    @property
    def nrows(self) -> int:
        return len(self.rowptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.values)


def randlc(x: int, a: int) -> tuple[float, int]:
    """One step of NPB's generator: ``x' = a x mod 2**46``; returns ``(x' 2**-46, x')``.

    NPB splits the operands into 23-bit halves so the product is exact in
    double precision; Python integers are exact anyway.
    """
    x = (a * x) & _MASK46
    return x * _R46, x


def _draw_sparse_vectors(n: int, nonzer: int, seed: int) -> tuple[list[list[int]], list[list[float]], int]:
    """NPB ``sprnvc`` for k = 0..n-1: per k, ``nonzer`` distinct 0-based positions
    and their values, in draw order; returns them and the advanced seed.

    Each attempt consumes two draws (value, then position) even when the
    position is rejected (beyond n, or already drawn for this vector).
    ``icnvrt(x, nn1) = int(nn1 * x)`` is a right shift because nn1, the
    smallest power of two not less than n, divides 2**46.
    """
    nn1_bits = max(1, (n - 1).bit_length())
    shift = 46 - nn1_bits
    a, x = RANDLC_MULTIPLIER, seed
    positions, values = [], []
    for _ in range(n):
        pos: list[int] = []
        val: list[float] = []
        while len(pos) < nonzer:
            x = (a * x) & _MASK46
            vecelt = x * _R46
            x = (a * x) & _MASK46
            i = x >> shift
            if i < n and i not in pos:
                pos.append(i)
                val.append(vecelt)
        positions.append(pos)
        values.append(val)
    return positions, values, x


def _vectors_with_diagonal(
    n: int, positions: list[list[int]], values: list[list[float]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NPB ``vecset(.., k, 0.5)`` for every k: set position k to 0.5, appending it
    when absent.  Returns padded (n, nonzer+1) positions, values and a validity
    mask, columns in NPB's list order."""
    pos = np.array(positions, dtype=np.int64).reshape(n, -1)
    val = np.array(values, dtype=np.float64).reshape(n, -1)
    k = np.arange(n, dtype=np.int64)
    hit = pos == k[:, None]
    val[hit] = 0.5
    absent = ~hit.any(axis=1)
    pos = np.column_stack([pos, k])
    val = np.column_stack([val, np.full(n, 0.5)])
    valid = np.ones(pos.shape, dtype=bool)
    valid[:, -1] = absent
    return pos, val, valid


def _triples(
    cls: CGClass, pos: np.ndarray, val: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (row, col, value) triples of ``makea`` in NPB's generation order:
    outer iteration k, then column entry, then row entry; the diagonal
    ``rcond - shift`` last.  Element value is ``v[row] * (size_k * v[col])``
    with ``size_k = ratio**k`` accumulated by repeated multiplication."""
    n = cls.na
    ratio = RCOND ** (1.0 / n)
    size = np.multiply.accumulate(np.r_[1.0, np.full(n - 1, ratio)])
    scale = size[:, None] * val
    elt = val[:, None, :] * scale[:, :, None]
    rows = np.broadcast_to(pos[:, None, :], elt.shape)
    cols = np.broadcast_to(pos[:, :, None], elt.shape)
    keep = valid[:, None, :] & valid[:, :, None]
    diag = np.arange(n, dtype=np.int64)
    return (
        np.concatenate([rows[keep], diag]),
        np.concatenate([cols[keep], diag]),
        np.concatenate([elt[keep], np.full(n, RCOND - cls.shift)]),
    )


def _sum_duplicates(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``keys`` and sum the values of equal keys left to right in their
    original order (NPB ``sparse``: ``x(i) = x(i) + a(k)``); returns the
    unique keys and sums."""
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[starts, len(keys)])
    sums = values[starts].copy()
    active = np.flatnonzero(counts > 1)
    rank = 1
    while active.size:
        sums[active] += values[starts[active] + rank]
        rank += 1
        active = active[counts[active] > rank]
    return keys[starts], sums


def make_matrix(cls: CGClass) -> CSRMatrix:
    """The NPB CG matrix of class ``cls`` (``makea`` + ``sparse``), 0-based CSR.

    The seed is advanced by one discarded draw first, as ``cg.f`` does before
    calling ``makea``.
    """
    n = cls.na
    _, seed = randlc(RANDLC_SEED, RANDLC_MULTIPLIER)
    positions, values, _ = _draw_sparse_vectors(n, cls.nonzer, seed)
    rows, cols, elts = _triples(cls, *_vectors_with_diagonal(n, positions, values))
    keys, sums = _sum_duplicates(rows * n + cols, elts)
    nonzero = sums != 0.0
    keys, sums = keys[nonzero], sums[nonzero]
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=n), out=rowptr[1:])
    return CSRMatrix(rowptr, keys % n, sums, n)


def csr_matvec(m: CSRMatrix, x: np.ndarray) -> np.ndarray:
    """``m @ x`` for a full-length ``x``; rows without entries give 0.

    ``np.add.reduceat`` would return a stray element for an empty segment,
    so only the starts of non-empty rows are passed to it.
    """
    out = np.zeros(m.nrows)
    nonempty = np.flatnonzero(np.diff(m.rowptr))
    if nonempty.size:
        out[nonempty] = np.add.reduceat(m.values * x[m.colidx], m.rowptr[nonempty])
    return out


def row_block(m: CSRMatrix, lo: int, hi: int) -> CSRMatrix:
    """Rows ``lo..hi-1`` of ``m`` with all columns, for a row-block distribution.

    ``colidx`` and ``values`` are views into ``m``.
    """
    start, end = m.rowptr[lo], m.rowptr[hi]
    return CSRMatrix(m.rowptr[lo : hi + 1] - start, m.colidx[start:end], m.values[start:end], m.n)


Vector = np.ndarray
MatVec = Callable[[Vector], Vector]
Dot = Callable[[Vector, Vector], float]
AsyncMatVec = Callable[[Vector], Awaitable[Vector]]
AsyncDot = Callable[[Vector, Vector], Awaitable[float]]


def run_sync(coro: Coroutine):
    """Run a coroutine that never suspends (every callable it awaits returns
    at once) to completion without an event loop; returns its value."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("run_sync: the coroutine suspended; it needs an event loop")


def _immediate(fn: Callable) -> Callable:
    """``fn`` as an async function that returns without suspending."""

    async def call(*args):
        return fn(*args)

    return call


async def conj_grad_async(matvec: AsyncMatVec, x: Vector, dot: AsyncDot) -> tuple[Vector, float]:
    """NPB ``conj_grad``: 25 CG steps on ``A z = x`` from ``z = 0``, no convergence
    test; returns ``z`` and the explicit residual norm ``||x - A z||``.

    ``await matvec(p)`` gives ``A p`` and ``await dot(a, b)`` the global inner
    product, both on whatever (local) vector layout the caller uses.
    """
    z = np.zeros_like(x)
    r = x.copy()
    p = r.copy()
    rho = await dot(r, r)
    for _ in range(CG_INNER_ITERATIONS):
        q = await matvec(p)
        d = await dot(p, q)
        alpha = rho / d
        rho0 = rho
        z = z + alpha * p
        r = r - alpha * q
        rho = await dot(r, r)
        beta = rho / rho0
        p = r + beta * p
    residual = x - await matvec(z)
    return z, math.sqrt(await dot(residual, residual))


async def power_step_async(
    matvec: AsyncMatVec, x: Vector, dot: AsyncDot, shift: float
) -> tuple[Vector, float, float]:
    """One outer (inverse power) iteration of NPB CG; returns the next ``x``,
    ``zeta = shift + 1 / (x . z)`` and the inner residual norm."""
    z, rnorm = await conj_grad_async(matvec, x, dot)
    norm_temp1 = await dot(x, z)
    norm_temp2 = 1.0 / math.sqrt(await dot(z, z))
    zeta = shift + 1.0 / norm_temp1
    return norm_temp2 * z, float(zeta), rnorm


def conj_grad(matvec: MatVec, x: Vector, dot: Dot) -> tuple[Vector, float]:
    """:func:`conj_grad_async` with synchronous ``matvec`` and ``dot``."""
    return run_sync(conj_grad_async(_immediate(matvec), x, _immediate(dot)))


def power_step(matvec: MatVec, x: Vector, dot: Dot, shift: float) -> tuple[Vector, float, float]:
    """:func:`power_step_async` with synchronous ``matvec`` and ``dot``."""
    return run_sync(power_step_async(_immediate(matvec), x, _immediate(dot), shift))


def verify_zeta(cls: CGClass, zeta: float) -> tuple[bool, float]:
    """NPB's check: relative error of ``zeta`` against the official value must
    be at most 1e-10; a NaN error fails."""
    err = abs(zeta - cls.zeta_verify) / cls.zeta_verify
    return (not math.isnan(err)) and err <= VERIFY_EPSILON, err


def cg_serial(problem_class: str) -> dict:
    """Run NPB CG serially: one warm-up outer iteration (kept because NPB runs
    it; x is reset to ones afterwards, so it changes nothing), then ``niter``
    outer iterations, then verification of the last zeta."""
    cls = CG_CLASSES[problem_class]
    a = make_matrix(cls)

    def matvec(p: Vector) -> Vector:
        return csr_matvec(a, p)

    power_step(matvec, np.ones(cls.na), np.dot, cls.shift)
    x = np.ones(cls.na)
    zetas, rnorms = [], []
    for _ in range(cls.niter):
        x, zeta, rnorm = power_step(matvec, x, np.dot, cls.shift)
        zetas.append(zeta)
        rnorms.append(rnorm)
    verified, err = verify_zeta(cls, zetas[-1])
    return {
        "zeta": zetas[-1],
        "zetas": zetas,
        "rnorms": rnorms,
        "iterations": cls.niter,
        "verified": verified,
        "error": err,
    }
