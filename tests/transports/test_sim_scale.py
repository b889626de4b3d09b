"""The simulator's cost per rank and per message does not grow with the rank count.

Measured structurally, never in wall time: the memory a run allocates per rank (traced
allocations, deterministic on the virtual clock), the entries each rank keeps per peer,
and the coordinator's work per ended rank. Each regression these catch made a 10,000-rank
``bench sim`` 6.7x slower per message than at 1,024 ranks and cost 1.3 MB per rank
(issue 28): a list of every rank in every rank's endpoint and world communicator, and a
supervisor that waited on every rank's run each time one ended.
"""
from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

import ftactors as ft
from ftactors.engine._vector import RankVector
from benchmarks.sim import SimWorkload


class Peers(ft.Rank):
    """A ring pass and an allreduce; returns how many peer entries the endpoint holds."""

    async def main(self):
        n, me = self.size, self.rank
        await self.comm.send(me, dest=(me + 1) % n)
        await self.comm.recv(source=(me - 1) % n)
        await self.comm.allreduce(me)
        ep = self.ft
        return (len(ep.sent.nonzero()), len(ep.received.nonzero()),
                len(ep.peer_epochs.nonzero()), type(self.comm.group).__name__)


def _bytes_per_rank(ranks: int) -> float:
    """Peak traced memory of a short ``bench sim`` run, per rank."""
    tracemalloc.start()
    try:
        ft.run(SimWorkload, ranks, args=(1,), transport="sim", seed=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / ranks


def test_memory_per_rank_does_not_grow_with_the_rank_count():
    # with a table of every rank in every rank, 8x the ranks cost ~3x the bytes per rank
    small, large = _bytes_per_rank(48), _bytes_per_rank(384)
    assert large < 1.3 * small, (small, large)


def test_each_rank_keeps_entries_for_its_peers_only():
    n = 256
    out = ft.run(Peers, n, transport="sim", seed=0).results
    for sent, received, epochs, group in out:
        # a ring neighbour and the allreduce's partners: O(log n), not n
        assert sent <= 2 + n.bit_length() and received <= 2 + n.bit_length()
        assert epochs == 0  # every peer's epoch is still 0: nothing stored
        assert group == "range"


def test_the_supervisor_takes_each_ended_rank_without_a_pass_over_every_rank(monkeypatch):
    # asyncio.wait over every run at each end did O(ranks) work per ended rank
    waited = []
    real_wait = asyncio.wait

    async def counting_wait(fs, *args, **kwargs):
        waited.append(len(fs))
        return await real_wait(fs, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counting_wait)
    ft.run(Peers, 128, transport="sim", seed=0)
    assert sum(waited) <= 128, waited


@pytest.mark.parametrize("values", [[0, 3, 0, 1], [0, 0], [5]])
def test_rank_vector_reads_like_its_list(values):
    v = RankVector.of(values)
    assert v == values and list(v) == values and len(v) == len(values)
    assert v[:] == values[:] and v[-1] == values[-1] and v.total() == sum(values)
    v[0] += 2
    values[0] += 2
    assert v == values and v.total() == sum(values)
    assert v.bump(len(values) - 1) == values[-1]
    with pytest.raises(IndexError):
        v[len(values)]
    with pytest.raises(IndexError):
        v.bump(len(values))


def test_a_simulation_collects_garbage_rarely_and_restores_the_thresholds():
    class Seen(ft.Rank):
        async def main(self):
            return gc.get_threshold()

    before = gc.get_threshold()
    seen = ft.run(Seen, 2, transport="sim").results[0]
    assert seen[0] >= 100_000 and gc.get_threshold() == before


def test_the_ranks_state_is_out_of_the_collector_s_passes_until_the_run_ends():
    class Frozen(ft.Rank):
        async def main(self):
            return gc.get_freeze_count()

    assert gc.get_freeze_count() == 0
    frozen = ft.run(Frozen, 4, transport="sim").results
    # every rank's endpoint, host and communicator was built before the freeze
    assert min(frozen) > 0 and gc.get_freeze_count() == 0


def test_the_collector_is_off_while_the_ranks_are_built_and_on_again_after():
    class Built(ft.Rank):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.built_with_collector = gc.isenabled()

        async def main(self):
            return self.built_with_collector, gc.isenabled()

    assert gc.isenabled()
    assert ft.run(Built, 3, transport="sim").results == [(False, True)] * 3
    assert gc.isenabled()


def test_a_freeze_made_before_the_run_is_left_alone():
    class Frozen(ft.Rank):
        async def main(self):
            return gc.get_freeze_count()

    gc.freeze()
    try:  # frozen objects that die leave the count: it may fall, never rise or empty
        before = gc.get_freeze_count()
        assert all(0 < count <= before for count in ft.run(Frozen, 2, transport="sim").results)
        assert 0 < gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


class _CountedWires(dict):
    """A wire table that counts the passes over it."""

    passes = 0

    def __iter__(self):
        type(self).passes += 1
        return super().__iter__()


def test_network_faults_find_a_rank_s_wires_without_a_pass_over_every_wire(monkeypatch):
    # a respawn and a disconnect each walked every wire of the run: O(ranks * peers)
    from ftactors.protocols import ReadyMessageFlush
    from ftactors.tools.simcheck import Flood
    from ftactors.transports.local import LocalFabric

    class Ready(ReadyMessageFlush, Flood):
        pass

    monkeypatch.setattr(LocalFabric, "track_wires",
                        lambda self: setattr(self, "wires", _CountedWires()))
    kw = {"iterations": 6, "per_peer": 1, "reach": 1}
    r = ft.run(Ready, 64, transport="sim", seed=2, kwargs=kw, checkpoint_interval=2,
               chaos=ft.Chaos(kill=[(5, 3)], partitions=[ft.Partition((1, 2), 0.0, 1e-5)]))
    plain = ft.run(Flood, 64, transport="sim", kwargs=kw)
    assert r.results == plain.results and r.metrics["recoveries"] == 1
    assert r.events_of("partitioned") and _CountedWires.passes == 0
