"""NPB CG on a bare asyncio message layer: the floor row of ``ftactors bench solver``.

What ranks written as asyncio programs in separate Python processes pay before any
framework adds to it: the kernel and row-block layout of ``apps.cg`` and ``_cg_mpi``;
ranks in processes started afresh (``spawn``, as Ray's workers and mpiexec's ranks are:
forked ranks share their parent's pages, and so their caches, and measured 1.3-1.5x
faster on CG W x4); a Unix socket pair between every two ranks; each message one pickled
frame (``_rawsocket._Frames``); ``allreduce`` and ``Allgatherv`` by recursive doubling,
the schedule ftactors runs (the sum in rank order); waits polled as a rank's are
(``Spin`` for the default ``poll_spin_us``). Nothing else: no tags, matching, channels,
protocols or checks. So ``direct / asyncio`` is what ftactors adds, and
``asyncio / mpi4py`` what the language and the event loop cost.

Run as ``python -m benchmarks._cg_asyncio CLASS RANKS``: one JSON line as ``_cg_mpi``
prints (the slowest rank's seconds of the timed outer iterations, the last zeta, NPB's
check). Rank counts are powers of two (the doubling here has no fold-in step).
``bench profile`` runs its ranks too (``spawn_ranks``, ``_cg_rank`` with a meter around the
timed iterations), counting the messages each sends (``_Mesh.messages_sent``).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import pickle
import socket
import sys
import time

import numpy as np

from ftactors.apps.cg import (CG_CLASSES, CSRMatrix, csr_matvec, make_matrix,
                              power_step_async, row_block, row_range, verify_zeta)
from ftactors.tools.options import core_default
from ftactors.transports import Spin

from ._rawsocket import _Frames, _frame


def power_of_two(ranks: int) -> bool:
    return ranks >= 1 and ranks & (ranks - 1) == 0


class _Mesh:
    """One rank's sockets to every other rank, and what has come from each."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.links: dict[int, _Frames] = {}
        self.inbox: dict[int, list] = {}
        self.waiting: dict[int, asyncio.Future] = {}
        self.messages_sent = 0

    async def connect(self, socks: dict[int, socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        for peer, sock in socks.items():
            self.inbox[peer] = []
            _, self.links[peer] = await loop.connect_accepted_socket(
                lambda peer=peer: _Frames(lambda _op, body: self._arrived(peer, body)),
                sock=sock)

    def _arrived(self, peer: int, body: bytes) -> None:
        self.inbox[peer].append(pickle.loads(body))
        waiter = self.waiting.pop(peer, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def send(self, peer: int, obj) -> None:
        """Send ``obj`` to ``peer``: one pickled frame."""
        self.messages_sent += 1
        self.links[peer].transport.write(_frame(0, pickle.dumps(obj, protocol=5)))

    async def sent(self, peer: int) -> None:
        """Return once the kernel takes more to ``peer`` (at once unless asyncio's write
        buffer is past its high-water mark: a backlog of large frames makes asyncio's
        buffer copy its remainder on every send)."""
        await self.links[peer].writable.wait()

    async def recv(self, peer: int):
        """The next object from ``peer``, waited for as a rank waits (the loop polls)."""
        box = self.inbox[peer]
        while not box:
            self.waiting[peer] = asyncio.get_running_loop().create_future()
            await self.waiting[peer]
        return box.pop(0)

    async def exchange(self, peer: int, obj):
        """Send ``obj`` to ``peer`` and return the next object from it."""
        self.send(peer, obj)
        return await self.recv(peer)

    async def doubling(self, mine) -> dict:
        """``{rank: its object}`` of every rank, by recursive doubling."""
        parts, mask = {self.rank: mine}, 1
        while mask < self.size:
            parts.update(await self.exchange(self.rank ^ mask, parts))
            mask <<= 1
        return parts


async def _cg_rank(mesh: _Mesh, problem_class: str,
                   timed: contextlib.AbstractContextManager | None = None) -> tuple:
    """One rank of CG: the slowest rank's seconds and the last zeta; ``timed`` (a context
    manager) is entered around the timed iterations."""
    rank, size = mesh.rank, mesh.size
    cls = CG_CLASSES[problem_class]
    lo, hi = row_range(cls.na, rank, size)
    rows = row_block(make_matrix(cls), lo, hi)
    block = CSRMatrix(rows.rowptr, rows.colidx.copy(), rows.values.copy(), rows.n)
    full = np.empty(cls.na)

    async def matvec(p_local):
        for r, part in (await mesh.doubling(p_local)).items():
            a, b = row_range(cls.na, r, size)
            full[a:b] = part
        return csr_matvec(block, full)

    async def dot(a, b):
        parts = await mesh.doubling(float(np.dot(a, b)))
        return sum(parts[r] for r in range(size))

    x = np.ones(hi - lo)
    await mesh.doubling(None)  # every rank is ready: the timing starts together
    t0 = time.perf_counter()
    with timed or contextlib.nullcontext():
        for _ in range(cls.niter):
            x, zeta, _ = await power_step_async(matvec, x, dot, cls.shift)
    seconds = time.perf_counter() - t0
    return max((await mesh.doubling(seconds)).values()), zeta


async def _rank(rank: int, size: int, socks: dict, body, args: tuple, spin_us: int):
    Spin().start(asyncio.get_running_loop(), spin_us * 1e-6)
    mesh = _Mesh(rank, size)
    await mesh.connect(socks)
    return await body(mesh, *args)


def _child(rank: int, size: int, socks: dict, body, args: tuple, spin_us: int,
           results) -> None:
    results.put((rank, asyncio.run(_rank(rank, size, socks, body, args, spin_us))))


def spawn_ranks(ranks: int, body, *args,
                poll_spin_us: int = core_default("poll_spin_us")) -> list:
    """What ``await body(mesh, *args)`` returned on each rank (in rank order), run in
    ``ranks`` processes started afresh, each with a ``_Mesh`` to every other and its loop
    polled as a rank's is, for ``poll_spin_us`` (``body``: a module-level coroutine
    function, which ``spawn`` pickles by name)."""
    pairs = {(a, b): socket.socketpair() for a in range(ranks) for b in range(a + 1, ranks)}
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = []
    for rank in range(ranks):
        socks = {b if a == rank else a: pair[0] if a == rank else pair[1]
                 for (a, b), pair in pairs.items() if rank in (a, b)}
        procs.append(context.Process(target=_child, args=(rank, ranks, socks, body, args,
                                                          poll_spin_us, results)))
        procs[-1].start()
    out = dict(results.get(timeout=1800) for _ in procs)
    for proc in procs:
        proc.join()
    return [out[rank] for rank in range(ranks)]


def main(problem_class: str, ranks: int) -> dict:
    if not power_of_two(ranks):
        raise ValueError(f"the asyncio floor runs power-of-two rank counts, not {ranks}")
    seconds, zeta = spawn_ranks(ranks, _cg_rank, problem_class)[0]
    verified, _ = verify_zeta(CG_CLASSES[problem_class], zeta)
    return {"time_s": seconds, "zeta": zeta, "verified": verified}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
