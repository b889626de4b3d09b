"""Matched probes (``mprobe``/``improbe`` and ``Message``), as mpi4py has them: the
message is taken at the probe, so no other receive gets it; it is received once, as an
object or into a buffer; a synchronous send completes at the probe; and a loop of them
survives a kill under every protocol stack with the failure-free answer."""
import asyncio
import functools

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups


class MatchedProbes(ft.Rank):
    async def main(self):
        comm = self.comm
        if self.rank == 0:
            await comm.send("a", 1, tag=6)
            await comm.send("b", 1, tag=6)
            await comm.Send(np.arange(7.0), 1, tag=2)
            sync = comm.issend({"sync": True}, 1, tag=3)
            await comm.recv(source=1, tag=4)        # rank 1 has matched it, not received it
            await sync.wait()                       # so the synchronous send is complete
            await comm.send("done", 1, tag=5)
            await comm.recv(source=1, tag=7)        # rank 1 found nothing on tag 8 yet
            await comm.Send(np.array([8.5]), 1, tag=8)
            return None
        out = {}
        status = ft.Status()
        first = await comm.mprobe(0, 6, status)
        out["other_receive"] = await comm.recv(source=0, tag=6)  # the next one, not first's
        out["first"] = (first.recv(), status.Get_source(), status.Get_tag())
        try:
            first.recv()
        except RuntimeError as exc:
            out["twice"] = str(exc)
        status = ft.Status()
        sized = await comm.Mprobe(0, 2, status)
        buf = np.empty(status.Get_count(ft.DOUBLE))
        got = ft.Status()
        sized.Recv(buf, got)
        out["buffer"] = (buf.tolist(), got.Get_count(ft.DOUBLE))
        matched = await comm.mprobe(0, 3)
        await comm.send("matched", 0, tag=4)
        await comm.recv(source=0, tag=5)
        out["sync"] = await matched.irecv().wait()
        out["nothing"] = comm.improbe(0, 8)
        await comm.send("look", 0, tag=7)
        while (found := comm.Improbe(0, 8)) is None:
            await asyncio.sleep(0)
        into = np.empty(1)
        await found.Irecv(into).wait()
        out["improbed"] = float(into[0])
        null_status = ft.Status()
        out["proc_null"] = ((await comm.mprobe(ft.PROC_NULL)).recv(null_status),
                            null_status.Get_source())
        return out


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_matched_message_is_its_messages_alone(transport):
    out = ft.run(MatchedProbes, 2, transport=transport, timeout_s=60).results[1]
    assert out["other_receive"] == "b" and out["first"] == ("a", 0, 6)
    assert "received already" in out["twice"]
    assert out["buffer"] == ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 7)
    assert out["sync"] == {"sync": True}
    assert out["nothing"] is None and out["improbed"] == 8.5
    assert out["proc_null"] == (None, ft.PROC_NULL)


class ProbedRing(ft.Rank):
    """Each iteration a message of varying length to the right, taken from the left by
    ``mprobe`` and received into a buffer its status sized."""

    async def main(self, iterations: int):
        comm, r, n = self.comm, self.rank, self.size
        self.register("acc", np.zeros(3))
        async for it in self.iterations(iterations):
            sent = comm.Isend(np.full(1 + (it + r) % 4, self.acc[0] + r), (r + 1) % n, it)
            status = ft.Status()
            msg = await comm.mprobe((r - 1) % n, it, status)
            buf = np.empty(status.Get_count(ft.DOUBLE))
            msg.Recv(buf)
            await sent.wait()
            self.acc = self.acc * 0.5 + buf.sum() + await comm.allreduce(float(buf.size))
        return self.acc.tolist()


@functools.cache
def _ring_reference():
    return ft.run(ProbedRing, 4, transport="sim", args=(8,)).results


@pytest.mark.parametrize("protocol", sorted(setups()))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_matched_probes_survive_a_kill_under_every_protocol(protocol):
    setup = setups()[protocol]
    cls = type(f"ProbedRing_{protocol}", (*setup.mixins, ProbedRing), {})
    r = ft.run(cls, 4, transport="sim", args=(8,), spares=min(setup.spares, 1),
               chaos=ft.Chaos(kill=[(1, 5)]), timeout_s=120, **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == _ring_reference()
