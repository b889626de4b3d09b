"""Snapshots between safe points: the last safe point's state plus what was received since."""
import ftactors as ft


class KeepBase(ft.Protocol):
    protocol_name = "keep-base"

    async def on_start(self):
        self.ft.keep_base = True
        await super().on_start()


class MidIteration(KeepBase, ft.Rank):
    async def main(self):
        self.register("acc", 0)
        async for it in self.iterations(3):
            if self.rank == 1:
                await self.comm.send(("msg", it), dest=0, tag=it)
                continue
            got = await self.comm.recv(source=1, tag=it)
            if it == 1:  # between safe points: base of iteration 1 + what came since
                parts = self.ft.load(self.ft.snapshot())
                return {"position": parts["position"], "received": parts["received"],
                        "sent": parts["sent"], "acc": self.acc, "got": got,
                        "replay": [(e.src, e.tag) for e in parts["replay"]]}
            self.acc += 1
        return None


def test_snapshot_between_safe_points_is_base_plus_deliveries_since():
    out = ft.run(MidIteration, ranks=2, transport="local").results[0]
    assert out["position"] == (0, 1)                  # resumes at the top of iteration 1
    # counts what was received since the base (and rank 1's last message if it is queued)
    assert out["received"][1] in (2, 3)
    assert out["sent"] == [0, 0]                      # sends after the base are re-sent
    assert out["replay"] == [(1, 1), (1, 2)][:out["received"][1] - 1]  # received since, queued
    assert out["acc"] == 1 and out["got"] == ("msg", 1)


class NoBase(ft.Rank):
    async def main(self):
        async for it in self.iterations(2):
            await self.comm.send(it, dest=self.rank)
            await self.comm.recv(source=self.rank)
            try:
                self.ft.snapshot()
            except ft.ProtocolError as exc:
                return str(exc)
        return None


def test_snapshot_between_safe_points_needs_keep_base():
    assert "keep_base" in ft.run(NoBase, ranks=1, transport="local").results[0]
