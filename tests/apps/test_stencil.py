"""The Jacobi stencil app: bit-identical to the single-process run on any process grid."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.apps import _stencil_ref as ref
from ftactors.apps.stencil import Layout, Stencil, process_grid
from ftactors.protocols import StandbyReplacement


def run_stencil(ranks, transport="local", **kwargs):
    return ft.run(Stencil, ranks=ranks, kwargs=kwargs, transport=transport, timeout_s=120).results


@pytest.mark.parametrize("ranks, transport", [(1, "local"), (2, "local"), (3, "sim"),
                                              (4, "local"), (6, "sim")])
def test_matches_the_serial_run_to_the_last_bit(ranks, transport):
    ny, nx, iterations = 37, 29, 25
    expected = ref.checksum(ref.stencil_serial(ny, nx, iterations))
    results = run_stencil(ranks, transport, ny=ny, nx=nx, iterations=iterations)
    py, px = results[0]["grid"]
    assert py * px == ranks
    for r in results:
        assert r["identical"] is True and r["verified"] is True
        assert r["checksum"] == r["reference_checksum"] == expected
        assert r["iterations"] == iterations


def test_without_verification_only_the_checksum():
    (r,) = run_stencil(1, ny=8, nx=8, iterations=3, verify=False)
    assert r["checksum"] == ref.checksum(ref.stencil_serial(8, 8, 3))
    assert r["reference_checksum"] is None and r["verified"] is False


@pytest.mark.parametrize("grid", [(4, 1), (1, 4)])
def test_an_imposed_process_grid_is_used_and_bit_identical(grid):
    """``grid`` overrides the least-traffic split (here 2 x 2): strips of rows or columns."""
    results = run_stencil(4, ny=12, nx=12, iterations=6, grid=grid)
    assert {tuple(r["grid"]) for r in results} == {grid}
    assert all(r["identical"] for r in results)


def test_an_imposed_grid_of_another_size_is_refused():
    with pytest.raises(ValueError, match="2 x 3 process grid does not split a 8 x 8 grid"):
        Layout.whole(8, 8, 4, (2, 3))


def test_process_grid_minimises_halo_traffic():
    assert process_grid(4, 100, 100) == (2, 2)
    assert process_grid(4, 1000, 10) == (4, 1)
    assert process_grid(4, 10, 1000) == (1, 4)
    assert process_grid(6, 2, 3) == (2, 3)  # the only split without empty blocks
    with pytest.raises(ValueError, match="cannot be split into 5 non-empty blocks"):
        process_grid(5, 2, 2)


def test_layout_blocks_tile_the_interior_and_neighbours_are_mutual():
    layout = Layout.whole(11, 13, 6)
    cover = np.zeros((13, 15), dtype=int)
    for r in range(6):
        r0, r1, c0, c1 = layout.bounds(r)
        cover[r0:r1, c0:c1] += 1
        north, south, west, east = layout.neighbours(r)
        for peer, back in ((north, 1), (south, 0), (west, 3), (east, 2)):
            assert peer is None or layout.neighbours(peer)[back] == r
    assert (cover[1:-1, 1:-1] == 1).all() and cover.sum() == 11 * 13


def test_ray_two_ranks(ray_session):
    results = run_stencil(2, "ray", ny=32, nx=32, iterations=10)
    assert all(r["verified"] for r in results)


class FTStencil(StandbyReplacement, Stencil):
    """The stencil with a protocol mixed in, and no change to the stencil."""

    backup_interval = 4


def test_recovers_bit_identically_under_a_protocol():
    r = ft.run(FTStencil, ranks=4, spares=1, transport="local",
               kwargs={"ny": 30, "nx": 30, "iterations": 20}, chaos=ft.Chaos(kill=[(1, 9)]),
               timeout_s=120)
    assert r.events_of("restored")
    assert all(o["identical"] for o in r.results)
