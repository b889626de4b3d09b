"""Large arrays on the Ray transport: either side of every threshold (in-band below
``LARGE_BUFFER_BYTES``; the direct plane's out-of-band frames below ``object_store_bytes``;
the object store from there on) they arrive intact, and writable where the receiver owns
their buffer; a ring of them survives a kill under the protocols that restart ranks in
new processes (resends and replays of out-of-band frames)."""
import collections
import os

import numpy as np
import pytest

import ftactors as ft
from ftactors.engine._payload import LARGE_BUFFER_BYTES as LARGE
from ftactors.tools.simcheck import setups

pytestmark = pytest.mark.ray

STORE = 1 << 20
"""``object_store_bytes`` for the threshold test: low, so that crossing it is cheap."""
SIZES = [LARGE - 8, LARGE, LARGE + 8, STORE - 8, STORE, STORE + 8, 3 << 20]


def _array(nbytes: int, seed: int) -> np.ndarray:
    return np.arange(nbytes // 8, dtype=np.float64) * 3 + seed


class Thresholds(ft.Rank):
    """Rank 0 sends each size alone, then two in one message, and overwrites its arrays
    once ``send`` returns; rank 1 reports, per array, whether it is intact and writable."""

    async def main(self, sizes):
        comm = self.comm
        if self.rank == 0:
            for i, n in enumerate(sizes):
                arr = _array(n, i)
                await comm.send(arr, dest=1)
                arr[:] = -1  # the sender owns its array again
            pair = [_array(LARGE + 8, 100), _array(STORE + 8, 101)]
            await comm.send(pair, dest=1)
            return None
        out = []
        for i, n in enumerate(sizes):
            arr = await comm.recv(source=0)
            out.append((n, bool(np.array_equal(arr, _array(n, i))), arr.flags.writeable))
        pair = await comm.recv(source=0)
        out += [(LARGE + 8, bool(np.array_equal(pair[0], _array(LARGE + 8, 100))),
                 pair[0].flags.writeable),
                (STORE + 8, bool(np.array_equal(pair[1], _array(STORE + 8, 101))),
                 pair[1].flags.writeable)]
        return out


def test_arrays_either_side_of_every_threshold_arrive_intact(ray_session):
    got = ft.run(Thresholds, 2, args=(SIZES,), transport="ray", object_store_bytes=STORE,
                 timeout_s=120).results[1]
    assert [n for n, _, _ in got] == SIZES + [LARGE + 8, STORE + 8]
    assert all(intact for _, intact, _ in got)
    # owned (writable) below the object store's threshold, its read-only views from it on
    assert [writable for _, _, writable in got] == [n < STORE for n, _, _ in got]


class Bases(ft.Rank):
    """Rank 0 sends one array of each size; rank 1 reports, per array, whether it is
    intact and writable and whether it arrived out of band (its memory is a byte array
    of its own, read into from the socket, not a copy out of the pickle stream)."""

    async def main(self, sizes):
        if self.rank == 0:
            for i, n in enumerate(sizes):
                await self.comm.send(_array(n, i), dest=1)
            return None
        out = []
        for i, n in enumerate(sizes):
            arr = await self.comm.recv(source=0)
            out.append((bool(np.array_equal(arr, _array(n, i))), arr.flags.writeable,
                        type(arr.base) is np.ndarray and arr.base.dtype == np.uint8))
        return out


def test_the_out_of_band_threshold_is_an_option(ray_session):
    """``out_of_band_bytes`` moves the in-band / out-of-band crossover of the direct
    plane; either side, arrays arrive intact and writable."""
    sizes = [16 << 10, (32 << 10) - 8, 32 << 10, 64 << 10]
    got = ft.run(Bases, 2, args=(sizes,), transport="ray", out_of_band_bytes=32 << 10,
                 timeout_s=120).results[1]
    assert got == [(True, True, n >= 32 << 10) for n in sizes]
    with pytest.raises(ft.ConfigError, match="out_of_band_bytes"):
        ft.run(Bases, 2, args=(sizes,), transport="ray", out_of_band_bytes=-1)


def _segments() -> dict[int, tuple[int, int]]:
    """This process's shared-memory segments of the direct plane, by inode: how many
    descriptors and mappings of each it holds."""
    fds, maps = collections.Counter(), collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:ftactors"):
                fds[os.stat(f"/proc/self/fd/{fd}").st_ino] += 1
        except OSError:  # the descriptor listdir itself held
            pass
    with open("/proc/self/maps") as lines:
        for line in lines:
            if "memfd:ftactors" in line:
                maps[int(line.split()[4])] += 1
    return {inode: (fds[inode], maps[inode]) for inode in fds | maps}


def test_large_arrays_to_a_rank_on_the_node_go_through_shared_memory(ray_session):
    """From ``shared_memory_bytes`` on, arrays to a rank on the same node go through the
    channel's segment (counted in ``metrics["direct"]["shared"]``), intact and writable
    (the receiver's own copy); with None, none does. Nothing is named in /dev/shm."""
    sizes = [512 << 10, (1 << 20) - 8, 1 << 20, 3 << 20]
    before = set(os.listdir("/dev/shm"))
    r = ft.run(Bases, 2, args=(sizes,), transport="ray", shared_memory_bytes=1 << 20,
               timeout_s=120)
    assert r.results[1] == [(True, True, True)] * 4
    assert r.metrics["direct"]["shared"] == 2
    r = ft.run(Bases, 2, args=(sizes,), transport="ray", shared_memory_bytes=None,
               timeout_s=120)
    assert r.results[1] == [(True, True, True)] * 4
    assert r.metrics["direct"]["shared"] == 0
    assert set(os.listdir("/dev/shm")) <= before


class LargeRing(ft.Rank):
    """Each iteration a rank sends its right neighbour an array of a few MiB and one just
    over the out-of-band threshold, then checks what came from its left; it returns how
    many were wrong and the shared-memory segments its process holds at the end."""

    async def main(self, iterations):
        comm, r, n = self.comm, self.rank, self.size
        self.register("bad", 0)
        async for it in self.iterations(iterations):
            req = comm.isend([_array(3 << 20, it * n + r), _array(LARGE + 8, it)],
                             dest=(r + 1) % n)
            big, small = await comm.recv(source=(r - 1) % n)
            left = (r - 1) % n
            self.bad += not (np.array_equal(big, _array(3 << 20, it * n + left))
                             and np.array_equal(small, _array(LARGE + 8, it))
                             and big.flags.writeable)
            await req.wait()
        await comm.barrier()
        return self.bad, _segments()


@pytest.mark.parametrize("protocol", ["ready-flush", "standby"])
def test_a_ring_of_large_arrays_survives_a_kill(ray_session, protocol):
    """The 3 MiB arrays go through shared memory (all ranks on one node); after a kill
    and its recovery every segment (one per channel that was used) is held by its two
    ends only, both live ranks: its sender (its descriptor, and the one Python's
    ``mmap`` keeps, one mapping) and its listener (one mapping and its ``mmap``
    descriptor); none of the dead rank's is left, at either end."""
    setup = setups()[protocol]
    cls = type(f"LargeRing_{protocol}", (*setup.mixins, LargeRing), {})
    r = ft.run(cls, 4, args=(8,), transport="ray", spares=min(setup.spares, 1),
               chaos=ft.Chaos(kill=[(1, 5)]), timeout_s=120, shared_memory_bytes=100 << 10,
               **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert [bad for bad, _ in r.results] == [0] * 4
    held = collections.defaultdict(lambda: [0, 0, 0])  # ranks, descriptors, mappings
    for _, segments in r.results:
        for inode, (fds, maps) in segments.items():
            held[inode] = [a + b for a, b in zip(held[inode], (1, fds, maps))]
    assert held and all(h == [2, 3, 2] for h in held.values()), dict(held)
    assert r.metrics["direct"]["shared"] > 0
