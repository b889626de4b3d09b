"""Tests for the serial 2-D Jacobi stencil reference."""

import math

import numpy as np

from ftactors.apps import _stencil_ref as st


def _jacobi_loop(u: np.ndarray) -> np.ndarray:
    """Hand-written element loop with the documented operand order."""
    ny, nx = u.shape[0] - 2, u.shape[1] - 2
    out = np.empty((ny, nx))
    for i in range(1, ny + 1):
        for j in range(1, nx + 1):
            out[i - 1, j - 1] = 0.25 * (((u[i - 1, j] + u[i + 1, j]) + u[i, j - 1]) + u[i, j + 1])
    return out


def test_initial_grid_boundaries_and_interior():
    u = st.initial_grid(6, 9)
    assert u.shape == (8, 11) and u.dtype == np.float64
    assert np.all(u[0] == 1.0)
    assert np.all(u[-1] == 0.0) and np.all(u[1:, -1] == 0.0)
    assert np.all(np.diff(u[1:, 0]) < 0) and u[-1, 0] == 0.0
    interior = u[1:-1, 1:-1]
    assert np.all((interior >= 0) & (interior < 1)) and len(np.unique(interior)) > 40


def test_initial_values_of_a_block_equal_the_slice():
    u = st.initial_grid(30, 20)
    rows, cols = np.arange(7, 19), np.arange(0, 22)
    assert np.array_equal(st.initial_values(30, 20, rows, cols), u[np.ix_(rows, cols)])


def test_jacobi_step_matches_loop_exactly():
    u = st.initial_grid(9, 13)
    assert np.array_equal(st.jacobi_step(u), _jacobi_loop(u))
    v = np.random.default_rng(7).standard_normal((12, 8)) * 1e3
    assert np.array_equal(st.jacobi_step(v), _jacobi_loop(v))


def test_stencil_serial_matches_loop_iteration():
    ny, nx, steps = 11, 7, 5
    u = st.initial_grid(ny, nx)
    for _ in range(steps):
        u[1:-1, 1:-1] = _jacobi_loop(u)
    result = st.stencil_serial(ny, nx, steps)
    assert np.array_equal(result, u[1:-1, 1:-1])
    assert np.array_equal(st.stencil_serial(ny, nx, 0), st.initial_grid(ny, nx)[1:-1, 1:-1])


def test_stencil_stays_within_maximum_principle_bounds():
    result = st.stencil_serial(20, 30, 200)
    assert result.min() >= 0.0 and result.max() <= 1.0


def test_checksum_is_order_independent():
    interior = st.stencil_serial(16, 24, 10)
    total = st.checksum(interior)
    assert total == math.fsum(interior.ravel().tolist())
    assert st.checksum(np.asfortranarray(interior)) == total
    assert st.checksum(np.vstack([interior[8:], interior[:8]])) == total
    assert 0 < total < interior.size
