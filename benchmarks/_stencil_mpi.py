"""The Jacobi stencil on mpi4py, the same kernel, layout and halo exchange as
``ftactors.apps.stencil``: the baseline of the halo row of ``ftactors bench solver``. Run as
``mpiexec -n N python -m benchmarks._stencil_mpi NY NX ITERATIONS PY PX``; rank 0
prints one JSON line with the slowest rank's seconds for the timed iterations and the
checksum of the gathered grid (bit-identical to the serial run's and to ftactors').

One ``Sendrecv`` per direction into the halo, rows straight between the arrays, columns
through a contiguous copy, as ``stencil.exchange_halos`` does.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from ftactors.apps.stencil import DOWN, LEFT, RIGHT, UP, Layout, checksum, jacobi_step


def main(ny: int, nx: int, iterations: int, py: int, px: int) -> None:
    comm = MPI.COMM_WORLD
    layout = Layout.whole(ny, nx, comm.Get_size(), (py, px))
    cart = comm.Create_cart([py, px])
    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    u = layout.initial(cart.Get_rank())
    halo = np.empty(u.shape[0] - 2)
    cart.Barrier()
    t0 = time.perf_counter()
    for _ in range(iterations):
        cart.Sendrecv(u[-2, 1:-1], south, DOWN, u[0, 1:-1], north, DOWN)
        cart.Sendrecv(u[1, 1:-1], north, UP, u[-1, 1:-1], south, UP)
        for edge, dest, source, tag, into in ((-2, east, west, RIGHT, 0),
                                              (1, west, east, LEFT, -1)):
            cart.Sendrecv(np.ascontiguousarray(u[1:-1, edge]), dest, tag, halo, source, tag)
            if source != MPI.PROC_NULL:
                u[1:-1, into] = halo
        u[1:-1, 1:-1] = jacobi_step(u)
    seconds = cart.reduce(time.perf_counter() - t0, op=MPI.MAX)
    blocks = cart.gather((layout.bounds(cart.Get_rank()), u[1:-1, 1:-1]), root=0)
    if cart.Get_rank() == 0:
        grid = np.empty((ny, nx))
        for (r0, r1, c0, c1), block in blocks:
            grid[r0 - 1:r1 - 1, c0 - 1:c1 - 1] = block
        print(json.dumps({"time_s": seconds, "checksum": checksum(grid)}))


if __name__ == "__main__":
    main(*map(int, sys.argv[1:6]))
