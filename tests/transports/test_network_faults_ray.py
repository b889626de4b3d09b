"""Network faults on Ray: CG's direct connections dropped again and again, and a rank cut
off for a while, give the failure-free answer with no rank declared failed (the channels
reconnect and resend; ``direct``)."""
import asyncio

import pytest

import ftactors as ft
from ftactors.apps.cg import CG

pytestmark = pytest.mark.ray

SAME = ("zeta", "zetas", "rnorms", "verified", "rows")
"""What a CG run answers (its timings differ from run to run)."""


def test_cg_loses_nothing_when_connections_drop_many_times(ray_session):
    """Every rank's connections drop at every other iteration of the solve, and rank 1
    is cut off for a while (from when the ranks are wired: the start of a Ray run takes
    seconds)."""
    expected = ft.run(CG, 3, kwargs={"problem_class": "S"}, transport="local").results
    cuts = [(rank, it) for it in range(1, 15) for rank in range(3) if (rank + it) % 2]
    r = ft.run(CG, 3, kwargs={"problem_class": "S"}, transport="ray", timeout_s=120,
               chaos=ft.Chaos(kill=cuts, method="disconnect", partitions=[((1,), 0.0, 0.3)]))
    assert [{k: x[k] for k in SAME} for x in r.results] == [{k: x[k] for k in SAME}
                                                            for x in expected]
    assert r.metrics["failures"] == 0 and r.metrics["recoveries"] == 0
    assert r.metrics["kills_unfired"] == [] and len(r.events_of("disconnected")) == len(cuts)
    direct = r.metrics["direct"]
    assert direct["reconnects"] >= len(cuts) and direct["dropped_sends"] == 0


class Stream(ft.Rank):
    """Rank 0 streams to rank 1 without waiting for it (up to the channel's window), a
    frame per message (it yields after each), so frames are on the wire whenever either
    drops its connections."""

    async def main(self, iterations: int, per_iteration: int):
        blob = bytes(range(256)) * 32
        total = 0
        async for i in self.iterations(iterations):
            for j in range(per_iteration):
                if self.rank == 0:
                    await self.comm.send((i, j, blob), dest=1)
                    await asyncio.sleep(0)
                else:
                    got = await self.comm.recv(source=0)
                    assert got == (i, j, blob)
                    total += 1
        return total


def test_frames_on_the_wire_when_connections_drop_are_resent(ray_session):
    cuts = [(it % 2, it) for it in range(2, 20)]
    r = ft.run(Stream, 2, args=(20, 200), transport="ray", timeout_s=120,
               chaos=ft.Chaos(kill=cuts, method="disconnect"))
    assert r.results == [0, 20 * 200]
    assert r.metrics["failures"] == 0 and r.metrics["kills_unfired"] == []
    direct = r.metrics["direct"]
    # a cut may find the connection down already (the other rank's cut a moment before):
    # 16 reconnects for the 18 cuts here, the first time
    assert direct["reconnects"] > 0 and direct["resent"] > 0
    assert direct["dropped_sends"] == 0
