"""A user's program: a red-black SOR solver of the 2-D Poisson equation, fault tolerant.

``-lap(u) = 1`` on the unit square with ``u = 0`` on its border, an ``n x n`` grid of
interior points split into row blocks, one block per rank. Each rank keeps its rows with
one halo row above and below. An iteration updates the red points (``i + j`` even) from
their neighbours, exchanges halos, updates the black points, exchanges halos again, and
sums the squared updates of every rank (``allreduce``); the loop stops when that residual
falls under ``tol``. Every value depends only on the arguments and the order of the
sweeps, so the answer is the same bit for bit on any transport, with or without failures.

Fault tolerance (docs/writing.md, "Code before the loop"): the block ``u`` and the residual
``history`` change across iterations, so both are registered; the first halo exchange
before the loop runs again after a restore and gets the same messages. A protocol is
mixed in by the tools (``ftactors run examples/poisson.py:Poisson --protocol standby``).
"""
from __future__ import annotations

import numpy as np

import ftactors as ft

UP, DOWN = 1, 2
"""Tags: the direction a halo row travels in."""


def rows_of(rank: int, size: int, n: int) -> tuple[int, int]:
    """Interior rows ``first .. last-1`` (1-based, as in the padded grid) of ``rank``."""
    return 1 + rank * n // size, 1 + (rank + 1) * n // size


async def exchange(comm: ft.Communicator, u: np.ndarray) -> None:
    """Fill the halo rows of ``u`` from the neighbours' edge rows (isend, irecv, wait)."""
    r, last = comm.rank, comm.size - 1
    recvs = []
    if r > 0:
        recvs.append((0, comm.irecv(source=r - 1, tag=DOWN)))
    if r < last:
        recvs.append((-1, comm.irecv(source=r + 1, tag=UP)))
    sends = ([comm.isend(u[1].copy(), dest=r - 1, tag=UP)] if r > 0 else []) + (
        [comm.isend(u[-2].copy(), dest=r + 1, tag=DOWN)] if r < last else [])
    for row, req in recvs:
        u[row] = await req.wait()
    await ft.waitall(sends)


def sweep(u: np.ndarray, first: int, colour: int, h2: float, omega: float) -> float:
    """Over-relax the points of one colour (``(i + j) % 2 == colour``, ``i`` the global
    row) in place; the sum of the squared updates."""
    change = 0.0
    for k in range(1, u.shape[0] - 1):
        j0 = 1 + (first + k - 1 + colour + 1) % 2  # first column of this colour in the row
        gs = 0.25 * (u[k - 1, j0:-1:2] + u[k + 1, j0:-1:2] + u[k, j0 - 1:-2:2]
                     + u[k, j0 + 1::2] + h2)
        delta = omega * (gs - u[k, j0:-1:2])
        u[k, j0:-1:2] += delta
        change += float(delta @ delta)
    return change


class Poisson(ft.Rank):
    """``main(n, tol, omega, max_iterations)`` returns on every rank its block's sum, the
    iterations run and the residual history."""

    async def main(self, n: int = 16, tol: float = 1e-6, omega: float = 1.7,
                   max_iterations: int = 100) -> dict:
        first, last = rows_of(self.rank, self.size, n)
        h2 = 1.0 / (n + 1) ** 2
        self.register("u", None if self.restored else np.zeros((last - first + 2, n + 2)))
        self.register("history", [])
        await exchange(self.comm, self.u)          # runs again after a restore: let it
        async for _ in self.iterations(max_iterations):
            change = sweep(self.u, first, 0, h2, omega)
            await exchange(self.comm, self.u)
            change += sweep(self.u, first, 1, h2, omega)
            await exchange(self.comm, self.u)
            residual = await self.comm.allreduce(change)
            self.history.append(residual)
            if residual < tol:
                break
        return {"sum": float(self.u[1:-1].sum()), "iterations": len(self.history),
                "history": list(self.history)}
