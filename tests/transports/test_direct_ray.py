"""The direct data plane on Ray: it carries the run's traffic, an intruder mid-run is
dropped and counted while the run loses nothing, and ``data_plane="ray"`` still works
(a bad ``data_plane`` is refused in ``tests/test_run.py``)."""
import asyncio
import os
import struct
import time

import pytest

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from ftactors.transports.direct.handshake import NONCE_BYTES
from ftactors.transports.direct.wire import ROWS


class Exchange(ft.Rank):
    """Ring exchanges and allreduces; rank 0 opens intruding connections to rank 1's
    listener (garbage, and a pickle that would run code) in the middle."""

    async def main(self, n: int, intrude: bool):
        total = 0
        for i in range(n):
            if intrude and self.rank == 0 and i == n // 2:
                await self._intrude()
            right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            await self.comm.send((self.rank, i), dest=right)
            src, j = await self.comm.recv(source=left)
            assert (src, j) == (left, i)
            total += await self.comm.allreduce(i * (self.rank + 1))
        return total

    async def _intrude(self) -> None:
        endpoint = self.ft.link.direct.endpoints[1]
        evil = b"cos\nsystem\n(S'touch /tmp/ftactors-intruded'\ntR."
        for payload in (os.urandom(300), struct.pack("!IB", len(evil), ROWS) + evil + bytes(64)):
            r, w = await asyncio.open_unix_connection(endpoint.path)
            await r.readexactly(NONCE_BYTES)  # then the payload is read as a (wrong) proof
            w.write(payload)
            await w.drain()
            w.close()
        r, w = await asyncio.open_connection(endpoint.host, endpoint.port)
        await r.readexactly(NONCE_BYTES)
        w.write(os.urandom(100))
        await w.drain()
        w.close()


def _expected(n: int, size: int) -> int:
    return sum(i * sum(range(1, size + 1)) for i in range(n))


def test_direct_plane_carries_the_run_and_drops_intruders(ray_session):
    if os.path.exists("/tmp/ftactors-intruded"):
        os.unlink("/tmp/ftactors-intruded")
    r = ft.run(Exchange, 3, args=(40, True), transport="ray", timeout_s=120)
    assert r.results == [_expected(40, 3)] * 3
    direct = r.metrics["direct"]
    assert direct["frames"] > 40 * 2  # the traffic went on the sockets
    assert direct["auth_failed"] == 3 and direct["bad_frame"] == 0
    assert r.metrics["stale_dropped"] == r.metrics["channel_duplicates"] == 0
    assert not os.path.exists("/tmp/ftactors-intruded")


def test_ranks_poll_before_they_sleep_unless_told_not_to(ray_session):
    """``poll_spin_us``: with a long poll, waits end while the ranks poll (their peers
    answer within 0.2 s); with 0, none does; the answer is the same."""
    polled = ft.run(Exchange, 3, args=(20, False), transport="ray", timeout_s=120,
                    poll_spin_us=200_000)
    asleep = ft.run(Exchange, 3, args=(20, False), transport="ray", timeout_s=120,
                    poll_spin_us=0)
    assert polled.results == asleep.results == [_expected(20, 3)] * 3
    assert polled.metrics["direct"]["polled_waits"] > 0
    assert asleep.metrics["direct"]["polled_waits"] == 0
    assert polled.metrics["direct"]["not_polling"] == asleep.metrics["direct"]["not_polling"] == 0


def test_ray_data_plane_still_works(ray_session):
    r = ft.run(Exchange, 3, args=(20, False), transport="ray", data_plane="ray", timeout_s=120)
    assert r.results == [_expected(20, 3)] * 3
    assert "direct" not in r.metrics


class Flood(ft.Rank):
    """Rank 0 sends far more than a socket holds while rank 1's loop is busy (a long
    computation), then rank 1 takes it all."""

    async def main(self, messages: int, kib: int):
        blob = bytes(kib << 10)
        if self.rank == 0:
            for i in range(messages):
                await self.comm.send((i, blob), dest=1)
            return messages
        time.sleep(1.0)  # computing: nothing is read meanwhile
        for i in range(messages):
            j, got = await self.comm.recv(source=0)
            assert j == i and got == blob
        return messages


def test_comm_send_waits_for_a_busy_receiver(ray_session):
    """``comm.send`` waits while the socket to its peer holds more than the high-water
    mark (32 MiB sent into a peer that reads nothing for a second), and nothing is lost."""
    r = ft.run(Flood, 2, args=(2000, 16), transport="ray", timeout_s=120)
    assert r.results == [2000, 2000]
    assert r.metrics["direct"]["throttled"] > 0 and r.metrics["direct"]["dropped_sends"] == 0


class SocketRing(ft.Rank):
    """A ring exchange that notes where the run's sockets are (in ``note``, a file)."""

    async def main(self, n: int, note: str):
        with open(note, "w") as f:
            f.write(os.path.dirname(self.ft.link.direct.endpoints[self.rank].path))
        total = 0
        async for it in self.iterations(n):
            await self.comm.send(it, dest=(self.rank + 1) % self.size)
            total += await self.comm.recv(source=(self.rank - 1) % self.size)
        return total


class StandbyRing(StandbyReplacement, SocketRing):
    pass


def test_a_killed_rank_is_hinted_and_no_socket_file_is_left(ray_session, tmp_path):
    """A killed rank's peer, whose connection to it closed, hints the coordinator (which
    fails the rank once, by its own verdict). The ranks alive at the end remove the run's
    socket directory on their node, with the socket of the rank killed there; where no
    actor of the run is left, a task does."""
    note = str(tmp_path / "run_dir")
    r = ft.run(StandbyRing, 3, args=(8, note), spares=1, transport="ray",
               chaos=ft.Chaos(kill=[(1, 4)]), timeout_s=120)
    assert r.results == [sum(range(8))] * 3 and r.metrics["recoveries"] == 1
    assert r.metrics["failures"] == 1
    assert any(e.rank == 0 and e.detail == {"peer": 1} for e in r.events_of("peer_lost"))
    run_dir = open(note).read()
    assert run_dir and not os.path.exists(run_dir)
    # the only rank dies: no actor of the run is left to clean up
    with pytest.raises(ft.RankFailed):
        ft.run(SocketRing, 1, args=(8, note), transport="ray", chaos=ft.Chaos(kill=[(0, 2)]),
               timeout_s=120)
    second = open(note).read()
    assert second != run_dir and not os.path.exists(second)
