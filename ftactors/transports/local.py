"""The ``local`` transport: every rank is an asyncio task in this process.

Delivery is a callback scheduled on the event loop, never a direct call, so a send never
runs receiver code inside the sender (as on a real network). Payloads are pickled like on
any transport, so ranks never share objects. A killed rank stops at once and everything
addressed to it is dropped. Used for fast tests of the protocol logic. A spare is a
placeholder (``LocalSpare``) that can die like any host: promoting a dead one fails.

Network faults (``Chaos(method="disconnect")``, ``Partition``) are modelled on a *wire*
per pair of ranks, as the direct data plane behaves on Ray (``direct``): a cut wire loses
the batches in flight on it and holds those sent after, then connects again (at once here,
after a handshake's round trips on ``sim``, when the partition ends) and sends them all,
in order. A sender whose wire is down holds a window's worth at most, then waits. A new
incarnation of a rank gets new wires: nothing is resent to a dead one.
"""
from __future__ import annotations

import asyncio
import time

from ..runtime import Killed, RankDied, RankHost, RankSpec
from ..engine import Envelope, Link
from .direct import WINDOW_BYTES


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

    def congested(self, dst: int):
        return None if self.fabric.wires is None else self.fabric.held_back(self.rank, dst)

    def cut(self, peers: list[int] | None, seconds: float) -> None:
        self.fabric.cut_wires(self.rank, peers, seconds)


class _Wire:
    """The model of one direct connection ``src -> dst`` (module docstring)."""

    __slots__ = ("inflight", "waiting", "waiting_bytes", "lost", "down", "up_at", "token",
                 "drained")

    def __init__(self):
        self.inflight: dict[int, list[Envelope]] = {}  # id(batch) -> batch on its way
        self.waiting: list[list[Envelope]] = []  # lost in flight or sent while down
        self.waiting_bytes = 0
        self.lost = 0  # batches of ``waiting`` that were on the wire when it was cut
        self.down = False
        self.up_at = 0.0  # loop time before which it does not connect again
        self.token = 0  # the cut whose reconnection is scheduled
        self.drained: asyncio.Future | None = None  # a sender waiting for the reconnection


class LocalSpare:
    """A spare in one process: only a promise, whose host is built at promotion."""

    rank = None


class LocalFabric:
    """In-process hosts, wired through the event loop (a ``runtime._fabric.Fabric``)."""

    name = "local"
    link_class = LocalLink
    hosts_here = True  # the coordinator may read a host's endpoint directly
    heartbeat_interval_s = None  # a rank in this process cannot hang apart from the run
    deadlock_check_s = 0.2
    """How often the coordinator reads the ranks' waits (``runtime/_deadlock``): two
    readings in a row that find every rank blocked and nothing moving end the run."""

    def __init__(self, options: dict):
        self.options = options
        self.hosts: dict[int, RankHost] = {}
        self.dead: set[int] = set()
        self.hung: set[int] = set()
        self.stalled: dict[int, float] = {}  # rank -> the end of its stall (clock)
        self.on_report = lambda event: None
        self._t0 = time.perf_counter()
        self._gone: dict[object, asyncio.Future] = {}  # handle -> done when it dies
        self.wires: dict[tuple[int, int], _Wire] | None = None  # with network faults only
        self._wires_of: dict[int, set] = {}  # rank -> its pairs in ``wires`` (either end)
        self.wire_counts: dict[int, list[int]] = {}  # sender -> [reconnects, resent]
        self.reconnect_delay_s = 0.0

    def clock(self) -> float:
        return time.perf_counter() - self._t0

    def on_quiet(self, check) -> None:
        """Where the fabric can tell that nothing but the coordinator's watching is
        pending, it calls ``check`` then (sim); here it cannot: the readings every
        ``deadlock_check_s`` decide."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def start(self, ranks: int) -> None:
        self.loop = asyncio.get_running_loop()

    async def spawn(self, spec: RankSpec) -> RankHost:
        host = RankHost(spec, self.link_class(self, spec.rank),
                        lambda: self._die_inside(host))
        self.hosts[spec.rank] = host
        if self.wires:  # a new incarnation: nothing is resent to or from the old one
            for pair in self._wires_of.pop(spec.rank, ()):
                self._release(self.wires.pop(pair))
                self._wires_of.get(pair[0] + pair[1] - spec.rank, set()).discard(pair)
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
        if self.wires is not None and self._held(src, dst, envs):
            return
        self.loop.call_soon(self._arrive, dst, envs)

    def _arrive(self, dst: int, envs: list[Envelope]) -> None:
        if self.wires is not None:
            wire = self.wires.get((envs[0].src, dst))
            if wire is not None and wire.inflight.pop(id(envs), None) is None:
                return  # lost with its connection: sent again when it is back
        host = self.hosts.get(dst)
        if host is not None and dst not in self.dead and dst not in self.hung:
            host.ep.deliver(envs)

    # ---------------------------------------------------------- network faults
    def track_wires(self) -> None:
        """Network faults are planned: model a wire per pair of ranks from now on."""
        self.wires = {}

    def _wire(self, src: int, dst: int) -> _Wire:
        wire = self.wires.get((src, dst))
        if wire is None:
            wire = self.wires[(src, dst)] = _Wire()
            for end in (src, dst):  # a rank's wires are found without a pass over all
                self._wires_of.setdefault(end, set()).add((src, dst))
        return wire

    def _held(self, src: int, dst: int, envs: list[Envelope]) -> bool:
        """Note ``envs`` on its wire; True when the wire is down (held until it is up)."""
        wire = self._wire(src, dst)
        if wire.down:
            wire.waiting.append(envs)
            wire.waiting_bytes += sum(e.payload.nbytes for e in envs)
            return True
        wire.inflight[id(envs)] = envs
        return False

    def held_back(self, src: int, dst: int):
        """What a sender waits on while its wire to ``dst`` is down and holds more than a
        window (backpressure, not loss); else None."""
        wire = self.wires.get((src, dst))
        if wire is None or not wire.down or wire.waiting_bytes <= WINDOW_BYTES:
            return None
        if wire.drained is None:
            wire.drained = self.loop.create_future()
        return asyncio.shield(wire.drained)

    async def cut(self, host: RankHost, peers: list[int] | None, seconds: float) -> None:
        self._check(host)
        self.cut_wires(host.spec.rank, peers, seconds)

    def cut_wires(self, rank: int, peers: list[int] | None, seconds: float) -> None:
        """Chaos: cut the wires from ``rank`` to ``peers`` (None: every wire to or from
        ``rank``); they connect again ``seconds`` later at the earliest."""
        if peers is None:
            pairs = sorted(self._wires_of.get(rank, ()))
        else:
            pairs = [(rank, peer) for peer in peers if peer != rank]
        up_at = self.loop.time() + max(seconds, self.reconnect_delay_s)
        for src, dst in pairs:
            wire = self._wire(src, dst)
            if not wire.down:
                wire.down = True
                wire.lost = len(wire.inflight)
                wire.waiting[:0] = wire.inflight.values()
                wire.waiting_bytes += sum(e.payload.nbytes for envs in wire.inflight.values()
                                          for e in envs)
                wire.inflight.clear()
            wire.up_at = max(wire.up_at, up_at)
            wire.token += 1
            self.loop.call_later(wire.up_at - self.loop.time(), self._reconnect, src, dst,
                                 wire, wire.token)

    def _reconnect(self, src: int, dst: int, wire: _Wire, token: int) -> None:
        """The wire is up again: what was lost or held on it is sent, in order."""
        if token != wire.token or self.wires.get((src, dst)) is not wire:
            return  # cut again since, or its rank is another incarnation now
        counts = self.wire_counts.setdefault(src, [0, 0])
        counts[0] += 1
        counts[1] += wire.lost
        waiting = wire.waiting
        wire.waiting, wire.waiting_bytes, wire.lost, wire.down = [], 0, 0, False
        for envs in waiting:
            self.route(src, dst, list(envs))  # a new batch: the lost one may still land
        self._release(wire)

    def _release(self, wire: _Wire) -> None:
        if wire.drained is not None:
            wire.drained.set_result(None)
            wire.drained = None

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
        out = host.collect()
        if self.wires is not None:
            reconnects, resent = self.wire_counts.get(host.spec.rank, (0, 0))
            out["stats"]["direct"] = {"reconnects": reconnects, "resent": resent}
        return out

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

    def metrics(self) -> dict:
        """No figures of its own."""
        return {}

    async def shutdown(self, completed: bool = False) -> None:
        for host in self.hosts.values():
            host.cancel_all()
        await asyncio.sleep(0)
