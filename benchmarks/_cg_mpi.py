"""NPB CG on mpi4py, the same kernel and row-block layout as ``ftactors.apps.cg``: the
baseline of ``ftactors bench solver``. Run as
``mpiexec -n N python -m benchmarks._cg_mpi CLASS``; rank 0 prints one JSON line with
the slowest rank's seconds for the timed outer iterations, the last zeta and the check.

``Allgatherv`` of the ``p`` blocks and ``allreduce`` of the partial dot products, as an
MPI programmer would write them (``allreduce``'s summation order is MPI's, so zeta may
differ from ftactors' in the last bits; both pass NPB's verification).
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from ftactors.apps.cg import (CG_CLASSES, CSRMatrix, csr_matvec, make_matrix, power_step,
                              row_block, row_range, verify_zeta)


def main(problem_class: str) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cls = CG_CLASSES[problem_class]
    lo, hi = row_range(cls.na, rank, size)
    rows = row_block(make_matrix(cls), lo, hi)
    block = CSRMatrix(rows.rowptr, rows.colidx.copy(), rows.values.copy(), rows.n)
    counts = [row_range(cls.na, r, size)[1] - row_range(cls.na, r, size)[0] for r in range(size)]
    full = np.empty(cls.na)

    def matvec(p_local):
        comm.Allgatherv(np.ascontiguousarray(p_local), [full, counts])
        return csr_matvec(block, full)

    def dot(a, b):
        return comm.allreduce(float(np.dot(a, b)))

    x = np.ones(hi - lo)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(cls.niter):
        x, zeta, _ = power_step(matvec, x, dot, cls.shift)
    seconds = comm.reduce(time.perf_counter() - t0, op=MPI.MAX)
    if rank == 0:
        verified, error = verify_zeta(cls, zeta)
        print(json.dumps({"time_s": seconds, "zeta": zeta, "verified": verified}))


if __name__ == "__main__":
    main(sys.argv[1])
