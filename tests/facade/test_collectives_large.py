"""The large-array schedules of the buffer API (reduce-scatter + allgather for
``Allreduce``, a ring for ``Allgather(v)``, a pipeline for ``Bcast``): the binomial tree's
bits on every rank for every size (ill-conditioned sums and a non-commutative op, where
another bracketing changes the bits), uneven ``Allgatherv`` counts, the bytes each rank
sends (what shows the schedule was taken), and the failure-free answer after a kill under
several protocol stacks."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.engine._envelope import COLLECTIVE_SUFFIX
from ftactors.tools.simcheck import setups

from .mpi4py_port import outcomes
from .mpi4py_port.cco_buf import CCOBuf, CCOBufInplace
from .mpi4py_port.cco_nb_buf import NBCCOBuf, NBCCOBufInplace
from .test_buffer_api import Buffers, _reference

ENTRIES = 1000
"""Entries of each operand (8000 bytes of float64)."""

LARGE = {"large_collectives_bytes": 0, "bcast_pipeline_bytes": 0}
TREES = {"large_collectives_bytes": None, "bcast_pipeline_bytes": None}
"""Options that put every buffer Allreduce, Allgather(v) and Bcast on the large-array
schedules, or on the trees (the schedules before them)."""

OVERHEAD = 400
"""Bytes a message may carry beyond its entries (the pickle of a small numpy array)."""


class CollectiveBytes(ft.Protocol):
    """Test mixin: the payload bytes and messages this rank sends on collective contexts."""

    protocol_name = "collective-bytes"

    async def on_start(self):
        self._collective_bytes = [0, 0]
        await super().on_start()

    def on_send(self, env):
        if env.comm.endswith(COLLECTIVE_SUFFIX):
            self._collective_bytes[0] += env.payload.nbytes
            self._collective_bytes[1] += 1
        return super().on_send(env)


def _left_heavy(a, b):
    return 0.5 * a + b  # not commutative, so the bits show order and bracketing


def _operand(rank: int) -> np.ndarray:
    """Ill-conditioned: magnitudes from 1e-8 to 1e8 that cancel, so a sum's bits depend on
    its bracketing."""
    rng = np.random.default_rng(rank)
    return rng.standard_normal(ENTRIES) * 10.0 ** rng.integers(-8, 9, ENTRIES) * (-1) ** rank


class Reductions(CollectiveBytes, ft.Rank):
    """One Allreduce with SUM, one with a user op, one in place and one nonblocking;
    their bytes and the bytes this rank sent doing them."""

    async def main(self):
        comm, x = self.comm, _operand(self.rank)
        out = []
        for op in (ft.SUM, _left_heavy):
            got = np.empty(ENTRIES)
            await comm.Allreduce(x, got, op)
            out.append(got.tobytes())
        sent_by_two = tuple(self._collective_bytes)
        inplace = x.copy()
        await comm.Allreduce(ft.IN_PLACE, inplace)
        nb = np.empty(ENTRIES)
        await comm.Iallreduce(x, nb, _left_heavy).wait()
        out += [inplace.tobytes(), nb.tobytes()]
        return out, sent_by_two


def _tree(values, op, lo=0, hi=None):
    """The binomial tree's bracketing over ranks lo..hi-1 (aligned halves, clipped)."""
    hi = len(values) if hi is None else hi
    if hi - lo == 1:
        return values[lo]
    half = 1
    while half * 2 < hi - lo:
        half *= 2
    return op(_tree(values, op, lo, lo + half), _tree(values, op, lo + half, hi))


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 6, 7, 8])
def test_allreduce_pieces_give_the_trees_bits(ranks):
    large = ft.run(Reductions, ranks, transport="local", **LARGE)
    tree = ft.run(Reductions, ranks, transport="local", **TREES)
    first = large.results[0][0]
    assert all(out == first for out, _ in large.results + tree.results)
    operands = [_operand(r) for r in range(ranks)]
    assert first[0] == _tree(operands, np.add).tobytes() == first[2]
    assert first[1] == _tree(operands, _left_heavy).tobytes() == first[3]
    if ranks > 2:  # the data tell bracketings apart: x0 + (x1 + (...)) has other bits
        fold = operands[-1]
        for x in operands[-2::-1]:
            fold = x + fold
        assert fold.tobytes() != first[0]
    nbytes = ENTRIES * 8
    first = 1 << (ranks.bit_length() - 1)  # the largest power-of-two block of ranks
    for rank, (_, (sent, messages)) in enumerate(large.results):
        if rank < first:  # halving and doubling: (p-1)/p of the array, twice; a unit out
            expected = 2 * (2 * nbytes * (first - 1) + (ranks - first) * nbytes) // first
        else:  # its block's reduce-scatter and its pieces to the block before: one array
            expected = 2 * nbytes
        assert expected <= sent <= expected + messages * OVERHEAD, (rank, sent)
    tree_root = tree.results[0][1][0]  # rank 0 broadcasts the whole array to its children
    assert tree_root >= 2 * (ranks - 1).bit_length() * nbytes


class Gathers(CollectiveBytes, ft.Rank):
    """Allgatherv with uneven counts (one rank sends nothing), Allgather in place, and a
    Bcast from the last rank read as bytes by the others."""

    async def main(self, counts):
        comm, r, n = self.comm, self.rank, self.size
        displs = [sum(counts[:k]) for k in range(n)]
        everyone = np.full(sum(counts), -1.0)
        await comm.Allgatherv(np.arange(counts[r]) + 1000.0 * r, [everyone, counts, displs])
        after_v = tuple(self._collective_bytes)
        square = np.zeros((n, 300), dtype=np.int32)
        square[r] = r + np.arange(300)
        await comm.Allgather(ft.IN_PLACE, square)
        root = n - 1
        data = np.sin(np.arange(5000.0)) if r == root else np.zeros(5000 * 8, np.uint8)
        before = self._collective_bytes[0]
        await comm.Bcast(data if r == root else [data, ft.BYTE], root=root)
        return (everyone.tobytes(), square.tobytes(), data.view(np.float64).tobytes(), after_v,
                self._collective_bytes[0] - before)


@pytest.mark.parametrize("ranks", [3, 4, 5])
def test_ring_and_pipeline_give_the_trees_data(ranks):
    counts = [7 * k + 3 for k in range(ranks)]
    counts[1] = 0
    large = ft.run(Gathers, ranks, args=(counts,), transport="local", **LARGE)
    tree = ft.run(Gathers, ranks, args=(counts,), transport="local", **TREES)
    expect = np.concatenate([np.arange(c) + 1000.0 * k for k, c in enumerate(counts)])
    for out in large.results + tree.results:
        assert out[0] == expect.tobytes()
        assert out[1] == (np.arange(ranks)[:, None] + np.arange(300)).astype(np.int32).tobytes()
        assert out[2] == np.sin(np.arange(5000.0)).tobytes()
    for rank, (*_, (sent, messages), bcast_sent) in enumerate(large.results):
        # the ring: every block but the right neighbour's own, once
        ring = 8 * (sum(counts) - counts[(rank + 1) % ranks])
        assert ring <= sent <= ring + messages * OVERHEAD
        # the pipeline: every rank but the chain's last (root - 1) sends the array once
        assert (bcast_sent >= 40000) == (rank != ranks - 2)
        assert bcast_sent <= 40000 + ranks * 2 * OVERHEAD
    assert tree.results[-1][-1] >= 40000 * (ranks - 1).bit_length()  # the tree's root


def test_thresholds_are_checked():
    for name, value in (("large_collectives_bytes", -1), ("bcast_pipeline_bytes", "big")):
        with pytest.raises(ft.ConfigError, match=name):
            ft.run(Gathers, 2, args=([1, 1],), transport="local", **{name: value})


STACKS = ("standby", "groups", "hc3i", "rs+ready-flush")
"""Stacks of every kind of recovery: spares and global rollback, group and cluster
rollback with logs, encoded checkpoints with flushed channels."""


@pytest.mark.parametrize("transport", ["local", "sim"])
@pytest.mark.parametrize("protocol", STACKS)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_large_schedules_survive_a_kill(transport, protocol):
    """Every buffer collective of the solver-like loop on the large schedules (threshold
    0): logged, flushed and replayed like any message, and the tree's bits after a kill."""
    setup = setups()[protocol]
    cls = type(f"Buffers_{protocol}", (*setup.mixins, Buffers), {})
    r = ft.run(cls, 4, transport=transport, args=(8,), spares=min(setup.spares, 1),
               chaos=ft.Chaos(kill=[(1, 5)]), timeout_s=120, **LARGE,
               **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == _reference()


def test_mpi4py_buffer_collectives_pass_on_the_large_schedules():
    """mpi4py's own buffer collective tests (every datatype, in place, counts of 0, the
    nonblocking forms) with every Allreduce, Allgather(v) and Bcast on the large
    schedules, on 5 ranks (blocks of 4 and 1)."""
    ranks = 5
    got = {}
    for case in (CCOBuf, CCOBufInplace, NBCCOBuf, NBCCOBufInplace):
        got.update(outcomes(case, "sim", ranks, ("world",), **LARGE))
    assert {k: o for k, o in got.items() if o and o[0] == "fail"} == {}


@pytest.mark.ray
def test_large_schedules_on_ray(ray_session):
    """What only Ray shows: blocks that go through the object store (a threshold lowered
    to 256 KiB) forwarded around the ring as references, pieces on the direct plane's
    sockets; the local transport's data and bits."""
    counts = [40_000, 0, 50_000]
    on_ray = ft.run(Gathers, 3, args=(counts,), transport="ray", object_store_bytes=1 << 18,
                    timeout_s=300, **LARGE).results
    local = ft.run(Gathers, 3, args=(counts,), transport="local", **LARGE).results
    assert [out[:4] for out in on_ray] == [out[:4] for out in local]
    sums = ft.run(Reductions, 3, transport="ray", timeout_s=300, **LARGE).results
    assert sums == ft.run(Reductions, 3, transport="local", **LARGE).results
