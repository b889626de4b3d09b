"""Small deterministic programs that the protocol tests mix protocols into, and what the
tests read from their runs."""
import numpy as np

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.tools.simcheck import Flood  # noqa: F401 (the protocol tests' busy-channel program)


class Heat1D(ft.Rank):
    """A 1-D heat equation split in blocks: halo exchange with both neighbours and a
    global norm every iteration. Floating-point results are deterministic, so a recovered
    run can be compared bit for bit with a failure-free one."""

    phase = 0.0
    """Shifts the initial state: a subclass with another phase is another program."""

    async def main(self, n_local=64, iterations=20):
        comm, r, n = self.comm, self.rank, self.size
        self.register("u", np.sin(np.arange(n_local) * 0.1 + r + self.phase))
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


FLOOD = {"iterations": 12, "per_peer": 3}
"""The protocol tests' Flood: every channel busy across every safe point."""


def ranks_of(result, kind: str) -> list[int]:
    """The ranks of the ``kind`` events of a run, sorted."""
    return sorted(e.rank for e in result.events_of(kind))


def positions(result, kind: str) -> list[tuple]:
    """The safe-point positions of the ``kind`` events of a run, in order."""
    return [tuple(e.detail["position"]) for e in result.events_of(kind)]


class FTHeat(StandbyReplacement, Heat1D):
    backup_interval = 3
