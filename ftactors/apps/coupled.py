"""Coupled two-module code: two Jacobi domains on disjoint ranks, coupled every k iterations.

Theory of operation
-------------------
The application model of the HC3I paper: two modules, each on its own set of ranks,
that talk a lot inside the module and rarely across. The global ``ny x nx`` heat
problem of ``_stencil_ref`` is cut after column ``nx_left`` (by default in proportion to
the modules' ranks): the left module (world ranks ``0 .. left_ranks-1``) owns interior
columns ``1 .. nx_left``, the right module the rest.
Each module is a distributed Jacobi stencil on its own communicator (from ``split``),
with a halo exchange every iteration (``stencil.exchange_halos``). Across the cut the
modules exchange their interface columns only at iterations ``k, 2k, ...``
(:func:`couple`, on the world communicator); in between, each side keeps the other's
last interface column. With ``couple_every=1`` this is exactly the monolithic stencil.

Verification: rank 0 gathers both domains and compares them bit for bit with
:func:`coupled_serial`, a single-process numpy run of the same lagged-coupling scheme
built from the same ``jacobi_step``.

Fault tolerance: as in the stencil, the haloed block ``u`` is the registered state and
each iteration is a safe point; coupling messages name their sources.
"""
from __future__ import annotations

import time

import numpy as np

import ftactors as ft

from . import _stencil_ref as ref
from .stencil import Layout, add_grid_arguments, check_grid, exchange_halos, finish, report

COUPLE = 5
"""Tag of the interface messages between the modules."""


def split_columns(nx: int, left_ranks: int, ranks: int) -> int:
    """``nx_left``: the left module's share of the columns, proportional to its ranks."""
    return max(1, min(nx - 1, nx * left_ranks // ranks))


def coupled_serial(ny: int, nx: int, nx_left: int, iterations: int, couple_every: int) -> np.ndarray:
    """Single-process reference: both domains with their own halo columns, the
    interface columns exchanged before iterations ``k, 2k, ...``; the ``ny x nx`` result."""
    grid = ref.initial_grid(ny, nx)
    left = grid[:, :nx_left + 2].copy()
    right = grid[:, nx_left:].copy()
    for it in range(iterations):
        if it and it % couple_every == 0:
            left[1:-1, -1], right[1:-1, 0] = right[1:-1, 1], left[1:-1, -2]
        left[1:-1, 1:-1] = ref.jacobi_step(left)
        right[1:-1, 1:-1] = ref.jacobi_step(right)
    return np.hstack([left[1:-1, 1:-1], right[1:-1, 1:-1]])


def interface_peers(mine: Layout, me: int, other: Layout, east: bool) -> list[tuple[int, int, int]]:
    """``(other_rank, row_lo, row_hi)``: the other module's blocks across the cut whose
    rows overlap block ``me`` (``east``: the cut is on my east side), by padded rows."""
    r0, r1, c0, c1 = mine.bounds(me)
    if (c1 != mine.col1) if east else (c0 != mine.col0):
        return []
    peers = []
    for r in range(other.py * other.px):
        o0, o1, oc0, oc1 = other.bounds(r)
        facing = oc0 == other.col0 if east else oc1 == other.col1
        if facing and max(r0, o0) < min(r1, o1):
            peers.append((r, max(r0, o0), min(r1, o1)))
    return peers


async def couple(comm: ft.Communicator, u: np.ndarray, r0: int, peers, offset: int, east: bool) -> None:
    """Swap interface columns with the other module (world rank = its rank + ``offset``)."""
    inner, halo = (-2, -1) if east else (1, 0)
    for peer, lo, hi in peers:
        comm.isend(u[1 + lo - r0:1 + hi - r0, inner], dest=peer + offset, tag=COUPLE)
    for peer, lo, hi in peers:
        u[1 + lo - r0:1 + hi - r0, halo] = await comm.recv(source=peer + offset, tag=COUPLE)


class Coupled(ft.Rank):
    """Two coupled stencil modules; ``main(ny, nx, iterations, couple_every, left_ranks,
    nx_left, verify)`` returns on every rank a dict with ``checksum``, ``verified``,
    ``module`` and ``time_s``."""

    async def main(self, ny: int = 256, nx: int = 512, iterations: int = 200,
                   couple_every: int = 10, left_ranks: int | None = None,
                   nx_left: int | None = None, verify: bool = True) -> dict:
        left_ranks = self.size // 2 if left_ranks is None else left_ranks
        nx_left = split_columns(nx, left_ranks, self.size) if nx_left is None else nx_left
        check_modules(self.size, left_ranks, couple_every, nx, nx_left)
        layouts = (Layout.part(ny, nx, 1, nx_left + 1, left_ranks),
                   Layout.part(ny, nx, nx_left + 1, nx + 1, self.size - left_ranks))
        module = 0 if self.rank < left_ranks else 1
        offsets = (0, left_ranks)
        mcomm = await self.comm.split(module, self.rank)
        mine, other = layouts[module], layouts[1 - module]
        east = module == 0
        peers = interface_peers(mine, mcomm.rank, other, east)
        neighbours = [ft.PROC_NULL if p is None else p for p in mine.neighbours(mcomm.rank)]
        bounds = mine.bounds(mcomm.rank)
        self.register("u", None if self.restored else mine.initial(mcomm.rank))
        t0 = time.perf_counter()
        async for it in self.iterations(iterations):
            if it and it % couple_every == 0:
                await couple(self.comm, self.u, bounds[0], peers, offsets[1 - module], east)
            await exchange_halos(mcomm, neighbours, self.u)
            self.u[1:-1, 1:-1] = ref.jacobi_step(self.u)
        seconds = time.perf_counter() - t0
        reference = ((lambda: coupled_serial(ny, nx, nx_left, iterations, couple_every))
                     if verify else None)
        out = await finish(self.comm, ny, nx, bounds, self.u, reference)
        out.update(ny=ny, nx=nx, nx_left=nx_left, iterations=iterations,
                   couple_every=couple_every, left_ranks=left_ranks, module=module,
                   grids=[(lay.py, lay.px) for lay in layouts], time_s=seconds)
        return out


def check_modules(ranks: int, left_ranks: int, couple_every: int, nx: int, nx_left: int) -> None:
    """Raise ValueError unless both modules get ranks and columns and the coupling
    period is >= 1."""
    if ranks < 2:
        raise ValueError(f"the coupled app needs at least 2 ranks (one per module), got {ranks}")
    if not 1 <= left_ranks < ranks:
        raise ValueError(f"left module ranks must be 1 .. {ranks - 1}, got {left_ranks}")
    if couple_every < 1:
        raise ValueError(f"coupling period must be >= 1, got {couple_every}")
    if not 1 <= nx_left < nx:
        raise ValueError(f"the cut must leave columns to both modules: nx_left must be "
                         f"1 .. {nx - 1}, got {nx_left}")


# ------------------------------------------------------------------ CLI contract
RANK_CLASS = Coupled


def add_arguments(parser) -> None:
    add_grid_arguments(parser, 256, 512, 200)
    parser.add_argument("--couple-every", type=int, default=10, metavar="K",
                        help="exchange interface columns every K iterations (default 10)")
    parser.add_argument("--left-ranks", type=int, default=None,
                        help="ranks of the left module (default half)")
    parser.add_argument("--nx-left", type=int, default=None,
                        help="interior columns of the left module (default: in proportion "
                             "to its ranks)")


def kwargs_from_args(args) -> dict:
    check_grid(args)
    left = args.ranks // 2 if args.left_ranks is None else args.left_ranks
    nx_left = split_columns(args.nx, left, args.ranks) if args.nx_left is None else args.nx_left
    check_modules(args.ranks, left, args.couple_every, args.nx, nx_left)
    Layout.part(args.ny, args.nx, 1, nx_left + 1, left)
    Layout.part(args.ny, args.nx, nx_left + 1, args.nx + 1, args.ranks - left)
    return {"ny": args.ny, "nx": args.nx, "iterations": args.iterations,
            "couple_every": args.couple_every, "left_ranks": left, "nx_left": nx_left}


def summarize(result) -> tuple[bool, list[str], dict]:
    r = result.results[0]
    r = dict(r, time_s=max(o["time_s"] for o in result.results))
    (ly, lx), (ry, rx) = r["grids"]
    return report(r, f"coupled stencils {r['ny']} x {r['nx']} cut at column {r['nx_left']}: "
                     f"left {ly} x {lx} ranks, right {ry} x {rx} ranks, coupled every "
                     f"{r['couple_every']} of {r['iterations']} iterations, {r['time_s']:.3f} s")
