"""mpi4py's own tests, translated to the facade's async calls (every assertion kept).

Each module here is one mpi4py test file (``test/test_p2p_obj.py`` -> ``p2p_obj.py``):
its test class's methods, made ``async``, with the changes the facade needs and nothing
else; the buffer tests loop over numpy's types through ``arrayimpl.py`` (mpi4py's helper
cut down to numpy). ``tests/facade/test_mpi4py_*.py`` run them on every transport.

The rules of translation (docs/porting.md, "Differences from mpi4py", lists why):
``recv``/``irecv``/``sendrecv`` take no ``buf``; waits are awaited; a polling loop
(``while not req.test()[0]``) yields to the event loop between tests
(``await asyncio.sleep(0)``), since ``test`` never waits; ``Dup()`` is ``await
comm.dup()`` and nothing is freed; ``COMM_SELF`` is a communicator of one rank made by
``split``. A test that needs what the facade leaves out (derived datatypes, info objects,
mpi4py's internals) calls ``self.skipTest`` with the reason, so it shows as skipped.
"""
from __future__ import annotations

import traceback
import unittest

import ftactors as ft

VARIANTS = ("self", "world", "self_dup", "world_dup")
"""mpi4py's four communicators: COMM_SELF, COMM_WORLD and a Dup of each."""


class Case(unittest.TestCase):
    """A test class body: unittest's assertions, ``COMM`` set before each method."""

    __test__ = False
    COMM = None

    def __init__(self, comm=None):
        super().__init__()
        self.COMM = comm


async def _communicator(world, variant: str):
    base = world if variant.startswith("world") else await world.split(world.rank, 0)
    return await base.dup() if variant.endswith("dup") else base


class Conformance(ft.Rank):
    """Runs every ``test*`` method of ``case`` on each of ``variants``; returns
    ``{(variant, method): None | ("skip", reason) | ("fail", traceback)}``. A barrier
    between methods keeps the ranks in step. ``case`` may be a tuple of cases, run one
    after the other in one job (keys ``(variant, "Case.method")``): what keeps Ray cheap."""

    async def main(self, case, variants=VARIANTS, names=None):
        out = {}
        cases = case if isinstance(case, tuple) else (case,)
        for variant in variants:
            comm = await _communicator(self.comm, variant)
            for one in cases:
                for name in methods(one) if names is None else names:
                    key = (variant, name if one is case else f"{one.__name__}.{name}")
                    try:
                        await getattr(one(comm), name)()
                        out[key] = None
                    except unittest.SkipTest as skip:
                        out[key] = ("skip", str(skip))
                    except Exception:
                        out[key] = ("fail", traceback.format_exc())
                    await self.comm.barrier()
        return out


def outcomes(case: type, transport: str, ranks: int, variants=VARIANTS, **options) -> dict:
    """``{(variant, method): outcome}`` merged over the ranks: the first failure of any
    rank, else a skip, else None (``options``: of the run)."""
    results = ft.run(Conformance, ranks=ranks, transport=transport, timeout_s=300,
                     args=(case, variants), **options).results
    merged = {}
    for key in results[0]:
        per_rank = [r[key] for r in results]
        merged[key] = next((o for o in per_rank if o and o[0] == "fail"),
                           next((o for o in per_rank if o), None))
    return merged


RUNS = (("local", 3), ("sim", 2), ("sim", 5))
"""Where every translated test runs: (transport, ranks) of COMM_WORLD."""

_outcomes: dict = {}


def check(case: type, transport: str, ranks: int, variant: str, method: str,
          variants=VARIANTS) -> None:
    """Pass, skip or fail as ``case.method`` did on ``variant`` (one run per ``case``,
    transport and size, shared by its methods)."""
    import pytest
    key = (case, transport, ranks, tuple(variants))
    if key not in _outcomes:
        _outcomes[key] = outcomes(case, transport, ranks, variants)
    outcome = _outcomes[key][(variant, method)]
    if outcome is None:
        return
    kind, text = outcome
    if kind == "skip":
        pytest.skip(text)
    pytest.fail(text, pytrace=False)


def methods(case: type) -> list[str]:
    return sorted(n for n in dir(case) if n.startswith("test"))
