"""mpi4py's test/test_status.py and test/test_request.py on the facade (translated in
mpi4py_port/status.py and request.py). They need no peer: one rank, local and sim."""
import pytest

from .mpi4py_port import check, methods
from .mpi4py_port.request import RequestArrayTests, RequestTests
from .mpi4py_port.status import StatusTests

CASES = [(case, m) for case in (StatusTests, RequestTests, RequestArrayTests)
         for m in methods(case)]


@pytest.mark.parametrize("case, method", CASES,
                         ids=[f"{c.__name__}.{m}" for c, m in CASES])
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_status_request(transport, case, method):
    check(case, transport, 1, "world", method, ("world",))
