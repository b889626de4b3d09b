"""Buffer collectives of large arrays on Ray: the large-array schedules against the ones
before them, and mpi4py.

What is measured, in one ``ft.run`` on Ray (``--ranks``, default 4): ``Allreduce``
(SUM of float64), ``Allgather`` (each rank 1/n of the array) and ``Bcast`` (from rank
0) of 1 MiB and 16 MiB arrays (``--sizes``), each timed between barriers over several
calls after a warm-up one: the slowest rank's seconds per call. Two schedules take turns
on the same ranks within every repetition: ``old``, the schedules before the large ones
(``large_collectives_bytes`` and ``bcast_pipeline_bytes`` None: recursive doubling for
Allreduce and Allgather on a power-of-two communicator of the direct plane, trees
elsewhere, the binomial tree for Bcast), and ``new``, the large-array ones (threshold 0:
reduce-scatter + allgather, the ring, the pipeline; ``facade/_collectives``). The rank
flips the options between turns.
Then mpi4py (``_colls_mpi``, started with ``mpiexec``) runs the same calls, when it is
installed. Figures are medians over repetitions; ratios are of medians.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import numpy as np

import ftactors as ft

from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from .solver import MPI_HINT, mpiexec

MIB = 1 << 20
OPS = ("Allreduce", "Allgather", "Bcast")
SCHEDULES = {"old": None, "new": 0}
"""The value of ``large_collectives_bytes`` and ``bcast_pipeline_bytes`` for each
schedule measured."""

CALLS = {MIB: 20, 16 * MIB: 4}
"""Timed calls per repetition, by array size (bytes); other sizes: 64 MiB / size, 2-20."""


def buffers(op: str, nbytes: int, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(send buffer, receive buffer)`` of one call (Bcast: the receive buffer is the
    one broadcast, rank 0's holding data)."""
    entries = nbytes // 8
    if op == "Allgather":
        block = entries // size
        return np.full(block, float(rank)), np.empty(block * size)
    if op == "Bcast":
        return None, np.arange(float(entries)) if rank == 0 else np.empty(entries)
    return np.full(entries, rank + 1.0), np.empty(entries)


class CollectivesBench(ft.Rank):
    """Every rank runs the plan; rank 0 returns ``{"OP SIZE SCHEDULE": [seconds per
    call, one per repetition]}``."""

    async def main(self, plan: dict) -> dict | None:
        comm, out = self.comm, {}
        calls = {"Allreduce": lambda s, r: comm.Allreduce(s, r),
                 "Allgather": lambda s, r: comm.Allgather(s, r),
                 "Bcast": lambda s, r: comm.Bcast(r, root=0)}
        for _ in range(plan["repetitions"]):
            for nbytes, count in plan["calls"].items():
                for op in OPS:
                    send, recv = buffers(op, int(nbytes), self.rank, self.size)
                    for schedule, limit in SCHEDULES.items():
                        self.options.update(large_collectives_bytes=limit,
                                            bcast_pipeline_bytes=limit)
                        await calls[op](send, recv)  # warm-up
                        await comm.Barrier()
                        t0 = time.perf_counter()
                        for _ in range(count):
                            await calls[op](send, recv)
                        await comm.Barrier()
                        seconds = await comm.allreduce((time.perf_counter() - t0) / count,
                                                       op=ft.MAX)
                        out.setdefault(f"{op} {nbytes} {schedule}", []).append(seconds)
        return out if self.rank == 0 else None


def run_mpi(plan: dict, ranks: int, exe: str) -> dict:
    out = subprocess.run([exe, "-n", str(ranks), sys.executable, "-m",
                          "benchmarks._colls_mpi", json.dumps(plan)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"mpiexec failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(plan: dict, ranks: int, address: str | None) -> dict[str, list[float]]:
    """Samples of every figure: ``"OP SIZE old|new|mpi4py"`` -> seconds per call."""
    samples = ft.run(CollectivesBench, ranks, args=(plan,), transport="ray",
                     address=address, timeout_s=3600).results[0]
    exe = mpiexec()
    if exe is not None:
        for key, values in run_mpi(plan, ranks, exe).items():
            samples[f"{key} mpi4py"] = values
    return samples


def summarize(samples: dict, plan: dict) -> list[dict]:
    """One row per (op, size): median milliseconds of each side and the ratios."""
    rows = []
    for nbytes in plan["calls"]:
        for op in OPS:
            row = {"op": op, "bytes": int(nbytes)}
            for side in (*SCHEDULES, "mpi4py"):
                values = samples.get(f"{op} {nbytes} {side}")
                if values:
                    row[f"{side}_ms"] = statistics.median(values) * 1e3
                    row[f"{side}_samples_ms"] = [v * 1e3 for v in values]
            row["new_over_old"] = row["new_ms"] / row["old_ms"]
            if "mpi4py_ms" in row:
                row["new_over_mpi4py"] = row["new_ms"] / row["mpi4py_ms"]
            rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [("call", "old (ms)", "new (ms)", "new/old", "mpi4py (ms)", "new/mpi4py")]
    for row in rows:
        size = f"{row['bytes'] // MIB} MiB" if row["bytes"] >= MIB else f"{row['bytes']} B"
        lines.append((f"{row['op']} {size}", f"{row['old_ms']:.1f}", f"{row['new_ms']:.1f}",
                      f"{row['new_over_old']:.2f}x",
                      f"{row['mpi4py_ms']:.2f}" if "mpi4py_ms" in row else "-",
                      f"{row['new_over_mpi4py']:.1f}x" if "mpi4py_ms" in row else "-"))
    return table(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--ranks", type=int, default=4, help="ranks on Ray (default 4)")
    parser.add_argument("--sizes", default="1,16",
                        help="array sizes in MiB, comma-separated (default 1,16)")
    add_repetitions(parser, 3, "repetitions; figures are medians")
    parser.add_argument("--quick", action="store_true",
                        help="a few calls per size (a smoke test, not a measurement)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    try:
        sizes = [int(float(v) * MIB) for v in args.sizes.split(",") if v.strip()]
    except ValueError:
        return usage_error("collectives", f"--sizes: MiB, comma-separated, got {args.sizes!r}")
    if not sizes or args.ranks < 2 or args.repetitions < 1:
        return usage_error("collectives", "need a size, --ranks >= 2 and --repetitions >= 1")
    calls = {n: 1 if args.quick else CALLS.get(n, max(2, min(20, 64 * MIB // n)))
             for n in sizes}
    plan = {"repetitions": args.repetitions, "calls": calls}
    print(f"collectives benchmark: {args.ranks} ranks on Ray, old vs new schedules in one "
          f"run, {args.repetitions} repetition(s)"
          + ("" if mpiexec() else f"; mpi4py missing ({MPI_HINT})"))
    machine = machine_info()
    rows = summarize(measure(plan, args.ranks, args.address), plan)
    print(format_table(rows))
    write_results(args, "collectives", {"ranks": args.ranks, "plan": plan, "rows": rows},
                  machine)
    return 0
