"""Ray transport against raw Ray actor calls: latency, small-message throughput, bandwidth.

What is measured, in one run, on the same embedded (or given) Ray:

* **round-trip latency** of a small message: rank 0 sends an int to rank 1, which sends
  it back (ftactors: ``send`` + ``recv`` on both sides; raw Ray: ``await
  other.echo.remote(i)``, the cheapest round trip Ray offers between two actors);
* **small-message throughput**, one way: rank 0 sends N ints to rank 1, which receives
  them all and then acknowledges once (raw Ray: one fire-and-forget actor call per
  message, then one call that waits until all N have run);
* **bandwidth** for 1 MiB and 16 MiB float64 arrays, one way, N in flight, the receiver
  reading one element and checking the shape of each (raw Ray: the array passed as a
  call argument, which Ray puts in the object store, as ftactors does for large buffers).

Each figure is timed with ``time.perf_counter`` inside the sending actor around the
measured loop only, after a warm-up, so both sides pay the same costs. The baseline is
raw Ray because it is what ftactors is built on: the ratio says what the framework
(envelopes, channels, matching, batching) adds or saves compared with writing the same
exchange by hand.

Both sides live for the whole run and take turns: one ``ft.run`` whose rank 0, after
each ftactors repetition, has the raw-Ray actors do theirs while rank 1 waits. Turns
let load from other users of this shared machine hit both sides; living actors keep
actor start-up out of every repetition of both, including what a fresh process pays on
its first touches of object-store memory (page-table faults that made 16 MiB transfers
of freshly started actors up to twice as slow as those of warm ones). Every figure is
the median over repetitions; a ratio is the ratio of medians.

The targets checked are those of the core issue: latency at most 1.3x raw Ray,
small-message throughput at least 3x raw Ray's one call per message (ftactors batches
per destination), 16 MiB bandwidth at least 0.8x raw Ray.
"""
from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

import ftactors as ft

from ._harness import add_repetitions, machine_info, table, usage_error, write_results

MIB = 1 << 20

FULL = {"repetitions": 5, "round_trips": 500, "messages": 8_000,
        "arrays": {MIB: 64, 16 * MIB: 16}}
QUICK = {"repetitions": 2, "round_trips": 50, "messages": 2_000,
         "arrays": {MIB: 5, 16 * MIB: 2}}
"""Work per repetition: round trips, small messages, and array count per array size."""

WARMUP_FRACTION = 0.1
"""Each timed loop is preceded by this fraction of its work, untimed (at least one)."""

TARGETS = {
    "latency": ("<=", 1.3),
    "throughput": (">=", 3.0),
    f"bandwidth_{16 * MIB}": (">=", 0.8),
}
"""Ratio ftactors / raw Ray required by the core issue, per figure."""


def _warmup(n: int) -> int:
    return max(1, int(n * WARMUP_FRACTION))


def _touch(arr: np.ndarray, nbytes: int) -> float:
    """What the receiver does with each array: check its shape and read one element."""
    if arr.shape != (nbytes // 8,):
        raise AssertionError(f"array of shape {arr.shape} received, expected {(nbytes // 8,)}")
    return float(arr[-1])


# ------------------------------------------------------------------------- ftactors side
class TransportBench(ft.Rank):
    """Rank 0 drives every measurement; rank 1 answers. Between two ftactors
    repetitions rank 0 has ``raw`` (a ``RawDriver``) run one of raw Ray; rank 0 returns
    ``[(ftactors figures, raw Ray figures)]``, one pair per repetition."""

    async def main(self, plan: dict, repetitions: int, raw) -> list | None:
        pairs = []
        for _ in range(repetitions):
            mine = {"latency": await self._pingpong(plan["round_trips"]),
                    "throughput": await self._stream(plan["messages"])}
            for nbytes, count in plan["arrays"].items():
                mine[f"bandwidth_{nbytes}"] = await self._arrays(nbytes, count)
            if self.rank == 0:
                pairs.append((mine, await raw.run.remote(plan)))
                await self.comm.send(None, dest=1)  # rank 1's turn again
            else:
                await self.comm.recv(source=0)
        return pairs if self.rank == 0 else None

    @staticmethod
    async def _timed(n: int, body) -> float:
        """Run ``body(count)`` once on a warm-up count, then timed on ``n``; seconds."""
        await body(_warmup(n))
        t0 = time.perf_counter()
        await body(n)
        return time.perf_counter() - t0

    async def _pingpong(self, n: int) -> float:
        """Seconds per round trip."""
        comm = self.comm

        async def body(count):
            if self.rank == 0:
                for i in range(count):
                    await comm.send(i, dest=1)
                    await comm.recv(source=1)
            else:
                for _ in range(count):
                    await comm.send(await comm.recv(source=0), dest=0)
        return await self._timed(n, body) / n

    async def _stream(self, n: int) -> float:
        """Messages per second, one way, until the receiver has them all."""
        comm = self.comm

        async def body(count):
            if self.rank == 0:
                for i in range(count):
                    await comm.send(i, dest=1)
                await comm.recv(source=1)
            else:
                for _ in range(count):
                    await comm.recv(source=0)
                await comm.send(None, dest=0)
        return n / await self._timed(n, body)

    async def _arrays(self, nbytes: int, n: int) -> float:
        """Bytes per second, one way, ``n`` arrays of ``nbytes`` in flight."""
        comm = self.comm
        arr = np.ones(nbytes // 8)

        async def body(count):
            if self.rank == 0:
                for _ in range(count):
                    await comm.send(arr, dest=1)
                await comm.recv(source=1)
            else:
                total = 0.0
                for _ in range(count):
                    total += _touch(await comm.recv(source=0), nbytes)
                await comm.send(total, dest=0)
        return n * nbytes / await self._timed(n, body)


# -------------------------------------------------------------------------- raw Ray side
class RawPeer:
    """The receiving actor of the raw-Ray baseline: counts calls, keeps what it needs."""

    def __init__(self):
        self.count = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.total = 0.0

    async def echo(self, x):
        return x

    async def put(self, x) -> None:
        self._one()

    async def take(self, arr: np.ndarray, nbytes: int) -> None:
        self.total += _touch(arr, nbytes)
        self._one()

    def _one(self) -> None:
        self.count += 1
        if self.count >= self.target:
            self.reached.set()

    async def drain(self, n: int) -> None:
        """Return once ``n`` calls of ``put``/``take`` have run (in any order), and
        start counting afresh."""
        self.target = n
        if self.count < n:
            self.reached.clear()
            await self.reached.wait()
        self.count -= n
        self.target = 0


class RawDriver:
    """The sending actor of the raw-Ray baseline: the same loops as ``TransportBench``."""

    def __init__(self, peer):
        self.peer = peer

    async def run(self, plan: dict) -> dict:
        out = {"latency": await self._pingpong(plan["round_trips"]),
               "throughput": await self._stream(plan["messages"])}
        for nbytes, count in plan["arrays"].items():
            out[f"bandwidth_{nbytes}"] = await self._arrays(nbytes, count)
        return out

    async def _pingpong(self, n: int) -> float:
        for timed in (False, True):
            count = n if timed else _warmup(n)
            t0 = time.perf_counter()
            for i in range(count):
                await self.peer.echo.remote(i)
        return (time.perf_counter() - t0) / n

    async def _stream(self, n: int) -> float:
        for timed in (False, True):
            count = n if timed else _warmup(n)
            t0 = time.perf_counter()
            for i in range(count):
                self.peer.put.remote(i)
            await self.peer.drain.remote(count)
        return n / (time.perf_counter() - t0)

    async def _arrays(self, nbytes: int, n: int) -> float:
        arr = np.ones(nbytes // 8)
        for timed in (False, True):
            count = n if timed else _warmup(n)
            t0 = time.perf_counter()
            for _ in range(count):
                self.peer.take.remote(arr, nbytes)
            await self.peer.drain.remote(count)
        return n * nbytes / (time.perf_counter() - t0)


# ------------------------------------------------------------------------------- driver
def _raw_actors(address: str | None):
    """Two plain async actors, reserving no CPU like ftactors' rank actors."""
    import ray

    from ...transports.ray import ensure_ray
    ensure_ray(address)
    peer = ray.remote(RawPeer).options(num_cpus=0).remote()
    driver = ray.remote(RawDriver).options(num_cpus=0).remote(peer)
    return ray, driver, peer


def measure(plan: dict, repetitions: int,
            address: str | None = None) -> dict[str, dict[str, list[float]]]:
    """Alternating ftactors and raw-Ray repetitions; the samples of each figure."""
    ray, driver, peer = _raw_actors(address)
    try:
        pairs = ft.run(TransportBench, 2, args=(plan, repetitions, driver), transport="ray",
                       address=address, timeout_s=1800).results[0]
    finally:
        ray.kill(driver)
        ray.kill(peer)
    return {key: {"ftactors": [mine[key] for mine, _ in pairs],
                  "ray": [raw[key] for _, raw in pairs]} for key in pairs[0][0]}


FIGURES = [
    ("latency", "round-trip latency", "us", 1e6),
    ("throughput", "small-msg throughput", "msg/s", 1.0),
    (f"bandwidth_{MIB}", "1 MiB bandwidth", "MiB/s", 1 / MIB),
    (f"bandwidth_{16 * MIB}", "16 MiB bandwidth", "MiB/s", 1 / MIB),
]
"""(key, label, unit, scale from the measured SI figure to the unit), in table order."""


def summarize(samples: dict) -> dict:
    """Medians, ratios ftactors / raw Ray, and the targets' verdicts, per figure."""
    figures = {}
    for key, label, unit, scale in FIGURES:
        s = samples[key]
        ft_med, ray_med = statistics.median(s["ftactors"]), statistics.median(s["ray"])
        ratio = ft_med / ray_med
        fig = {"label": label, "unit": unit,
               "ftactors": ft_med * scale, "ray": ray_med * scale, "ratio": ratio,
               "ftactors_samples": [v * scale for v in s["ftactors"]],
               "ray_samples": [v * scale for v in s["ray"]]}
        if key in TARGETS:
            op, bound = TARGETS[key]
            fig["target"] = f"{op} {bound}"
            fig["met"] = ratio <= bound if op == "<=" else ratio >= bound
        figures[key] = fig
    return figures


def format_table(figures: dict) -> str:
    rows = [("figure", "ftactors", "raw Ray", "ratio", "target", "met")]
    for key, fig in figures.items():
        rows.append((f"{fig['label']} ({fig['unit']})", f"{fig['ftactors']:.1f}",
                     f"{fig['ray']:.1f}", f"{fig['ratio']:.2f}x",
                     f"{fig['target']}x" if "target" in fig else "-",
                     ("yes" if fig["met"] else "NO") if "met" in fig else "-"))
    return table(rows)


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="little work and 2 repetitions (a smoke test, not a measurement)")
    add_repetitions(parser, None, f"repetitions of each side (default {FULL['repetitions']}, "
                                  f"--quick {QUICK['repetitions']})")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    settings = QUICK if args.quick else FULL
    repetitions = args.repetitions or settings["repetitions"]
    if repetitions < 1:
        return usage_error("transport", "--repetitions must be >= 1")
    plan = {k: v for k, v in settings.items() if k != "repetitions"}
    print(f"transport benchmark: ftactors on Ray vs raw Ray actor calls, "
          f"{repetitions} repetition(s)")
    machine = machine_info()
    figures = summarize(measure(plan, repetitions, args.address))
    print(format_table(figures))
    write_results(args, "transport", {
        "quick": bool(args.quick), "repetitions": repetitions,
        "plan": {"round_trips": plan["round_trips"], "messages": plan["messages"],
                 "arrays": {str(k): v for k, v in plan["arrays"].items()}},
        "figures": figures,
        "targets_met": all(f["met"] for f in figures.values() if "met" in f),
    }, machine)
    return 0
