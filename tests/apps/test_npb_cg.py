"""Tests for the serial NPB CG kernel against the official NPB values."""

import numpy as np
import pytest

from ftactors.apps import _npb_cg as cg


def _randlc_npb(x: float, a: float) -> tuple[float, float]:
    """Direct port of NPB's double-precision ``randlc`` (common/randdp.f)."""
    r23, t23 = 0.5**23, 2.0**23
    r46, t46 = r23 * r23, t23 * t23
    a1 = float(int(r23 * a))
    a2 = a - t23 * a1
    x1 = float(int(r23 * x))
    x2 = x - t23 * x1
    t1 = a1 * x2 + a2 * x1
    t2 = float(int(r23 * t1))
    z = t1 - t23 * t2
    t3 = t23 * z + a2 * x2
    t4 = float(int(r46 * t3))
    x = t3 - t46 * t4
    return r46 * x, x


def _npb_dense_matrix(c: cg.CGClass) -> np.ndarray:
    """Plain-loop port of cg.f's makea + sparse summation, as a dense array."""
    n = c.na
    _, tran = _randlc_npb(314159265.0, 1220703125.0)
    nn1 = 1
    while True:
        nn1 *= 2
        if nn1 >= n:
            break
    dense = np.zeros((n, n))
    size, ratio = 1.0, cg.RCOND ** (1.0 / n)
    for iouter in range(n):
        iv, v = [], []
        while len(iv) < c.nonzer:
            vecelt, tran = _randlc_npb(tran, 1220703125.0)
            vecloc, tran = _randlc_npb(tran, 1220703125.0)
            i = int(nn1 * vecloc)
            if i < n and i not in iv:
                iv.append(i)
                v.append(vecelt)
        if iouter in iv:
            v[iv.index(iouter)] = 0.5
        else:
            iv.append(iouter)
            v.append(0.5)
        for jcol, vj in zip(iv, v):
            scale = size * vj
            for irow, vi in zip(iv, v):
                dense[irow, jcol] += vi * scale
        size *= ratio
    dense[np.diag_indices(n)] += cg.RCOND - c.shift
    return dense


def _to_dense(m: cg.CSRMatrix) -> np.ndarray:
    dense = np.zeros((m.nrows, m.n))
    rows = np.repeat(np.arange(m.nrows), np.diff(m.rowptr))
    dense[rows, m.colidx] = m.values
    return dense


def test_classes_match_setparams():
    s = cg.CG_CLASSES["S"]
    assert (s.na, s.nonzer, s.niter, s.shift, s.zeta_verify) == (1400, 7, 15, 10.0, 8.5971775078648)
    assert [cg.CG_CLASSES[k].na for k in "SWABC"] == [1400, 7000, 14000, 75000, 150000]
    assert [cg.CG_CLASSES[k].niter for k in "SWABC"] == [15, 15, 15, 75, 75]
    assert cg.RCOND == 0.1 and cg.CG_INNER_ITERATIONS == 25


def test_randlc_matches_npb_double_precision_algorithm():
    x_int, x_float = cg.RANDLC_SEED, float(cg.RANDLC_SEED)
    for _ in range(2000):
        value, x_int = cg.randlc(x_int, cg.RANDLC_MULTIPLIER)
        expected, x_float = _randlc_npb(x_float, float(cg.RANDLC_MULTIPLIER))
        assert value == expected and x_int == x_float


@pytest.mark.parametrize("name, nnz", [("S", 78148), ("W", 508402), ("A", 1853104)])
def test_nnz(name, nnz):
    assert cg.make_matrix(cg.CG_CLASSES[name]).nnz == nnz


def test_class_s_matrix_is_bitwise_npb():
    c = cg.CG_CLASSES["S"]
    m = cg.make_matrix(c)
    dense = _to_dense(m)
    assert np.array_equal(dense, _npb_dense_matrix(c))
    # v_i (size v_j) and v_j (size v_i) round differently: NPB's matrix is
    # symmetric only to rounding.
    np.testing.assert_allclose(dense, dense.T, rtol=4e-16, atol=0)
    rows = np.repeat(np.arange(m.nrows), np.diff(m.rowptr))
    assert np.all(np.diff(m.colidx)[rows[1:] == rows[:-1]] > 0), "columns ascend within rows"


def test_csr_matvec_and_row_blocks():
    m = cg.make_matrix(cg.CG_CLASSES["S"])
    x = np.random.default_rng(1).standard_normal(m.n)
    full = cg.csr_matvec(m, x)
    np.testing.assert_allclose(full, _to_dense(m) @ x, rtol=1e-13, atol=1e-13)
    bounds = [0, 1, 1, 500, 1399, 1400]
    pieces = [cg.csr_matvec(cg.row_block(m, lo, hi), x) for lo, hi in zip(bounds, bounds[1:])]
    assert [len(p) for p in pieces] == [1, 0, 499, 899, 1]
    assert np.array_equal(np.concatenate(pieces), full)


def test_csr_matvec_with_empty_rows():
    m = cg.CSRMatrix(
        rowptr=np.array([0, 0, 2, 2, 3, 3]),
        colidx=np.array([0, 3, 1]),
        values=np.array([2.0, 3.0, 4.0]),
        n=4,
    )
    assert cg.csr_matvec(m, np.array([1.0, 10.0, 100.0, 1000.0])).tolist() == [0.0, 3002.0, 0.0, 40.0, 0.0]


def test_conj_grad_solves_small_spd_system():
    rng = np.random.default_rng(0)
    b = rng.standard_normal((10, 10))
    a = b @ b.T + 10 * np.eye(10)
    x = rng.standard_normal(10)
    z, rnorm = cg.conj_grad(lambda p: a @ p, x, np.dot)
    np.testing.assert_allclose(a @ z, x, atol=1e-10)
    assert rnorm < 1e-10


def test_class_s_trace_and_verification():
    result = cg.cg_serial("S")
    assert result["iterations"] == 15 and len(result["zetas"]) == 15 and len(result["rnorms"]) == 15
    for got, expected in zip(result["zetas"], [9.9986441579140, 8.5733279203222, 8.5954510374058]):
        assert abs(got - expected) <= 1e-12
    assert result["zeta"] == result["zetas"][-1]
    assert result["verified"] and result["error"] <= 1e-10
    assert abs(result["zeta"] - 8.5971775078648) <= 1e-12
    assert all(r < 1e-12 for r in result["rnorms"])


def test_class_w_verification():
    result = cg.cg_serial("W")
    assert result["verified"] and result["error"] <= 1e-10


def test_verify_zeta():
    s = cg.CG_CLASSES["S"]
    assert cg.verify_zeta(s, 8.5971775078648) == (True, 0.0)
    assert not cg.verify_zeta(s, 8.5971775078648 * (1 + 2e-10))[0]
    ok, err = cg.verify_zeta(s, float("nan"))
    assert not ok and np.isnan(err)
