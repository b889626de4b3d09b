"""The sim transport's sites: links between sites have their own latency and bandwidth."""
import asyncio

import ftactors as ft


class Ping(ft.Rank):
    async def main(self):
        if self.rank == 0:
            for dst in (1, 2):
                await self.comm.send(b"x" * 1000, dest=dst)
            return None
        await self.comm.recv(source=0)
        return asyncio.get_running_loop().time()


def test_wide_links_between_sites():
    r = ft.run(Ping, 3, transport="sim", sim_sites=[[0, 1], [2]], sim_latency_s=1e-5,
               sim_bandwidth_Bps=1e8, sim_jitter_s=0.0, sim_wide_latency_s=1.5e-4,
               sim_wide_bandwidth_Bps=1e7)
    _, inside, across = r.results
    # latency + bytes / bandwidth, with ~1 KB on the wire (payload and pickle header)
    assert 1e-5 + 1000 / 1e8 <= inside < 1e-5 + 1100 / 1e8
    assert 1.5e-4 + 1000 / 1e7 <= across < 1.5e-4 + 1100 / 1e7


def test_without_sites_every_link_is_the_same():
    r = ft.run(Ping, 3, transport="sim", sim_latency_s=1e-5, sim_bandwidth_Bps=1e8,
               sim_jitter_s=0.0, sim_wide_latency_s=1.0)
    _, a, b = r.results
    assert a == b
