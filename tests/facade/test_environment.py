"""mpi4py's environment calls (``ft.Wtime``, ``ft.Wtick``, ``ft.Get_processor_name``)
and ``Clone``, as solver code ported from mpi4py uses them."""
import socket

import pytest

import ftactors as ft


class Timed(ft.Rank):
    async def main(self):
        t0 = ft.Wtime()
        clone = await self.comm.Clone()
        peer = 1 - self.rank
        await clone.send(("clone", self.rank), peer, tag=3)
        await self.comm.send(("world", self.rank), peer, tag=3)
        first = await self.comm.recv(source=peer, tag=3)  # the clone's is not the world's
        on_clone = await clone.recv(source=peer, tag=3)
        return {"first": first, "on_clone": on_clone, "elapsed": ft.Wtime() - t0,
                "tick": ft.Wtick(), "host": ft.Get_processor_name(),
                "size": clone.Get_size(), "rank": clone.Get_rank()}


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_timing_host_name_and_clone(transport):
    for r, out in enumerate(ft.run(Timed, 2, transport=transport).results):
        assert out["first"] == ("world", 1 - r) and out["on_clone"] == ("clone", 1 - r)
        assert out["elapsed"] >= 0 and 0 < out["tick"] < 1e-3
        assert out["host"] == socket.gethostname()
        assert (out["size"], out["rank"]) == (2, r)
