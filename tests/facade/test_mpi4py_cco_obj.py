"""mpi4py's test/test_cco_obj.py on the facade (translated in mpi4py_port/cco_obj.py),
blocking and through the nonblocking collectives."""
import pytest

from .mpi4py_port import RUNS, VARIANTS, check, methods, outcomes
from .mpi4py_port.cco_obj import CCOObj, CCOObjNonblocking


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", methods(CCOObj))
@pytest.mark.parametrize("transport, ranks", RUNS)
@pytest.mark.parametrize("case", [CCOObj, CCOObjNonblocking], ids=["blocking", "nonblocking"])
def test_cco_obj(case, transport, ranks, method, variant):
    check(case, transport, ranks, variant, method)


@pytest.mark.ray
def test_cco_obj_on_ray(ray_session):
    got = outcomes(CCOObj, "ray", 3, ("world",))
    assert {k: o for k, o in got.items() if o} == {}
