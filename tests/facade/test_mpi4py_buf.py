"""mpi4py's buffer tests on the facade, for numpy arrays: test/test_p2p_buf.py,
test/test_cco_buf.py and test/test_cco_nb_buf.py (translated in mpi4py_port/p2p_buf.py,
cco_buf.py, cco_nb_buf.py). The buffer code does not depend on the communicator, so each
body runs on COMM_WORLD everywhere and on a Dup of COMM_SELF (mpi4py's size-1 paths) once,
not on all four of mpi4py's communicators everywhere; Ray runs every body of the three
files in one job."""
import pytest

from .mpi4py_port import check, methods, outcomes
from .mpi4py_port.cco_buf import CCOBuf, CCOBufInplace, ReduceLocal
from .mpi4py_port.cco_nb_buf import NBCCOBuf, NBCCOBufInplace
from .mpi4py_port.p2p_buf import P2PBuf

RUNS = [("local", 3, "world"), ("sim", 2, "world"), ("sim", 2, "self_dup"), ("sim", 5, "world")]
"""(transport, ranks of COMM_WORLD, communicator) of every translated body."""
CASES = [(case, m) for case in (P2PBuf, CCOBuf, CCOBufInplace, NBCCOBuf, NBCCOBufInplace)
         for m in methods(case)]


@pytest.mark.parametrize("case, method", CASES, ids=[f"{c.__name__}.{m}" for c, m in CASES])
@pytest.mark.parametrize("transport, ranks, variant", RUNS)
def test_buf(transport, ranks, variant, case, method):
    check(case, transport, ranks, variant, method, (variant,))


@pytest.mark.parametrize("method", methods(ReduceLocal))
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_reduce_local(transport, method):
    check(ReduceLocal, transport, 1, "world", method, ("world",))


@pytest.mark.ray
def test_buf_on_ray(ray_session):
    got = outcomes((P2PBuf, CCOBuf, CCOBufInplace, ReduceLocal, NBCCOBuf, NBCCOBufInplace),
                   "ray", 3, ("world",))
    assert {k: o for k, o in got.items() if o and o[0] == "fail"} == {}
    assert {k for k, o in got.items() if o} == {("world", "P2PBuf.testConstructor")}
