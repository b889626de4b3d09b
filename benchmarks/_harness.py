"""What every ``ftactors bench`` subcommand shares: its common options, repetitions, the
ratio table it prints, and the JSON it writes with ``--json``.

A benchmark module provides ``add_arguments(parser)`` and ``main(args) -> int``; the
package's ``add_bench`` gives every one ``--json PATH``. The figures mean little on their
own on a shared, noisy machine, so each benchmark measures its baseline in the same run
and reports ratios; ``machine_info`` says where it ran.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
import time
from typing import Callable, Sequence

import numpy as np

import ftactors as ft

TRANSPORTS = ("ray", "local", "sim")
"""The order a benchmark runs its rank counts in: real ranks first, simulated last."""


# ------------------------------------------------------------------------- options
def rank_list(text: str) -> list[int]:
    """``--*-ranks``: comma-separated counts; "none" (or empty, or 0) for none."""
    text = text.strip()
    if text in ("", "none", "0"):
        return []
    return [int(v) for v in text.split(",") if v.strip()]


def add_rank_counts(parser, *, ray: str, sim: str, local: str = "none",
                    sim_note: str = "") -> None:
    """``--ray-ranks``, ``--sim-ranks`` and ``--local-ranks``: the rank counts to run on
    each transport ('none' skips one)."""
    parser.add_argument("--ray-ranks", default=ray,
                        help=f"real rank counts on Ray (default {ray}; 'none' to skip)")
    parser.add_argument("--sim-ranks", default=sim,
                        help=f"simulated rank counts (default {sim}{sim_note}; 'none' to skip)")
    parser.add_argument("--local-ranks", default=local,
                        help=f"rank counts on the local transport (default {local}; a smoke test)")


def rank_plan(args) -> list[tuple[str, int]]:
    """(transport, ranks) for every count of ``add_rank_counts``'s options, Ray first.

    Raises:
        ValueError: a list that is not comma-separated integers.
    """
    counts = {t: rank_list(getattr(args, f"{t}_ranks")) for t in TRANSPORTS}
    return [(t, n) for t in TRANSPORTS for n in counts[t]]


def add_sim_network(parser, *, latency_us: float, bandwidth_gbps: float,
                    jitter_us: float | None = None) -> None:
    """The sim transport's network model: ``--sim-latency-us``, ``--sim-bandwidth-gbps``
    and, given a default, ``--sim-jitter-us``."""
    parser.add_argument("--sim-latency-us", type=float, default=latency_us,
                        help=f"sim: per-message latency, us (default {latency_us:g})")
    parser.add_argument("--sim-bandwidth-gbps", type=float, default=bandwidth_gbps,
                        help=f"sim: link bandwidth, Gbit/s (default {bandwidth_gbps:g})")
    if jitter_us is not None:
        parser.add_argument("--sim-jitter-us", type=float, default=jitter_us,
                            help=f"sim: uniform random extra delay per batch, us "
                                 f"(default {jitter_us:g})")


def sim_network(args) -> dict:
    """``ft.run`` options for ``add_sim_network``'s model."""
    options = {"sim_latency_s": args.sim_latency_us * 1e-6,
               "sim_bandwidth_Bps": args.sim_bandwidth_gbps * 1e9 / 8}
    if getattr(args, "sim_jitter_us", None) is not None:
        options["sim_jitter_s"] = args.sim_jitter_us * 1e-6
    return options


def add_repetitions(parser, default: int | None, what: str, *,
                    flag: str = "--repetitions") -> None:
    """How many times each figure is measured (``args.repetitions``); ``what`` says how
    they combine (a median, the best one)."""
    shown = "" if default is None else f" (default {default})"
    parser.add_argument(flag, dest="repetitions", type=int, default=default,
                        help=f"{what}{shown}")


def best_of(fn: Callable[[], object], repetitions: int) -> float:
    """The shortest of ``repetitions`` timed calls of ``fn`` (s): the least disturbed by
    the machine's other load."""
    times = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


# ------------------------------------------------------------------------- results
def usage_error(bench: str, message: str) -> int:
    """Say what is wrong with the options; the exit code for bad usage (2)."""
    print(f"ftactors bench {bench}: {message}", file=sys.stderr)
    return 2


def table(rows: Sequence[Sequence[str]], *, left: int = 1, header: int = 1,
          indent: str = "  ") -> str:
    """An aligned text table: the first ``header`` rows are the header, underlined; the
    first ``left`` columns are left-aligned (labels), the others right-aligned (figures,
    ratios)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [indent + "  ".join(cell.ljust(w) if i < left else cell.rjust(w)
                                for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(header, indent + "-" * max(len(line) - len(indent) for line in lines))
    return "\n".join(lines)


def machine_info() -> dict:
    """Where the figures were measured (they mean little without it)."""
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "ray": importlib.metadata.version("ray"),
            "numpy": np.__version__,
            "ftactors": ft.__version__, "load_avg_1m": os.getloadavg()[0]}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((line.split(":", 1)[1].strip() for line in f
                                      if line.startswith("model name")), None)
    except OSError:
        info["cpu_model"] = platform.processor() or None
    return info


def write_results(args, bench: str, results: dict, machine: dict | None = None) -> None:
    """Write ``--json``: the benchmark's name, its results and the machine (as measured
    before the runs, when given: the load average then is the one that counts), and say
    so; no ``--json``: nothing."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": bench, **results, "machine": machine or machine_info()}, f,
                      indent=2, default=str)
        print(f"wrote {args.json}")
