"""HPL 2.3: matrix generator, block-cyclic helpers, residual check and a serial LU.

Theory of operation
-------------------
HPL (``icl-utk-edu/hpl``) solves ``A x = b`` for the random N x (N+1) matrix
``[A|b]`` of ``HPL_pdmatgen`` (seed ``HPL_ISEED = 100``).  Its 64-bit generator
(``HPL_lmul``/``HPL_ladd`` on 32-bit word pairs, ``testing/matgen/HPL_rand.c``)
is the linear congruential sequence ``X_{k+1} = (a X_k + 1) mod 2**64`` with
``a = 6364136223846793005``, ``X_0 = 100``, walked in column-major order, so
the global entry is ``A(i, j) = 0.5 - X_{1 + i + j N} / 2**64``.  Because
``X_{s+t} = A_t X_s + C_t (mod 2**64)`` with constants computable by
repeated squaring, any block of the global matrix is generated directly
(:func:`hpl_entries`) with numpy uint64 arithmetic, whose silent wrap-around
is exactly the reduction mod 2**64.  This is what lets every process of a
grid generate its own block-cyclic pieces of the same global matrix.

The distribution helpers follow ScaLAPACK/HPL (``HPL_indxg2p`` etc.) with
``INB = NB`` and ``SRCPROC = 0``: global index ``ig`` lives in block
``ig // nb``, owned by process ``(ig // nb) % nprocs``.

:func:`lu_serial` is the reference the distributed solver is compared with:
right-looking blocked LU with row partial pivoting on ``[A|b]`` (so ``b`` is
transformed into ``y = L^-1 P b`` along the way, as in HPL), split into the
same steps as HPL's main loop -- panel factorisation (:func:`factor_panel`),
row interchanges (:func:`swap_rows`), triangular solve of the U row block
(:func:`update_row_block`), trailing matrix update (:func:`update_trailing`)
-- followed by the back substitution ``U x = y`` (:func:`back_solve`).  The
solution passes when HPL's scaled residual (``testing/ptest/HPL_pdtest.c``)
is below 16 (:func:`scaled_residual`).
"""

from __future__ import annotations

import numpy as np

HPL_MULTIPLIER = 6364136223846793005
HPL_INCREMENT = 1
HPL_SEED = 100
_MASK64 = (1 << 64) - 1

HPL_EPS = 2.0**-53
HPL_THRESHOLD = 16.0


def lcg_jump(t: int) -> tuple[int, int]:
    """Constants ``(A_t, C_t)`` with ``X_{s+t} = A_t X_s + C_t mod 2**64``.

    Squares the one-step map ``(a, 1)`` and composes the powers selected by
    the bits of ``t``; the maps commute, so the composition order is free.
    """
    a_t, c_t = 1, 0
    a_p, c_p = HPL_MULTIPLIER, HPL_INCREMENT
    while t:
        if t & 1:
            a_t, c_t = (a_p * a_t) & _MASK64, (a_p * c_t + c_p) & _MASK64
        a_p, c_p = (a_p * a_p) & _MASK64, (a_p * c_p + c_p) & _MASK64
        t >>= 1
    return a_t, c_t


def _lcg_jump_arrays(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise :func:`lcg_jump` for an array of non-negative offsets, as
    uint64 arrays; one vectorised pass per bit of the largest offset."""
    offsets = np.asarray(offsets, dtype=np.uint64)
    a_t = np.ones_like(offsets)
    c_t = np.zeros_like(offsets)
    a_p, c_p = HPL_MULTIPLIER, HPL_INCREMENT
    for bit in range(int(offsets.max(initial=0)).bit_length()):
        selected = (offsets >> np.uint64(bit)) & np.uint64(1) == 1
        a_p64, c_p64 = np.uint64(a_p), np.uint64(c_p)
        a_t = np.where(selected, a_p64 * a_t, a_t)
        c_t = np.where(selected, a_p64 * c_t + c_p64, c_t)
        a_p, c_p = (a_p * a_p) & _MASK64, (a_p * c_p + c_p) & _MASK64
    return a_t, c_t


def hpl_entries(n: int, rows, cols) -> np.ndarray:
    """Entries ``[A|b][rows, cols]`` of HPL's order-``n`` system, shape
    ``(len(rows), len(cols))``; column ``n`` is ``b``.

    Jumps ``X_0`` to each column's first state ``X_{1 + j n}`` and each row's
    offset ``i`` within a column, then combines them with one uint64
    multiply-add per entry.  ``X`` is converted to double with one rounding
    and scaled by the exact power of two, as ``HPL_rand`` does.
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"row index out of range for n={n}")
    if cols.size and (cols.min() < 0 or cols.max() > n):
        raise ValueError(f"column index out of range for n={n} (b is column n)")
    a_row, c_row = _lcg_jump_arrays(rows)
    a_col, c_col = _lcg_jump_arrays(1 + cols * n)
    x_col = a_col * np.uint64(HPL_SEED) + c_col
    x = a_row[:, None] * x_col[None, :] + c_row[:, None]
    return 0.5 - x.astype(np.float64) / 2.0**64


def generate_system(n: int) -> np.ndarray:
    """The whole ``n x (n+1)`` matrix ``[A|b]``."""
    return hpl_entries(n, np.arange(n), np.arange(n + 1))


def numroc(n: int, nb: int, iproc: int, nprocs: int) -> int:
    """Number of the ``n`` global indices owned by process coordinate ``iproc``
    (ScaLAPACK ``NUMROC`` with source process 0)."""
    nblocks, extra = divmod(n // nb, nprocs)
    count = nblocks * nb
    if iproc < extra:
        count += nb
    elif iproc == extra:
        count += n % nb
    return count


def global_indices(n: int, nb: int, iproc: int, nprocs: int) -> np.ndarray:
    """Sorted global indices owned by process coordinate ``iproc``; local index
    ``l`` of that process holds global index ``global_indices(...)[l]``."""
    ig = np.arange(n, dtype=np.int64)
    return ig[(ig // nb) % nprocs == iproc]


def owner(ig: int, nb: int, nprocs: int) -> int:
    """Process coordinate owning global index ``ig`` (``HPL_indxg2p``)."""
    return (ig // nb) % nprocs


def global_to_local(ig: int, nb: int, nprocs: int) -> int:
    """Local index of global index ``ig`` on its owner (``HPL_indxg2l``)."""
    return (ig // (nb * nprocs)) * nb + ig % nb


def scaled_residual(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    """HPL's normwise backward error
    ``||Ax-b||_oo / (eps (||A||_oo ||x||_oo + ||b||_oo) N)`` with ``eps = 2**-53``;
    ``||A||_oo`` is the largest absolute row sum."""
    resid = np.max(np.abs(a @ x - b))
    a_norm = np.max(np.sum(np.abs(a), axis=1))
    return backward_error(resid, a_norm, np.max(np.abs(x)), np.max(np.abs(b)), a.shape[0])


def backward_error(resid: float, a_norm: float, x_norm: float, b_norm: float, n: int) -> float:
    """HPL's scaled residual from its parts: ``||Ax-b||_oo``, ``||A||_oo``,
    ``||x||_oo``, ``||b||_oo`` and the order ``n`` (a distributed check
    computes the norms with reductions, then calls this)."""
    return float(resid / (HPL_EPS * (a_norm * x_norm + b_norm) * n))


def hpl_flops(n: int) -> float:
    """Operation count HPL uses for its Gflop/s figure."""
    return 2.0 / 3.0 * n**3 + 3.0 / 2.0 * n**2


def factor_panel(panel: np.ndarray) -> np.ndarray:
    """Unblocked right-looking LU with partial pivoting of an ``m x jb`` panel
    (``m >= jb``), in place; returns the pivot rows relative to the panel top.

    Per column: pivot search (first largest magnitude, like ``idamax``),
    swap across the panel, scale by the reciprocal pivot as HPL does, rank-1
    update of the remaining panel columns.
    """
    jb = panel.shape[1]
    pivots = np.empty(jb, dtype=np.int64)
    for k in range(jb):
        p = k + int(np.argmax(np.abs(panel[k:, k])))
        pivots[k] = p
        if p != k:
            panel[[k, p]] = panel[[p, k]]
        pivot = panel[k, k]
        if pivot == 0.0:
            raise np.linalg.LinAlgError(f"exactly singular: zero pivot in panel column {k}")
        panel[k + 1 :, k] *= 1.0 / pivot
        panel[k + 1 :, k + 1 :] -= np.outer(panel[k + 1 :, k], panel[k, k + 1 :])
    return pivots


def swap_rows(block: np.ndarray, pivots: np.ndarray) -> None:
    """Apply a panel's interchanges ``k <-> pivots[k]``, in order, to the rows of
    ``block`` (the columns right of the panel, starting at the panel's top row)."""
    for k, p in enumerate(pivots):
        if p != k:
            block[[k, p]] = block[[p, k]]


def update_row_block(l11: np.ndarray, a12: np.ndarray) -> None:
    """``a12 := L11^-1 a12`` in place (HPL's ``dtrsm``): forward substitution
    with the unit lower triangle of the factored panel's top square."""
    for k in range(1, l11.shape[0]):
        a12[k] -= l11[k, :k] @ a12[:k]


def update_trailing(a22: np.ndarray, l21: np.ndarray, u12: np.ndarray) -> None:
    """``a22 -= l21 @ u12`` in place (HPL's ``dgemm`` update)."""
    a22 -= l21 @ u12


def lu_factor(aug: np.ndarray, nb: int) -> None:
    """Right-looking blocked LU with row partial pivoting of ``[A|b]`` in place:
    afterwards the upper triangle of ``aug[:, :n]`` is ``U`` and ``aug[:, n]``
    is ``y = L^-1 P b``.  The strictly lower part holds the multipliers, left
    unpermuted by later panels (not needed once ``b`` is transformed)."""
    n = aug.shape[0]
    for j0 in range(0, n, nb):
        j1 = min(j0 + nb, n)
        pivots = factor_panel(aug[j0:, j0:j1])
        swap_rows(aug[j0:, j1:], pivots)
        update_row_block(aug[j0:j1, j0:j1], aug[j0:j1, j1:])
        update_trailing(aug[j1:, j1:], aug[j1:, j0:j1], aug[j0:j1, j1:])


def back_solve(u: np.ndarray, y: np.ndarray, nb: int) -> np.ndarray:
    """Solve ``U x = y`` by blocks of ``nb`` from the bottom (like HPL's
    ``HPL_pdtrsv``): substitution inside the diagonal block, then one
    matrix-vector update of everything above it."""
    n = len(y)
    x = y.copy()
    for j0 in reversed(range(0, n, nb)):
        j1 = min(j0 + nb, n)
        for k in range(j1 - 1, j0 - 1, -1):
            x[k] = (x[k] - u[k, k + 1 : j1] @ x[k + 1 : j1]) / u[k, k]
        x[:j0] -= u[:j0, j0:j1] @ x[j0:j1]
    return x


def lu_serial(n: int, nb: int) -> dict:
    """Solve HPL's order-``n`` system with block size ``nb`` and check it as
    HPL does, against a regenerated ``[A|b]``."""
    aug = generate_system(n)
    lu_factor(aug, nb)
    x = back_solve(aug[:, :n], aug[:, n], nb)
    original = generate_system(n)
    residual = scaled_residual(original[:, :n], x, original[:, n])
    return {"x": x, "residual": residual, "verified": residual < HPL_THRESHOLD}
