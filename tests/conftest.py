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
    "tests/protocols/test_stacks_nodes.py": 163, "tests/transports/test_deaths_ray.py": 82,
    "tests/protocols/test_stacks_ray.py": 61,
    # its own two-node cluster with a dashboard (about 130 s alone, 130-360 s in the
    # suite): not at the very start, where its head failed to start twice within 3
    # minutes beside the node module's five-node cluster starting, nor last, where it
    # alone made the tail; this figure starts it seventh, a minute or so in
    "tests/tools/test_job_submit.py": 47,
    "tests/protocols/test_ready_flush_ray.py": 57,
    "tests/protocols/test_ddv_piggyback_ray.py": 49,
    "tests/benchmarks/test_bench_smoke.py": 49, "tests/transports/test_warm_ray.py": 45,
    "tests/tools/test_cli.py": 45, "tests/tools/test_simcheck.py": 44,
    "tests/facade/test_mpi4py_buf.py": 42, "tests/tools/test_stacks_cli.py": 39,
    "tests/protocols/test_standby_ray.py": 37, "tests/programs/test_shapes_rounds.py": 35,
    "tests/transports/test_ray_driver.py": 30, "tests/facade/test_conformance.py": 30,
    "tests/protocols/test_ready_flush.py": 30, "tests/programs/test_shapes_groups.py": 29,
    "tests/programs/test_farm_ray.py": 29, "tests/facade/test_buffer_api.py": 28,
    "tests/benchmarks/test_bench_osu.py": 28, "tests/programs/test_register_idiom.py": 26,
    "tests/protocols/test_code_before_loop.py": 25, "tests/runtime/test_deadlock.py": 22,
    "tests/tools/test_simcheck_programs.py": 22, "tests/protocols/test_rs_parts.py": 21,
    "tests/protocols/test_rs_backup.py": 20, "tests/programs/test_wildcard_replay.py": 17,
    "tests/test_site.py": 17, "tests/apps/test_cg.py": 16,
    "tests/protocols/test_shared_store.py": 15, "tests/transports/test_direct_ray.py": 15,
    "tests/transports/test_large_arrays_ray.py": 14, "tests/test_run.py": 13,
    "tests/programs/test_jacobi_columns.py": 12, "tests/protocols/test_ddv_piggyback.py": 11,
    "tests/tools/test_report.py": 11, "tests/runtime/test_notices.py": 11,
    "tests/protocols/test_level_plan.py": 10,
}
"""Seconds each of the longest modules took in a full run of the suite (the sum of its
tests' times in the JUnit report, -n 3 --dist loadfile on a machine shared with other
work, Nov 29 2026; test_warm_ray and test_ray_driver as estimated after they started
fewer processes): the order in which they start (a negative figure: after every other
module). Stale figures only change the order, never what runs."""


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
