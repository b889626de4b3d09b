"""Large buffer receives on one node, on Ray's direct plane: a receive posted before its
message arrives (``Irecv``, ``Recv``, into a view of a larger array, a Fortran-ordered
one, another dtype read as bytes) gets its bytes straight from the sender's
shared-memory segment, with no copy of the listener's (``lent_copied`` stays 0), while
a message that waits for its receive (unexpected), or one ``recv`` takes as an object,
gets a copy of its own before its region is reused: every receive gets exactly what
was sent, though the sender's later messages reuse the same region. So do the messages
the protocols keep, log and replay across a kill."""
import tracemalloc

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups

pytestmark = pytest.mark.ray

N = 1 << 20
"""Bytes of each message: out of band, and through the segment (default thresholds)."""


def _sent(k: int, dtype=np.float64, shape=None, order="C") -> np.ndarray:
    arr = (np.arange(N // np.dtype(dtype).itemsize) * 7 + k).astype(dtype)
    return arr if shape is None else arr.reshape(shape, order=order)


SHAPES = [(np.float64, None, "C"), (np.float32, (512, 512), "F"), (np.int16, (1024, 512), "C")]


class OneCopy(ft.Rank):
    async def main(self):
        comm = self.comm
        if self.rank == 0:
            for k in range(4):  # posted receives: the peer says when
                await comm.recv(source=1, tag=9)
                dtype, shape, order = SHAPES[k % len(SHAPES)]
                await comm.Send(np.asarray(_sent(k, dtype, shape, order), order="A"), 1, k)
            for k in range(4, 7):  # not awaited yet: unexpected
                await comm.Send(_sent(k), 1, k)
            await comm.send(_sent(7), 1, 7)  # an object
            await comm.Barrier()
            return self.ft.link.listener.counters.as_dict()  # (a sender counts its own)
        counters = self.ft.link.listener.counters
        got = {}
        req = None
        for k in range(4):
            dtype, shape, order = SHAPES[k % len(SHAPES)]
            if k == 0:
                into = np.zeros(N // 8)
                req = comm.Irecv(into, 0, k)
                await comm.send(None, 0, 9)
                await req.wait()
            elif k == 1:
                into = np.zeros(shape, dtype, order="F")
                await comm.send(None, 0, 9)
                await comm.Recv(into, 0, k)
            elif k == 2:  # a view in the middle of a larger array
                big = np.full(3 * N // 2, -1, np.int16)
                into = big[100:100 + N // 2]
                await comm.send(None, 0, 9)
                await comm.Recv(into, 0, k)
                got["around"] = bool((big[:100] == -1).all() and (big[100 + N // 2:] == -1).all())
                into = into.reshape(shape)
            else:  # another dtype's buffer, read as bytes
                into = np.zeros(N, np.uint8)
                await comm.send(None, 0, 9)
                await comm.Recv([into, ft.BYTE], 0, k)
                into = into.view(np.float64)
            got[k] = bool(np.array_equal(into, _sent(k, dtype, shape, order)))
        got["posted_copies"] = counters.lent_copied
        await comm.Barrier()  # meanwhile 4..7 arrive and wait
        for k in range(4, 7):
            into = np.zeros(N // 8)
            await comm.Recv(into, 0, k)
            got[k] = bool(np.array_equal(into, _sent(k)))
        obj = await comm.recv(source=0, tag=7)
        got[7] = bool(np.array_equal(obj, _sent(7)) and obj.flags.writeable)
        got["waiting_copies"] = counters.lent_copied - got["posted_copies"]
        got["lent"] = counters.lent
        return got


def test_posted_buffer_receives_copy_from_the_segment_only(ray_session):
    shared, got = ft.run(OneCopy, 2, transport="ray", timeout_s=120).results
    assert all(got[k] for k in range(8)) and got["around"], got
    assert shared["shared"] == 8 and got["lent"] == 8, f"{shared} {got}"  # through the segment
    assert got["posted_copies"] == 0  # one copy each: segment -> the program's buffer
    assert got["waiting_copies"] == 4  # the three unexpected and the object: their own


BIG = 4 << 20
"""Bytes of each array the sender copies once (OSU's largest bandwidth size here)."""


async def _traced(send) -> int:
    """Await ``send``; the most memory Python's allocators held meanwhile beyond what they
    held before (numpy arrays and bytearrays are traced; the segment, a mapping, is not)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await send
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


class SendOnce(ft.Rank):
    """Rank 0 sends 4 MiB arrays to rank 1 on its node: with ``Send`` into a posted
    ``Irecv`` and a ``Recv``, and a dict of two with ``send``; each time, how much memory
    its send allocated (main's path made a bytearray of every array before copying it
    into the segment)."""

    async def main(self):
        comm = self.comm
        arrays = [np.arange(BIG // 8, dtype=np.float64) * (k + 2) for k in range(4)]
        if self.rank == 0:
            grown = []
            for k in range(2):
                await comm.recv(source=1, tag=9)  # the receive is posted
                grown.append(await _traced(comm.Send(arrays[k], 1, k)))
                arrays[k][:] = -1  # the program's array is its own again
            grown.append(await _traced(comm.send(
                {"a": arrays[2], "b": arrays[3], "n": 7}, 1, 2)))
            await comm.Barrier()
            return grown, self.ft.link.listener.counters.placed
        got = []
        into = np.zeros(BIG // 8)
        req = comm.Irecv(into, 0, 0)
        await comm.send(None, 0, 9)
        await req.wait()
        got.append(np.array_equal(into, arrays[0]))
        await comm.send(None, 0, 9)
        await comm.Recv(into, 0, 1)
        got.append(np.array_equal(into, arrays[1]))
        obj = await comm.recv(source=0, tag=2)
        got.append(obj["n"] == 7 and np.array_equal(obj["a"], arrays[2])
                   and np.array_equal(obj["b"], arrays[3]) and obj["a"].flags.writeable)
        await comm.Barrier()
        return got


def test_a_large_send_copies_once_into_the_segment(ray_session):
    """The buffers of ``Send`` and of an object's ``send`` are copied by the sender once,
    straight into the shared-memory segment (``placed``: none copied again when its
    frame is written), with nothing of their size allocated on the way; ``Irecv``,
    ``Recv`` and ``recv`` get exactly what was sent."""
    (grown, placed), got = ft.run(SendOnce, 2, transport="ray", timeout_s=120).results
    assert got == [True] * 3
    assert all(g < BIG // 4 for g in grown), grown
    assert placed == 4


class BufferRing(ft.Rank):
    """Each iteration a rank sends its right neighbour a 3 MiB array with ``Isend`` and
    receives its left neighbour's into one buffer it reuses, with ``Recv``; it counts the
    receives that did not hold exactly what was sent (the protocols keep, log and replay
    these messages across a kill; their copies must not follow the segment's reuse)."""

    async def main(self, iterations):
        comm, r, n = self.comm, self.rank, self.size
        self.register("bad", 0)
        into = np.zeros((3 << 20) // 8)
        async for it in self.iterations(iterations):
            req = comm.Isend(np.arange(into.size, dtype=np.float64) + it * n + r, (r + 1) % n)
            await comm.Recv(into, (r - 1) % n)
            left = (r - 1) % n
            self.bad += not np.array_equal(into, np.arange(into.size) + it * n + left)
            await req.wait()
        await comm.barrier()
        return self.bad


@pytest.mark.parametrize("protocol", ["ready-flush", "standby"])
def test_buffer_receives_from_the_segment_survive_a_kill(ray_session, protocol):
    setup = setups()[protocol]
    cls = type(f"BufferRing_{protocol}", (*setup.mixins, BufferRing), {})
    r = ft.run(cls, 4, args=(8,), transport="ray", spares=min(setup.spares, 1),
               chaos=ft.Chaos(kill=[(1, 5)]), timeout_s=120, **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == [0] * 4
    assert r.metrics["direct"]["lent"] > 0
