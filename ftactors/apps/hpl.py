"""HPL-like LU: blocked LU with partial pivoting on a P x Q grid, checked by HPL's residual test.

Theory of operation
-------------------
The system is HPL's own ``[A|b]`` (``_hpl_matgen.hpl_entries``, the closed form of
``HPL_pdmatgen``), distributed 2-D block-cyclically with block size ``nb`` over a
``p x q`` process grid in HPL's row-major mapping (``myrow = rank // q``); ``b`` is
global column ``n`` and is distributed like any other column, so the factorisation
turns it into ``y = L^-1 P b`` on the way, as in HPL. Row and column communicators come
from ``split``. Each safe-point iteration is one panel step of a right-looking LU
(:func:`panel_step`), using the serial kernels of ``_hpl_matgen`` on local pieces:

1. the process column owning the panel ``allgather``s it (each process column member
   then holds the whole ``(n - j0) x jb`` panel), factors it with ``factor_panel``
   (pivot search, swaps, scaling and rank-1 updates, all local and identical on every
   member: HPL's "leave-on-all" idea without the per-column messages) and keeps its rows;
2. the panel (pivots, ``L11`` for the U row block, each process row's rows of ``L21``)
   is broadcast along every process row;
3. the interchanges are applied to the columns right of the panel (``swap_rows`` turns
   the pivots into the net row permutation; rows that change process row travel in one
   ``alltoall`` per process column);
4. the process row owning the panel's rows solves ``U12 = L11^-1 A12``
   (``update_row_block``) and broadcasts ``U12`` down every process column;
5. every process updates its trailing block (``update_trailing``).

Then ``U x = y`` is solved block by block from the bottom (:func:`solve_step`, one safe
point per block): the process row of block ``k`` reduces its partial right-hand sides to
the diagonal block's owner, which solves the diagonal block (``back_solve`` on one
block) and broadcasts ``x_k`` to everyone; the process column of block ``k`` subtracts
``U[:, k] x_k`` from its partial right-hand sides.

The check regenerates ``[A|b]`` as HPL does and computes HPL's scaled residual
``||Ax-b||_oo / (eps (||A||_oo ||x||_oo + ||b||_oo) n)`` with ``eps = 2**-53``; it
passes below 16. A position-weighted fingerprint of the regenerated matrix shows that
every grid and block size solved the same global system.

Fault tolerance: the local block of ``[A|b]`` is overwritten by the factorisation, so it
is registered (and only generated when ``main()`` is not re-entered after a restore);
the solve registers the solution and the partial right-hand sides. Every message names
its source, so runs are piecewise deterministic.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

import ftactors as ft

from . import _hpl_matgen as hpl
# The serial solver, public: the benchmarks' numpy baseline runs it.
from ._hpl_matgen import back_solve, generate_system, lu_factor  # noqa: F401

DEFAULT_N = 1000
DEFAULT_NB = 64


@dataclass
class Grid:
    """This process's place in the ``p x q`` grid and its block-cyclic indices."""

    n: int
    nb: int
    p: int
    q: int
    myrow: int
    mycol: int
    row_comm: ft.Communicator
    col_comm: ft.Communicator
    rows: np.ndarray = field(init=False)
    """Global row indices held locally, ascending."""
    cols: np.ndarray = field(init=False)
    """Global column indices (of the n + 1 columns of [A|b]) held locally, ascending."""

    def __post_init__(self):
        self.rows = hpl.global_indices(self.n, self.nb, self.myrow, self.p)
        self.cols = hpl.global_indices(self.n + 1, self.nb, self.mycol, self.q)

    def first_row(self, ig: int) -> int:
        """Local index of the first local row with global index >= ``ig``."""
        return int(np.searchsorted(self.rows, ig))

    def first_col(self, jg: int) -> int:
        """Local index of the first local column with global index >= ``jg``."""
        return int(np.searchsorted(self.cols, jg))

    def local_rows(self, ig: np.ndarray) -> np.ndarray:
        """Local indices of global rows ``ig`` (all owned by this process row)."""
        return hpl.global_to_local(ig, self.nb, self.p)


def resolve_grid(n: int, nb: int, p: int | None, q: int | None, ranks: int) -> tuple[int, int]:
    """The process grid ``(p, q)`` for ``ranks`` ranks; a missing side follows from the
    other, both missing give the squarest grid with ``p <= q`` (HPL favours flat grids).

    Raises ValueError for an impossible problem or grid.
    """
    if n < 1 or nb < 1:
        raise ValueError(f"n and nb must be >= 1, got n={n}, nb={nb}")
    if n < nb:
        raise ValueError(f"n ({n}) must be >= nb ({nb})")
    if p is None and q is None:
        p = max(d for d in range(1, math.isqrt(ranks) + 1) if ranks % d == 0)
    if p is None or q is None:
        given = p if q is None else q
        if given < 1 or ranks % given:
            raise ValueError(f"a grid side of {given} does not divide the {ranks} ranks")
        p, q = (given, ranks // given) if q is None else (ranks // given, given)
    if p < 1 or q < 1 or p * q != ranks:
        raise ValueError(f"the process grid p x q = {p} x {q} must have as many processes "
                         f"as there are ranks ({ranks})")
    return p, q


async def panel_step(g: Grid, a: np.ndarray, j0: int) -> None:
    """One step of the right-looking LU on columns ``j0 .. j0+nb-1``, in place on ``a``."""
    n, nb = g.n, g.nb
    j1 = min(j0 + nb, n)
    jb = j1 - j0
    pcol, prow = hpl.owner(j0, nb, g.q), hpl.owner(j0, nb, g.p)
    r0, r1, c1 = g.first_row(j0), g.first_row(j1), g.first_col(j1)
    panel_msg = None
    if g.mycol == pcol:
        c0 = g.first_col(j0)
        pieces = await g.col_comm.allgather(a[r0:, c0:c0 + jb])
        panel = np.empty((n - j0, jb))
        for i, piece in enumerate(pieces):
            rows_i = hpl.global_indices(n, nb, i, g.p)
            panel[rows_i[rows_i >= j0] - j0] = piece
        pivots = hpl.factor_panel(panel)
        a[r0:, c0:c0 + jb] = panel[g.rows[r0:] - j0]
        panel_msg = (pivots, panel[:jb] if g.myrow == prow else None, panel[g.rows[r1:] - j0])
    pivots, l11, l21 = await g.row_comm.bcast(panel_msg, root=pcol)

    source = np.arange(j0, n)
    hpl.swap_rows(source, pivots)  # afterwards row j0 + i holds the old row source[i]
    moved = np.flatnonzero(source != np.arange(j0, n))
    await exchange_rows(g, a, j0 + moved, source[moved], c1)

    u12 = None
    if g.myrow == prow:
        hpl.update_row_block(l11, a[r0:r1, c1:])
        u12 = a[r0:r1, c1:]
    u12 = await g.col_comm.bcast(u12, root=prow)
    hpl.update_trailing(a[r1:, c1:], l21, u12)


async def exchange_rows(g: Grid, a: np.ndarray, dst: np.ndarray, src: np.ndarray, c0: int) -> None:
    """Row ``dst[i]`` takes the old row ``src[i]``, on local columns ``c0:``.

    Every process of a column knows the whole move list, so each copies what it must
    send before anything is overwritten and one ``alltoall`` (skipped when no row
    changes process row) carries the rows between process rows, in list order.
    """
    nb, p, me = g.nb, g.p, g.myrow
    dst_owner, src_owner = hpl.owner(dst, nb, p), hpl.owner(src, nb, p)
    outgoing = [a[g.local_rows(src[(src_owner == me) & (dst_owner == t)]), c0:] for t in range(p)]
    incoming = (await g.col_comm.alltoall(outgoing) if np.any(dst_owner != src_owner)
                else outgoing)
    for f in range(p):
        sel = (src_owner == f) & (dst_owner == me)
        a[g.local_rows(dst[sel]), c0:] = incoming[f]


async def solve_step(comm: ft.Communicator, g: Grid, a: np.ndarray, part: np.ndarray,
                     x: np.ndarray, k: int) -> None:
    """Block ``k`` of the back substitution ``U x = y``: fills ``x[j0:j1]`` on every
    rank and removes its contribution from the partial right-hand sides ``part``."""
    n, nb = g.n, g.nb
    j0 = k * nb
    j1 = min(j0 + nb, n)
    pk, qk = hpl.owner(j0, nb, g.p), hpl.owner(j0, nb, g.q)
    r0 = g.first_row(j0)
    xk = None
    if g.myrow == pk:
        rhs = await g.row_comm.reduce(part[r0:r0 + j1 - j0], root=qk)
        if g.mycol == qk:
            c0 = g.first_col(j0)
            xk = hpl.back_solve(a[r0:r0 + j1 - j0, c0:c0 + j1 - j0], rhs, nb)
    x[j0:j1] = await comm.bcast(xk, root=pk * g.q + qk)
    if g.mycol == qk:
        c0 = g.first_col(j0)
        part[:r0] -= a[:r0, c0:c0 + j1 - j0] @ x[j0:j1]


def fingerprint(block: np.ndarray, rows: np.ndarray, cols: np.ndarray, n: int) -> int:
    """Position-weighted sum mod 2**64 of the bit patterns of a block of ``[A|b]``;
    the blocks' fingerprints add up to the global matrix's, whatever the grid."""
    weights = (1 + rows[:, None] * (n + 1) + cols[None, :]).astype(np.uint64)
    return int((block.view(np.uint64) * weights).sum(dtype=np.uint64))


async def residual_check(comm: ft.Communicator, g: Grid, x: np.ndarray) -> tuple[float, int]:
    """HPL's scaled residual against a regenerated ``[A|b]``, and its fingerprint."""
    n = g.n
    orig = hpl.hpl_entries(n, g.rows, g.cols)
    in_a = g.cols < n
    a_part = orig[:, in_a]
    partial = np.stack([a_part @ x[g.cols[in_a]], np.abs(a_part).sum(axis=1)])
    b = orig[:, ~in_a].ravel()  # empty unless this process holds column n
    if b.size:
        partial[0] -= b
    sums = await g.row_comm.allreduce(partial)
    local = np.array([np.max(np.abs(sums[0]), initial=0.0), np.max(sums[1], initial=0.0),
                      np.max(np.abs(b), initial=0.0)])
    resid, a_norm, b_norm = await comm.allreduce(local, op=ft.MAX)
    fp = await comm.allreduce(fingerprint(orig, g.rows, g.cols, n))
    return hpl.backward_error(resid, a_norm, np.max(np.abs(x)), b_norm, n), fp % 2**64


class HPL(ft.Rank):
    """HPL-like LU; ``main(n, nb, p, q)`` returns on every rank a dict with ``residual``,
    ``verified``, ``gflops``, ``time_s`` and the matrix ``fingerprint`` (rank 0 adds ``x``)."""

    async def main(self, n: int = DEFAULT_N, nb: int = DEFAULT_NB, p: int | None = None,
                   q: int | None = None) -> dict:
        p, q = resolve_grid(n, nb, p, q, self.size)
        comm = self.comm
        myrow, mycol = divmod(self.rank, q)
        g = Grid(n, nb, p, q, myrow, mycol, await comm.split(myrow, mycol),
                 await comm.split(mycol, myrow))
        self.register("a", None if self.restored else hpl.hpl_entries(n, g.rows, g.cols))
        nblocks = -(-n // nb)
        t0 = time.perf_counter()
        async for k in self.iterations(nblocks):
            await panel_step(g, self.a, k * nb)
        owns_b = g.cols.size and g.cols[-1] == n  # b is the last column of [A|b]
        self.register("x", np.zeros(n))
        self.register("part", self.a[:, -1].copy() if owns_b else np.zeros(len(g.rows)))
        async for s in self.iterations(nblocks):
            await solve_step(comm, g, self.a, self.part, self.x, nblocks - 1 - s)
        seconds = time.perf_counter() - t0
        residual, fp = await residual_check(comm, g, self.x)
        out = {"n": n, "nb": nb, "p": p, "q": q, "residual": residual,
               "verified": residual < hpl.HPL_THRESHOLD, "time_s": seconds,
               "gflops": hpl.hpl_flops(n) / seconds / 1e9, "fingerprint": fp}
        if self.rank == 0:
            out["x"] = self.x.copy()
        return out


# ------------------------------------------------------------------ CLI contract
RANK_CLASS = HPL


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=int, default=DEFAULT_N, help=f"order of the system (default {DEFAULT_N})")
    parser.add_argument("--nb", type=int, default=DEFAULT_NB, help=f"block size (default {DEFAULT_NB})")
    parser.add_argument("--p", type=int, default=None, help="process rows (default: squarest grid, p <= q)")
    parser.add_argument("--q", type=int, default=None, help="process columns (default ranks / p)")


def kwargs_from_args(args) -> dict:
    p, q = resolve_grid(args.n, args.nb, args.p, args.q, args.ranks)
    return {"n": args.n, "nb": args.nb, "p": p, "q": q}


def summarize(result) -> tuple[bool, list[str], dict]:
    """HPL-style report: grid, time, Gflop/s, the scaled residual and the verdict."""
    results = result.results
    r = results[0]
    seconds = max(o["time_s"] for o in results)
    gflops = hpl.hpl_flops(r["n"]) / seconds / 1e9
    verified = all(o["verified"] for o in results)
    lines = [f" HPL-like LU: N = {r['n']}, NB = {r['nb']}, P x Q = {r['p']} x {r['q']}",
             f" Time = {seconds:.3f} s   Gflops = {gflops:.4g}",
             f" ||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N) = {r['residual']:.7f}"
             f" ...... {'PASSED' if verified else 'FAILED'}",
             " VERIFICATION SUCCESSFUL" if verified else
             f" VERIFICATION FAILED (scaled residual {r['residual']!r} >= {hpl.HPL_THRESHOLD})"]
    record = {k: r[k] for k in ("n", "nb", "p", "q", "residual", "fingerprint")}
    record.update(time_s=seconds, gflops=gflops)
    return verified, lines, record
