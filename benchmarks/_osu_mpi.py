"""The OSU benchmarks of ``ftactors bench osu`` on mpi4py, its anchor: the loops of
mpi4py's ``demo/osu_latency.py``, ``osu_bw.py``, ``osu_bibw.py`` and ``osu_bcast.py``
with the smallest change (numpy buffers, the plan's sizes and counts, every figure
returned instead of printed), and ``allreduce`` as OSU's ``osu_allreduce`` (float32 sum,
``Allreduce`` on buffers, timed as ``osu_bcast``). Run as
``mpiexec -n N python -m benchmarks._osu_mpi PLAN_JSON``; rank 0 prints one JSON line,
the figures ``osu.measure_rank`` describes.
"""
from __future__ import annotations

import json
import sys

from mpi4py import MPI

from .osu import ACK_BYTES, PAIRS, WINDOW, buffers, figure


def latency(comm, size, skip, loop, s_buf, r_buf) -> float:
    myid = comm.Get_rank()
    s_msg, r_msg = [s_buf, size, MPI.BYTE], [r_buf, size, MPI.BYTE]
    if myid == 0:
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            comm.Send(s_msg, 1, 1)
            comm.Recv(r_msg, 1, 1)
    else:
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            comm.Recv(r_msg, 0, 1)
            comm.Send(s_msg, 0, 1)
    return MPI.Wtime() - t_start


def bw(comm, size, skip, loop, s_buf, r_buf) -> float:
    requests = [MPI.REQUEST_NULL] * WINDOW
    if comm.Get_rank() == 0:
        s_msg, r_msg = [s_buf, size, MPI.BYTE], [r_buf, ACK_BYTES, MPI.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            for j in range(WINDOW):
                requests[j] = comm.Isend(s_msg, 1, 100)
            MPI.Request.Waitall(requests)
            comm.Recv(r_msg, 1, 101)
    else:
        s_msg, r_msg = [s_buf, ACK_BYTES, MPI.BYTE], [r_buf, size, MPI.BYTE]
        for i in range(loop + skip):
            if i == skip:
                t_start = MPI.Wtime()
            for j in range(WINDOW):
                requests[j] = comm.Irecv(r_msg, 0, 100)
            MPI.Request.Waitall(requests)
            comm.Send(s_msg, 0, 101)
    return MPI.Wtime() - t_start


def bibw(comm, size, skip, loop, s_buf, r_buf) -> float:
    peer = 1 - comm.Get_rank()
    s_msg, r_msg = [s_buf, size, MPI.BYTE], [r_buf, size, MPI.BYTE]
    send_request = [MPI.REQUEST_NULL] * WINDOW
    recv_request = [MPI.REQUEST_NULL] * WINDOW
    for i in range(loop + skip):
        if i == skip:
            t_start = MPI.Wtime()
        for j in range(WINDOW):
            recv_request[j] = comm.Irecv(r_msg, peer, 10)
        for j in range(WINDOW):
            send_request[j] = comm.Isend(s_msg, peer, 10)
        MPI.Request.Waitall(send_request)
        MPI.Request.Waitall(recv_request)
    return MPI.Wtime() - t_start


def bcast(comm, size, skip, loop, s_buf, r_buf) -> float:
    msg = [s_buf if comm.Get_rank() == 0 else r_buf, size, MPI.BYTE]
    for i in range(loop + skip):
        if i == skip:
            t_start = MPI.Wtime()
        comm.Bcast(msg, 0)
    return MPI.Wtime() - t_start


def allreduce(comm, size, skip, loop, s_buf, r_buf) -> float:
    count = size // 4
    s_msg, r_msg = [s_buf, count, MPI.FLOAT], [r_buf, count, MPI.FLOAT]
    for i in range(loop + skip):
        if i == skip:
            t_start = MPI.Wtime()
        comm.Allreduce(s_msg, r_msg, op=MPI.SUM)
    return MPI.Wtime() - t_start


TESTS = {"latency": latency, "bw": bw, "bibw": bibw, "bcast": bcast, "allreduce": allreduce}


def main(plan: dict) -> None:
    comm = MPI.COMM_WORLD
    s_buf, r_buf = buffers(plan)
    out = {}
    for test, rows in plan["tests"].items():
        out[test] = {}
        for size, skip, loop in rows:
            comm.Barrier()
            seconds = 0.0 if test in PAIRS and comm.Get_rank() > 1 else \
                TESTS[test](comm, size, skip, loop, s_buf, r_buf)
            times = comm.allgather(seconds)
            out[test][size] = figure(test, size, loop, times)
    if comm.Get_rank() == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
