"""The ``local`` transport: every rank is an asyncio task in this process.

Delivery is a callback scheduled on the event loop, never a direct call, so a send never
runs receiver code inside the sender (as on a real network). Payloads are pickled like on
any transport, so ranks never share objects. A killed rank stops at once and everything
addressed to it is dropped. Used for fast tests of the protocol logic. A spare is a
placeholder (``LocalSpare``) that can die like any host: promoting a dead one fails.
"""
from __future__ import annotations

import asyncio
import time

from ..runtime._coordinator import RankDied
from ..engine._endpoint import Link
from ..engine._envelope import Envelope
from ..runtime._host import Killed, RankHost, RankSpec


class LocalLink(Link):
    def __init__(self, fabric: "LocalFabric", rank: int):
        self.fabric = fabric
        self.rank = rank

    def send(self, dst: int, envs: list[Envelope]) -> None:
        self.fabric.route(self.rank, dst, envs)

    def clock(self) -> float:
        return self.fabric.clock()

    def report(self, event) -> None:
        self.fabric.on_report(event)


class LocalSpare:
    """A spare in one process: only a promise, whose host is built at promotion."""

    rank = None


class LocalFabric:
    """In-process hosts, wired through the event loop."""

    name = "local"
    link_class = LocalLink

    def __init__(self, options: dict):
        self.options = options
        self.hosts: dict[int, RankHost] = {}
        self.dead: set[int] = set()
        self.hung: set[int] = set()
        self.stalled: dict[int, float] = {}  # rank -> the end of its stall (clock)
        self.on_report = lambda event: None
        self._t0 = time.perf_counter()
        self._gone: dict[object, asyncio.Future] = {}  # handle -> done when it dies

    def clock(self) -> float:
        return time.perf_counter() - self._t0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def start(self, ranks: int) -> None:
        self.loop = asyncio.get_running_loop()

    async def spawn(self, spec: RankSpec) -> RankHost:
        host = RankHost(spec, self.link_class(self, spec.rank),
                        lambda: self._die_inside(host))
        self.hosts[spec.rank] = host
        self.dead.discard(spec.rank)
        self.hung.discard(spec.rank)
        return host

    async def spawn_spare(self, node: str | None = None) -> LocalSpare:
        """In one process a spare is only a promise: the host is built at promotion.
        There are no nodes here: ``node`` is accepted and ignored, so protocols that
        move ranks are testable in one process."""
        return LocalSpare()

    async def promote(self, spare, spec: RankSpec) -> RankHost:
        if self._dead(spare):
            raise RankDied(spec.rank, "the spare died before it was promoted")
        return await self.spawn(spec)

    def _dead(self, handle) -> bool:
        gone = self._gone.get(handle)
        return gone is not None and gone.done()

    def _mark_dead(self, handle) -> None:
        gone = self._gone.setdefault(handle, self.loop.create_future())
        if not gone.done():
            gone.set_result(None)

    async def watch(self, handle) -> None:
        """Return once ``handle`` (a host or a spare) is dead."""
        gone = self._gone.setdefault(handle, self.loop.create_future())
        await asyncio.shield(gone)

    def _check(self, host) -> None:
        """Raise ``RankDied`` for a host that is dead or no longer its rank's."""
        if isinstance(host, LocalSpare):
            if self._dead(host):
                raise RankDied(-1, "the spare died")
        elif self._dead(host) or self.hosts.get(host.spec.rank) is not host:
            raise RankDied(host.spec.rank, "gone")

    async def call(self, host: RankHost, name: str, *args):
        self._check(host)
        return await host.call(name, *args)

    async def ping(self, host: RankHost) -> None:
        self._check(host)
        if isinstance(host, LocalSpare):
            return
        while self.stalled.get(host.spec.rank, 0.0) > self.clock():
            await self.sleep(self.stalled[host.spec.rank] - self.clock())
        if host.spec.rank in self.hung:
            await asyncio.get_running_loop().create_future()  # never answers

    async def wire(self, handles: list[RankHost]) -> None:
        """Local links look peers up at send time: nothing to hand out, but as on Ray a
        host that died fails the wiring."""
        await asyncio.sleep(0)  # a kill issued beside the wiring lands first, as a call's would
        for host in handles:
            self._check(host)

    def route(self, src: int, dst: int, envs: list[Envelope]) -> None:
        if src in self.dead or src in self.hung:
            return
        self.loop.call_soon(self._arrive, dst, envs)

    def _arrive(self, dst: int, envs: list[Envelope]) -> None:
        host = self.hosts.get(dst)
        if host is not None and dst not in self.dead and dst not in self.hung:
            host.ep.deliver(envs)

    async def run(self, host: RankHost, args: tuple, kwargs: dict, restore=None) -> dict:
        rank = host.spec.rank
        self._check(host)
        try:
            return await host.run(args, kwargs, restore)
        except Killed:
            raise RankDied(rank, "killed by chaos") from None
        except asyncio.CancelledError:
            if rank in self.dead:
                raise RankDied(rank, "killed") from None
            if rank in self.hung:  # a hung process never answers again
                await asyncio.get_running_loop().create_future()
            raise

    async def collect(self, host: RankHost) -> dict:
        if host.spec.rank in self.dead:
            raise RankDied(host.spec.rank)
        return host.collect()

    async def progress(self, host: RankHost):
        return host.progress()

    async def node_of(self, host: RankHost) -> str:
        return "local"

    def nodes(self) -> list[str]:
        return ["local"]

    async def drain_reports(self) -> None:
        """Reports reach the coordinator at once here: nothing to hand over."""

    async def call_kept(self, host: RankHost, name: str, *args):
        """A rank's answer, kept by the coordinator (here: the bytes themselves)."""
        return await self.call(host, name, *args)

    async def available(self, handles: list) -> bool:
        """Whether ``call_kept`` handles can still be fetched (in-process: always)."""
        return True

    def _die_inside(self, host: RankHost) -> None:
        if self.hosts.get(host.spec.rank) is host:
            self.dead.add(host.spec.rank)
        self._mark_dead(host)
        raise Killed()

    def process_state(self, host: RankHost) -> str | None:
        """As ``/proc/PID/stat`` would say: ``T`` for a ``sigstop``ped rank, ``R`` (busy)
        for a stalled one, else None (nothing to tell)."""
        rank = host.spec.rank
        if rank in self.hung:
            return "T"
        return "R" if self.stalled.get(rank, 0.0) > self.clock() else None

    async def stall(self, host: RankHost, seconds: float) -> None:
        """The rank freezes for ``seconds``: its answers to heartbeats wait until then
        (its program goes on: in one process, the model of a loop busy elsewhere)."""
        self.stalled[host.spec.rank] = self.clock() + seconds

    async def kill(self, host: RankHost, method: str) -> None:
        """``sigstop`` leaves a hung rank: silent, but not reported dead (heartbeats must
        find it); every other method kills it (or a spare) at once."""
        if isinstance(host, LocalSpare):
            if method != "sigstop":
                self._mark_dead(host)
            return
        if self.hosts.get(host.spec.rank) is host:
            (self.hung if method == "sigstop" else self.dead).add(host.spec.rank)
        if method != "sigstop":
            self._mark_dead(host)
        host.cancel_all()

    async def shutdown(self) -> None:
        for host in self.hosts.values():
            host.cancel_all()
        await asyncio.sleep(0)
