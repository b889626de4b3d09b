"""mpi4py's demos, ported (tests/programs/mpi4py_demos.py), give what mpi4py's own
asserts and printouts say, failure-free on local and sim; the compute-pi loop also after
a kill under the headline stacks."""
from math import pi as PI

import numpy as np
import pytest

import ftactors as ft
from tests.programs import mpi4py_demos as demos
from tests.programs.test_register_idiom import HEADLINE, run


@pytest.fixture(params=["local", "sim"])
def transport(request):
    return request.param


def results(cls, ranks, transport, **kwargs):
    return ft.run(cls, ranks, transport=transport, kwargs=kwargs, timeout_s=60).results


def test_helloworld(transport):
    got = results(demos.HelloWorld, 3, transport)
    assert [g.split(" on ")[0] for g in got] == [
        f"Hello, World! I am process {r} of 3" for r in range(3)]


def test_ex_2_01_a_char_message_and_its_status(transport):
    msg, source, tag, error, count = results(demos.Ex201, 2, transport)[1]
    assert msg == b"Hello there\0" and (source, tag, error, count) == (0, 99, ft.SUCCESS, 12)


def test_ex_2_08_there_and_back(transport):
    for rank, got in enumerate(results(demos.Ex208, 2, transport)):
        assert got == (list(map(float, range(10))), True, 1 - rank, 0, 10)


def test_ex_2_29_probe_any_source_then_the_type_it_sent(transport):
    assert results(demos.Ex229, 3, transport)[2] == ([7] * 5, [7.0] * 5, 0, 0)


def test_ex_2_34_ssend_rsend_into_fortran_columns(transport):
    assert results(demos.Ex234, 2, transport)[0] == (True, True, [(1, 1), (1, 2)], True)


def test_ex_2_35_attach_and_detach_a_buffer(transport):
    assert results(demos.Ex235, 2, transport) == [True, True]


def test_profiling_ring(transport):
    assert results(demos.Ring, 4, transport) == [(3.0, 103.0), (0.0, 100.0), (1.0, 101.0),
                                                 (2.0, 102.0)]


@pytest.mark.parametrize("ng", [1, 2])
def test_sequential_sections_run_in_rank_order(ng):
    demos.ORDER.clear()
    ft.run(demos.Sequential, 4, transport="local", kwargs={"ng": ng})
    assert demos.ORDER == [0, 1, 2, 3] if ng == 1 else sorted(demos.ORDER) == [0, 1, 2, 3]


def test_reductions_of_a_subclass_of_intracomm(transport):
    for rank, (reduced, prod, scan, own_prod, own_scan) in enumerate(
            results(demos.Reductions, 5, transport)):
        assert reduced == (15 if rank == 4 else None)
        assert prod == own_prod == 120 and scan == own_scan == sum(range(1, rank + 2))


def pattern(rank, n):
    """What OsuBenchmark writes in rank ``rank``'s send buffer of ``n`` bytes."""
    return bytes((rank + k) % 251 for k in range(n))


@pytest.mark.parametrize("cls, ranks, check", [
    (demos.OsuLatency, 2, lambda r, buf, n: buf[:1024] == pattern(1 - r, n)[:1024]),
    (demos.OsuBandwidth, 2, lambda r, buf, n: buf[:1024 if r else 4] == pattern(
        1 - r, n)[:1024 if r else 4]),
    (demos.OsuBiBandwidth, 2, lambda r, buf, n: buf[:1024] == pattern(1 - r, n)[:1024]),
    (demos.OsuMultiLatency, 4, lambda r, buf, n: buf[:1024] == pattern((r + 2) % 4, n)[:1024]),
    (demos.OsuBarrier, 3, lambda r, buf, n: True),
    (demos.OsuBcast, 3, lambda r, buf, n: r == 0 or buf[:1024] == pattern(0, n)[:1024]),
    (demos.OsuAllgather, 3, lambda r, buf, n: True),
    (demos.OsuGather, 3, lambda r, buf, n: r != 0 or all(
        buf[p * 1024:(p + 1) * 1024] == pattern(p, n)[:1024] for p in (1, 2))),
    (demos.OsuScatter, 3, lambda r, buf, n: r == 0 or buf[:1024] == pattern(0, n)[
        r * 1024:(r + 1) * 1024]),
    (demos.OsuAlltoall, 3, lambda r, buf, n: all(
        buf[p * 1024:(p + 1) * 1024] == pattern(p, n)[r * 1024:(r + 1) * 1024]
        for p in range(3))),
    (demos.OsuAlltoallv, 3, lambda r, buf, n: all(
        buf[p * 1024:(p + 1) * 1024] == pattern(p, n)[r * 1024:(r + 1) * 1024]
        for p in range(3))),
])
def test_osu_benchmarks(transport, cls, ranks, check):
    """Every size gets a time, and the last (largest) exchange delivered the sender's
    bytes where the demo's calls say."""
    n = cls.MAX_MSG_SIZE * ranks
    for rank, (rows, buf) in enumerate(results(cls, ranks, transport)):
        assert list(rows) == cls.sizes(cls())
        assert all(t >= 0 for t in rows.values())
        assert check(rank, buf, n), (cls.__name__, rank)


def pi_reference(counts, nprocs):
    return [demos.comp_pi(n, r, nprocs) for n in counts[:-1] for r in range(nprocs)]


def test_compute_pi(transport):
    counts = (10, 100, 1000, 10000, 0)
    printed = results(demos.ComputePi, 3, transport, counts=counts)[0]
    assert len(printed) == 4
    for line, n in zip(printed, counts):
        pi = sum(demos.comp_pi(n, r, 3) for r in range(3))
        got = float(line.split()[3].rstrip(","))
        assert got == pytest.approx(pi, rel=1e-15) and abs(got - PI) < 1e-2


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE)
def test_compute_pi_after_a_kill(stack, transport):
    counts = (10, 100, 1000, 10000, 20000, 30000, 0)
    want = run(demos.ComputePi, stack, transport, [], counts=counts).results[0]
    got = run(demos.ComputePi, stack, transport, [ft.Kill(1, iteration=3)], counts=counts)
    assert got.events_of("killed") and got.results[0] == want


def test_ex_3_01_an_indexed_upper_triangle(transport):
    assert results(demos.Ex301, 2, transport) == [True, True]


def test_ex_3_02_to_3_13_sizes_and_extents_of_derived_types():
    assert all(demos.ex_3_02_to_3_13())


def test_ex_3_08_a_vector_of_vectors_received_as_doubles(transport):
    assert results(demos.Ex308, 2, transport) == [(True, 1, True)] * 2


def test_ex_3_09_a_transpose_by_datatypes(transport):
    assert results(demos.Ex309, 1, transport) == [(True, 1, True)]


def test_nxtval_a_counter_served_by_a_task_of_rank_0(transport):
    for vals in results(demos.Nxtval, 4, transport):
        assert sorted(vals) == list(range(20))
