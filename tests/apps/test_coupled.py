"""The coupled two-module app: bit-identical to its single-process reference, the
monolithic stencil when coupled every iteration, and rare traffic across the modules."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.runtime._trace import read_trace
from ftactors.apps import _stencil_ref as ref
from ftactors.apps.coupled import COUPLE, Coupled, check_modules, coupled_serial
from ftactors.protocols import StandbyReplacement


def run_coupled(ranks, transport="local", trace=None, **kwargs):
    return ft.run(Coupled, ranks=ranks, kwargs=kwargs, transport=transport, trace=trace,
                  timeout_s=120)


def test_reference_coupled_every_iteration_is_the_monolithic_stencil():
    mono = ref.stencil_serial(20, 30, 15)
    assert np.array_equal(coupled_serial(20, 30, 11, 15, 1), mono)
    assert not np.array_equal(coupled_serial(20, 30, 11, 15, 4), mono)


@pytest.mark.parametrize("ranks, left, nx_left, k, transport", [
    (2, 1, None, 3, "local"),
    (3, 1, None, 4, "sim"),
    (5, 2, 7, 1, "local"),   # uneven modules, explicit cut, coupled every iteration
    (7, 4, None, 5, "sim"),  # 2 x 2 against 3 x 1: interface blocks overlap partially
])
def test_matches_the_single_process_reference(ranks, left, nx_left, k, transport):
    ny, nx, iterations = 24, 30, 21
    results = run_coupled(ranks, transport, ny=ny, nx=nx, iterations=iterations,
                          couple_every=k, left_ranks=left, nx_left=nx_left).results
    cut = results[0]["nx_left"]
    expected = ref.checksum(coupled_serial(ny, nx, cut, iterations, k))
    assert [r["module"] for r in results] == [0] * left + [1] * (ranks - left)
    for r in results:
        assert r["verified"] is True and r["identical"] is True
        assert r["checksum"] == expected
    if k == 1:
        assert expected == ref.checksum(ref.stencil_serial(ny, nx, iterations))


def test_modules_talk_rarely_across_and_often_inside(tmp_path):
    path = tmp_path / "coupled.parquet"
    iterations, k = 30, 10
    run_coupled(4, ny=16, nx=16, iterations=iterations, couple_every=k, trace=str(path))
    t = read_trace(path).to_pydict()
    p2p = [(s, d, tag) for s, d, tag, comm in zip(t["source"], t["dest"], t["tag"], t["comm"])
           if not comm.endswith("/c")]  # point to point, not the collectives' context
    across = [m for m in p2p if (m[0] < 2) != (m[1] < 2)]
    inside = [m for m in p2p if (m[0] < 2) == (m[1] < 2)]
    # 2 x 1 blocks on each side: 2 facing pairs, both ways, at iterations 10 and 20
    assert len(across) == 2 * 2 * ((iterations - 1) // k)
    assert all(tag == COUPLE for _, _, tag in across)
    assert len(inside) == 4 * iterations  # one halo message each way per module per iteration


def test_bad_module_setups():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        check_modules(1, 1, 10, 20, 10)
    with pytest.raises(ValueError, match="left module ranks must be 1 .. 3"):
        check_modules(4, 4, 10, 20, 10)
    with pytest.raises(ValueError, match="coupling period must be >= 1"):
        check_modules(4, 2, 0, 20, 10)
    with pytest.raises(ValueError, match="nx_left must be 1 .. 19"):
        check_modules(4, 2, 10, 20, 20)
    with pytest.raises(ft.RankError, match="at least 2 ranks"):
        run_coupled(1)


def test_ray_two_modules(ray_session):
    results = run_coupled(2, "ray", ny=16, nx=24, iterations=12, couple_every=4).results
    assert all(r["verified"] for r in results)


class FTCoupled(StandbyReplacement, Coupled):
    """The coupled code with a protocol mixed in, and no change to it."""

    backup_interval = 4


def test_recovers_bit_identically_under_a_protocol():
    r = ft.run(FTCoupled, ranks=4, spares=1, transport="local",
               kwargs={"ny": 20, "nx": 40, "iterations": 30, "couple_every": 4},
               chaos=ft.Chaos(kill=[(2, 9)]), timeout_s=120)
    assert r.events_of("restored")
    assert all(o["identical"] for o in r.results)
