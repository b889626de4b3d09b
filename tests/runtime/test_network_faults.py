"""Network faults between live ranks (``Chaos(method="disconnect")``, ``ft.Partition``):
the channels lose nothing, under every protocol and stack sim-check knows, and nobody is
declared failed. The sockets themselves are checked in
``tests/transports/test_direct_plane.py``; CG on Ray in ``test_network_faults_ray.py``."""
from functools import lru_cache

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups


class Mixed(ft.Rank):
    """Large arrays around a ring, small messages to every peer, an allreduce: every
    channel busy with messages of both sizes across every safe point."""

    async def main(self, iterations: int, kib: int):
        comm, r, n = self.comm, self.rank, self.size
        self.register("block", np.full(kib << 7, float(r)))
        self.register("small", 0)
        async for i in self.iterations(iterations):
            got = await comm.sendrecv(self.block, dest=(r + 1) % n, source=(r - 1) % n)
            self.block = 0.5 * (self.block + got) + i
            reqs = [comm.isend((r, i), dest=p, tag=7) for p in range(n) if p != r]
            for p in range(n):
                if p != r:
                    src, j = await comm.recv(source=p, tag=7)
                    assert (src, j) == (p, i)
                    self.small += src * j
            await ft.waitall(reqs)
            self.small += await comm.allreduce(i + r)
        return float(self.block.sum()), self.small


def _run(cls, transport, chaos=None, **kw):
    return ft.run(cls, kw.pop("ranks", 4), args=(kw.pop("iterations", 12), kw.pop("kib", 256)),
                  transport=transport, chaos=chaos, timeout_s=60, **kw)


def _assert_lost_nothing(r, expected, transport):
    assert r.results == expected
    assert r.metrics["failures"] == 0 and r.metrics["recoveries"] == 0
    assert r.metrics["kills_unfired"] == []
    direct = r.metrics["direct"]
    assert direct["reconnects"] > 0
    if transport == "sim":  # batches take time there: some were in flight when cut
        assert direct["resent"] > 0


CUTS = [(1, 2), (2, 3), (1, 5), (0, 6), (3, 6), (2, 9), (1, 10)]
"""Disconnects at iterations: some ranks again and again, two at once."""
CUTS_AT = [(1, 0.0005), (2, 0.001), (0, 0.0015), (3, 0.002), (1, 0.003)]
"""Disconnects at times: on sim (virtual seconds) in the middle of transfers."""


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_disconnects_and_a_partition_lose_nothing(transport):
    expected = _run(Mixed, transport).results
    r = _run(Mixed, transport, ft.Chaos(kill=CUTS, kill_at=CUTS_AT, method="disconnect"))
    _assert_lost_nothing(r, expected, transport)
    assert len(r.events_of("disconnected")) == len(CUTS) + len(CUTS_AT)
    r = _run(Mixed, transport, ft.Chaos(kill_at=[(2, 0.004)], method="disconnect",
                                        partitions=[((0, 1), 0.001, 0.002)]))
    _assert_lost_nothing(r, expected, transport)
    assert [e.detail["ranks"] for e in r.events_of("partitioned")] == [[0, 1]]


def test_network_faults_are_checked():
    with pytest.raises(ValueError, match="a Partition takes"):
        ft.Partition((0,), 1.0, 0.0)
    with pytest.raises(ValueError, match="cuts some of ranks 0..3 off"):
        _run(Mixed, "local", ft.Chaos(partitions=[((0, 1, 2, 3), 0.0, 1.0)]))
    with pytest.raises(ValueError, match="a kill at a moment"):
        ft.Chaos(kill=[ft.Kill(1, moment="wire")], method="disconnect")
    with pytest.raises(ft.ConfigError, match="data_plane='ray' has none"):
        _run(Mixed, "ray", ft.Chaos(kill=[(1, 2)], method="disconnect"), data_plane="ray")


@lru_cache
def _failure_free(ranks: int) -> list:
    """``Mixed``'s results (a protocol changes nothing in a run without failures)."""
    return _run(Mixed, "sim", ranks=ranks, **SHORT).results


SHORT = {"iterations": 6, "kib": 32}
SHORT_CUTS = [(1, 1), (2, 2), (1, 3), (0, 4), (3, 4)]
SHORT_CUTS_AT = [(1, 0.0002), (2, 0.0004), (0, 0.0006)]


# DDVPiggyback's clusters talk at every step here: storms are this program's, by design
@pytest.mark.filterwarnings("ignore::ftactors.protocols.ForcedCheckpointStorm")
@pytest.mark.parametrize("protocol", sorted(setups()))
def test_every_protocol_loses_nothing_through_disconnects(protocol):
    setup = setups()[protocol]
    cls = type(f"Mixed_{protocol}", (*setup.mixins, Mixed), {})
    r = _run(cls, "sim", ft.Chaos(kill=SHORT_CUTS, kill_at=SHORT_CUTS_AT, method="disconnect",
                                  partitions=[((1,), 0.0003, 0.0002)]),
             ranks=setup.ranks, spares=setup.spares, **SHORT, **setup.options)
    _assert_lost_nothing(r, _failure_free(setup.ranks), "sim")
