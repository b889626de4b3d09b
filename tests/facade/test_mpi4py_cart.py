"""Cartesian communicators: the Cartesian parts of mpi4py's test/test_comm_topo.py
(translated in mpi4py_port/cart.py), ``ft.compute_dims`` against MPI_Dims_create, edges,
sub-grids, and a grid that survives restores."""
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups

from .mpi4py_port import RUNS, VARIANTS, check, methods, outcomes
from .mpi4py_port.cart import CartTests


@pytest.fixture(params=["local", "sim"])
def transport(request):
    return request.param


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", methods(CartTests))
@pytest.mark.parametrize("transport, ranks", RUNS + (("sim", 6), ("sim", 12)))
def test_cart(transport, ranks, method, variant):
    check(CartTests, transport, ranks, variant, method)


@pytest.mark.ray
def test_cart_on_ray(ray_session):
    got = outcomes(CartTests, "ray", 4, ("world",))
    assert {k: o for k, o in got.items() if o and o[0] == "fail"} == {}


@pytest.mark.parametrize("nnodes, dims, expect", [
    (6, 2, [3, 2]), (7, 2, [7, 1]), (6, [0, 3, 0], [2, 3, 1]),   # the MPI standard's examples
    (12, 2, [4, 3]), (16, 3, [4, 2, 2]), (32, 3, [4, 4, 2]), (24, 2, [6, 4]),
    (60, 3, [5, 4, 3]), (1, 3, [1, 1, 1]), (8, 1, [8]), (12, [0, 0, 2], [3, 2, 2]),
    (36, 2, [6, 6]), (90, 2, [10, 9]), (4, [2, 2], [2, 2]), (1, 0, []),
])
def test_compute_dims_as_mpi_dims_create(nnodes, dims, expect):
    assert ft.compute_dims(nnodes, dims) == expect


@pytest.mark.parametrize("nnodes, dims", [(7, [0, 3, 0]), (0, 2), (6, [-1, 0]), (4, [3]), (5, 0)])
def test_compute_dims_refuses(nnodes, dims):
    with pytest.raises(ValueError):
        ft.compute_dims(nnodes, dims)


class Edges(ft.Rank):
    async def main(self):
        grid = await self.comm.Create_cart([2, 3], periods=[False, True])
        if grid is None:
            return None
        out = {"coords": grid.coords, "shifts": [grid.Shift(d, 1) for d in (0, 1)],
               "far": grid.Shift(0, 2)}
        rows = await grid.Sub([False, True])            # each row: 3 ranks, periodic
        out["row"] = (rows.dims, rows.periods, rows.rank, rows.size,
                      await rows.allgather(self.rank))
        # halo exchange along the non-periodic dimension: PROC_NULL ends give None
        src, dst = grid.Shift(0, 1)
        out["halo"] = await grid.sendrecv(self.rank, dest=dst, source=src)
        return out


def test_edges_sub_grids_and_halos(transport):
    res = ft.run(Edges, ranks=7, transport=transport, timeout_s=120).results
    assert res[6] is None  # outside the 2 x 3 grid
    for r in range(6):
        out = res[r]
        row, col = divmod(r, 3)
        assert out["coords"] == [row, col]
        up, down = (r - 3 if row else ft.PROC_NULL), (r + 3 if row == 0 else ft.PROC_NULL)
        assert out["shifts"] == [(up, down), (3 * row + (col - 1) % 3, 3 * row + (col + 1) % 3)]
        assert out["far"] == (ft.PROC_NULL, ft.PROC_NULL)
        assert out["row"] == ([3], [True], col, 3, [3 * row + c for c in range(3)])
        assert out["halo"] == (None if row == 0 else r - 3)


class Stencil(ft.Rank):
    """A periodic 2 x 2 grid made before the loop (it is made again after a restore, from
    the logged split messages); a halo exchange along both dimensions each iteration."""

    async def main(self, steps: int):
        grid = await self.comm.Create_cart(ft.compute_dims(self.size, 2), periods=True)
        self.register("u", float(self.rank + 1))
        async for _ in self.iterations(steps):
            total = self.u
            for d in (0, 1):
                src, dst = grid.Shift(d, 1)
                total += 0.5 * await grid.sendrecv(self.u, dest=dst, source=src)
            self.u = total / 2.0 + await grid.allreduce(self.u) * 1e-3
        return grid.coords, self.u


@pytest.mark.parametrize("protocol", ["standby", "ready-flush"])
def test_a_grid_survives_a_kill(transport, protocol):
    setup = setups()[protocol]
    cls = type(f"Stencil_{protocol}", (*setup.mixins, Stencil), {})
    reference = ft.run(Stencil, ranks=4, transport="sim", args=(12,)).results
    r = ft.run(cls, ranks=4, transport=transport, args=(12,), spares=min(setup.spares, 1),
               chaos=ft.Chaos(kill=[(1, 7)]), timeout_s=120, **setup.options)
    assert r.metrics["recoveries"] >= 1
    assert r.results == reference
