"""Serial reference for the 2-D Jacobi heat stencil.

Theory of operation
-------------------
The grid is an ``ny x nx`` interior surrounded by a fixed one-cell boundary
ring, stored as an ``(ny+2, nx+2)`` array.  Each iteration replaces every
interior value by the mean of its four neighbours, reading only old values
(Jacobi, not Gauss-Seidel).  A distributed version splits the interior into
blocks with one-cell halos; after a halo exchange each block applies
:func:`jacobi_step` to its haloed array.  Because floating-point addition is
not associative, the distributed code must use exactly the expression of
:func:`jacobi_step` (same operands, same parenthesisation) to agree with this
reference to the last bit.

Initial values are functions of the global padded coordinates built from
integer arithmetic and one correctly rounded division (:func:`initial_values`),
so any block can be generated on its own with bit-identical values;
transcendental functions are avoided because numpy may evaluate them with
different SIMD code paths depending on array layout.
"""

from __future__ import annotations

import math

import numpy as np

TOP_BOUNDARY = 1.0


def initial_values(ny: int, nx: int, rows, cols) -> np.ndarray:
    """Initial values of the padded ``(ny+2, nx+2)`` grid at padded coordinates
    ``rows x cols``, shape ``(len(rows), len(cols))``.

    Top boundary row: 1.0.  Left boundary column below it: a ramp from 1 down
    to 0 at the bottom row.  Bottom row and right column: 0.  Interior: a
    pseudo-random pattern ``((7919 i + 104729 j) mod 1009) / 1009`` in [0, 1).
    """
    i = np.asarray(rows, dtype=np.int64)[:, None]
    j = np.asarray(cols, dtype=np.int64)[None, :]
    interior = ((7919 * i + 104729 * j) % 1009) / 1009.0
    ramp = 1.0 - i / (ny + 1)
    values = np.where((i == 0) | (i == ny + 1) | (j == nx + 1), 0.0, interior)
    values = np.where((j == 0) & (i > 0), ramp, values)
    return np.where(i == 0, TOP_BOUNDARY, values)


def initial_grid(ny: int, nx: int) -> np.ndarray:
    """The whole padded initial grid, shape ``(ny+2, nx+2)``, float64."""
    return initial_values(ny, nx, np.arange(ny + 2), np.arange(nx + 2))


def jacobi_step(u: np.ndarray) -> np.ndarray:
    """New interior of a haloed array ``u``: the mean of the four neighbours,
    computed as ``0.25 * (((north + south) + west) + east)``.

    This exact expression and order is the contract with the distributed
    version; changing it changes the last bits of the result.
    """
    return 0.25 * (((u[:-2, 1:-1] + u[2:, 1:-1]) + u[1:-1, :-2]) + u[1:-1, 2:])


def stencil_serial(ny: int, nx: int, iterations: int) -> np.ndarray:
    """Final ``ny x nx`` interior after ``iterations`` Jacobi steps from
    :func:`initial_grid`; the boundary ring stays fixed."""
    u = initial_grid(ny, nx)
    for _ in range(iterations):
        u[1:-1, 1:-1] = jacobi_step(u)
    return u[1:-1, 1:-1].copy()


def checksum(interior: np.ndarray) -> float:
    """Sum of all values, correctly rounded (``math.fsum``).

    Unlike ``np.sum``, whose pairwise order depends on shape and memory
    layout, the correctly rounded sum does not depend on the order of the
    values, so a gathered distributed result gives the same checksum however
    its blocks were assembled.
    """
    return math.fsum(np.asarray(interior, dtype=np.float64).ravel().tolist())
