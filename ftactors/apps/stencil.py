"""2-D Jacobi heat stencil with halo exchange, checked bit for bit against a single-process run.

Theory of operation
-------------------
The ``ny x nx`` interior of the padded grid of ``_stencil_ref`` is split into a
``py x px`` process grid of rectangular blocks (:class:`Layout`; :func:`process_grid`
picks the split with the least halo traffic). Each rank holds its block with a one-cell
halo, generated directly from the global coordinates (``_stencil_ref.initial_values``),
so halos on the global boundary already hold the fixed boundary values. The ranks form
a ``py x px`` Cartesian grid (``Create_cart``; ``Shift`` gives each rank's neighbours,
``PROC_NULL`` past the global boundary). One safe-point iteration is: exchange edges with
the four neighbours (:func:`exchange_halos`: a ``Sendrecv`` per direction into the
halo, every message naming its source and direction), then apply
``_stencil_ref.jacobi_step``, the exact expression of the serial reference, so every
value is bit-identical to a single-process run.

At the end rank 0 gathers the blocks (:func:`finish`), computes the correctly rounded
checksum and, unless ``verify=False``, runs the serial reference
(``_stencil_ref.stencil_serial``) and compares the whole grid bit for bit.

Fault tolerance: the haloed block ``u`` is the only state carried across iterations and
is registered; it is generated only when ``main()`` is not re-entered after a restore.
The helpers here are shared with the coupled two-module app (``coupled.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import ftactors as ft

from . import _stencil_ref as ref
# The serial reference, public: the benchmarks' baselines (serial, mpi4py) compute with it.
from ._stencil_ref import checksum, jacobi_step, stencil_serial  # noqa: F401

UP, DOWN, LEFT, RIGHT = 1, 2, 3, 4
"""Tags: the direction a halo message travels in."""


def process_grid(size: int, ny: int, nx: int) -> tuple[int, int]:
    """``(py, px)`` with ``py * px == size`` and no empty block that exchanges the fewest
    halo values per iteration (``(py-1) nx + (px-1) ny``); ties go to fewer rows."""
    splits = [(py, size // py) for py in range(1, size + 1)
              if size % py == 0 and py <= ny and size // py <= nx]
    if not splits:
        raise ValueError(f"a {ny} x {nx} grid cannot be split into {size} non-empty blocks")
    return min(splits, key=lambda s: ((s[0] - 1) * nx + (s[1] - 1) * ny, s[0]))


@dataclass(frozen=True)
class Layout:
    """Interior rows ``row0 .. row1-1`` and columns ``col0 .. col1-1`` (padded
    coordinates) of the global ``ny x nx`` problem, split over ``py x px`` ranks of one
    communicator in row-major order."""

    ny: int
    nx: int
    row0: int
    row1: int
    col0: int
    col1: int
    py: int
    px: int

    @classmethod
    def whole(cls, ny: int, nx: int, size: int, grid: tuple[int, int] | None = None) -> "Layout":
        """The whole interior over ``size`` ranks, on the process grid ``grid``
        (``(py, px)``; default ``process_grid``'s, the least halo traffic).

        Raises:
            ValueError: a grid of another size than ``size``, or with an empty block.
        """
        if grid is None:
            return cls.part(ny, nx, 1, nx + 1, size)
        py, px = grid
        if py < 1 or px < 1 or py * px != size or py > ny or px > nx:
            raise ValueError(f"a {py} x {px} process grid does not split a {ny} x {nx} "
                             f"grid into {size} non-empty blocks")
        return cls(ny, nx, 1, ny + 1, 1, nx + 1, py, px)

    @classmethod
    def part(cls, ny: int, nx: int, col0: int, col1: int, size: int) -> "Layout":
        """All rows of interior columns ``col0 .. col1-1`` over ``size`` ranks."""
        return cls(ny, nx, 1, ny + 1, col0, col1, *process_grid(size, ny, col1 - col0))

    def bounds(self, r: int) -> tuple[int, int, int, int]:
        """Interior ``(r0, r1, c0, c1)`` of rank ``r``'s block, padded coordinates."""
        iy, ix = divmod(r, self.px)
        rows, cols = self.row1 - self.row0, self.col1 - self.col0
        return (self.row0 + iy * rows // self.py, self.row0 + (iy + 1) * rows // self.py,
                self.col0 + ix * cols // self.px, self.col0 + (ix + 1) * cols // self.px)

    def initial(self, r: int) -> np.ndarray:
        """Rank ``r``'s block with its halo, at the initial values."""
        r0, r1, c0, c1 = self.bounds(r)
        return ref.initial_values(self.ny, self.nx, range(r0 - 1, r1 + 1), range(c0 - 1, c1 + 1))

    def neighbours(self, r: int) -> tuple[int | None, int | None, int | None, int | None]:
        """Ranks of the north, south, west and east neighbours (None at an edge)."""
        iy, ix = divmod(r, self.px)
        return (r - self.px if iy > 0 else None, r + self.px if iy < self.py - 1 else None,
                r - 1 if ix > 0 else None, r + 1 if ix < self.px - 1 else None)


async def exchange_halos(comm: ft.Communicator, neighbours, u: np.ndarray) -> None:
    """Fill ``u``'s halo from the edges of the ``(north, south, west, east)`` neighbours
    (``ft.PROC_NULL`` at the global boundary, whose halo keeps its fixed values): one
    ``Sendrecv`` per direction, rows straight between the arrays, columns through a
    contiguous copy, as an MPI code does without a vector datatype."""
    north, south, west, east = neighbours
    await comm.Sendrecv(u[-2, 1:-1], south, DOWN, u[0, 1:-1], north, DOWN)
    await comm.Sendrecv(u[1, 1:-1], north, UP, u[-1, 1:-1], south, UP)
    halo = np.empty(u.shape[0] - 2)
    for edge, dest, source, tag, into in ((-2, east, west, RIGHT, 0), (1, west, east, LEFT, -1)):
        await comm.Sendrecv(np.ascontiguousarray(u[1:-1, edge]), dest, tag, halo, source, tag)
        if source != ft.PROC_NULL:
            u[1:-1, into] = halo


async def finish(comm: ft.Communicator, ny: int, nx: int, bounds: tuple, u: np.ndarray,
                 reference) -> dict:
    """Gather every rank's interior on rank 0, checksum it and, when ``reference`` (a
    callable returning the serial ``ny x nx`` result) is given, compare bit for bit.
    Every rank gets ``checksum``, ``reference_checksum``, ``identical`` and ``verified``."""
    blocks = await comm.gather((bounds, u[1:-1, 1:-1]), root=0)
    summary = None
    if comm.rank == 0:
        grid = np.empty((ny, nx))
        for (r0, r1, c0, c1), block in blocks:
            grid[r0 - 1:r1 - 1, c0 - 1:c1 - 1] = block
        expect = None if reference is None else reference()
        summary = {
            "checksum": ref.checksum(grid),
            "reference_checksum": None if expect is None else ref.checksum(expect),
            "identical": None if expect is None else bool(np.array_equal(grid, expect)),
        }
        summary["verified"] = bool(summary["identical"])
    return await comm.bcast(summary, root=0)


class Stencil(ft.Rank):
    """Jacobi heat stencil; ``main(ny, nx, iterations, verify, grid)`` returns on every
    rank a dict with ``checksum``, ``verified`` (bit-identical to the serial run),
    ``iterations`` and ``time_s``; ``grid`` (``(py, px)``) imposes the process grid
    (strips of whole rows: ``(size, 1)``)."""

    async def main(self, ny: int = 512, nx: int = 512, iterations: int = 200,
                   verify: bool = True, grid: tuple[int, int] | None = None) -> dict:
        layout = Layout.whole(ny, nx, self.size, grid)
        cart = await self.comm.Create_cart([layout.py, layout.px])
        neighbours = (*cart.Shift(0, 1), *cart.Shift(1, 1))  # north, south, west, east
        self.register("u", None if self.restored else layout.initial(self.rank))
        t0 = time.perf_counter()
        async for _ in self.iterations(iterations):
            await exchange_halos(cart, neighbours, self.u)
            self.u[1:-1, 1:-1] = ref.jacobi_step(self.u)
        seconds = time.perf_counter() - t0
        reference = (lambda: ref.stencil_serial(ny, nx, iterations)) if verify else None
        out = await finish(self.comm, ny, nx, layout.bounds(self.rank), self.u, reference)
        out.update(ny=ny, nx=nx, iterations=iterations, grid=(layout.py, layout.px),
                   time_s=seconds)
        return out


# ------------------------------------------------------------------ CLI contract
RANK_CLASS = Stencil


def add_grid_arguments(parser, ny: int, nx: int, iterations: int) -> None:
    """The grid options shared with the coupled app."""
    parser.add_argument("--ny", type=int, default=ny, help=f"interior rows (default {ny})")
    parser.add_argument("--nx", type=int, default=nx, help=f"interior columns (default {nx})")
    parser.add_argument("--iterations", type=int, default=iterations,
                        help=f"Jacobi iterations (default {iterations})")


def check_grid(args) -> None:
    """Raise ValueError for a grid or iteration count that cannot run."""
    if args.ny < 1 or args.nx < 1:
        raise ValueError(f"--ny and --nx must be >= 1, got {args.ny} x {args.nx}")
    if args.iterations < 0:
        raise ValueError(f"--iterations must be >= 0, got {args.iterations}")


def add_arguments(parser) -> None:
    add_grid_arguments(parser, 512, 512, 200)


def kwargs_from_args(args) -> dict:
    check_grid(args)
    process_grid(args.ranks, args.ny, args.nx)
    return {"ny": args.ny, "nx": args.nx, "iterations": args.iterations}


def report(r: dict, title: str) -> tuple[bool, list[str], dict]:
    """The verification lines and record of a stencil-like result (shared with coupled)."""
    verified = bool(r["verified"])
    lines = [f" {title}",
             f" checksum {r['checksum']!r}, single-process reference {r['reference_checksum']!r}",
             " VERIFICATION SUCCESSFUL" if verified else
             f" VERIFICATION FAILED (checksum {r['checksum']!r} vs reference "
             f"{r['reference_checksum']!r}, grids identical: {r['identical']})"]
    return verified, lines, dict(r)


def summarize(result) -> tuple[bool, list[str], dict]:
    r = result.results[0]
    r = dict(r, time_s=max(o["time_s"] for o in result.results))
    return report(r, f"Jacobi stencil {r['ny']} x {r['nx']}, {r['iterations']} iterations, "
                     f"{r['grid'][0]} x {r['grid'][1]} ranks, {r['time_s']:.3f} s")
