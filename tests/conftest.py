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


def _wait_heavy(item) -> int:
    """0 for a module of real-Ray tests, 1 for a test on the ray transport, 2 otherwise."""
    if any(m.name == "ray" for m in item.getparent(pytest.Module).own_markers):
        return 0
    if item.get_closest_marker("ray") or item.get_closest_marker("slow") or "[ray" in item.nodeid:
        return 1
    return 2


def pytest_collection_modifyitems(items):
    """Run the modules that mostly wait on Ray first.

    Under ``pytest -n N --dist loadfile`` (the README's test command) files go to the
    workers in collection order; a cluster test that starts last would leave the other
    workers idle while it waits, so the waiting starts first and overlaps the rest.
    Within a weight the collection order is kept (the sort is stable).
    """
    items.sort(key=_wait_heavy)
