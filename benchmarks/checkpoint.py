"""Coordinated checkpoints (ReadyMessageFlush, CoCheck): coordination and save time per rank.

The program (``CheckpointWorkload``) is a synthetic iterative SPMD code: every rank
registers a numpy state of ``--state-mib`` MiB; each iteration it receives the message
its left neighbour sent at the end of the previous iteration (so one message per
channel is in transit at every safe point and ends up in the snapshot), exchanges
``--msg-kib`` KiB with ``--neighbours`` ranks on each side (``sendrecv``), touches its
state, "computes" for ``--compute-ms`` (an ``asyncio.sleep``: virtual time on ``sim``,
and on Ray it keeps 8 ranks on 2 cores from measuring CPU contention alone), does one
``allreduce`` (timed) and sends the carried message on. It runs as
``class P(ReadyMessageFlush, CheckpointWorkload)`` in two ways per configuration:

* **interval**: ``checkpoint_interval=--interval``; every rank knows the position, so
  there is no notification. Per rank: *flush* = arrival at the checkpoint's safe point
  to its last ready message (RM) (``flushed_at - at`` of its ``checkpoint_part``, on the
  run clock); per checkpoint: *spread* = the last rank's last RM minus the first rank's
  arrival (``max(flushed_at) - min(at)``), the time the checkpoint holds the job.
* **requested**: on ``sim`` the coordinator's ``checkpoint_interval_s`` timer (virtual
  time, so deterministic) every ``--interval`` + 1/2 iterations, so requests come in the
  middle of an iteration or near its end; elsewhere ``await run.checkpoint()`` through
  ``ft.launch`` from the driver, each once every rank is 3 iterations past the last one.
  *notify -> last RM* = the last rank's last RM minus the notification (the
  ``notified_at`` of the coordinator's ``checkpoint_requested`` event). It includes the notify/decide round (Ray: two rounds of actor
  calls, in the JSON as ``decided``) and waiting for every rank to reach the agreed
  position (the rest of the iteration the request came in, or the next one).

Both report *save* per rank (``save_s``: snapshot and store, on this machine's CPU even
on ``sim``, where it costs no virtual time) and *complete*: last RM to the coordinator
holding every part (``checkpoint`` event; with object storage it fetches the parts).

Baselines, from the same run (the machine is shared and noisy): one global
synchronisation, the ``allreduce`` every iteration ends with, as the first rank entering
it to the last leaving it (the same first-in to last-out measure as the spread), and the
iteration time without a checkpoint (median over ranks and the iterations with no
checkpoint). Ratios: spread / allreduce, and the extra time of an iteration with a
checkpoint over a plain one, in iterations. In interval mode off ``sim``, the workload
also runs bare (no protocol, next to the checkpointed run): *plain/bare*, a plain
iteration over a bare one, is what the protocol costs at every safe point, chiefly the
base it keeps there for a round joined between safe points (the registered state copied:
raise ``--state-mib`` and ``--compute-ms 0`` to see it; on ``sim`` it is CPU, not
virtual time, so it is not measured there).

Ranks: real ones on Ray (``--ray-ranks``, the embedded local Ray, started once),
simulated ones on ``sim`` (``--sim-ranks``) with a cluster network model
(``--sim-latency-us``, ``--sim-bandwidth-gbps``, ``--sim-jitter-us``), and optionally in
one process on ``local`` (``--local-ranks``; a smoke test). CoCheck's flush is all-to-all,
n(n-1) RMs per checkpoint, and the simulator does ~10-30k messages per wall second, so a
sim run takes at most ``--sim-rm-budget`` RMs: at 1024 ranks that is one checkpoint per
run (~1M RMs, 1-2 minutes of wall time each).
The sim's network has no NIC serialisation (a rank's n-1 RMs fly in parallel, each
``latency + bytes/bandwidth + jitter``), so simulated coordination grows with arrival skew
and latency, not with n.
"""
from __future__ import annotations

import asyncio
import math
import shutil
import statistics
import tempfile
import time

import numpy as np

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush

from ._harness import (TRANSPORTS, add_rank_counts, add_sim_network, machine_info, rank_plan,
                       sim_network, table, usage_error, write_results)

MIB = 1 << 20
CARRY, HALO = 7, 8  # tags


class CheckpointWorkload(ft.Rank):
    """A synthetic iterative SPMD program; returns its timings on the run clock: the
    start of every iteration's body and every allreduce's entry and exit."""

    async def main(self, iterations: int, state_bytes: int, msg_bytes: int,
                   neighbours: int, compute_s: float) -> dict:
        comm, r, n = self.comm, self.rank, self.size
        clock = self.ft.link.clock
        self.register("state", np.full(max(1, state_bytes // 8), float(r)))
        buf = np.full(max(1, msg_bytes // 8), float(r))
        right, left = (r + 1) % n, (r - 1) % n
        # the timings are registered, as a program's history must be (else a restore
        # leaves them as the code before the loop set them: UnsavedStateWarning)
        starts, enter, leave = (self.register(name, []) for name in ("starts", "enter", "leave"))
        async for i in self.iterations(iterations):
            starts.append(clock())
            if i > 0 and n > 1:
                await comm.recv(source=left, tag=CARRY)
            for k in range(1, min(neighbours, n - 1) + 1):
                for dest, src in (((r + k) % n, (r - k) % n), ((r - k) % n, (r + k) % n)):
                    await comm.sendrecv(buf, dest=dest, sendtag=HALO, source=src,
                                        recvtag=HALO)
            self.state[::512] += 1.0  # touch the state (one element per 4 KiB page)
            if compute_s:
                await asyncio.sleep(compute_s)
            enter.append(clock())
            total = await comm.allreduce(float(self.state[0]))
            leave.append(clock())
            self.state[-1] = total
            if i < iterations - 1 and n > 1:
                await comm.send(buf, dest=right, tag=CARRY)
        return {"starts": starts, "enter": enter, "leave": leave}


class CheckpointedWorkload(ReadyMessageFlush, CheckpointWorkload):
    """The workload under ReadyMessageFlush."""


# ----------------------------------------------------------------------- figures
def _stats(values) -> dict:
    values = list(values)
    if not values:
        return {"median": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(values), "max": max(values), "n": len(values)}


def _baselines(results: list[dict], checkpoint_iterations: set[int]) -> dict:
    """Same-run baselines from the ranks' timings: the allreduce span (first entry to
    last exit, per iteration), plain iteration times, and the iterations that held a
    checkpoint (a checkpoint at safe point i falls between body starts i-1 and i)."""
    iterations = min(len(res["starts"]) for res in results)
    spans = [max(res["leave"][i] for res in results) - min(res["enter"][i] for res in results)
             for i in range(iterations)]
    plain, with_ckpt = [], []
    for res in results:
        for i in range(1, iterations):
            d = res["starts"][i] - res["starts"][i - 1]
            (with_ckpt if i in checkpoint_iterations else plain).append(d)
    # iteration 0 and the one after a checkpoint's may carry start-up / catch-up work
    plain_sync = [s for i, s in enumerate(spans) if i > 0 and i not in checkpoint_iterations]
    out = {"allreduce_s": _stats(plain_sync or spans), "iteration_s": _stats(plain),
           "checkpoint_iteration_s": _stats(with_ckpt)}
    it, ck = out["iteration_s"]["median"], out["checkpoint_iteration_s"]["median"]
    out["extra_iterations"] = (ck - it) / it if it > 0 and with_ckpt else float("nan")
    return out


def _per_checkpoint(events, n: int) -> list[dict]:
    """One row per complete checkpoint: per-rank flush and save, the spread, and the
    time from the last RM to the coordinator holding every part."""
    parts: dict[tuple, list] = {}
    for e in events:
        if e.kind == "checkpoint_part":
            parts.setdefault(tuple(e.detail["position"]), []).append(e)
    done = {tuple(e.detail["position"]): e for e in events if e.kind == "checkpoint"}
    rows = []
    for pos in sorted(done):
        ps = parts.get(pos, [])
        if len(ps) != n:
            continue
        last_rm = max(p.detail["flushed_at"] for p in ps)
        rows.append({
            "position": list(pos),
            "bytes": sum(p.detail["bytes"] for p in ps),
            "flush_s": [p.detail["flushed_at"] - p.detail["at"] for p in
                        sorted(ps, key=lambda p: p.rank)],
            "save_s": [p.detail["save_s"] for p in sorted(ps, key=lambda p: p.rank)],
            "first_at": min(p.detail["at"] for p in ps),
            "last_at": max(p.detail["at"] for p in ps),
            "last_rm": last_rm,
            "spread_s": last_rm - min(p.detail["at"] for p in ps),
            "complete_s": done[pos].time - last_rm,
        })
    return rows


def _summary(rows: list[dict], base: dict) -> dict:
    flush = [f for row in rows for f in row["flush_s"]]
    save = [s for row in rows for s in row["save_s"]]
    spread = [row["spread_s"] for row in rows]
    out = {"checkpoints": len(rows), "flush_s": _stats(flush), "save_s": _stats(save),
           "spread_s": _stats(spread),
           "complete_s": _stats(row["complete_s"] for row in rows)}
    if rows and "notify_to_last_rm_s" in rows[0]:
        out["notify_to_last_rm_s"] = _stats(row["notify_to_last_rm_s"] for row in rows)
    if rows and rows[0].get("decided") is not None:
        out["notify_to_decided_s"] = _stats(row["decided"] - row["notified"] for row in rows)
    sync = base["allreduce_s"]["median"]
    out["spread_over_allreduce"] = (out["spread_s"]["median"] / sync
                                    if sync > 0 and rows else float("nan"))
    if "notify_to_last_rm_s" in out:
        it = base["iteration_s"]["median"]
        out["notify_in_iterations"] = (out["notify_to_last_rm_s"]["median"] / it
                                       if it > 0 else float("nan"))
    return out


# -------------------------------------------------------------------------- runs
def _workload_kwargs(args, iterations: int) -> dict:
    return {"iterations": iterations, "state_bytes": int(args.state_mib * MIB),
            "msg_bytes": int(args.msg_kib * 1024), "neighbours": args.neighbours,
            "compute_s": args.compute_ms / 1000.0}


def _run_options(args, transport: str) -> dict:
    opts = {"checkpoint_storage": args.storage}
    if args.storage != "object":
        opts["checkpoint_dir"] = args.checkpoint_dir
    if transport == "sim":
        opts.update(sim_network(args))
    return opts


def checkpoints_for(args, transport: str, n: int) -> int:
    """Checkpoints per run: ``--checkpoints``, on sim capped by the RM budget."""
    if transport != "sim" or n < 2:
        return args.checkpoints
    return max(1, min(args.checkpoints, args.sim_rm_budget // (n * (n - 1))))


def measure_interval(args, transport: str, n: int, count: int) -> dict:
    """Checkpoints every ``--interval`` iterations, ``count`` of them; off ``sim``, the
    bare workload too (``_bare``)."""
    k = args.interval
    iterations = k * count + 2
    t0 = time.perf_counter()
    r = ft.run(CheckpointedWorkload, n, transport=transport, seed=args.seed,
               kwargs=_workload_kwargs(args, iterations), checkpoint_interval=k,
               timeout_s=args.timeout_s, **_run_options(args, transport))
    wall = time.perf_counter() - t0
    base = _baselines(r.results, {i for i in range(k, iterations, k)})
    if transport != "sim":
        base.update(_bare(args, transport, n, iterations, base["iteration_s"]["median"]))
    rows = _per_checkpoint(r.events, n)
    return {"mode": "interval", "transport": transport, "ranks": n, "iterations": iterations,
            "interval": k, "wall_s": wall, "baseline": base, "rows": rows,
            "summary": _summary(rows, base)}


def _bare(args, transport: str, n: int, iterations: int, plain_s: float) -> dict:
    """The workload with no protocol, run as the checkpointed one was: its median
    iteration, and the protocol's plain iterations (no checkpoint in them) over it. What
    ReadyMessageFlush costs at every safe point shows there, chiefly the base it keeps
    for a round joined between safe points (``--state-mib`` of registered state copied)."""
    r = ft.run(CheckpointWorkload, n, transport=transport, seed=args.seed,
               kwargs=_workload_kwargs(args, iterations), timeout_s=args.timeout_s)
    bare = _baselines(r.results, set())["iteration_s"]
    ratio = plain_s / bare["median"] if bare["median"] > 0 else float("nan")
    return {"bare_iteration_s": bare, "plain_over_bare": ratio}


def measure_requested_sim(args, n: int, count: int, iteration_s: float) -> dict:
    """``checkpoint_interval_s`` requests on sim, placed mid-iteration (virtual time)."""
    period = (args.interval + 0.5) * iteration_s
    # request j comes at j * period (its checkpoint at the next safe point, the latest
    # at iteration ceil(j * (interval + 0.5)) + 1); the run ends before request count+1
    iterations = math.floor((count + 0.5) * (args.interval + 0.5)) + 1
    t0 = time.perf_counter()
    r = ft.run(CheckpointedWorkload, n, transport="sim", seed=args.seed,
               kwargs=_workload_kwargs(args, iterations), checkpoint_interval_s=period,
               timeout_s=args.timeout_s, **_run_options(args, "sim"))
    wall = time.perf_counter() - t0
    requested = {tuple(e.detail["position"]): e.detail["notified_at"]
                 for e in r.events_of("checkpoint_requested")}
    rows = _per_checkpoint(r.events, n)
    for row in rows:
        row["notified"] = requested.get(tuple(row["position"]))
        row["notify_to_last_rm_s"] = row["last_rm"] - row["notified"]
    positions = {tuple(row["position"]) for row in rows}
    base = _baselines(r.results, {p[1] for p in positions})
    return {"mode": "requested", "transport": "sim", "ranks": n, "iterations": iterations,
            "timer_s": period, "wall_s": wall, "baseline": base, "rows": rows,
            "skipped": len(r.events_of("checkpoint_skipped")),
            "summary": _summary(rows, base)}


async def _requested_launch(args, transport: str, n: int, count: int) -> tuple:
    """``await run.checkpoint()`` from the driver, ``count`` times, each once every rank
    is a few iterations past the previous one (seen by progress polling)."""
    gap = 3
    poll_s = 0.05 if transport == "ray" else 0.005  # progress polls are actor calls on Ray
    per_checkpoint = gap + 8 + math.ceil(poll_s / max(args.compute_ms / 1000.0, 1e-3))
    iterations = 8 + count * per_checkpoint
    seen = {"min": -1}
    moved = asyncio.Event()

    def progress(report: ft.Progress):
        its = [p[1] if p is not None else -1 for p in report.positions]
        seen["min"] = min(its, default=-1)
        moved.set()

    async def reach(iteration):
        while seen["min"] < iteration:
            moved.clear()
            await moved.wait()

    run = await ft.launch(CheckpointedWorkload, n, transport=transport, seed=args.seed,
                          kwargs=_workload_kwargs(args, iterations), progress=progress,
                          progress_interval_s=poll_s, timeout_s=args.timeout_s,
                          **_run_options(args, transport))
    asked = []
    for _ in range(count):
        waiter = asyncio.ensure_future(reach(seen["min"] + gap if asked else 2))
        await asyncio.wait([waiter, asyncio.ensure_future(run.result())],
                           return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            waiter.cancel()
            break  # the run ended first
        try:
            info = await run.checkpoint()
        except ft.ProtocolError:
            break
        asked.append(tuple(info["position"]))
    return await run.result(), asked


def measure_requested_launch(args, transport: str, n: int, count: int) -> dict:
    t0 = time.perf_counter()
    r, asked = asyncio.run(_requested_launch(args, transport, n, count))
    wall = time.perf_counter() - t0
    # notified_at: when the coordinator sent the notifications; the event's own time is
    # when every rank had been told the position
    decided = {tuple(e.detail["position"]): e.time for e in r.events_of("checkpoint_requested")}
    notified = {tuple(e.detail["position"]): e.detail["notified_at"]
                for e in r.events_of("checkpoint_requested") if tuple(e.detail["position"]) in asked}
    rows = [row for row in _per_checkpoint(r.events, n) if tuple(row["position"]) in notified]
    for row in rows:
        pos = tuple(row["position"])
        row["notified"] = notified[pos]
        row["decided"] = decided.get(pos)
        row["notify_to_last_rm_s"] = row["last_rm"] - row["notified"]
    base = _baselines(r.results, {tuple(row["position"])[1] for row in rows})
    return {"mode": "requested", "transport": transport, "ranks": n,
            "iterations": len(r.results[0]["starts"]), "wall_s": wall, "baseline": base,
            "rows": rows, "skipped": len(r.events_of("checkpoint_skipped")),
            "summary": _summary(rows, base)}


# ------------------------------------------------------------------------ output
def _ms(x: float) -> str:
    return "-" if x != x else f"{1000 * x:.2f}"


def _ratio(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


def format_table(configs: list[dict]) -> str:
    head = ("mode", "transport", "ranks", "ckpts", "flush/rank", "spread", "notify->RM",
            "save/rank", "complete", "allreduce", "iteration", "spread/ar", "+iter",
            "plain/bare")
    sub = ("", "", "", "", "med/max", "med/max", "med/max", "med/max", "med", "med", "med",
           "", "", "")
    rows = [head, sub]
    for c in configs:
        s, b = c["summary"], c["baseline"]
        mm = lambda d: f"{_ms(d['median'])}/{_ms(d['max'])}"  # noqa: E731
        rows.append((c["mode"], c["transport"], str(c["ranks"]), str(s["checkpoints"]),
                     mm(s["flush_s"]), mm(s["spread_s"]),
                     mm(s["notify_to_last_rm_s"]) if "notify_to_last_rm_s" in s else "-",
                     mm(s["save_s"]), _ms(s["complete_s"]["median"]),
                     _ms(b["allreduce_s"]["median"]), _ms(b["iteration_s"]["median"]),
                     _ratio(s["spread_over_allreduce"]), _ratio(b["extra_iterations"]),
                     _ratio(b.get("plain_over_bare", float("nan")))))
    return table(rows, left=2, header=2)


# -------------------------------------------------------------------------- main
def add_arguments(parser) -> None:
    add_rank_counts(parser, ray="4,8", sim="32,128,1024")
    parser.add_argument("--state-mib", type=float, default=1.0,
                        help="registered numpy state per rank, MiB (default 1)")
    parser.add_argument("--checkpoints", type=int, default=3,
                        help="checkpoints per run (default 3; sim: capped by --sim-rm-budget)")
    parser.add_argument("--interval", type=int, default=4,
                        help="iterations between interval checkpoints (default 4)")
    parser.add_argument("--storage", default="object", choices=("object", "stable", "both"),
                        help="checkpoint_storage (default object)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="checkpoint_dir for stable/both (default: a temporary directory)")
    parser.add_argument("--modes", default="interval,requested",
                        help="interval and/or requested (default both)")
    parser.add_argument("--compute-ms", type=float, default=10.0,
                        help="modelled compute per iteration, an asyncio.sleep (default 10)")
    parser.add_argument("--msg-kib", type=float, default=8.0,
                        help="size of each halo and carried message, KiB (default 8)")
    parser.add_argument("--neighbours", type=int, default=2,
                        help="halo partners on each side (default 2)")
    add_sim_network(parser, latency_us=10.0, bandwidth_gbps=25.0, jitter_us=2.0)
    parser.add_argument("--sim-rm-budget", type=int, default=2_000_000,
                        help="sim: at most this many ready messages per run (default 2e6: "
                             "one checkpoint per run at 1024 ranks)")
    parser.add_argument("--seed", type=int, default=0, help="sim seed")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per run")


def main(args) -> int:
    try:
        plan = rank_plan(args)
    except ValueError:
        return usage_error("checkpoint", "rank lists are comma-separated ints")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if (any(n < 2 for _, n in plan) or args.checkpoints < 1
            or args.interval < 1 or args.state_mib < 0 or args.neighbours < 0
            or not modes or set(modes) - {"interval", "requested"}):
        return usage_error("checkpoint", "needs ranks >= 2, --checkpoints >= 1, "
                           "--interval >= 1, --state-mib >= 0 and --modes from "
                           "interval,requested")
    tmp = None
    if args.storage != "object" and args.checkpoint_dir is None:
        tmp = args.checkpoint_dir = tempfile.mkdtemp(prefix="ftactors-bench-ckpt-")
    print(f"bench checkpoint: ReadyMessageFlush, {args.state_mib:g} MiB state per rank, "
          f"storage {args.storage}, checkpoint every {args.interval} iterations, "
          f"{args.compute_ms:g} ms compute per iteration; sim network: latency "
          f"{args.sim_latency_us:g} us, {args.sim_bandwidth_gbps:g} Gbit/s, jitter "
          f"{args.sim_jitter_us:g} us", flush=True)
    machine = machine_info()
    if any(t == "ray" for t, _ in plan):
        from ftactors.transports.ray import ensure_ray
        ensure_ray()  # once for the whole process
    configs = []
    t_all = time.perf_counter()
    try:
        for transport, n in plan:
            count = checkpoints_for(args, transport, n)
            interval = None
            if "interval" in modes or transport == "sim":
                interval = measure_interval(args, transport, n, count)
                if "interval" in modes:
                    configs.append(interval)
                    _progress(interval)
            if "requested" in modes:
                if transport == "sim":
                    it = interval["baseline"]["iteration_s"]["median"]
                    req = measure_requested_sim(args, n, count, it)
                else:
                    req = measure_requested_launch(args, transport, n, count)
                configs.append(req)
                _progress(req)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - t_all
    print()
    print(format_table(configs))
    print("\n  times in ms on the run clock (wall on ray/local, virtual on sim) except "
          "save/rank (this machine's CPU everywhere); flush/rank: arrival at the position "
          "to the rank's last RM; spread: first arrival to last RM of the checkpoint; "
          "notify->RM: notification to the last RM; complete: last RM to every part at "
          "the coordinator; allreduce: first in to last out (same run, plain iterations); "
          "spread/ar: spread / allreduce; +iter: extra time of an iteration holding a "
          "checkpoint, in plain iterations; plain/bare: a plain iteration over one of "
          "the workload run with no protocol (interval mode, not on sim): the cost at "
          "every safe point, chiefly the base kept for rounds joined between them")
    print(f"  total wall time {total:.1f} s")
    write_results(args, "checkpoint", {
        "settings": {"state_mib": args.state_mib, "checkpoints": args.checkpoints,
                     "interval": args.interval, "storage": args.storage,
                     "modes": modes, "compute_ms": args.compute_ms,
                     "msg_kib": args.msg_kib, "neighbours": args.neighbours,
                     **{f"{t}_ranks": [n for u, n in plan if u == t] for t in TRANSPORTS},
                     "seed": args.seed,
                     "sim_rm_budget": args.sim_rm_budget},
        "sim_network": sim_network(args),
        "configs": configs, "wall_s": total,
    }, machine)
    return 0


def _progress(c: dict) -> None:
    s = c["summary"]
    print(f"  {c['mode']:9s} {c['transport']:5s} {c['ranks']:5d} ranks: "
          f"{s['checkpoints']} checkpoint(s), spread {_ms(s['spread_s']['median'])} ms, "
          f"save {_ms(s['save_s']['median'])} ms/rank  ({c['wall_s']:.1f} s wall)",
          flush=True)
