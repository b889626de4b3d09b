"""``ftactors bench ...``: benchmarks that report ratios against a baseline measured in
the same run (this machine is shared and noisy, so absolute numbers mean little).

Each benchmark module provides ``add_arguments(parser)`` and ``main(args) -> int``, built
on ``_harness`` (common options, repetitions, the ratio table, the ``--json PATH`` file).

This package is not part of the installed ``ftactors``: it sits next to ``ftactors/`` in
a source checkout, where ``ftactors bench`` finds it (``ftactors/tools/bench.py``), and it
uses only ftactors' public names (``tests/benchmarks/test_public_names.py``).
Importing it puts the checkout's root on ``PYTHONPATH``, so that the processes a bench
starts import it too: the MPI baselines (``python -m benchmarks._cg_mpi`` under
``mpiexec``), the plain kernel's process, and the Ray workers of a Ray started after it
(an actor class of a bench is pickled by reference, and a worker imports its module).
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The source checkout this package is in (its ``ftactors/`` is next to it)."""

BENCHES = ("transport", "sim", "apps", "recovery", "erasure", "checkpoint", "migrate", "groups",
            "rs", "hc3i", "solver", "kernel", "footprint", "levels", "parts", "deaths", "nodes",
            "collectives", "osu", "profile")
"""Names of the benchmark modules in this package."""


def _importable_by_children() -> None:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])


_importable_by_children()


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks (ratios against a same-run baseline)")
    bsub = p.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        mod = importlib.import_module(f"{__name__}.{name}")
        bp = bsub.add_parser(name, help=(mod.__doc__ or name).strip().splitlines()[0])
        bp.add_argument("--json", default=None, metavar="PATH", help="write results as JSON")
        mod.add_arguments(bp)
        bp.set_defaults(func=mod.main)
