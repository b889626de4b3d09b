"""A solver against MPI: NPB CG (class W on 8 ranks, class S on 4) on every way to run it.

One table of seconds and ratios, measured in one run: the serial numpy kernel (one
process, no messages), mpi4py on the same kernel and row-block layout (``_cg_mpi``,
started with the ``mpiexec`` of the installed ``mpich`` wheel: ``pip install
'ftactors[bench]'``; without it the row says so), ftactors on the ``local`` transport
(one process, every message through the full engine), and ftactors on Ray with
``data_plane="ray"`` (every batch an actor call) and ``data_plane="direct"`` (sockets
between ranks). Every figure is the timed outer iterations only (matrix generation and
process start left out), the slowest rank's, median over repetitions; the ratio column
is against mpi4py (against serial when mpi4py is missing).

Targets (issue #16): on Ray (direct) CG W 8 ranks at most 3x mpi4py, CG S 4 ranks at
most 5x; direct at least 5x faster than ``data_plane="ray"`` on CG W.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys

import ftactors as ft

from ...apps._npb_cg import CG_CLASSES as CLASSES
from ...apps.cg import CG
from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from .apps import baseline_cg

CASES = (("W", 8), ("S", 4))
"""(NPB class, ranks) of the table's columns."""

WAYS = ("serial", "mpi4py", "local", "ray", "direct")
"""The table's rows."""

TARGETS = (("W", 8, "direct", "mpi4py", 3.0), ("S", 4, "direct", "mpi4py", 5.0),
           ("W", 8, "direct", "ray", 0.2))
"""(class, ranks, way, against, at most this ratio of seconds)."""

MPI_HINT = "pip install 'ftactors[bench]' (mpi4py + mpich wheels)"


def mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), if mpi4py imports."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def run_mpi(problem_class: str, ranks: int, exe: str) -> float:
    out = subprocess.run([exe, "-n", str(ranks), sys.executable, "-m", "ftactors.tools.bench._cg_mpi",
                          problem_class], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"mpiexec failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["verified"]:
        raise RuntimeError(f"mpi4py CG {problem_class} did not verify: {result}")
    return result["time_s"]


def run_ftactors(problem_class: str, ranks: int, way: str, address: str | None) -> float:
    where = ({"transport": "local"} if way == "local" else
             {"transport": "ray", "address": address, "data_plane": way})
    result = ft.run(CG, ranks, args=(problem_class,), timeout_s=3600, **where)
    if not all(r["verified"] for r in result.results):
        raise RuntimeError(f"ftactors CG {problem_class} on {way} did not verify")
    return max(r["time_s"] for r in result.results)


def parse_cases(text: str) -> tuple[tuple[str, int], ...]:
    """``"W:8,S:4"`` as ``(("W", 8), ("S", 4))``; ValueError for anything else."""
    cases = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        problem_class, _, ranks = item.partition(":")
        if problem_class not in CLASSES or not ranks.isdigit() or int(ranks) < 1:
            raise ValueError(item)
        cases.append((problem_class, int(ranks)))
    if not cases:
        raise ValueError(text)
    return tuple(cases)


def measure(repetitions: int, ways, address: str | None, log=print,
            cases: tuple[tuple[str, int], ...] = CASES) -> dict:
    """``{(class, ranks): {way: [seconds per repetition] or a reason string}}``; the
    ways take turns within each repetition, so the machine's load hits them all."""
    exe = mpiexec()
    samples: dict = {case: {w: [] for w in ways} for case in cases}
    for rep in range(repetitions):
        for problem_class, ranks in cases:
            cell = samples[(problem_class, ranks)]
            for way in ways:
                if way == "serial":
                    cell[way].append(baseline_cg(problem_class)["compute_s"])
                elif way == "mpi4py":
                    if exe is None:
                        cell[way] = f"not installed: {MPI_HINT}"
                        continue
                    cell[way].append(run_mpi(problem_class, ranks, exe))
                else:
                    cell[way].append(run_ftactors(problem_class, ranks, way, address))
                log(f"  rep {rep + 1}: CG {problem_class} x{ranks} {way}: "
                    f"{cell[way][-1]:.3f} s", file=sys.stderr)
    return samples


def summarize(samples: dict) -> dict:
    """Medians, ratios to the baseline (mpi4py, else serial), target verdicts."""
    table = {}
    for case, cell in samples.items():
        med = {w: statistics.median(v) for w, v in cell.items() if isinstance(v, list) and v}
        base = "mpi4py" if "mpi4py" in med else "serial"
        table[case] = {w: {"seconds": med[w], "ratio": med[w] / med[base], "samples": cell[w]}
                       if w in med else {"missing": cell[w]} for w in cell}
        table[case]["_baseline"] = base
    targets = []
    for problem_class, ranks, way, against, bound in TARGETS:
        cell = table.get((problem_class, ranks), {})
        if "seconds" in cell.get(way, {}) and "seconds" in cell.get(against, {}):
            ratio = cell[way]["seconds"] / cell[against]["seconds"]
            targets.append({"case": f"CG {problem_class} x{ranks}", "figure": f"{way}/{against}",
                            "ratio": ratio, "bound": bound, "met": ratio <= bound})
    return {"table": table, "targets": targets}


def format_table(summary: dict) -> str:
    cells = summary["table"]
    rows = [["way"] + [f"CG {c} x{n} (s)" for c, n in cells] +
            [f"CG {c} x{n} ratio" for c, n in cells]]
    missing = []
    for way in [w for w in WAYS if any(w in cell for cell in cells.values())]:
        row, ratios = [way], []
        for cell in cells.values():
            fig = cell[way]
            if "seconds" in fig:
                row.append(f"{fig['seconds']:.3f}")
                ratios.append(f"{fig['ratio']:.2f}x")
            else:
                row.append("-")
                ratios.append("-")
                missing.append(f"{way}: {fig['missing']}")
        rows.append(row + ratios)
    lines = [table(rows)]
    base = next(iter(cells.values()))["_baseline"]
    lines.append(f"ratios: seconds / {base}'s seconds in the same column")
    lines.extend(sorted(set(missing)))
    for t in summary["targets"]:
        lines.append(f"target {t['case']} {t['figure']} <= {t['bound']}x: "
                     f"{t['ratio']:.2f}x {'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_repetitions(parser, 3, "repetitions of every way; medians reported")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated subset of {','.join(WAYS)}")
    parser.add_argument("--cases", default=",".join(f"{c}:{n}" for c, n in CASES),
                        help="NPB class:ranks columns (default: the table's W:8,S:4)")
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
                                     f"{','.join(CLASSES)} (got {exc})")
    print(f"solver benchmark: NPB CG, {args.repetitions} repetition(s)")
    machine = machine_info()
    summary = summarize(measure(args.repetitions, ways, args.address, cases=cases))
    print(format_table(summary))
    write_results(args, "solver", {
        "repetitions": args.repetitions,
        "table": {f"CG {c} x{n}": cell for (c, n), cell in summary["table"].items()},
        "targets": summary["targets"],
    }, machine)
    return 0
