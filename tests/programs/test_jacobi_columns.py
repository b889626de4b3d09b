"""mpi4py's ex-2.32 (a Fortran-order grid, persistent requests on column views),
ported with the register idiom: the demo's 195 sweeps and grid, failure-free and after
a kill under the headline stacks (issue 40 reported 243 sweeps and another grid after
one kill, with no warning)."""
import numpy as np
import pytest

import ftactors as ft
from tests.programs.jacobi_columns import JacobiColumns, reference
from tests.programs.test_register_idiom import HEADLINE, run


def same(results, ranks):
    want = reference(ranks)
    return ([sweeps for sweeps, _ in results] == [sweeps for sweeps, _ in want]
            and all(np.array_equal(a, b) and a.flags.f_contiguous
                    for (_, a), (_, b) in zip(results, want)))


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_the_demo_s_sweeps_and_grid(transport):
    r = ft.run(JacobiColumns, 3, transport=transport)
    assert r.results[0][0] == 195 and same(r.results, 3)


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("stack", HEADLINE)
def test_after_a_kill(stack, transport):
    r = run(JacobiColumns, stack, transport, [ft.Kill(1, iteration=120)], ranks=4)
    assert r.events_of("killed") and same(r.results, 4)
