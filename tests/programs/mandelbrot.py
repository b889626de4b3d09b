"""mpi4py's demo/mandelbrot/mandelbrot.py: the parameters broadcast from rank 0 in
FLOAT and INT arrays, rows dealt round-robin (``N = h // size + (h % size > rank)``:
ranks run loops of different lengths), the counts ``Gather``-ed and the rows
``Gatherv``-ed with counts and no displacements (``[buf, (counts, None), INT]``), the
image put together at rank 0. The row loop is the safe-point loop and the rows computed
so far are registered."""
import numpy as np

import ftactors as ft


def mandelbrot(x, y, maxit):
    c = x + y * 1j
    z = 0 + 0j
    it = 0
    while abs(z) < 2 and it < maxit:
        z = z**2 + c
        it += 1
    return it


class Mandelbrot(ft.Rank):
    async def main(self, w=30, h=20, maxit=40):
        comm, size, rank = self.comm, self.size, self.rank
        rmsg = np.empty(4, dtype="f")
        imsg = np.empty(3, dtype="i")
        if rank == 0:
            rmsg[:] = [-2.0, +1.0, -1.0, +1.0]
            imsg[:] = [w, h, maxit]
        await comm.Bcast([rmsg, ft.FLOAT], root=0)
        await comm.Bcast([imsg, ft.INT], root=0)
        x1, x2, y1, y2 = (float(r) for r in rmsg)
        w, h, maxit = (int(i) for i in imsg)
        dx = (x2 - x1) / w
        dy = (y2 - y1) / h
        N = h // size + (h % size > rank)
        I = np.arange(rank, h, size, dtype="i")  # noqa: E741 (the demo's name)
        C = np.empty([N, w], dtype="i")
        self.register("C", C)
        async for k in self.iterations(N):
            y = y1 + I[k] * dy
            for j in range(w):
                C[k, j] = mandelbrot(x1 + j * dx, y, maxit)
        N = np.array(N, dtype="i")
        counts = indices = cdata = None
        if rank == 0:
            counts = np.empty(size, dtype="i")
            indices = np.empty(h, dtype="i")
            cdata = np.empty([h, w], dtype="i")
        await comm.Gather(sendbuf=[N, ft.INT], recvbuf=[counts, ft.INT], root=0)
        await comm.Gatherv(sendbuf=[I, ft.INT], recvbuf=[indices, (counts, None), ft.INT],
                           root=0)
        await comm.Gatherv(sendbuf=[C, ft.INT],
                           recvbuf=[cdata, (None if counts is None else counts * w, None),
                                    ft.INT], root=0)
        if rank == 0:
            M = np.zeros([h, w], dtype="i")
            M[indices, :] = cdata
            return M


def reference(w=30, h=20, maxit=40):
    """demo/mandelbrot/mandelbrot-seq.py's image, in plain numpy and Python."""
    x1, x2, y1, y2 = (float(v) for v in np.array([-2.0, 1.0, -1.0, 1.0], dtype="f"))
    dx, dy = (x2 - x1) / w, (y2 - y1) / h
    return np.array([[mandelbrot(x1 + j * dx, y1 + i * dy, maxit) for j in range(w)]
                     for i in range(h)], dtype="i")
