"""The OSU benchmarks of ``ftactors bench osu`` on the bare asyncio message layer of
``_cg_asyncio`` (its floor): ranks in spawned processes, a socket pair between every two,
each message one pickled frame, waits polled as a rank's are. The loops are
``_osu_mpi``'s with a frame for each ``Send``/``Isend`` and the next frame from the peer
for each ``Recv``/``Irecv`` (no tags, matching or requests: what OSU's exchange needs and
nothing more); ``bcast`` is a binomial tree and ``allreduce`` recursive doubling with the
sum in rank order (the schedules ftactors runs), so rank counts are powers of two.

Run as ``python -m benchmarks._osu_asyncio RANKS PLAN_JSON``: one JSON line, the figures
``osu.measure_rank`` describes.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from ._cg_asyncio import _Mesh, power_of_two, spawn_ranks
from .osu import ACK_BYTES, PAIRS, WINDOW, buffers, figure

clock = time.perf_counter


async def _latency(mesh: _Mesh, size: int, skip: int, loop: int, s_buf, r_buf) -> float:
    peer = 1 - mesh.rank
    for i in range(skip + loop):
        if i == skip:
            t0 = clock()
        if mesh.rank == 0:
            mesh.send(peer, s_buf[:size])
            r_buf[:size] = await mesh.recv(peer)
        else:
            r_buf[:size] = await mesh.recv(peer)
            mesh.send(peer, s_buf[:size])
    return clock() - t0


async def _bw(mesh: _Mesh, size: int, skip: int, loop: int, s_buf, r_buf) -> float:
    peer = 1 - mesh.rank
    for i in range(skip + loop):
        if i == skip:
            t0 = clock()
        if mesh.rank == 0:
            for _ in range(WINDOW):
                mesh.send(peer, s_buf[:size])
                await mesh.sent(peer)
            r_buf[:ACK_BYTES] = await mesh.recv(peer)
        else:
            for _ in range(WINDOW):
                r_buf[:size] = await mesh.recv(peer)
            mesh.send(peer, s_buf[:ACK_BYTES])
    return clock() - t0


async def _bibw(mesh: _Mesh, size: int, skip: int, loop: int, s_buf, r_buf) -> float:
    peer = 1 - mesh.rank
    for i in range(skip + loop):
        if i == skip:
            t0 = clock()
        for _ in range(WINDOW):
            mesh.send(peer, s_buf[:size])
            await mesh.sent(peer)
        for _ in range(WINDOW):
            r_buf[:size] = await mesh.recv(peer)
    return clock() - t0


async def _bcast(mesh: _Mesh, size: int, skip: int, loop: int, s_buf, r_buf) -> float:
    buf = s_buf if mesh.rank == 0 else r_buf
    for i in range(skip + loop):
        if i == skip:
            t0 = clock()
        mask = 1
        while mask < mesh.size:
            if mesh.rank < mask:
                mesh.send(mesh.rank + mask, buf[:size])
            elif mesh.rank < 2 * mask:
                buf[:size] = await mesh.recv(mesh.rank - mask)
            mask <<= 1
    return clock() - t0


async def _allreduce(mesh: _Mesh, size: int, skip: int, loop: int, s_buf, r_buf) -> float:
    mine = s_buf[:size].view(np.float32)
    for i in range(skip + loop):
        if i == skip:
            t0 = clock()
        acc, mask = mine, 1
        while mask < mesh.size:
            peer = mesh.rank ^ mask
            other = await mesh.exchange(peer, acc)
            acc = other + acc if peer < mesh.rank else acc + other
            mask <<= 1
        r_buf[:size].view(np.float32)[:] = acc
    return clock() - t0


TESTS = {"latency": _latency, "bw": _bw, "bibw": _bibw, "bcast": _bcast,
         "allreduce": _allreduce}


async def _osu_rank(mesh: _Mesh, plan: dict) -> dict:
    s_buf, r_buf = buffers(plan)
    out = {}
    for test, rows in plan["tests"].items():
        out[test] = {}
        for size, skip, loop in rows:
            await mesh.doubling(None)  # OSU's Barrier before each size
            seconds = 0.0 if test in PAIRS and mesh.rank > 1 else \
                await TESTS[test](mesh, size, skip, loop, s_buf, r_buf)
            times = await mesh.doubling(seconds)
            out[test][size] = figure(test, size, loop, [times[r] for r in range(mesh.size)])
    return out


def main(ranks: int, plan: dict) -> dict:
    if not power_of_two(ranks) or ranks < 2:
        raise ValueError(f"the asyncio floor runs power-of-two rank counts >= 2, not {ranks}")
    return spawn_ranks(ranks, _osu_rank, plan)[0]


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), json.loads(sys.argv[2]))))
