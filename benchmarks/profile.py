"""Calls and CPU per message on each side: ftactors on Ray (direct plane) beside the asyncio floor.

What a message costs the processes that send and receive it, in two shapes, each run by
ftactors (``data_plane="direct"``, the default) and by the bare asyncio floor of the same
shape (``_cg_asyncio``'s ranks and message layer), in one run:

* ``ping-pong``: OSU latency's loop (``osu.OsuBench.latency``, ``_osu_asyncio``'s
  floor) at ``SIZE`` bytes between ranks 0 and 1, ``--round-trips`` of them. Figures are
  **per round trip, on each side**: in a round trip each side sends one message and
  receives one, so each side's figure is the cost of one send plus one receive (rank 0
  sends first, rank 1 echoes).
* ``CG``: NPB CG (``ftactors.apps.cg.CG``, as ``bench solver`` runs it; the floor
  ``_cg_asyncio``) on ``--cg CLASS:RANKS``, its timed iterations only (no matrix
  generation). Figures are **per message the rank sent**, averaged over the ranks; a rank
  receives as many as it sends (recursive doubling). Both ways compute the same, so
  ``added`` (ftactors' figure less the floor's) is what ftactors adds to each message.

Each rank measures its own process between entering and leaving the loop (``Meter``):
``calls``, cProfile's count of the function calls (Python functions and the built-in ones
they call) in a pass under the profiler; ``cpu_us``, ``time.process_time`` over the same
loop in a separate pass without it (cProfile makes a call several times dearer). A rank
runs the loop three times: unmetered (warming caches and connections), for CPU, profiled.
Ranks wait without polling unless ``--poll-us`` is given (``poll_spin_us`` = 0 on
both ways): a polling rank burns its wait as CPU, and its polls as calls, so the figures
would be the peer's speed rather than the message's cost. The JSON also has each loop's
CPU on the loop's own thread (``thread_us``: without a Ray worker's own threads) and
wall time. Every figure is the median over repetitions, the ways taking turns in each.
``--top`` lists ftactors' functions of most own time, per round trip of rank 0 and per
message of CG's rank 0: CPU time of the loop's thread under the profiler, less what its
clock costs a call (``profiler_cost``); read them as shares, not as costs.
"""
from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Awaitable, Callable

import ftactors as ft
from ftactors.apps.cg import CG, CG_CLASSES, verify_zeta

from ._cg_asyncio import _cg_rank, _Mesh, spawn_ranks
from ._harness import add_repetitions, machine_info, table, usage_error, write_results
from ._osu_asyncio import _latency
from .osu import OsuBench, buffers
from .solver import HEARTBEAT_TIMEOUT_S

SIZE = 8
"""Bytes of a ping-pong message."""

PASSES = ("warm", "cpu", "profile")
"""The loop's passes in each rank: unmetered, timed for CPU, under cProfile."""

WAYS = ("ftactors", "asyncio")


class Meter(AbstractContextManager):
    """CPU, wall time and messages sent of one process between entering and leaving, and
    with ``profile`` its cProfile (total calls, the ``top`` functions of most own time);
    ``result`` has them once left."""

    def __init__(self, sent: Callable[[], int], profile: bool = False, top: int = 0):
        self.sent, self.profile, self.top = sent, profile, top
        self.result: dict = {}

    def __enter__(self):
        self._sent0 = self.sent()
        self._profiler = profiler() if self.profile else None
        if self._profiler is not None:
            self._profiler.enable()
        self._t0 = time.process_time(), time.thread_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        t1 = time.process_time(), time.thread_time(), time.perf_counter()
        if self._profiler is not None:
            self._profiler.disable()
        self.result = {"sent": self.sent() - self._sent0,
                       **{k: b - a for k, a, b in zip(("cpu_s", "thread_s", "wall_s"),
                                                      self._t0, t1)}}
        if self._profiler is not None:
            stats = pstats.Stats(self._profiler)
            self.result.update(calls=stats.total_calls,
                               top=top_functions(stats, self.top, profiler_cost()))


def profiler(timer=time.thread_time) -> cProfile.Profile:
    """A profiler timing the CPU of its thread (a wall clock would give the waits, and
    whatever preempted the process, to the function that was running)."""
    return cProfile.Profile(timer)


def profiler_cost(calls: int = 20000) -> float:
    """The own seconds ``profiler`` gives a call that does nothing (an empty built-in
    call, taken ``calls`` times): its clock's cost, which it adds to every call."""
    pr, empty, nothing = profiler(), len, ()
    pr.enable()
    for _ in range(calls):
        empty(nothing)
    pr.disable()
    return next(tt for (_, _, name), (_, _, tt, _, _) in pstats.Stats(pr).stats.items()
                if name == "<built-in method builtins.len>") / calls


def top_functions(stats: pstats.Stats, n: int, cost: float) -> list[dict]:
    """The ``n`` functions of most own time, less the profiler's ``cost`` a call:
    ``{"function", "calls", "own_s"}``."""
    own = {key: max(0.0, tt - nc * cost) for key, (_, nc, tt, _, _) in stats.stats.items()}
    return [{"function": function_name(key), "calls": stats.stats[key][1], "own_s": own[key]}
            for key in sorted(own, key=own.get, reverse=True)[:n]]


def function_name(key: tuple) -> str:
    """``engine/_outbox.py:100(send)`` for cProfile's (file, line, name); built-ins as
    cProfile names them."""
    path, line, name = key
    if path == "~":
        return name
    return f"{'/'.join(path.split(os.sep)[-2:])}:{line}({name})"


async def metered_passes(loop: Callable[[AbstractContextManager | None], Awaitable],
                         sent: Callable[[], int], top: int) -> dict:
    """``{"cpu": ..., "profile": ...}``: ``Meter.result`` of the passes of ``PASSES``
    (``loop(timed)`` enters ``timed`` around what it measures; the warm-up pass's None)."""
    await loop(None)
    out = {}
    for name in PASSES[1:]:
        meter = Meter(sent, profile=name == "profile", top=top)
        await loop(meter)
        out[name] = meter.result
    return out


# ------------------------------------------------------------------- ftactors side
class PingPong(OsuBench):
    """OSU latency's loop between ranks 0 and 1 (two ranks), metered on each."""

    async def main(self, round_trips: int, top: int) -> dict:
        s_buf, r_buf = buffers({"max_bytes": SIZE})

        async def loop(timed):
            with timed or nullcontext():
                await self.latency(SIZE, 0, round_trips, s_buf, r_buf)
        return await metered_passes(loop, lambda: self.ft.stats()["sent"], top)


class MeteredCG(CG):
    """NPB CG whose timed iterations (``iterations``) are metered."""

    _timed: AbstractContextManager | None = None

    async def main(self, problem_class: str, top: int) -> dict:
        verified = []

        async def loop(timed):
            self._timed = timed
            verified.append((await super(MeteredCG, self).main(problem_class))["verified"])
        out = await metered_passes(loop, lambda: self.ft.stats()["sent"], top)
        return {**out, "verified": all(verified)}

    async def iterations(self, n: int):
        with self._timed or nullcontext():
            async for i in super().iterations(n):
                yield i


# --------------------------------------------------------------------- floor side
async def _floor_ping_pong(mesh: _Mesh, round_trips: int) -> dict:
    s_buf, r_buf = buffers({"max_bytes": SIZE})

    async def loop(timed):
        with timed or nullcontext():
            await _latency(mesh, SIZE, 0, round_trips, s_buf, r_buf)
    return await metered_passes(loop, lambda: mesh.messages_sent, 0)


async def _floor_cg(mesh: _Mesh, problem_class: str) -> dict:
    zetas = []

    async def loop(timed):
        zetas.append((await _cg_rank(mesh, problem_class, timed))[1])
    out = await metered_passes(loop, lambda: mesh.messages_sent, 0)
    return {**out, "verified": all(verify_zeta(CG_CLASSES[problem_class], z)[0]
                                   for z in zetas)}


# --------------------------------------------------------------------- the driver
def run_case(case: str, way: str, args) -> list[dict]:
    """Each rank's ``metered_passes`` result of one case (``ping-pong`` or ``cg``)."""
    problem, ranks = ("", 2) if case == "ping-pong" else args.cg
    if way == "asyncio":
        body, first = ((_floor_ping_pong, args.round_trips) if case == "ping-pong"
                       else (_floor_cg, problem))
        return spawn_ranks(ranks, body, first, poll_spin_us=args.poll_us)
    program, first = ((PingPong, args.round_trips) if case == "ping-pong"
                      else (MeteredCG, problem))
    return ft.run(program, ranks, args=(first, args.top), transport="ray", address=args.address,
                  poll_spin_us=args.poll_us, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
                  timeout_s=3600).results


def per_unit(case: str, rank: dict, round_trips: int) -> dict:
    """A rank's figures per round trip (ping-pong) or per message it sent (CG)."""
    units = round_trips if case == "ping-pong" else rank["cpu"]["sent"]
    cpu, prof = rank["cpu"], rank["profile"]
    return {"calls": prof["calls"] / units, "cpu_us": cpu["cpu_s"] * 1e6 / units,
            "thread_us": cpu["thread_s"] * 1e6 / units, "wall_us": cpu["wall_s"] * 1e6 / units,
            "sent": cpu["sent"], "units": units}


def rows_of(case: str, ranks: list[dict], round_trips: int) -> dict:
    """``{row label: per_unit figures}``: a row per side of the ping-pong, CG's mean over
    its ranks."""
    figures = [per_unit(case, r, round_trips) for r in ranks]
    if case == "ping-pong":
        return {f"ping-pong {SIZE} B, rank {i}": f for i, f in enumerate(figures)}
    return {"CG, mean of ranks": {k: statistics.fmean(f[k] for f in figures)
                                  for k in figures[0]}}


def measure(args, cases, log=print) -> tuple[dict, dict]:
    """``({row: {way: [figures per repetition]}}, {case: ftactors' rank 0 top
    functions, last repetition})``; RuntimeError when a CG run does not verify or a side
    sent other than a message a round trip."""
    samples: dict = {}
    tops: dict = {}
    for rep in range(args.repetitions):
        for case in cases:
            for way in WAYS:
                t0 = time.perf_counter()
                ranks = run_case(case, way, args)
                if case == "cg" and not all(r["verified"] for r in ranks):
                    raise RuntimeError(f"CG on {way} did not verify")
                for label, fig in rows_of(case, ranks, args.round_trips).items():
                    if case == "ping-pong" and fig["sent"] != args.round_trips:
                        raise RuntimeError(f"{label} on {way} sent {fig['sent']} messages "
                                           f"in {args.round_trips} round trips")
                    samples.setdefault(label, {}).setdefault(way, []).append(fig)
                if way == "ftactors":
                    units = per_unit(case, ranks[0], args.round_trips)["units"]
                    tops[case] = [{**t, "calls": t["calls"] / units,
                                   "own_us": t.pop("own_s") * 1e6 / units}
                                  for t in ranks[0]["profile"]["top"]]
                log(f"  rep {rep + 1}: {case} {way} in {time.perf_counter() - t0:.1f} s "
                    f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return samples, tops


def summarize(samples: dict) -> dict:
    """``{row: {way: {figure: median}, "added": {figure: ftactors - asyncio},
    "ratio": {figure: ftactors / asyncio}}}``."""
    out = {}
    for label, ways in samples.items():
        cell = {w: {k: statistics.median(f[k] for f in runs) for k in runs[0]}
                for w, runs in ways.items()}
        cell["added"] = {k: cell["ftactors"][k] - cell["asyncio"][k]
                         for k in ("calls", "cpu_us")}
        cell["ratio"] = {k: cell["ftactors"][k] / cell["asyncio"][k]
                         for k in ("calls", "cpu_us") if cell["asyncio"][k] > 0}
        out[label] = cell
    return out


def format_tables(summary: dict, tops: dict) -> str:
    rows = [["per round trip a side (ping-pong), per message sent (CG)",
             "calls ftactors", "calls asyncio", "added", "ratio",
             "CPU us ftactors", "CPU us asyncio", "added", "ratio"]]
    for label, cell in summary.items():
        row = [label]
        for k, fmt in (("calls", "{:.0f}"), ("cpu_us", "{:.1f}")):
            row += [fmt.format(cell["ftactors"][k]), fmt.format(cell["asyncio"][k]),
                    fmt.format(cell["added"][k]),
                    f"{cell['ratio'][k]:.2f}x" if k in cell["ratio"] else "-"]
        rows.append(row)
    lines = [table(rows)]
    for case, top in tops.items():
        unit = "round trip" if case == "ping-pong" else "message sent"
        lines += ["", f"ftactors {case}, rank 0: functions of most own time per {unit} "
                      f"(under cProfile)",
                  table([["function", "calls", "own us"]]
                        + [[t["function"], f"{t['calls']:.1f}", f"{t['own_us']:.2f}"]
                           for t in top])]
    return "\n".join(lines)


def parse_cg(text: str) -> tuple[str, int] | None:
    """``--cg CLASS:RANKS`` as (class, ranks), "none" as None; ValueError otherwise."""
    if text.strip() == "none":
        return None
    problem, _, ranks = text.strip().partition(":")
    if problem not in CG_CLASSES or not ranks.isdigit() or int(ranks) < 2 \
            or int(ranks) & (int(ranks) - 1):
        raise ValueError(text)
    return problem, int(ranks)


def add_arguments(parser) -> None:
    add_repetitions(parser, 3, "repetitions of every way; medians reported")
    parser.add_argument("--round-trips", type=int, default=10000,
                        help="ping-pong round trips in each pass (default 10000; 0 skips it)")
    parser.add_argument("--cg", default="S:4",
                        help="CG's CLASS:RANKS, ranks a power of two (default S:4; 'none' "
                             "skips it)")
    parser.add_argument("--poll-us", type=int, default=0,
                        help="both ways' poll_spin_us (default 0: waits sleep, so CPU and "
                             "calls are the messages' own)")
    parser.add_argument("--top", type=int, default=10,
                        help="ftactors' functions of most own time to list (default 10)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: embedded local Ray)")


def main(args) -> int:
    try:
        args.cg = parse_cg(args.cg)
    except ValueError:
        return usage_error("profile", f"--cg takes CLASS:RANKS, CLASS one of "
                                      f"{','.join(CG_CLASSES)} and RANKS a power of two >= 2, "
                                      f"or none (got {args.cg!r})")
    cases = ["ping-pong"] * (args.round_trips > 0) + ["cg"] * (args.cg is not None)
    if not cases or args.repetitions < 1 or args.round_trips < 0 or args.top < 0 \
            or args.poll_us < 0:
        return usage_error("profile", "something to run (--round-trips > 0 or --cg), "
                                      "--repetitions >= 1, --top and --poll-us >= 0")
    print(f"calls and CPU per message: ping-pong {SIZE} B x {args.round_trips}, CG "
          f"{'none' if args.cg is None else '%s x%d' % args.cg}, {args.repetitions} "
          f"repetition(s), poll_spin_us {args.poll_us}, load {os.getloadavg()[0]:.1f}")
    machine = machine_info()
    samples, tops = measure(args, cases)
    summary = summarize(samples)
    print(format_tables(summary, tops))
    print(f"load at the end: {os.getloadavg()[0]:.1f}")
    write_results(args, "profile", {
        "repetitions": args.repetitions, "round_trips": args.round_trips,
        "cg": None if args.cg is None else list(args.cg), "poll_spin_us": args.poll_us,
        "rows": summary, "top": tops}, machine)
    return 0
