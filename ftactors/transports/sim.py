"""The ``sim`` transport: a deterministic discrete-event simulation with a virtual clock.

Ranks are asyncio tasks on a virtual-time loop (``_simloop``): time advances only from
event to event, so a run of thousands of ranks takes the wall time of its Python work, and
the same seed reproduces the same run exactly (same event log, same results). Each batch
arrives after ``latency + bytes / bandwidth`` plus a seeded random jitter, so batches can
overtake each other as on Ray and the channels' reordering is exercised. With
``sim_send_overhead_s`` a sender also puts its messages on the wire one at a time, each
taking that long (LogP's gap): n - 1 messages from one rank then cost n - 1 gaps, which
is what makes an all-to-all exchange grow with n. With ``sim_sites`` (a partition of the
ranks, such as the clusters of a federation) batches between ranks of different sites
take ``sim_wide_latency_s`` and ``sim_wide_bandwidth_Bps`` instead (a SAN inside each
cluster, Ethernet between them). Compute costs
nothing in virtual time unless a rank sleeps (``await asyncio.sleep(t)`` is virtual).
A restored rank pays for fetching its snapshot like for a message of that size (a
replacement loads its image over the network), so recoveries take virtual time too.
Network faults cut wires as on ``local``; a wire connects again after three latencies.
"""
from __future__ import annotations

import asyncio
import random

from ..engine import Envelope
from ..runtime import BACKGROUND, CORE_OPTIONS
from .local import LocalFabric, LocalLink

DEFAULTS = {o.name: o.default for o in CORE_OPTIONS if o.name.startswith("sim_")}
"""The network model's settings when not given (declared in ``runtime/_options``)."""


class SimLink(LocalLink):
    async def fetch(self, handle):
        """The data behind a handle, after the time it takes to cross the network."""
        data = handle[0] if isinstance(handle, tuple) else handle
        nbytes = len(data) + (sum(len(b) for b in handle[1]) if isinstance(handle, tuple) else 0)
        await asyncio.sleep(self.fabric.latency_s + nbytes / self.fabric.bandwidth)
        return handle


class SimFabric(LocalFabric):
    name = "sim"
    link_class = SimLink
    deadlock_check_s = 1.0  # virtual: a net under periodic timers (``runtime/_deadlock``)

    def __init__(self, options: dict, seed: int):
        super().__init__(options)
        self.latency_s = float(options.get("sim_latency_s", DEFAULTS["sim_latency_s"]))
        self.bandwidth = float(options.get("sim_bandwidth_Bps", DEFAULTS["sim_bandwidth_Bps"]))
        self.jitter_s = float(options.get("sim_jitter_s", DEFAULTS["sim_jitter_s"]))
        self.send_overhead_s = float(options.get("sim_send_overhead_s",
                                                 DEFAULTS["sim_send_overhead_s"]))
        self._nic_free: dict[int, float] = {}  # sender -> when its last message is out
        self.site_of = {r: i for i, site in enumerate(options.get("sim_sites") or ())
                        for r in site}
        self.wide_latency_s = float(options.get("sim_wide_latency_s", self.latency_s))
        self.wide_bandwidth = float(options.get("sim_wide_bandwidth_Bps", self.bandwidth))
        self.rng = random.Random(seed)
        self.reconnect_delay_s = 3 * self.latency_s  # a handshake's round trips
        try:  # made in the run's job, before its timeout: told apart from now on
            asyncio.get_running_loop().background = BACKGROUND
        except RuntimeError:  # (made outside a loop: by a test)
            pass

    def clock(self) -> float:
        return self.loop.time()

    async def start(self, ranks: int) -> None:
        """As on ``local``; the ranks' state built from now until ``wire`` lives until
        the end of the run: the collector is off meanwhile (``VirtualClockLoop.build``)."""
        await super().start(ranks)
        self.loop.build()

    def on_quiet(self, check) -> None:
        """``check()`` runs whenever the loop has nothing pending but the coordinator's
        watching: a deadlock is found at that virtual moment."""
        self.loop.on_quiet = check

    async def wire(self, handles: list) -> None:
        """As on ``local``; the ranks' state, built now, lives until the end of the run:
        the collector stops walking it (``VirtualClockLoop.settle``)."""
        await super().wire(handles)
        self.loop.settle()

    def metrics(self) -> dict:
        """What the simulation cost: timers fired (its events) and callbacks run."""
        return {"sim_events": self.loop.timers_fired, "sim_callbacks": self.loop.callbacks_run}

    def route(self, src: int, dst: int, envs: list[Envelope]) -> None:
        if src in self.dead:
            return
        if self.wires is not None and self._held(src, dst, envs):
            return
        nbytes = sum(e.payload.nbytes for e in envs)
        latency, bandwidth = self.latency_s, self.bandwidth
        if self.site_of.get(src) != self.site_of.get(dst):
            latency, bandwidth = self.wide_latency_s, self.wide_bandwidth
        delay = latency + nbytes / bandwidth + self.rng.random() * self.jitter_s
        if self.send_overhead_s:  # the sender puts one message on the wire at a time
            now = self.loop.time()
            out = max(now, self._nic_free.get(src, now)) + self.send_overhead_s * len(envs)
            self._nic_free[src] = out
            delay += out - now
        self.loop.call_later(delay, self._arrive, dst, envs)
