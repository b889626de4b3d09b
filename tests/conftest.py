"""Shared fixtures: one embedded Ray per test session, and the transport matrix."""
import os

import pytest

TRANSPORTS = ["local", "sim", "ray"]


@pytest.fixture(scope="session")
def ray_session():
    """Start (once) the embedded Ray that every ``transport="ray"`` run reuses."""
    from ftactors.transports.ray import ensure_ray
    ensure_ray()
    yield
    import ray
    ray.shutdown()


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    """Run the test body on each transport (Ray started once for the session)."""
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


SECONDS = {
    "tests/protocols/test_stacks_nodes.py": 350, "tests/programs/test_wildcard_replay.py": 90,
    "tests/benchmarks/test_bench_smoke.py": 156,
    "tests/transports/test_deaths_ray.py": 108, "tests/protocols/test_ready_flush_ray.py": 106,
    "tests/protocols/test_standby_ray.py": 71, "tests/tools/test_stacks_cli.py": 68,
    "tests/tools/test_cli.py": 66, "tests/facade/test_conformance.py": 64,
    "tests/tools/test_simcheck.py": 60, "tests/protocols/test_stacks_ray.py": 52,
    "tests/facade/test_mpi4py_buf.py": 47, "tests/transports/test_ray_driver.py": 46,
    "tests/facade/test_buffer_api.py": 39, "tests/transports/test_warm_ray.py": 35,
    "tests/facade/test_mpi4py_p2p_obj.py": 25, "tests/protocols/test_rs_parts.py": 23,
    "tests/facade/test_mpi4py_cart.py": 23, "tests/facade/test_mpi4py_cco_obj.py": 23,
    "tests/test_run.py": 21, "tests/runtime/test_notices.py": 20, "tests/apps/test_cg.py": 20,
    "tests/protocols/test_ddv_piggyback_ray.py": 18,
    # its own two-node cluster with a dashboard (about 200 s of Ray jobs): not at the
    # very start, where its head failed to start twice within 3 minutes beside the node
    # module's five-node cluster starting, nor last, where it alone made the tail
    "tests/tools/test_job_submit.py": 100,
}
"""Seconds each of the longest modules took in a full run of the suite (worker time,
--durations=0, Nov 27 2026, with rank processes kept between runs): the order in which
they start (a negative figure: after every other module). Stale figures only change the
order, never what runs."""


def _seconds(item) -> float:
    """How long ``item``'s module is expected to take: its figure in ``SECONDS``, else a
    guess from what it waits on (a module of real-Ray tests, a test on the ray
    transport, or neither)."""
    module = item.getparent(pytest.Module)
    path = os.path.relpath(str(module.path), os.path.dirname(os.path.dirname(__file__)))
    if path in SECONDS:
        return SECONDS[path]
    if any(m.name == "ray" for m in module.own_markers):
        return 30
    if item.get_closest_marker("ray") or item.get_closest_marker("slow") or "[ray" in item.nodeid:
        return 10
    return 0


def pytest_configure(config):
    """Hand files to the xdist workers in collection order (``pytest_collection_modifyitems``
    below): pytest-xdist 3.7 and newer reorders them by their number of tests unless told
    not to (``--no-loadscope-reorder``), which started the longest module (18 tests, 350
    s) 42nd of 100."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    """Start the longest modules first.

    Under ``pytest -n N --dist loadfile`` (the README's test command) files go to the
    workers in collection order as they ask for more; a long module that starts last
    leaves the other workers idle while it finishes (the last CI spent its final three
    minutes on two such modules), so the longest start first (LPT order) and the short
    ones fill in. Within a module the collection order is kept (the sort is stable).
    """
    seconds = {}
    for item in items:
        seconds.setdefault(item.getparent(pytest.Module).nodeid, _seconds(item))
    items.sort(key=lambda item: -seconds[item.getparent(pytest.Module).nodeid])
