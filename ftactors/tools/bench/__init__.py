"""``ftactors bench ...``: benchmarks that report ratios against a baseline measured in
the same run (this machine is shared and noisy, so absolute numbers mean little).

Each benchmark module provides ``add_arguments(parser)`` and ``main(args) -> int``, built
on ``_harness`` (common options, repetitions, the ratio table, the ``--json PATH`` file).
"""
from __future__ import annotations

import importlib

BENCHES = ("transport", "sim", "apps", "recovery", "erasure", "checkpoint", "migrate", "groups",
            "rs", "hc3i", "solver", "kernel", "footprint", "levels", "parts", "deaths", "nodes",
            "collectives")
"""Names of the benchmark modules in this package."""


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks (ratios against a same-run baseline)")
    bsub = p.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        mod = importlib.import_module(f"{__name__}.{name}")
        bp = bsub.add_parser(name, help=(mod.__doc__ or name).strip().splitlines()[0])
        bp.add_argument("--json", default=None, metavar="PATH", help="write results as JSON")
        mod.add_arguments(bp)
        bp.set_defaults(func=mod.main)
