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
