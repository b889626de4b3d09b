"""The collectives of ``ftactors bench collectives`` on mpi4py, its anchor. Run as
``mpiexec -n N python -m benchmarks._colls_mpi PLAN_JSON``; rank 0 prints one
JSON line: ``{"OP SIZE": [seconds per call, one per repetition]}``, each the slowest
rank's, timed between barriers as the ftactors side is."""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from .collectives import OPS, buffers


def main(plan: dict) -> None:
    comm = MPI.COMM_WORLD
    out: dict[str, list[float]] = {}
    for _ in range(plan["repetitions"]):
        for nbytes, count in plan["calls"].items():
            for op in OPS:
                send, recv = buffers(op, int(nbytes), comm.Get_rank(), comm.Get_size())
                call = {"Allreduce": lambda: comm.Allreduce(send, recv),
                        "Allgather": lambda: comm.Allgather(send, recv),
                        "Bcast": lambda: comm.Bcast(recv, root=0)}[op]
                call()  # warm-up
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(count):
                    call()
                comm.Barrier()
                seconds = comm.allreduce((time.perf_counter() - t0) / count, op=MPI.MAX)
                out.setdefault(f"{op} {nbytes}", []).append(seconds)
    if comm.Get_rank() == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
