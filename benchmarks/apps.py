"""The apps (CG, HPL, stencil, coupled) on 1, 2, 4 ranks against a single-process numpy run.

What is measured, in one run, for each app and rank count:

* **wall**: ``ft.run`` from call to return, as a user sees it (actor start-up, matrix
  generation, the solve, verification, shutdown), against the **numpy total**: the
  serial kernel of ``ftactors.apps`` doing the same problem in this process (generation
  and solve; no verification);
* **app**: the section each app times itself (CG's outer iterations, HPL's
  factorisation and solve, the stencils' iterations; the slowest rank), against the
  **numpy compute**: the same section of the serial run.

The numpy run is timed where the ranks run, so that both use the same BLAS threading:
on Ray in a Ray task (Ray gives its workers ``OMP_NUM_THREADS=1``, so single-threaded
BLAS, like the rank actors; at this process's niceness, as the ranks run, not at Ray's 15),
on ``local`` and ``sim`` in this process.

A ratio above 1 is how much slower the distributed run is. On a 2-core machine the
distributed runs cannot be much faster than numpy (which already uses both cores in
BLAS for HPL); the ratios show what the messaging costs at each rank count, which is
what the fault-tolerance protocols add to. Every run is also checked: CG and HPL by
their own verification, the stencils by their checksum against the numpy run (they
run with ``verify=False`` so the reference is not inside the timed run). With
``--repetitions`` each figure is the median. Untimed warm-ups first (each baseline at
the quick size, a one-rank run that starts Ray) keep first-call costs out of the figures.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import ftactors as ft
from ftactors.apps.cg import CG, CG_CLASSES, csr_matvec, make_matrix, power_step
from ftactors.apps.coupled import Coupled, coupled_serial
from ftactors.apps.hpl import HPL, back_solve, generate_system, lu_factor
from ftactors.apps.stencil import Stencil, checksum, stencil_serial

from ._harness import add_repetitions, machine_info, table, usage_error, write_results

FULL = {"cg": {"problem_class": "A"}, "hpl": {"n": 2000, "nb": 64},
        "stencil": {"ny": 1024, "nx": 1024, "iterations": 200},
        "coupled": {"ny": 512, "nx": 1024, "iterations": 200, "couple_every": 10}}
QUICK = {"cg": {"problem_class": "S"}, "hpl": {"n": 500, "nb": 32},
         "stencil": {"ny": 256, "nx": 256, "iterations": 50},
         "coupled": {"ny": 128, "nx": 256, "iterations": 50, "couple_every": 10}}
"""The problem of each app (its ``main()`` kwargs)."""

APPS = tuple(FULL)


# ------------------------------------------------------------------ numpy baselines
def _now() -> float:
    return time.perf_counter()


def baseline_cg(problem_class: str) -> dict:
    """Serial NPB CG: the matrix, then the ``niter`` outer iterations the app runs
    (``compute_s``; ``compute_cpu_s``: the CPU time of this thread in them)."""
    cls = CG_CLASSES[problem_class]
    t0 = _now()
    a = make_matrix(cls)
    t1, c1 = _now(), time.thread_time()
    x = np.ones(cls.na)
    for _ in range(cls.niter):
        x, zeta, _ = power_step(lambda p: csr_matvec(a, p), x, np.dot, cls.shift)
    t2, c2 = _now(), time.thread_time()
    return {"total_s": t2 - t0, "compute_s": t2 - t1, "compute_cpu_s": c2 - c1, "zeta": zeta}


def baseline_hpl(n: int, nb: int) -> dict:
    """Serial HPL: generate ``[A|b]``, then factorise and solve (the app's timed part)."""
    t0 = _now()
    aug = generate_system(n)
    t1 = _now()
    lu_factor(aug, nb)
    back_solve(aug[:, :n], aug[:, n], nb)
    t2 = _now()
    return {"total_s": t2 - t0, "compute_s": t2 - t1}


def baseline_stencil(ny: int, nx: int, iterations: int) -> dict:
    t0 = _now()
    grid = stencil_serial(ny, nx, iterations)
    t1 = _now()
    return {"total_s": t1 - t0, "compute_s": t1 - t0, "checksum": checksum(grid)}


def baseline_coupled(ny: int, nx: int, iterations: int, couple_every: int) -> dict:
    t0 = _now()
    grid = coupled_serial(ny, nx, nx // 2, iterations, couple_every)
    t1 = _now()
    return {"total_s": t1 - t0, "compute_s": t1 - t0, "checksum": checksum(grid)}


BASELINES = {"cg": baseline_cg, "hpl": baseline_hpl, "stencil": baseline_stencil,
             "coupled": baseline_coupled}
CLASSES = {"cg": CG, "hpl": HPL, "stencil": Stencil, "coupled": Coupled}


# ----------------------------------------------------------------------- app runs
def run_kwargs(app: str, problem: dict) -> dict:
    """``main()`` kwargs of a timed run: the stencils skip their in-run reference and the
    coupled cut is fixed at the middle so every rank count solves the same problem."""
    if app == "stencil":
        return dict(problem, verify=False)
    if app == "coupled":
        return dict(problem, verify=False, nx_left=problem["nx"] // 2)
    return dict(problem)


def check(app: str, result, base: dict) -> bool:
    """The run's verdict: its own verification, or the stencils' checksum vs numpy."""
    if app in ("cg", "hpl"):
        return all(r["verified"] for r in result.results)
    return result.results[0]["checksum"] == base["checksum"]


def measure(app: str, problem: dict, ranks: int, transport: str, address: str | None) -> dict:
    t0 = _now()
    result = ft.run(CLASSES[app], ranks=ranks, kwargs=run_kwargs(app, problem),
                    transport=transport, address=address, timeout_s=600)
    wall = _now() - t0
    return {"wall_s": wall, "app_s": max(r["time_s"] for r in result.results),
            "result": result, "messages": result.metrics["sent"]}


def run_baseline(app: str, problem: dict, transport: str, address: str | None) -> dict:
    """The numpy run of ``problem``, in a Ray task on Ray (at this process's niceness,
    as the ranks are: Ray's worker would run it at 15), else in this process."""
    if transport != "ray":
        return BASELINES[app](**problem)
    import os

    import ray

    from ftactors.transports.ray import ensure_ray
    ensure_ray(address)
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    return ray.get(ray.remote(_reniced).remote(BASELINES[app], niceness, problem))


def _reniced(baseline, niceness: int, problem: dict) -> dict:
    """``baseline(**problem)`` with this process's threads at ``niceness``."""
    from ftactors.transports.ray import set_niceness
    set_niceness(niceness)
    return baseline(**problem)


def bench(apps, ranks_list, problems, transport, address, repetitions, log=print) -> dict:
    """Baselines and runs, alternated per repetition so that machine load hits both."""
    baselines: dict[str, list[dict]] = {app: [] for app in apps}
    samples: dict[tuple[str, int], list[dict]] = {}
    verdicts: dict[tuple[str, int], bool] = {}
    for rep in range(repetitions):
        for app in apps:
            base = run_baseline(app, problems[app], transport, address)
            baselines[app].append(base)
            for ranks in ranks_list:
                if app == "coupled" and ranks < 2:
                    continue
                got = measure(app, problems[app], ranks, transport, address)
                ok = check(app, got.pop("result"), base)
                verdicts[app, ranks] = verdicts.get((app, ranks), True) and ok
                samples.setdefault((app, ranks), []).append(got)
                log(f"  [{rep + 1}/{repetitions}] {app} on {ranks} rank(s): wall "
                    f"{got['wall_s']:.2f} s, app {got['app_s']:.3f} s, numpy "
                    f"{base['total_s']:.3f} s{'' if ok else '  VERIFICATION FAILED'}",
                    flush=True)
    base_med = {app: {k: statistics.median(b[k] for b in bs) for k in ("total_s", "compute_s")}
                for app, bs in baselines.items()}
    runs = []
    for (app, ranks), got in samples.items():
        wall = statistics.median(g["wall_s"] for g in got)
        app_s = statistics.median(g["app_s"] for g in got)
        runs.append({"app": app, "ranks": ranks, "wall_s": wall, "app_s": app_s,
                     "numpy_total_s": base_med[app]["total_s"],
                     "numpy_compute_s": base_med[app]["compute_s"],
                     "wall_ratio": wall / base_med[app]["total_s"],
                     "app_ratio": app_s / base_med[app]["compute_s"],
                     "messages": got[0]["messages"], "verified": verdicts[app, ranks]})
    return {"baselines": base_med, "runs": runs}


def describe(app: str, problem: dict) -> str:
    if app == "cg":
        return f"class {problem['problem_class']}"
    if app == "hpl":
        return f"n={problem['n']} nb={problem['nb']}"
    text = f"{problem['ny']}x{problem['nx']} x{problem['iterations']}"
    return text + (f" k={problem['couple_every']}" if app == "coupled" else "")


def format_table(runs: list[dict], problems: dict) -> str:
    rows = [("app", "problem", "ranks", "wall s", "numpy s", "wall/numpy", "app s",
             "numpy compute s", "app/numpy", "messages", "ok")]
    for r in runs:
        rows.append((r["app"], describe(r["app"], problems[r["app"]]), str(r["ranks"]),
                     f"{r['wall_s']:.2f}", f"{r['numpy_total_s']:.3f}", f"{r['wall_ratio']:.1f}x",
                     f"{r['app_s']:.3f}", f"{r['numpy_compute_s']:.3f}", f"{r['app_ratio']:.1f}x",
                     str(r["messages"]), "yes" if r["verified"] else "NO"))
    return table(rows, left=2)


# ---------------------------------------------------------------------------- CLI
def _csv(kind):
    def parse(text: str) -> list:
        return [kind(item) for item in text.split(",") if item]
    return parse


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small problems (CG S, HPL n=500, small grids): a smoke test")
    parser.add_argument("--apps", type=_csv(str), default=list(APPS),
                        help=f"comma-separated apps (default {','.join(APPS)})")
    parser.add_argument("--ranks", type=_csv(int), default=[1, 2, 4],
                        help="comma-separated rank counts (default 1,2,4; coupled needs >= 2)")
    parser.add_argument("--transport", choices=("ray", "local", "sim"), default="ray")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: embedded)")
    add_repetitions(parser, 1, "runs of each configuration; figures are medians")
    parser.add_argument("--cg-class", default=None, type=str.upper, help="NPB class (default A, --quick S)")
    parser.add_argument("--hpl-n", type=int, default=None, help="HPL order (default 2000, --quick 500)")
    parser.add_argument("--hpl-nb", type=int, default=None, help="HPL block size (default 64, --quick 32)")
    parser.add_argument("--grid", type=int, default=None, metavar="N",
                        help="stencil N x N, coupled N/2 x N (default 1024, --quick 256)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="stencil and coupled iterations (default 200, --quick 50)")


def problems_from_args(args) -> dict:
    """The problems to run, after ``--quick`` and the size options; ValueError if bad."""
    problems = {app: dict(p) for app, p in (QUICK if args.quick else FULL).items()}
    if args.cg_class is not None:
        if args.cg_class not in CG_CLASSES:
            raise ValueError(f"unknown CG class {args.cg_class!r}")
        problems["cg"]["problem_class"] = args.cg_class
    for key, value in (("n", args.hpl_n), ("nb", args.hpl_nb)):
        if value is not None:
            problems["hpl"][key] = value
    if args.grid is not None:
        if args.grid < 2:
            raise ValueError(f"--grid must be >= 2, got {args.grid}")
        problems["stencil"].update(ny=args.grid, nx=args.grid)
        problems["coupled"].update(ny=max(1, args.grid // 2), nx=args.grid)
    if args.iterations is not None:
        for app in ("stencil", "coupled"):
            problems[app]["iterations"] = args.iterations
    if not 1 <= problems["hpl"]["nb"] <= problems["hpl"]["n"]:
        raise ValueError(f"HPL needs 1 <= nb <= n, got n={problems['hpl']['n']}, "
                         f"nb={problems['hpl']['nb']}")
    unknown = sorted(set(args.apps) - set(APPS))
    if unknown or not args.apps:
        raise ValueError(f"unknown app(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(APPS)}")
    if not args.ranks or min(args.ranks) < 1:
        raise ValueError(f"--ranks must list counts >= 1, got {args.ranks}")
    if args.repetitions < 1:
        raise ValueError(f"--repetitions must be >= 1, got {args.repetitions}")
    return problems


def main(args) -> int:
    try:
        problems = problems_from_args(args)
    except ValueError as exc:
        return usage_error("apps", str(exc))
    apps = [app for app in APPS if app in args.apps]
    print(f"apps benchmark on {args.transport}: {', '.join(apps)} at "
          f"{', '.join(map(str, args.ranks))} rank(s) vs single-process numpy, "
          f"{args.repetitions} repetition(s)", flush=True)
    machine = machine_info()
    for app in apps:  # untimed warm-up: Ray, BLAS threads, first-call costs
        run_baseline(app, QUICK[app], args.transport, args.address)
    ft.run(Stencil, ranks=1, kwargs={"ny": 8, "nx": 8, "iterations": 1},
           transport=args.transport, address=args.address)
    out = bench(apps, sorted(set(args.ranks)), problems, args.transport, args.address,
                args.repetitions)
    print(format_table(out["runs"], problems))
    all_ok = all(r["verified"] for r in out["runs"])
    if not all_ok:
        print("some runs FAILED verification", file=sys.stderr)
    write_results(args, "apps", {
        "transport": args.transport, "quick": bool(args.quick),
        "repetitions": args.repetitions, "problems": problems,
        "numpy_runs_in": "a Ray task" if args.transport == "ray" else "this process", **out,
        "all_verified": all_ok,
    }, machine)
    return 0 if all_ok else 1
