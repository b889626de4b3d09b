"""The HPL-like LU app: HPL's residual check on many grids and block sizes, the same
global [A|b] whatever the grid, bit-identity with the serial LU on a 1 x 1 grid."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.apps import _hpl_matgen as hpl_ref
from ftactors.apps.hpl import HPL, fingerprint, resolve_grid
from ftactors.protocols import StandbyReplacement


def run_hpl(n, nb, p=None, q=None, transport="local", ranks=None):
    ranks = ranks or p * q
    return ft.run(HPL, ranks=ranks, kwargs={"n": n, "nb": nb, "p": p, "q": q},
                  transport=transport, timeout_s=300).results


def serial_fingerprint(n):
    return fingerprint(hpl_ref.generate_system(n), np.arange(n), np.arange(n + 1), n)


@pytest.mark.parametrize("n, nb, p, q, transport", [
    (97, 8, 2, 2, "local"),     # n not a multiple of nb
    (120, 16, 1, 3, "local"),   # a flat grid
    (120, 7, 3, 1, "local"),    # a tall grid, odd block size
    (100, 10, 2, 3, "sim"),     # 6 ranks, both communicators bigger than 1
    (16, 8, 3, 1, "local"),     # a process row without any row
    (64, 64, 2, 2, "sim"),      # a single panel
])
def test_residual_check_passes_on_every_grid_with_the_same_matrix(n, nb, p, q, transport):
    results = run_hpl(n, nb, p, q, transport)
    serial = hpl_ref.lu_serial(n, nb)
    expected_fp = serial_fingerprint(n)
    for r in results:
        assert (r["n"], r["nb"], r["p"], r["q"]) == (n, nb, p, q)
        assert r["verified"] is True and 0 <= r["residual"] < hpl_ref.HPL_THRESHOLD
        assert r["residual"] == results[0]["residual"]
        assert r["fingerprint"] == expected_fp, "the grid changed the global [A|b]"
        assert r["gflops"] > 0 and r["time_s"] > 0
    np.testing.assert_allclose(results[0]["x"], serial["x"], rtol=1e-9, atol=1e-9)


def test_one_by_one_grid_is_bit_identical_to_the_serial_lu():
    (r,) = run_hpl(90, 16, 1, 1)
    serial = hpl_ref.lu_serial(90, 16)
    assert np.array_equal(r["x"], serial["x"])
    assert r["verified"] and serial["verified"]


def test_fingerprint_sees_a_moved_entry():
    n = 12
    aug = hpl_ref.generate_system(n)
    swapped = aug.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    rows, cols = np.arange(n), np.arange(n + 1)
    assert fingerprint(swapped, rows, cols, n) != fingerprint(aug, rows, cols, n)
    halves = (fingerprint(aug[:5], rows[:5], cols, n) + fingerprint(aug[5:], rows[5:], cols, n))
    assert halves % 2**64 == fingerprint(aug, rows, cols, n)


def test_default_grid_is_the_squarest_flat_one():
    assert [resolve_grid(100, 10, None, None, k) for k in (1, 2, 4, 6, 8)] == [
        (1, 1), (1, 2), (2, 2), (2, 3), (2, 4)]
    assert resolve_grid(100, 10, 4, None, 8) == (4, 2)
    assert resolve_grid(100, 10, None, 4, 8) == (2, 4)
    r = run_hpl(64, 8, ranks=4)
    assert (r[0]["p"], r[0]["q"]) == (2, 2) and r[0]["verified"]


@pytest.mark.parametrize("n, nb, p, q, ranks, message", [
    (10, 20, 1, 1, 1, r"n \(10\) must be >= nb \(20\)"),
    (100, 0, 1, 1, 1, "must be >= 1"),
    (100, 10, 3, 2, 4, "3 x 2 must have as many processes as there are ranks"),
    (100, 10, 3, None, 4, "does not divide the 4 ranks"),
])
def test_bad_problems_are_rejected(n, nb, p, q, ranks, message):
    with pytest.raises(ValueError, match=message):
        resolve_grid(n, nb, p, q, ranks)
    with pytest.raises(ft.RankError, match=message):
        run_hpl(n, nb, p, q, ranks=ranks)


def test_ray_two_by_one(ray_session):
    results = run_hpl(200, 32, 2, 1, "ray")
    assert all(r["verified"] for r in results)
    assert results[0]["fingerprint"] == serial_fingerprint(200)


@pytest.mark.slow
def test_n2000_on_a_two_by_two_grid():
    results = run_hpl(2000, 64, 2, 2)
    assert all(r["verified"] for r in results)


class FTHPL(StandbyReplacement, HPL):
    """HPL with a protocol mixed in, and no change to HPL."""

    backup_interval = 2


def test_recovers_bit_identically_under_a_protocol():
    kwargs = {"n": 120, "nb": 16, "p": 2, "q": 2}
    plain = run_hpl(**kwargs)
    r = ft.run(FTHPL, ranks=4, spares=1, transport="local", kwargs=kwargs,
               chaos=ft.Chaos(kill=[(2, 5)]), timeout_s=120)
    assert r.events_of("restored")
    assert np.array_equal(r.results[0]["x"], plain[0]["x"])
