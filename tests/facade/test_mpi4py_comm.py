"""The lowercase parts of mpi4py's test/test_comm.py on the facade (translated in
mpi4py_port/comm.py)."""
import pytest

from .mpi4py_port import RUNS, VARIANTS, check, methods
from .mpi4py_port.comm import CommTests


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", methods(CommTests))
@pytest.mark.parametrize("transport, ranks", RUNS)
def test_comm(transport, ranks, method, variant):
    check(CommTests, transport, ranks, variant, method)
