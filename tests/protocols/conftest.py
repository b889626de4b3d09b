"""Fixtures the protocol tests share."""
import pytest

import ftactors as ft

from .programs import FLOOD, Flood


@pytest.fixture(scope="session")
def flood_reference():
    """``flood_reference(n)``: the failure-free ``Flood`` run's results on ``n`` ranks
    with the ``FLOOD`` settings, what every recovered run must equal (run once per ``n``)."""
    runs = {}

    def of(n: int) -> list:
        if n not in runs:
            runs[n] = ft.run(Flood, n, transport="local", kwargs=FLOOD).results
        return runs[n]

    return of
