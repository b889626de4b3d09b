"""The register-then-use-the-local idiom after a kill (issue 40, item 3): a port keeps
using the object it registered, its views and the persistent requests made on it, and
gets the failure-free answer under every restore path: ranks restarted in new actors
(ready-flush), survivors rolled back in place and a promoted spare (standby, rs), ranks
restored from a snapshot between safe points with logged messages replayed (groups,
hc3i). Where the object cannot take the checkpoint's value, the run says so at once,
naming the local."""
import warnings

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups
from tests.programs.register_idiom import (Containers, Growing, Immutables, Jacobi, MatVec,
                                           TimedLoop, containers_reference,
                                           jacobi_reference)

HEADLINE = ["standby", "ready-flush", "rs+standby+ready-flush"]


def run(program, stack, transport, kills, ranks=None, **kwargs):
    """``program`` under ``stack`` (sim-check's settings) with ``kills``."""
    setup = setups()[stack]
    cls = type(program.__name__, (*setup.mixins, program), {})
    return ft.run(cls, ranks or setup.ranks, transport=transport, spares=setup.spares,
                  kwargs=kwargs, chaos=ft.Chaos(kill=kills), timeout_s=120, **setup.options)


def fired(result):
    return [e.rank for e in result.events_of("killed")]


# hc3i's default clusters cut the grid's halo exchange at every step: a forced-checkpoint
# storm is that protocol working as written for this program (it warns so)
@pytest.mark.filterwarnings("ignore::ftactors.protocols.ForcedCheckpointStorm")
@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE + ["rs", "groups", "hc3i"])
def test_jacobi_with_persistent_requests_on_the_registered_grid(stack, transport):
    """Before: the restored ranks went on with the grid the code before the loop made
    (zeros), while self.A held the checkpoint: 239 iterations instead of 152."""
    iterations, grid = jacobi_reference()
    r = run(Jacobi, stack, transport, [ft.Kill(1, iteration=90)])
    assert fired(r) == [1]
    assert [x["iterations"] for x in r.results] == [iterations] * len(r.results)
    assert np.array_equal(np.vstack([x["grid"] for x in r.results]), grid)


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE)
def test_matvec_allgathers_into_a_registered_buffer(stack, transport):
    """The unit vector moves one index per step: after 20 steps it is at 20 (before, a
    kill at step 11 left it at 11 or so)."""
    r = run(MatVec, stack, transport, [ft.Kill(2, iteration=11)])
    assert fired(r) == [2]
    expected = np.zeros(8 * len(r.results))
    expected[20] = 1.0
    for whole in r.results:
        assert np.array_equal(whole, expected)


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE + ["groups"])
def test_every_container_kind_is_refilled_through_its_local(stack, transport):
    r = run(Containers, stack, transport, [ft.Kill(1, iteration=9)])
    assert fired(r) == [1]
    for got, want in zip(r.results, containers_reference(len(r.results))):
        assert got.keys() == want.keys()
        for key in want:
            if isinstance(want[key], np.ndarray):
                assert np.array_equal(got[key], want[key]), key
            else:
                assert got[key] == want[key], key


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE)
def test_a_number_or_tuple_used_through_its_local_is_warned_of_at_once(stack, transport):
    """A float and a tuple cannot take the checkpoint's value: the warning names both
    locals and what to write instead, as the restored loop starts."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(Immutables, stack, transport, [ft.Kill(1, iteration=7)])
    stale = [str(w.message) for w in caught if w.category is ft.StaleLocalWarning]
    assert any("self.total" in m and "the local 'total'" in m
               and "total = self.register('total', total)" in m for m in stale), stale
    assert any("self.extremes" in m and "tuple cannot be changed in place" in m
               for m in stale), stale
    assert issubclass(ft.StaleLocalWarning, ft.FaultToleranceWarning)
    warned = [e for e in r.events_of("restored_not_in_place")]
    assert warned and all(e.time < r.events_of("run_end")[0].time for e in warned)


def test_no_warning_without_a_failure_or_when_the_local_takes_what_register_returns():
    class Bound(Immutables):
        async def main(self, steps=12):
            comm, rank, size = self.comm, self.rank, self.size
            total = self.register("total", 0.0)
            async for i in self.iterations(steps):
                total += await comm.sendrecv(total + rank + i, dest=(rank + 1) % size,
                                             source=(rank - 1) % size)
                self.total = total
            return total

    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.FaultToleranceWarning)
        want = run(Bound, "standby", "sim", []).results
        assert run(Bound, "standby", "sim", [ft.Kill(1, iteration=7)]).results == want
        assert [x["total"] for x in run(Immutables, "standby", "sim", []).results] == want


def test_a_resized_array_used_through_its_local_is_warned_of():
    with pytest.warns(ft.StaleLocalWarning, match=r"shape \(\d+,\) and yours \(0,\).*"
                      r"the local 'seen'"):
        run(Growing, "standby", "sim", [ft.Kill(0, iteration=6)])


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_local_the_skipped_iterations_set_is_named_in_the_error(transport):
    """OSU's ``t_start = Wtime()`` at ``i == skip``, read after the loop: a rank
    restored past ``skip`` never sets it."""
    # it registers nothing, which the run says at the restore
    with pytest.warns(ft.NothingRegisteredWarning), \
            pytest.raises(ft.RankError, match=r"'t_start'.*restored to iteration \d+ of the "
                          r"iterations\(\) loop.*self.register\('t_start', None\)"):
        run(TimedLoop, "ready-flush", transport, [ft.Kill(1, iteration=10)], ranks=2)


def test_a_stale_local_the_loop_never_reads_is_not_warned_of():
    class Unread(Immutables):
        async def main(self, steps=12):
            comm, rank, size = self.comm, self.rank, self.size
            total = 0.0
            self.register("total", total)  # the loop reads self.total, never total
            async for i in self.iterations(steps):
                self.total += await comm.sendrecv(self.total + rank + i,
                                                  dest=(rank + 1) % size,
                                                  source=(rank - 1) % size)
            return self.total

    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.StaleLocalWarning)
        r = run(Unread, "standby", "sim", [ft.Kill(1, iteration=7)])
    assert r.events_of("restored") and not r.events_of("restored_not_in_place")
    assert r.results == run(Unread, "standby", "sim", []).results
