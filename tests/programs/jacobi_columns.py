"""mpi4py's demo/mpi-ref-v1/ex-2.32.py (MPI: The Complete Reference, example 2.32): a
Jacobi sweep on a Fortran-order grid split in columns, the edge columns sent with
persistent requests made once on column views (``Send_init``/``Recv_init`` on
``B[:, 0]``, ``A[:, -1]``, ...; each checked ``!= REQUEST_NULL``), the interior
computed while they are under way, until every rank's block is close to 0 (an
``Allreduce`` with ``LAND``). The port registers the grid and goes on with its local
``A``, as the demo's code does: the register idiom on a Fortran-order array."""
import numpy as np

import ftactors as ft


def columns(n, p, rank):
    """The demo's split: n columns over p ranks, the first ones one more."""
    m = n // p
    return m + 1 if rank < n - p * m else m


def boundary_columns(A, B):
    """B's first and last columns from A (the part sent before the interior)."""
    for j, (a, e, w) in ((0, (1, 0, 2)), (-1, (-2, -3, -1))):
        N, S = A[:-2, a], A[2:, a]
        E, W = A[1:-1, e], A[1:-1, w]
        C = B[:, j]
        np.add(N, S, C)
        np.add(C, E, C)
        np.add(C, W, C)
        C *= 0.25


def interior(A, B):
    """The demo's interior update (with its stencil as written: S is row 2, and E and W
    are the same block), and A's interior set from B."""
    N, S = A[:-2, 2:-2], A[2, 2:-2]
    E, W = A[1:-1, 2:-2], A[1:-1, 2:-2]
    C = B[:, 1:-1]
    np.add(N, S, C)
    np.add(E, C, C)
    np.add(W, C, C)
    C *= 0.25
    A[1:-1, 1:-1] = B


def initial(n, m):
    A = np.empty((n + 2, m + 2), dtype=float, order="F")
    A.fill(1)
    A[0, :] = A[-1, :] = 0
    A[:, 0] = A[:, -1] = 0
    return A


class JacobiColumns(ft.Rank):
    async def main(self, rows_per_rank=5, max_iterations=2000):
        comm, p, myrank = self.comm, self.size, self.rank
        n = rows_per_rank * p
        m = columns(n, p, myrank)
        left = ft.PROC_NULL if myrank == 0 else myrank - 1
        right = ft.PROC_NULL if myrank == p - 1 else myrank + 1
        A = initial(n, m)
        B = np.empty((n, m), dtype=float, order="F")
        self.register("A", A)
        tag = 0
        reqlist = [comm.Send_init((B[:, 0], ft.DOUBLE), left, tag),
                   comm.Send_init((B[:, -1], ft.DOUBLE), right, tag),
                   comm.Recv_init((A[:, 0], ft.DOUBLE), left, tag),
                   comm.Recv_init((A[:, -1], ft.DOUBLE), right, tag)]
        assert all(req != ft.REQUEST_NULL for req in reqlist)
        sweeps = max_iterations
        async for it in self.iterations(max_iterations):
            boundary_columns(A, B)
            for r in reqlist:
                r.Start()
            interior(A, B)
            await ft.Prequest.Waitall(reqlist)
            loc_conv = np.asarray(np.allclose(B, 0), dtype="i")
            glb_conv = np.asarray(0, dtype="i")
            await comm.Allreduce([loc_conv, ft.INT], [glb_conv, ft.INT], op=ft.LAND)
            if glb_conv:
                sweeps = it + 1
                break
        for req in reqlist:
            req.Free()
        return sweeps, A.copy(order="F")


def reference(p, rows_per_rank=5, max_iterations=2000):
    """Every rank's sweeps and grid, the demo's steps on all blocks in one process."""
    n = rows_per_rank * p
    A = [initial(n, columns(n, p, r)) for r in range(p)]
    B = [np.empty((n, a.shape[1] - 2), dtype=float, order="F") for a in A]
    for it in range(max_iterations):
        for a, b in zip(A, B):
            boundary_columns(a, b)
        sent = [(b[:, 0].copy(), b[:, -1].copy()) for b in B]
        for a, b in zip(A, B):
            interior(a, b)
        for r, a in enumerate(A):  # what the persistent receives fill: the first n
            if r > 0:               # entries of a halo column of n + 2, as MPI does
                a[:len(sent[r - 1][1]), 0] = sent[r - 1][1]
            if r < p - 1:
                a[:len(sent[r + 1][0]), -1] = sent[r + 1][0]
        if all(np.allclose(b, 0) for b in B):
            return [(it + 1, a) for a in A]
    return [(max_iterations, a) for a in A]
