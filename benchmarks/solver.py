"""A solver against MPI: NPB CG and a halo exchange on every way to run them.

One table of seconds and ratios, measured in one run, a column per case: NPB CG class W
on 8 ranks, S on 4, A on 2 and 4, B on 2, and ``halo`` (the Jacobi stencil of
``apps.stencil`` on strips of whole rows, ``HALO_NX`` = 16384 points, so every halo is
a 128 KiB row; ``HALO_ROWS`` rows per rank, ``HALO_ITERATIONS`` iterations). The rows:
the serial kernel (one process, no messages; CG in a plain process with one BLAS thread,
``kernel.run_plain``), mpi4py on the same kernel and layout (``_cg_mpi``,
``_stencil_mpi``, started with the ``mpiexec`` of the installed ``mpich`` wheel: ``pip
install 'ftactors[bench]'``; without it the row says so), the asyncio floor (CG on a bare
asyncio message layer in separate processes, ``_cg_asyncio``: ``direct / asyncio`` is
what ftactors adds to what asyncio ranks cost), ftactors on the ``local``
transport (one process, every message through the full engine), and ftactors on Ray with
``data_plane="ray"`` (every batch an actor call) and ``data_plane="direct"`` (sockets
between ranks). Every figure is the timed iterations only (matrix or grid generation and
process start left out), the slowest rank's, median over repetitions; the ratio column
is against mpi4py (against serial when mpi4py is missing). Every run is checked: CG by
NPB's verification, the stencil by its checksum against the serial run's.

mpi4py's ranks get ``OMP_NUM_THREADS=1`` (unless it is set), the one BLAS thread Ray
gives its workers and what MPI ranks that fill the cores are given: with the default
one thread per core, ranks that share the cores spin in BLAS against each other.

Targets (issue #42): what ftactors adds to the asyncio floor, ``direct / asyncio``, at
most 1.15x on CG W x8, S x4 and A x4; against mpi4py, CG A x2 at most 1.15x and B x2 at
most 1.05x; and (issue #16) direct at least 5x faster than ``data_plane="ray"`` on CG W.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import ftactors as ft
from ftactors.apps.cg import CG, CG_CLASSES as CLASSES
from ftactors.apps.stencil import Stencil, checksum, stencil_serial

from ._cg_asyncio import power_of_two
from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from .kernel import run_plain

HALO = "halo"
"""The stencil case's name (beside the CG classes)."""

HALO_NX, HALO_ROWS, HALO_ITERATIONS = 16384, 16, 200
"""The halo case: interior points per row (16384 doubles: 128 KiB halos), rows per rank,
timed iterations."""

CASES = (("W", 8), ("S", 4), ("A", 2), ("A", 4), ("B", 2), (HALO, 4))
"""(NPB class or ``HALO``, ranks) of the table's columns."""

WAYS = ("serial", "mpi4py", "asyncio", "local", "ray", "direct")
"""The table's rows."""

TARGETS = (("W", 8, "direct", "asyncio", 1.15), ("S", 4, "direct", "asyncio", 1.15),
           ("A", 4, "direct", "asyncio", 1.15), ("A", 2, "direct", "mpi4py", 1.15),
           ("B", 2, "direct", "mpi4py", 1.05), ("W", 8, "direct", "ray", 0.2))
"""(class, ranks, way, against, at most this ratio of seconds)."""

HEARTBEAT_TIMEOUT_S = 600.0
"""Ranks silent this long are declared hung (``run_ftactors``)."""

MPI_HINT = "pip install 'ftactors[bench]' (mpi4py + mpich wheels)"


def label(problem: str, ranks: int) -> str:
    """A case's name in the table: ``CG A x2``, ``halo x4``."""
    return f"{problem} x{ranks}" if problem == HALO else f"CG {problem} x{ranks}"


def halo_grid(ranks: int) -> dict:
    """The stencil's ``main()`` keyword arguments for the halo case on ``ranks`` ranks."""
    return {"ny": HALO_ROWS * ranks, "nx": HALO_NX, "iterations": HALO_ITERATIONS,
            "grid": (ranks, 1)}


def mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), if mpi4py imports."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def run_mpi(problem: str, ranks: int, exe: str) -> dict:
    """mpi4py's ``{"time_s", ...}`` for a case (``_cg_mpi`` or ``_stencil_mpi``)."""
    if problem == HALO:
        g = halo_grid(ranks)
        argv = ["_stencil_mpi", *map(str, (g["ny"], g["nx"], g["iterations"], *g["grid"]))]
    else:
        argv = ["_cg_mpi", problem]
    return _run_baseline([exe, "-n", str(ranks)], argv, problem, "mpi4py")


def run_floor(problem: str, ranks: int) -> dict:
    """The asyncio floor's ``{"time_s", ...}`` for a CG case (``_cg_asyncio``)."""
    return _run_baseline([], ["_cg_asyncio", problem, str(ranks)], problem, "the asyncio floor")


def _run_baseline(launcher: list[str], argv: list[str], problem: str, name: str) -> dict:
    """``run_module``'s JSON line; RuntimeError when a CG case does not verify."""
    result = run_module(launcher, argv, name)
    if problem != HALO and not result["verified"]:
        raise RuntimeError(f"{name}'s CG {problem} did not verify: {result}")
    return result


def run_module(launcher: list[str], argv: list[str], name: str) -> dict:
    """The last line of ``python -m benchmarks.MODULE ARGS`` under ``launcher`` (JSON),
    with one BLAS thread per process; RuntimeError when it fails."""
    out = subprocess.run([*launcher, sys.executable, "-m", f"benchmarks.{argv[0]}", *argv[1:]],
                         capture_output=True, text=True, timeout=1800,
                         env={"OMP_NUM_THREADS": "1", **os.environ})
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_ftactors(problem: str, ranks: int, way: str, address: str | None) -> dict:
    """The slowest rank's ``{"time_s", ...}`` of a case run with ftactors ``way``.

    Each rank generates the whole NPB matrix in ``main()`` without awaiting, so it answers
    no heartbeat meanwhile: for class B that is 10 s and more on a busy machine, past the
    default bound, hence a bound of ``HEARTBEAT_TIMEOUT_S`` (nothing is killed here)."""
    where = ({"transport": "local"} if way == "local" else
             {"transport": "ray", "address": address, "data_plane": way,
              "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S})
    if problem == HALO:
        result = ft.run(Stencil, ranks, kwargs=dict(halo_grid(ranks), verify=False),
                        timeout_s=3600, **where)
    else:
        result = ft.run(CG, ranks, args=(problem,), timeout_s=3600, **where)
        if not all(r["verified"] for r in result.results):
            raise RuntimeError(f"ftactors CG {problem} on {way} did not verify")
    return max(result.results, key=lambda r: r["time_s"])


def run_serial(problem: str, ranks: int) -> dict:
    """The serial kernel's ``{"time_s", ...}``: CG in a plain process, the stencil here."""
    if problem != HALO:
        return {"time_s": run_plain(problem)["compute_s"]}
    g = halo_grid(ranks)
    t0 = time.perf_counter()
    grid = stencil_serial(g["ny"], g["nx"], g["iterations"])
    return {"time_s": time.perf_counter() - t0, "checksum": checksum(grid)}


def run_way(problem: str, ranks: int, way: str, address: str | None, exe: str | None) -> dict:
    if way == "serial":
        return run_serial(problem, ranks)
    if way == "mpi4py":
        return run_mpi(problem, ranks, exe)
    if way == "asyncio":
        return run_floor(problem, ranks)
    return run_ftactors(problem, ranks, way, address)


def unavailable(problem: str, ranks: int, way: str, exe: str | None) -> str | None:
    """Why ``way`` cannot run a case, or None."""
    if way == "mpi4py" and exe is None:
        return f"not installed: {MPI_HINT}"
    if way == "asyncio" and problem == HALO:
        return "the asyncio floor runs CG only"
    if way == "asyncio" and not power_of_two(ranks):
        return "the asyncio floor runs power-of-two rank counts only"
    return None


def parse_cases(text: str) -> tuple[tuple[str, int], ...]:
    """``"W:8,halo:4"`` as ``(("W", 8), ("halo", 4))``; ValueError for anything else."""
    cases = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        problem, _, ranks = item.partition(":")
        if (problem not in CLASSES and problem != HALO) or not ranks.isdigit() \
                or int(ranks) < 1:
            raise ValueError(item)
        cases.append((problem, int(ranks)))
    if not cases:
        raise ValueError(text)
    return tuple(cases)


def measure(repetitions: int, ways, address: str | None, log=print,
            cases: tuple[tuple[str, int], ...] = CASES) -> dict:
    """``{(problem, ranks): {way: [seconds per repetition] or a reason string}}``; the
    ways take turns within each repetition, so the machine's load hits them all. A
    stencil run whose checksum differs from the serial run's raises RuntimeError."""
    exe = mpiexec()
    samples: dict = {case: {w: [] for w in ways} for case in cases}
    reference: dict = {}  # the halo case's serial checksum, per rank count
    for rep in range(repetitions):
        for problem, ranks in cases:
            cell = samples[(problem, ranks)]
            for way in ways:
                reason = unavailable(problem, ranks, way, exe)
                if reason is not None:
                    cell[way] = reason
                    continue
                result = run_way(problem, ranks, way, address, exe)
                if problem == HALO:
                    if ranks not in reference:
                        reference[ranks] = run_serial(problem, ranks)["checksum"]
                    if result["checksum"] != reference[ranks]:
                        raise RuntimeError(f"{label(problem, ranks)} on {way}: checksum "
                                           f"{result['checksum']!r}, serial "
                                           f"{reference[ranks]!r}")
                cell[way].append(result["time_s"])
                log(f"  rep {rep + 1}: {label(problem, ranks)} {way}: {cell[way][-1]:.3f} s "
                    f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return samples


def summarize(samples: dict) -> dict:
    """Medians, ratios to the baseline (mpi4py, else serial), target verdicts."""
    table = {}
    for case, cell in samples.items():
        med = {w: statistics.median(v) for w, v in cell.items() if isinstance(v, list) and v}
        base = next((w for w in ("mpi4py", "serial") if w in med), None)
        table[case] = {w: {"seconds": med[w], "samples": cell[w]} if w in med
                       else {"missing": cell[w]} for w in cell}
        if base is not None:  # else no ratio: neither baseline ran
            for w in med:
                table[case][w]["ratio"] = med[w] / med[base]
        table[case]["_baseline"] = base
    targets = []
    for problem_class, ranks, way, against, bound in TARGETS:
        cell = table.get((problem_class, ranks), {})
        if "seconds" in cell.get(way, {}) and "seconds" in cell.get(against, {}):
            ratio = cell[way]["seconds"] / cell[against]["seconds"]
            targets.append({"case": label(problem_class, ranks), "figure": f"{way}/{against}",
                            "ratio": ratio, "bound": bound, "met": ratio <= bound})
    above_floor = {label(*case): cell["direct"]["seconds"] / cell["asyncio"]["seconds"]
                   for case, cell in table.items()
                   if "seconds" in cell.get("direct", {}) and "seconds" in cell.get("asyncio", {})}
    return {"table": table, "targets": targets, "above_floor": above_floor}


def format_table(summary: dict) -> str:
    """A row per case: every way's seconds, then its ratio to the case's baseline."""
    cells = summary["table"]
    ways = [w for w in WAYS if any(w in cell for cell in cells.values())]
    rows = [["case"] + [f"{w} (s)" for w in ways] + [f"{w} ratio" for w in ways]]
    missing = []
    for case, cell in cells.items():
        seconds, ratios = [], []
        for way in ways:
            fig = cell.get(way, {"missing": "not run"})
            if "seconds" in fig:
                seconds.append(f"{fig['seconds']:.3f}")
                ratios.append(f"{fig['ratio']:.2f}x" if "ratio" in fig else "-")
            else:
                seconds.append("-")
                ratios.append("-")
                missing.append(f"{way}: {fig['missing']}")
        rows.append([label(*case)] + seconds + ratios)
    lines = [table(rows)]
    base = next(iter(cells.values()))["_baseline"]
    lines.append(f"ratios: seconds / {base}'s seconds in the same row" if base else
                 "no ratios: neither mpi4py nor serial ran")
    lines.extend(sorted(set(missing)))
    for t in summary["targets"]:
        lines.append(f"target {t['case']} {t['figure']} <= {t['bound']}x: "
                     f"{t['ratio']:.2f}x {'met' if t['met'] else 'NOT met'}")
    for case, ratio in summary["above_floor"].items():
        lines.append(f"what ftactors adds to the asyncio floor, {case}: direct/asyncio "
                     f"{ratio:.2f}x")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_repetitions(parser, 3, "repetitions of every way; medians reported")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated subset of {','.join(WAYS)}")
    default = ",".join(f"{c}:{n}" for c, n in CASES)
    parser.add_argument("--cases", default=default,
                        help=f"CLASS:RANKS columns, CLASS an NPB class or {HALO} (the "
                             f"stencil with 128 KiB halos); default {default}")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown or not ways or args.repetitions < 1:
        return usage_error("solver", f"--ways from {','.join(WAYS)} and --repetitions >= 1 "
                                     f"(got {args.ways!r}, {args.repetitions})")
    try:
        cases = parse_cases(args.cases)
    except ValueError as exc:
        return usage_error("solver", f"--cases takes CLASS:RANKS items, CLASS one of "
                                     f"{','.join(CLASSES)},{HALO} (got {exc})")
    print(f"solver benchmark: NPB CG and a halo exchange, {args.repetitions} repetition(s)")
    machine = machine_info()
    summary = summarize(measure(args.repetitions, ways, args.address, cases=cases))
    print(format_table(summary))
    write_results(args, "solver", {
        "repetitions": args.repetitions,
        "table": {label(*case): cell for case, cell in summary["table"].items()},
        "targets": summary["targets"], "above_floor": summary["above_floor"],
    }, machine)
    return 0
