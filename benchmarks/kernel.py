"""The CG kernel with no messages: inside a rank on Ray against a plain process.

What a rank adds to the compute alone, isolated from messaging: the serial NPB CG kernel
(``apps.baseline_cg``: the matrix, then the timed outer iterations, no message sent)
run, in turn within each repetition,

* **plain**: in a fresh Python process (``python -m benchmarks.kernel CLASS``)
  with ``OMP_NUM_THREADS=1``, the BLAS threads Ray gives its workers (a plain process
  with the machine's default threads runs a different kernel: on a busy machine its
  spinning BLAS threads make it several times slower, on a quiet one slightly faster);
* **rank**: as the ``main()`` of one rank of ``ft.run`` on Ray, as every rank runs
  (``rank_niceness`` at its default: the driver's niceness);
* **rank-nice15**: the same at Ray's own worker niceness (``rank_niceness=15``), how
  ranks ran before they took the driver's.

Each figure is the timed section's seconds (wall) and its thread's CPU seconds, the
median over repetitions; the ratios are medians of the ratio within each repetition (the
pairs run back to back, so a change of the machine's load hits both sides of a pair).
Niceness shows in the wall time only (a smaller share of a busy CPU); what would make a
rank's instructions slower (an allocator, BLAS threads, caches) shows in the CPU time
too, which the machine's load disturbs far less. Target (issue #27): the kernel in a rank
within 1.05x of the plain process (wall).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import ftactors as ft
from ftactors.apps.cg import CG_CLASSES

from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from .apps import baseline_cg

WAYS = ("plain", "rank", "rank-nice15")
"""The table's rows; the first is the baseline of the ratios."""

TARGET = ("rank", 1.05)
"""(way, at most this ratio to ``plain``)."""


class Kernel(ft.Rank):
    """The serial kernel as a rank's ``main()``: no message sent."""

    async def main(self, problem_class: str) -> dict:
        return baseline_cg(problem_class)


def run_plain(problem_class: str) -> dict:
    """``apps.baseline_cg`` in a fresh Python process with one BLAS thread."""
    out = subprocess.run([sys.executable, "-m", __name__, problem_class], capture_output=True,
                         text=True, timeout=1800, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        raise RuntimeError(f"the plain kernel failed ({out.returncode}): {out.stderr[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_rank(problem_class: str, address: str | None, **options) -> dict:
    """``apps.baseline_cg`` as the ``main()`` of one rank on Ray (which answers no
    heartbeat while the kernel runs: it never awaits, so the bound is the run's)."""
    result = ft.run(Kernel, 1, args=(problem_class,), transport="ray", address=address,
                    timeout_s=1800, heartbeat_timeout_s=1800.0, **options)
    return result.results[0]


def measure(problem_class: str, repetitions: int, ways, address: str | None,
            log=print) -> dict:
    """``{way: {"seconds": [...], "cpu_s": [...]}}`` (one per repetition), the ways in
    turn within each repetition."""
    run = {"plain": lambda: run_plain(problem_class),
           "rank": lambda: run_rank(problem_class, address),
           "rank-nice15": lambda: run_rank(problem_class, address, rank_niceness=15)}
    samples: dict = {w: {"seconds": [], "cpu_s": []} for w in ways}
    for rep in range(repetitions):
        for way in ways:
            result = run[way]()
            samples[way]["seconds"].append(result["compute_s"])
            samples[way]["cpu_s"].append(result["compute_cpu_s"])
            log(f"  rep {rep + 1}: CG {problem_class} kernel {way}: {result['compute_s']:.3f} s, "
                f"CPU {result['compute_cpu_s']:.3f} s (load {os.getloadavg()[0]:.1f})",
                file=sys.stderr)
    return samples


def summarize(samples: dict) -> dict:
    """Median wall and CPU seconds per way; with ``plain`` measured, every way's median
    ratios of the pairs and the target's verdict."""
    rows = {w: {"seconds": statistics.median(v["seconds"]),
                "cpu_s": statistics.median(v["cpu_s"]), "samples": v["seconds"],
                "cpu_samples": v["cpu_s"]} for w, v in samples.items()}
    base = samples.get("plain")
    target = None
    if base:
        for way, values in samples.items():
            for key, figure in (("seconds", "ratio"), ("cpu_s", "cpu_ratio")):
                rows[way][figure] = statistics.median(
                    v / b for v, b in zip(values[key], base[key]))
        way, bound = TARGET
        if way in rows:
            target = {"figure": f"{way}/plain", "ratio": rows[way]["ratio"], "bound": bound,
                      "met": rows[way]["ratio"] <= bound}
    return {"rows": rows, "target": target}


def format_table(problem_class: str, summary: dict) -> str:
    rows = [["way", f"CG {problem_class} kernel (s)", "ratio to plain", "CPU (s)",
             "CPU ratio"]]
    for way, fig in summary["rows"].items():
        ratios = [f"{fig[k]:.2f}x" if k in fig else "-" for k in ("ratio", "cpu_ratio")]
        rows.append([way, f"{fig['seconds']:.3f}", ratios[0], f"{fig['cpu_s']:.3f}", ratios[1]])
    lines = [table(rows), "ratios: medians over repetitions of figure / plain's in the same one"]
    t = summary["target"]
    if t is not None:
        lines.append(f"target {t['figure']} <= {t['bound']}x: {t['ratio']:.2f}x "
                     f"{'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_repetitions(parser, 5, "repetitions of every way (pairs in turn); medians reported")
    parser.add_argument("--class", dest="problem_class", default="A", type=str.upper,
                        metavar="CLASS", help=f"NPB class: {', '.join(CG_CLASSES)} (default A)")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated subset of {','.join(WAYS)}")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if set(ways) - set(WAYS) or not ways or args.repetitions < 1 \
            or args.problem_class not in CG_CLASSES:
        return usage_error("kernel", f"--ways from {','.join(WAYS)}, --repetitions >= 1 and "
                                     f"--class one of {','.join(CG_CLASSES)} (got {args.ways!r}, "
                                     f"{args.repetitions}, {args.problem_class!r})")
    print(f"kernel benchmark: NPB CG {args.problem_class} with no messages, "
          f"{args.repetitions} repetition(s)")
    machine = machine_info()
    summary = summarize(measure(args.problem_class, args.repetitions, ways, args.address))
    print(format_table(args.problem_class, summary))
    write_results(args, "kernel", {"problem_class": args.problem_class,
                                   "repetitions": args.repetitions, **summary}, machine)
    return 0


if __name__ == "__main__":  # the plain process of ``run_plain``
    print(json.dumps(baseline_cg(sys.argv[1]), default=float))
