"""mpi4py's test/test_p2p_obj.py on the facade (translated in mpi4py_port/p2p_obj.py)."""
import pytest

from .mpi4py_port import RUNS, VARIANTS, check, methods, outcomes
from .mpi4py_port.p2p_obj import P2PObj


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", methods(P2PObj))
@pytest.mark.parametrize("transport, ranks", RUNS)
def test_p2p_obj(transport, ranks, method, variant):
    check(P2PObj, transport, ranks, variant, method)


@pytest.mark.ray
def test_p2p_obj_on_ray(ray_session):
    got = outcomes(P2PObj, "ray", 3, ("world", "self_dup"))
    assert {k: o for k, o in got.items() if o and o[0] == "fail"} == {}
