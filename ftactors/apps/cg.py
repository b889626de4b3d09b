"""NAS Parallel Benchmarks CG (classes S, W, A, B, C) with NPB's own verification.

Theory of operation
-------------------
Every rank generates the official NPB matrix (``_npb_cg.make_matrix``: makea / sprnvc /
vecset / sparse with randlc, a = 5**13, seed 314159265) and keeps only its block of
rows, then runs ``niter`` outer iterations of the inverse power method, each 25 CG
steps (``_npb_cg.power_step_async``, the same code the serial kernel runs) with:

* ``dot``: the local partial inner product, summed over ranks with ``allreduce`` (the
  facade folds in rank order, so the result is the same on every run);
* ``matvec``: ``Allgatherv`` of the row blocks of ``p`` (one count per rank) into a
  full vector the rank keeps, then the local rows of ``A p``.

Layout: row blocks rather than NPB's 2-D process grid. NPB's 2-D layout needs a
power-of-two number of ranks and pays off when many ranks make the ``O(n)`` vector
exchange per rank the bottleneck; here ranks are a handful of actors, the row-block
layout works for any rank count, each rank's rows of ``A p`` are bit-identical to the
serial kernel's (the same ``csr_matvec`` on the same rows), and only the reduction order
of the dot products differs from a single process (on one rank the run is bit-identical
to ``_npb_cg.cg_serial``). The price is one ``Allgatherv`` of ``n`` doubles per
matrix-vector product.

Fault tolerance: the outer loop runs through ``self.iterations(niter)``, a safe point
per outer iteration; the state carried from one outer iteration to the next (the local
block of ``x`` and the zeta / residual history) is registered. The matrix is read-only
and regenerated deterministically when ``main()`` is re-entered, so it is not saved.
NPB's untimed warm-up iteration is left out: it resets ``x`` afterwards so it changes
no number, and running it outside a safe-point loop would only add messages that a
protocol has to log for replay.
"""
from __future__ import annotations

import time

import numpy as np

import ftactors as ft

from . import _npb_cg as npb
# The serial kernel, public: the benchmarks' baselines (a plain process, mpi4py's ranks)
# run the very code a rank runs.
from ._npb_cg import (CG_CLASSES, CSRMatrix, csr_matvec, make_matrix,  # noqa: F401
                      power_step, power_step_async, row_block, verify_zeta)


def npb_mops(cls: npb.CGClass, seconds: float) -> float:
    """NPB's Mop/s figure for ``niter`` outer iterations taking ``seconds``
    (the operation count of ``cg.f``)."""
    nz = cls.nonzer * (cls.nonzer + 1)
    ops = 2.0 * cls.niter * cls.na * (3.0 + nz + 25.0 * (5.0 + nz) + 3.0)
    return ops / seconds / 1e6 if seconds > 0 else float("nan")


def row_range(n: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of rank ``rank`` in a balanced row-block distribution."""
    return rank * n // size, (rank + 1) * n // size


class CG(ft.Rank):
    """NPB CG on row blocks; ``main(problem_class)`` returns on every rank a dict with
    ``zeta``, ``zetas``, ``rnorms``, ``verified``, ``error``, ``iterations`` and timings."""

    async def main(self, problem_class: str = "S") -> dict:
        if problem_class not in npb.CG_CLASSES:
            raise ValueError(f"unknown NPB CG class {problem_class!r}; "
                             f"choose one of {', '.join(npb.CG_CLASSES)}")
        cls = npb.CG_CLASSES[problem_class]
        comm = self.comm
        lo, hi = row_range(cls.na, self.rank, self.size)
        # row_block views the whole matrix; copies keep only this rank's rows in memory
        rows = npb.row_block(npb.make_matrix(cls), lo, hi)
        block = npb.CSRMatrix(rows.rowptr, rows.colidx.copy(), rows.values.copy(), rows.n)

        counts = [b - a for a, b in (row_range(cls.na, r, self.size) for r in range(self.size))]
        p_full = np.empty(cls.na)

        async def matvec(p_local):
            await comm.Allgatherv(p_local, [p_full, counts])
            return npb.csr_matvec(block, p_full)

        async def dot(a, b):
            return await comm.allreduce(float(np.dot(a, b)))

        self.register("x", np.ones(hi - lo))
        self.register("zetas", [])
        self.register("rnorms", [])
        t0 = time.perf_counter()
        async for _ in self.iterations(cls.niter):
            self.x, zeta, rnorm = await npb.power_step_async(matvec, self.x, dot, cls.shift)
            self.zetas = self.zetas + [zeta]
            self.rnorms = self.rnorms + [rnorm]
        seconds = time.perf_counter() - t0
        verified, error = npb.verify_zeta(cls, self.zetas[-1])
        return {
            "problem_class": cls.name, "na": cls.na, "rows": (lo, hi), "nnz_local": block.nnz,
            "zeta": self.zetas[-1], "zetas": list(self.zetas), "rnorms": list(self.rnorms),
            "iterations": cls.niter, "verified": verified, "error": error,
            "zeta_verify": cls.zeta_verify, "time_s": seconds, "mops": npb_mops(cls, seconds),
        }


# ------------------------------------------------------------------ CLI contract
RANK_CLASS = CG


def add_arguments(parser) -> None:
    parser.add_argument("--class", dest="problem_class", default="S", type=str.upper,
                        metavar="CLASS", help=f"NPB class: {', '.join(npb.CG_CLASSES)} (default S)")


def kwargs_from_args(args) -> dict:
    if args.problem_class not in npb.CG_CLASSES:
        raise ValueError(f"unknown class {args.problem_class!r}; "
                         f"choose one of {', '.join(npb.CG_CLASSES)}")
    na = npb.CG_CLASSES[args.problem_class].na
    if args.ranks > na:
        raise ValueError(f"class {args.problem_class} has {na} rows, fewer than {args.ranks} ranks")
    return {"problem_class": args.problem_class}


def summarize(result) -> tuple[bool, list[str], dict]:
    """NPB-style report: the per-iteration table, zeta, error and the verdict."""
    results = result.results
    r = results[0]
    agree = all(o["zetas"] == r["zetas"] for o in results)
    verified = r["verified"] and agree
    seconds = max(o["time_s"] for o in results)
    mops = npb_mops(npb.CG_CLASSES[r["problem_class"]], seconds)
    lines = [f" NAS Parallel Benchmarks CG, class {r['problem_class']}, na = {r['na']}",
             "   iteration           ||r||                 zeta"]
    lines += [f"    {i:5d}       {rn:20.14E} {z:20.13f}"
              for i, (rn, z) in enumerate(zip(r["rnorms"], r["zetas"]), 1)]
    lines += [f" Time in seconds = {seconds:.3f}   Mop/s total = {mops:.2f}",
              f" Zeta is    {r['zeta']:20.13E}",
              f" Error is   {r['error']:20.13E}"]
    if not agree:
        lines.append(" ranks disagree on zeta")
    lines.append(" VERIFICATION SUCCESSFUL" if verified else
                 f" VERIFICATION FAILED (zeta {r['zeta']!r}, official {r['zeta_verify']!r}, "
                 f"relative error {r['error']:.3e} > {npb.VERIFY_EPSILON})")
    record = {k: r[k] for k in ("problem_class", "na", "zeta", "zetas", "rnorms", "error",
                                "iterations", "zeta_verify")}
    record.update(time_s=seconds, mops=mops)
    return verified, lines, record

