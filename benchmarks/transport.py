"""Ray transport against raw Ray actor calls and a raw socket pair: latency, small-message
throughput, bandwidth.

What is measured, in one run, on the same embedded (or given) Ray:

* **round-trip latency** of a small message: rank 0 sends an int to rank 1, which sends
  it back (ftactors: ``send`` + ``recv`` on both sides; raw Ray: ``await
  other.echo.remote(i)``, the cheapest round trip Ray offers between two actors);
* **small-message throughput**, one way: rank 0 sends N ints to rank 1, which receives
  them all and then acknowledges once (raw Ray: one fire-and-forget actor call per
  message, then one call that waits until all N have run);
* **bandwidth** for 64 KiB, 128 KiB, 1 MiB and 16 MiB float64 arrays (``SIZES``: either
  side of the out-of-band and object-store thresholds; ``--sizes-kib`` adds more, to look
  at a crossover from both sides), one way, N in flight, the receiver
  reading one element and checking the shape of each (raw Ray: the array passed as a
  call argument, which Ray puts in the object store, as ftactors does for large buffers).

The second anchor is a **raw socket pair** (``_rawsocket``): two actors exchanging
length-prefixed frames over a Unix socket with asyncio protocols, one frame per message,
the same kind of channel the direct data plane (``data_plane="direct"``, the default)
uses, with none of ftactors on it.

Each figure is timed with ``time.perf_counter`` inside the sending actor around the
measured loop only, after a warm-up, so every side pays the same costs. Raw Ray is what
the control plane is built on and the socket pair is what the data plane is built on:
the ratios say what the framework (envelopes, channels, matching, batching) adds or saves
compared with writing the same exchange by hand on either.

All sides live for the whole run and take turns: one ``ft.run`` whose rank 0, after
each ftactors repetition, has the raw-Ray actors and then the socket pair do theirs while
rank 1 waits. Turns
let load from other users of this shared machine hit both sides; living actors keep
actor start-up out of every repetition of both, including what a fresh process pays on
its first touches of object-store memory (page-table faults that made 16 MiB transfers
of freshly started actors up to twice as slow as those of warm ones). Every figure is
the median over repetitions; a ratio is the ratio of medians.

The targets checked are those of issues #16 and #27: latency at most 0.5x raw Ray and at
most 1.5x the socket pair, small-message throughput at least 3x raw Ray's one call per
message (ftactors batches per destination), 64 KiB to 1 MiB bandwidth at least 0.8x the
socket pair, 16 MiB bandwidth at least 0.8x raw Ray (the object store).
"""
from __future__ import annotations

import ast
import asyncio
import statistics
import time

import numpy as np

import ftactors as ft

from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from ._rawsocket import SocketDriver, SocketPeer

MIB = 1 << 20

KIB = 1 << 10
SIZES = (64 * KIB, 128 * KIB, MIB, 16 * MIB)
"""The array sizes measured."""

FULL = {"repetitions": 5, "round_trips": 500, "messages": 8_000,
        "arrays": {64 * KIB: 512, 128 * KIB: 256, MIB: 64, 16 * MIB: 16}}
QUICK = {"repetitions": 2, "round_trips": 50, "messages": 2_000,
         "arrays": {64 * KIB: 20, 128 * KIB: 10, MIB: 5, 16 * MIB: 2}}
"""Work per repetition: round trips, small messages, and array count per array size."""
EXTRA_BYTES = {"full": 64 * MIB, "quick": 4 * MIB}
"""Bytes per repetition of an array size added with ``--sizes-kib`` (at least 2 arrays)."""

WARMUP_FRACTION = 0.1
"""Each timed loop is preceded by this fraction of its work, untimed (at least one)."""

ANCHORS = ("ray", "socket")
"""The hand-written baselines, by the name their samples go under."""

TARGETS = {
    ("latency", "ray"): ("<=", 0.5),
    ("latency", "socket"): ("<=", 1.5),
    ("throughput", "ray"): (">=", 3.0),
    (f"bandwidth_{64 * KIB}", "socket"): (">=", 0.8),
    (f"bandwidth_{128 * KIB}", "socket"): (">=", 0.8),
    (f"bandwidth_{MIB}", "socket"): (">=", 0.8),
    (f"bandwidth_{16 * MIB}", "ray"): (">=", 0.8),
}
"""Ratio ftactors / anchor required by issues #16 (latency, throughput) and #27 (arrays),
per (figure, anchor)."""


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
    repetitions rank 0 has ``raw`` (a ``RawDriver``) run one of raw Ray and ``sock`` (a
    ``SocketDriver``) one over the socket pair; rank 0 returns ``[(ftactors figures,
    raw Ray figures, socket figures)]``, one per repetition."""

    async def main(self, plan: dict, repetitions: int, raw, sock) -> list | None:
        pairs = []
        for _ in range(repetitions):
            mine = {"latency": await self._pingpong(plan["round_trips"]),
                    "throughput": await self._stream(plan["messages"])}
            for nbytes, count in plan["arrays"].items():
                mine[f"bandwidth_{nbytes}"] = await self._arrays(nbytes, count)
            if self.rank == 0:
                pairs.append((mine, await raw.run.remote(plan),
                              await sock.run.remote(plan, _warmup)))
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
def _anchor_actors(address: str | None):
    """The raw-Ray pair and the socket pair: plain async actors, reserving no CPU like
    ftactors' rank actors, on this node (the socket is a Unix socket)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ftactors.transports.ray import ensure_ray
    ensure_ray(address)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    peer = ray.remote(RawPeer).options(num_cpus=0).remote()
    driver = ray.remote(RawDriver).options(num_cpus=0).remote(peer)
    sock_peer = ray.remote(SocketPeer).options(num_cpus=0, scheduling_strategy=here).remote()
    sock_driver = ray.remote(SocketDriver).options(num_cpus=0, scheduling_strategy=here).remote()
    ray.get(sock_driver.connect.remote(ray.get(sock_peer.listen.remote())))
    return ray, [driver, peer, sock_driver, sock_peer]


def measure(plan: dict, repetitions: int, address: str | None = None,
            options: dict | None = None) -> dict[str, dict[str, list[float]]]:
    """Alternating ftactors, raw-Ray and socket repetitions; the samples of each figure
    (``options``: more options of ``ft.run``, such as the thresholds)."""
    ray, actors = _anchor_actors(address)
    try:
        runs = ft.run(TransportBench, 2, args=(plan, repetitions, actors[0], actors[2]),
                      transport="ray", address=address, timeout_s=1800,
                      **(options or {})).results[0]
    finally:
        for actor in actors:
            ray.kill(actor)
    return {key: {"ftactors": [mine[key] for mine, _, _ in runs],
                  "ray": [raw[key] for _, raw, _ in runs],
                  "socket": [sock[key] for _, _, sock in runs]} for key in runs[0][0]}


def figures_of(sizes) -> list[tuple]:
    """(key, label, unit, scale from the measured SI figure to the unit) of each figure,
    in table order, with a bandwidth per array size in ``sizes`` (bytes)."""
    return [("latency", "round-trip latency", "us", 1e6),
            ("throughput", "small-msg throughput", "msg/s", 1.0)] + [
        (f"bandwidth_{n}", f"{n / MIB:g} MiB bandwidth" if n >= MIB else
         f"{n / KIB:g} KiB bandwidth", "MiB/s", 1 / MIB) for n in sorted(sizes)]


def plan_of(settings: dict, extra_kib: str) -> dict:
    """The work per repetition: ``settings`` (FULL or QUICK) and the array sizes of
    ``extra_kib`` (KiB, comma-separated) with as many arrays as ``EXTRA_BYTES`` hold.

    Raises:
        ValueError: a size that is not a positive multiple of 8 bytes.
    """
    plan = {k: v for k, v in settings.items() if k != "repetitions"}
    budget = EXTRA_BYTES["quick" if settings is QUICK else "full"]
    arrays = dict(plan["arrays"])
    for text in filter(None, (t.strip() for t in extra_kib.split(","))):
        nbytes = int(float(text) * KIB)
        if nbytes <= 0 or nbytes % 8:
            raise ValueError(f"array size {text} KiB is not a positive multiple of 8 bytes")
        arrays.setdefault(nbytes, max(2, budget // nbytes))
    plan["arrays"] = dict(sorted(arrays.items()))
    return plan


def options_of(pairs: list[str]) -> dict:
    """``NAME=VALUE`` strings as options of ``ft.run`` (values are Python literals).

    Raises:
        ValueError: a pair without ``=`` or a value that is not a literal.
    """
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--option {pair!r} is not NAME=VALUE")
        try:
            options[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"--option {pair!r}: {value!r} is not a Python literal") from None
    return options


def summarize(samples: dict) -> dict:
    """Medians, ratios ftactors / each anchor (``ratio`` is against raw Ray,
    ``ratio_socket`` against the socket pair), and the targets' verdicts, per figure."""
    figures = {}
    sizes = [int(key.split("_")[1]) for key in samples if key.startswith("bandwidth_")]
    for key, label, unit, scale in figures_of(sizes):
        s = samples[key]
        fig = {"label": label, "unit": unit}
        for side in ("ftactors",) + ANCHORS:
            fig[side] = statistics.median(s[side]) * scale
            fig[f"{side}_samples"] = [v * scale for v in s[side]]
        fig["ratio"] = fig["ftactors"] / fig["ray"]
        fig["ratio_socket"] = fig["ftactors"] / fig["socket"]
        targets = {}
        for anchor in ANCHORS:
            if (key, anchor) in TARGETS:
                op, bound = TARGETS[(key, anchor)]
                ratio = fig["ratio" if anchor == "ray" else "ratio_socket"]
                targets[anchor] = {"target": f"{op} {bound}",
                                   "met": ratio <= bound if op == "<=" else ratio >= bound}
        if targets:
            fig["targets"] = targets
            fig["met"] = all(t["met"] for t in targets.values())
        figures[key] = fig
    return figures


def format_table(figures: dict) -> str:
    rows = [("figure", "ftactors", "raw Ray", "socket", "vs Ray", "vs socket", "targets",
             "met")]
    for key, fig in figures.items():
        targets = fig.get("targets", {})
        rows.append((f"{fig['label']} ({fig['unit']})", f"{fig['ftactors']:.1f}",
                     f"{fig['ray']:.1f}", f"{fig['socket']:.1f}", f"{fig['ratio']:.2f}x",
                     f"{fig['ratio_socket']:.2f}x",
                     ", ".join(f"{t['target']}x {a}" for a, t in targets.items()) or "-",
                     ("yes" if fig["met"] else "NO") if "met" in fig else "-"))
    return table(rows)


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="little work and 2 repetitions (a smoke test, not a measurement)")
    add_repetitions(parser, None, f"repetitions of each side (default {FULL['repetitions']}, "
                                  f"--quick {QUICK['repetitions']})")
    parser.add_argument("--sizes-kib", default="",
                        help="more array sizes to measure, in KiB, comma-separated (e.g. "
                             "either side of a crossover: 96,104,15360,16384)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="an option of ft.run for the ftactors side, a Python literal "
                             "(e.g. object_store_bytes=33554432, shared_memory_bytes=None); "
                             "repeatable")


def main(args) -> int:
    settings = QUICK if args.quick else FULL
    repetitions = args.repetitions or settings["repetitions"]
    if repetitions < 1:
        return usage_error("transport", "--repetitions must be >= 1")
    try:
        plan = plan_of(settings, args.sizes_kib)
        options = options_of(args.option)
    except ValueError as exc:
        return usage_error("transport", str(exc))
    print(f"transport benchmark: ftactors on Ray vs raw Ray actor calls and a raw socket pair, "
          f"{repetitions} repetition(s)")
    machine = machine_info()
    figures = summarize(measure(plan, repetitions, args.address, options))
    print(format_table(figures))
    write_results(args, "transport", {
        "quick": bool(args.quick), "repetitions": repetitions, "options": options,
        "plan": {"round_trips": plan["round_trips"], "messages": plan["messages"],
                 "arrays": {str(k): v for k, v in plan["arrays"].items()}},
        "figures": figures,
        "targets_met": all(f["met"] for f in figures.values() if "met" in f),
    }, machine)
    return 0
