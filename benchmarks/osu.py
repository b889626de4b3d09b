"""The OSU micro-benchmarks on ftactors (Ray, direct plane) beside mpi4py and the asyncio floor.

OSU's definitions, as mpi4py's ``demo/osu_*.py`` port them, in one run:

* ``latency``: rank 0 ``Send``s ``size`` bytes to rank 1, which ``Recv``s and sends them
  back; the one-way latency is the time of ``loop`` round trips over ``2 * loop`` (us);
* ``bw``: rank 0 posts a window of ``WINDOW`` ``Isend``s, ``Waitall``s, then ``Recv``s
  a ``ACK_BYTES`` acknowledgement; rank 1 posts ``WINDOW`` ``Irecv``s, ``Waitall``s and
  sends the acknowledgement; ``size * WINDOW * loop`` bytes over the time (MB/s, 1e6);
* ``bibw``: both ranks post ``WINDOW`` ``Irecv``s then ``WINDOW`` ``Isend``s and wait for
  all; OSU's C code counts both directions (``2 * size * WINDOW * loop``), as here;
* ``bcast`` and ``allreduce`` (float32 sum, ``size // 4`` entries): the time of ``loop``
  calls over ``loop``, averaged over the ranks (OSU's "Avg Latency", us).

Sizes are OSU's: ``latency`` 0 B to 4 MiB, ``bw`` and ``bibw`` 1 B to 4 MiB, ``bcast`` 1 B
to 1 MiB, ``allreduce`` 4 B to 1 MiB, powers of two; each size is preceded by a barrier and
``skip`` untimed iterations. OSU's counts (``skip``/``loop`` 1,000/10,000 for latency and
the collectives, 10/100 for bandwidth, 10/100 and 2/20 above ``LARGE`` bytes) are scaled
by ``--scale`` (at least one of each).

The three ways run the same plan, taking turns within each repetition:

* ``mpi4py``: ``_osu_mpi`` under the ``mpiexec`` of the installed ``mpich`` wheel
  (``pip install 'ftactors[bench]'``; without it the column says so);
* ``asyncio``: the floor, ``_osu_asyncio`` (spawned processes, a socket pair, one pickled
  frame a message, waits polled as a rank's are): what Python ranks on an event loop pay
  before any framework; ``ftactors / asyncio`` is what ftactors adds;
* ``ftactors``: ``OsuBench`` ranks on Ray, buffers sent and received with the uppercase
  API (``Send([buf, size, ft.BYTE], ...)``), as the port of the demos would be written.

Every figure is the median over repetitions; ratios are ftactors' over the baseline's for
each size (for latency lower is better, for bandwidth higher). Targets (issue #42): 8-byte
latency at most 3x the floor's; ``bw`` at 8 B to 1 KiB at least 0.5x the floor's; ``bw``
at 1 and 4 MiB at least 0.3x mpi4py's.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

import ftactors as ft

from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from .solver import MPI_HINT, mpiexec, run_module

WINDOW = 64
"""Messages in flight in ``bw`` and ``bibw`` (OSU's window)."""

ACK_BYTES = 4
"""The acknowledgement that ends a ``bw`` window (OSU's)."""

LARGE = 8192
"""Above this size OSU runs fewer iterations."""

MIB = 1 << 20
TESTS = ("latency", "bw", "bibw", "bcast", "allreduce")
PAIRS = ("latency", "bw", "bibw")
"""Tests between ranks 0 and 1 (the others wait at the barriers)."""

SIZES = {"latency": [0] + [1 << i for i in range(23)],
         "bw": [1 << i for i in range(23)], "bibw": [1 << i for i in range(23)],
         "bcast": [1 << i for i in range(21)], "allreduce": [1 << i for i in range(2, 21)]}
"""OSU's sizes (bytes) per test."""

COUNTS = {"latency": ((1000, 10000), (10, 100)), "bcast": ((1000, 10000), (10, 100)),
          "allreduce": ((1000, 10000), (10, 100)), "bw": ((10, 100), (2, 20)),
          "bibw": ((10, 100), (2, 20))}
"""OSU's (skip, loop) per test, for sizes up to ``LARGE`` and above."""

WAYS = ("mpi4py", "asyncio", "ftactors")
UNITS = {"latency": "us", "bw": "MB/s", "bibw": "MB/s", "bcast": "us", "allreduce": "us"}


# ----------------------------------------------------------------------- the plan
def plan_of(tests, sizes, scale: float) -> dict:
    """``{"tests": {test: [[size, skip, loop], ...]}, "max_bytes"}``: OSU's sizes of each
    test (only those in ``sizes``, when given) with OSU's counts times ``scale``."""
    rows = {}
    for test in tests:
        small, large = COUNTS[test]
        rows[test] = [[size, *(max(1, round(n * scale)) for n in
                               (large if size > LARGE else small))]
                      for size in SIZES[test] if sizes is None or size in sizes]
    biggest = max((size for r in rows.values() for size, _, _ in r), default=0)
    return {"tests": rows, "max_bytes": max(biggest, ACK_BYTES)}


def buffers(plan: dict) -> tuple[np.ndarray, np.ndarray]:
    """The send and receive buffers of every way (bytes, the plan's largest size)."""
    return (np.ones(plan["max_bytes"], np.uint8),  # float32 ones would not be 1s: no matter
            np.zeros(plan["max_bytes"], np.uint8))


def figure(test: str, size: int, loop: int, seconds: list[float]) -> float:
    """OSU's figure from each rank's timed seconds: latency in us (rank 0's, one way),
    bandwidth in MB/s (rank 0's), a collective's average latency over the ranks in us."""
    if test == "latency":
        return seconds[0] * 1e6 / (2 * loop)
    if test in ("bw", "bibw"):
        return (2 if test == "bibw" else 1) * size * WINDOW * loop / 1e6 / seconds[0]
    return statistics.fmean(seconds) * 1e6 / loop


# ------------------------------------------------------------------- ftactors side
class OsuBench(ft.Rank):
    """The OSU loops on ftactors; rank 0 returns ``{test: {size: figure}}``."""

    async def main(self, plan: dict) -> dict | None:
        comm = self.comm
        s_buf, r_buf = buffers(plan)
        out = {}
        for test, rows in plan["tests"].items():
            out[test] = {}
            for size, skip, loop in rows:
                await comm.Barrier()
                seconds = 0.0 if test in PAIRS and self.rank > 1 else \
                    await getattr(self, test)(size, skip, loop, s_buf, r_buf)
                out[test][size] = figure(test, size, loop, await comm.allgather(seconds))
        return out if self.rank == 0 else None

    async def latency(self, size, skip, loop, s_buf, r_buf) -> float:
        comm = self.comm
        s_msg, r_msg = [s_buf, size, ft.BYTE], [r_buf, size, ft.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = time.perf_counter()
            if self.rank == 0:
                await comm.Send(s_msg, 1, 1)
                await comm.Recv(r_msg, 1, 1)
            else:
                await comm.Recv(r_msg, 0, 1)
                await comm.Send(s_msg, 0, 1)
        return time.perf_counter() - t_start

    async def bw(self, size, skip, loop, s_buf, r_buf) -> float:
        comm = self.comm
        if self.rank == 0:
            s_msg, r_msg = [s_buf, size, ft.BYTE], [r_buf, ACK_BYTES, ft.BYTE]
        else:
            s_msg, r_msg = [s_buf, ACK_BYTES, ft.BYTE], [r_buf, size, ft.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = time.perf_counter()
            if self.rank == 0:
                await ft.Request.Waitall([comm.Isend(s_msg, 1, 100) for _ in range(WINDOW)])
                await comm.Recv(r_msg, 1, 101)
            else:
                await ft.Request.Waitall([comm.Irecv(r_msg, 0, 100) for _ in range(WINDOW)])
                await comm.Send(s_msg, 0, 101)
        return time.perf_counter() - t_start

    async def bibw(self, size, skip, loop, s_buf, r_buf) -> float:
        comm, peer = self.comm, 1 - self.rank
        s_msg, r_msg = [s_buf, size, ft.BYTE], [r_buf, size, ft.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = time.perf_counter()
            recvs = [comm.Irecv(r_msg, peer, 10) for _ in range(WINDOW)]
            await ft.Request.Waitall([comm.Isend(s_msg, peer, 10) for _ in range(WINDOW)])
            await ft.Request.Waitall(recvs)
        return time.perf_counter() - t_start

    async def bcast(self, size, skip, loop, s_buf, r_buf) -> float:
        msg = [s_buf if self.rank == 0 else r_buf, size, ft.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = time.perf_counter()
            await self.comm.Bcast(msg, 0)
        return time.perf_counter() - t_start

    async def allreduce(self, size, skip, loop, s_buf, r_buf) -> float:
        count = size // 4
        s_msg, r_msg = [s_buf, count, ft.FLOAT], [r_buf, count, ft.FLOAT]
        for i in range(loop + skip):
            if i == skip:
                t_start = time.perf_counter()
            await self.comm.Allreduce(s_msg, r_msg, op=ft.SUM)
        return time.perf_counter() - t_start


# --------------------------------------------------------------------- the driver
def run_way(way: str, plan: dict, ranks: int, exe: str | None, address: str | None) -> dict:
    """``{test: {size: figure}}`` of one way (sizes as strings, as JSON has them)."""
    if way == "mpi4py":
        return run_module([exe, "-n", str(ranks)], ["_osu_mpi", json.dumps(plan)], "mpi4py")
    if way == "asyncio":
        return run_module([], ["_osu_asyncio", str(ranks), json.dumps(plan)],
                          "the asyncio floor")
    result = ft.run(OsuBench, ranks, args=(plan,), transport="ray", address=address,
                    timeout_s=3600).results[0]
    return {test: {str(size): v for size, v in figures.items()}
            for test, figures in result.items()}


def measure(plan: dict, ranks: int, ways, repetitions: int, address: str | None = None,
            log=print) -> dict:
    """``{way: [figures of each repetition] or why it could not run}``; the ways take
    turns within each repetition, so the machine's load hits them all."""
    exe = mpiexec()
    samples: dict = {w: [] for w in ways}
    if "mpi4py" in ways and exe is None:
        samples["mpi4py"] = f"not installed: {MPI_HINT}"
    for rep in range(repetitions):
        for way in ways:
            if isinstance(samples[way], str):
                continue
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            samples[way].append(run_way(way, plan, ranks, exe, address))
            log(f"  rep {rep + 1}: {way} in {time.perf_counter() - t0:.1f} s "
                f"(load {load:.1f} -> {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return samples


def summarize(plan: dict, samples: dict) -> dict:
    """``{test: {size: {way: median, ...}, "_missing": {way: why}}}`` with the ratios
    ftactors/asyncio and ftactors/mpi4py (and the floor's to mpi4py), and the targets."""
    out = {}
    for test, rows in plan["tests"].items():
        cells = {}
        for size, _, _ in rows:
            cell = {w: statistics.median(s[test][str(size)] for s in runs)
                    for w, runs in samples.items() if isinstance(runs, list) and runs}
            for num, den in (("ftactors", "asyncio"), ("ftactors", "mpi4py"),
                             ("asyncio", "mpi4py")):
                if num in cell and den in cell and cell[den] > 0:
                    cell[f"{num}/{den}"] = cell[num] / cell[den]
            cells[str(size)] = cell
        out[test] = cells
    return {"figures": out, "targets": targets(out),
            "missing": {w: s for w, s in samples.items() if isinstance(s, str)}}


def targets(figures: dict) -> list[dict]:
    """Issue #42's targets that this run measured, with their verdicts."""
    found = []

    def check(test, size, ratio, op, bound):
        value = figures.get(test, {}).get(str(size), {}).get(ratio)
        if value is not None:
            found.append({"test": test, "size": size, "ratio": ratio, "value": value,
                          "bound": f"{op} {bound}",
                          "met": value <= bound if op == "<=" else value >= bound})
    check("latency", 8, "ftactors/asyncio", "<=", 3.0)
    for size in (8, 64, 1024):
        check("bw", size, "ftactors/asyncio", ">=", 0.5)
    for size in (MIB, 4 * MIB):
        check("bw", size, "ftactors/mpi4py", ">=", 0.3)
    return found


def size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= MIB and size % MIB == 0 else \
        f"{size >> 10} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def format_tables(summary: dict) -> str:
    lines = []
    ratios = ("ftactors/asyncio", "ftactors/mpi4py", "asyncio/mpi4py")
    for test, cells in summary["figures"].items():
        rows = [[f"{test} ({UNITS[test]})", *WAYS, *ratios]]
        for size, cell in cells.items():
            rows.append([size_label(int(size))]
                        + [f"{cell[w]:.2f}" if w in cell else "-" for w in WAYS]
                        + [f"{cell[r]:.2f}x" if r in cell else "-" for r in ratios])
        lines += [table(rows), ""]
    for way, why in summary["missing"].items():
        lines.append(f"{way}: {why}")
    for t in summary["targets"]:
        lines.append(f"target {t['test']} {size_label(t['size'])} {t['ratio']} {t['bound']}x: "
                     f"{t['value']:.2f}x {'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_repetitions(parser, 3, "repetitions of every way; medians reported")
    parser.add_argument("--tests", default=",".join(TESTS),
                        help=f"comma-separated subset of {','.join(TESTS)}")
    parser.add_argument("--sizes", default="",
                        help="only these sizes of OSU's (bytes, comma-separated; default all)")
    parser.add_argument("--scale", type=float, default=0.1,
                        help="OSU's iteration counts times this (default 0.1; 1 for OSU's own)")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated subset of {','.join(WAYS)}")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks (a power of two; the pair tests use ranks 0 and 1)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    try:
        sizes = {int(s) for s in args.sizes.split(",") if s.strip()} or None
    except ValueError:
        return usage_error("osu", f"--sizes takes byte counts (got {args.sizes!r})")
    ranks = args.ranks
    if (set(tests) - set(TESTS) or not tests or set(ways) - set(WAYS) or not ways
            or args.repetitions < 1 or args.scale <= 0 or ranks < 2 or ranks & (ranks - 1)):
        return usage_error("osu", f"--tests from {','.join(TESTS)}, --ways from "
                                  f"{','.join(WAYS)}, --repetitions >= 1, --scale > 0 and "
                                  f"--ranks a power of two >= 2")
    plan = plan_of(tests, sizes, args.scale)
    print(f"OSU benchmarks on {ranks} ranks, {args.repetitions} repetition(s), OSU's counts "
          f"x {args.scale:g}, load {os.getloadavg()[0]:.1f}")
    machine = machine_info()
    summary = summarize(plan, measure(plan, ranks, ways, args.repetitions, args.address))
    print(format_tables(summary))
    print(f"load at the end: {os.getloadavg()[0]:.1f}")
    write_results(args, "osu", {"repetitions": args.repetitions, "scale": args.scale,
                                "ranks": ranks, "plan": plan, **summary}, machine)
    return 0
