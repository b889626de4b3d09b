"""Tests for HPL's matrix generator, block-cyclic helpers and serial LU."""

import numpy as np
import pytest

from ftactors.apps import _hpl_matgen as hpl


def _sequential_system(n: int) -> np.ndarray:
    """Slow oracle: walk X_1, X_2, ... with Python ints, column-major into [A|b]."""
    x = hpl.HPL_SEED
    out = np.empty((n, n + 1))
    for j in range(n + 1):
        for i in range(n):
            x = (hpl.HPL_MULTIPLIER * x + 1) % 2**64
            out[i, j] = 0.5 - float(x) / 2.0**64
    return out


def test_reference_entries():
    a = hpl.hpl_entries(37, [0, 1, 0], [0, 0, 1])
    assert a[0, 0] == -5.159944193766641e-05
    assert a[1, 0] == 0.38413122531282284
    assert a[0, 2] == 0.3370133411406804


def test_lcg_jump_matches_stepping():
    x = 12345
    for t in range(70):
        a_t, c_t = hpl.lcg_jump(t)
        assert (a_t * 12345 + c_t) % 2**64 == x
        x = (hpl.HPL_MULTIPLIER * x + 1) % 2**64


@pytest.mark.parametrize("n", [1, 2, 7, 23])
def test_full_matrix_matches_sequential_oracle(n):
    assert np.array_equal(hpl.generate_system(n), _sequential_system(n))


def test_sub_blocks_match_oracle():
    n = 23
    full = _sequential_system(n)
    rng = np.random.default_rng(3)
    for _ in range(20):
        rows = rng.choice(n, size=rng.integers(1, n + 1), replace=False)
        cols = rng.choice(n + 1, size=rng.integers(1, n + 2), replace=False)
        assert np.array_equal(hpl.hpl_entries(n, rows, cols), full[np.ix_(rows, cols)])
    assert np.array_equal(hpl.hpl_entries(n, [5, 5, 0], [n, 3]), full[np.ix_([5, 5, 0], [n, 3])])
    assert hpl.hpl_entries(n, [], [1, 2]).shape == (0, 2)


def test_large_offsets_match_jump():
    n = 100_000
    i, j = 99_999, 100_000
    a_t, c_t = hpl.lcg_jump(1 + i + j * n)
    expected = 0.5 - float((a_t * hpl.HPL_SEED + c_t) % 2**64) / 2.0**64
    assert hpl.hpl_entries(n, [i], [j])[0, 0] == expected


def test_entries_reject_out_of_range():
    with pytest.raises(ValueError):
        hpl.hpl_entries(5, [5], [0])
    with pytest.raises(ValueError):
        hpl.hpl_entries(5, [0], [6])


@pytest.mark.parametrize(
    "n, nb, nprocs",
    [(1, 1, 1), (10, 3, 1), (10, 3, 2), (10, 3, 4), (10, 3, 7), (100, 8, 3), (37, 5, 4), (64, 16, 4), (5, 8, 3)],
)
def test_block_cyclic_partition(n, nb, nprocs):
    owned = [hpl.global_indices(n, nb, p, nprocs) for p in range(nprocs)]
    assert sorted(np.concatenate(owned).tolist()) == list(range(n))
    for p, indices in enumerate(owned):
        assert hpl.numroc(n, nb, p, nprocs) == len(indices)
        assert np.all(np.diff(indices) > 0)
        for local, ig in enumerate(indices.tolist()):
            assert hpl.owner(ig, nb, nprocs) == p
            assert hpl.global_to_local(ig, nb, nprocs) == local


def test_scaled_residual_and_flops():
    system = hpl.generate_system(37)
    a, b = system[:, :37], system[:, 37]
    assert hpl.scaled_residual(a, np.linalg.solve(a, b), b) < 1.0
    assert hpl.scaled_residual(a, np.zeros(37), b) > hpl.HPL_THRESHOLD
    assert hpl.HPL_EPS == 2.0**-53 and hpl.HPL_THRESHOLD == 16.0
    assert hpl.hpl_flops(10) == pytest.approx(2 / 3 * 1000 + 150)


@pytest.mark.parametrize("n, nb", [(1, 1), (2, 1), (37, 5), (50, 64), (100, 16), (128, 32), (131, 32), (200, 7)])
def test_lu_serial(n, nb):
    result = hpl.lu_serial(n, nb)
    assert result["verified"] and result["residual"] < hpl.HPL_THRESHOLD
    system = hpl.generate_system(n)
    np.testing.assert_allclose(result["x"], np.linalg.solve(system[:, :n], system[:, n]), rtol=1e-8, atol=1e-10)


def test_factor_panel_pivots_and_multipliers():
    panel = np.array([[1.0, 2.0], [4.0, 3.0], [2.0, 1.0]])
    original = panel.copy()
    pivots = hpl.factor_panel(panel)
    assert pivots.tolist() == [1, 1]
    l = np.tril(panel, -1) + np.eye(3, 2)
    u = np.triu(panel[:2])
    permuted = original[[1, 0, 2]]
    np.testing.assert_allclose(l @ u, permuted, atol=1e-15)
