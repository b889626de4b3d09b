"""Small deterministic programs that the protocol tests mix protocols into."""
import numpy as np

import ftactors as ft
from ftactors.protocols import StandbyReplacement


class Heat1D(ft.Rank):
    """A 1-D heat equation split in blocks: halo exchange with both neighbours and a
    global norm every iteration. Floating-point results are deterministic, so a recovered
    run can be compared bit for bit with a failure-free one."""

    async def main(self, n_local=64, iterations=20):
        comm, r, n = self.comm, self.rank, self.size
        self.register("u", np.sin(np.arange(n_local) * 0.1 + r))
        self.register("norms", [])
        async for _ in self.iterations(iterations):
            left = await comm.sendrecv(self.u[-1], dest=(r + 1) % n, sendtag=1,
                                       source=(r - 1) % n, recvtag=1)
            right = await comm.sendrecv(self.u[0], dest=(r - 1) % n, sendtag=2,
                                        source=(r + 1) % n, recvtag=2)
            padded = np.concatenate(([left], self.u, [right]))
            self.u = 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]
            self.norms.append(await comm.allreduce(float(self.u @ self.u)))
        return {"u": self.u, "norms": list(self.norms)}


class FTHeat(StandbyReplacement, Heat1D):
    backup_interval = 3


class Flood(ft.Rank):
    """Many channels busy across every safe point: each iteration every rank receives
    what each peer sent it during the previous iteration (``per_peer`` messages per
    channel, on several tags, sent with isend), runs a ring exchange through a posted
    irecv and an allreduce, and sends the next iteration's messages; the last ones are
    received after the loop. Every message says who sent it, when and which one, so a
    lost, duplicated or reordered message fails the rank at once; the digest of what
    was received is compared with a failure-free run.

    ``request_at``: iterations at whose middle rank 0 asks for a checkpoint (ReadyMessage-
    Flush), so notifications arrive while isends, an irecv and collectives are pending.
    """

    async def main(self, iterations=12, per_peer=3, request_at=()):
        comm, r, n = self.comm, self.rank, self.size
        peers = [p for p in range(n) if p != r]
        self.register("digest", [])
        self.register("total", 0.0)
        async for i in self.iterations(iterations):
            if i > 0:
                self.digest.append(await self._take(peers, i - 1, per_peer))
            ring = comm.irecv(source=(r - 1) % n, tag=5)
            sends = [comm.isend((r, i, j, float(r * 1000 + i * 10 + j)), dest=p, tag=10 + j)
                     for p in peers for j in range(per_peer)]
            if r == 0 and i in request_at:
                self.request_checkpoint()
            await comm.send(("ring", r, i), dest=(r + 1) % n, tag=5)
            assert await ring.wait() == ("ring", (r - 1) % n, i)
            self.total = await comm.allreduce(self.total + r + i)
            await ft.waitall(sends)
        self.digest.append(await self._take(peers, iterations - 1, per_peer))
        return {"digest": list(self.digest), "total": self.total}

    async def _take(self, peers, i, per_peer):
        got = []
        for src in peers:
            for j in range(per_peer):
                m = await self.comm.recv(source=src, tag=10 + j)
                assert m[:3] == (src, i, j), f"rank {self.rank} expected {(src, i, j)}, got {m}"
                got.append(m[3])
        return sum(got)
