"""Simulator speed: simulated messages per wall-clock second at 1024 ranks.

What is measured: a light, message-bound workload (per round, a token passed once round
a ring, an ``allreduce`` and a ``bcast``) run on the ``sim`` transport. Each rank counts
the application messages it sends between two barriers and reads ``time.perf_counter``
at both; the figure is all ranks' messages over the wall time from the first start to
the last end (rank start-up is excluded). The virtual time the simulation reached is
reported beside it, to show what the messages stand for. So that a user can see what a
simulated run of their size costs, each run also reports its wall time with the start-up,
the simulator's events (timers fired at their virtual time) and callbacks, and its peak
memory (each run in a forked child, so the peak is its own) and growth per rank.

Baseline: the same workload at the same rank count on the ``local`` transport, which
runs the same ranks, endpoints, channels, matching and collectives as asyncio tasks on
the stock event loop and delivers every batch with ``call_soon``. The two runs differ
only in what the simulator adds: the virtual-time loop (a timer heap instead of a FIFO
ready queue) and the network model (a seeded delay per batch), so the ratio
sim / local is the price of simulation itself, on the same machine in the same run.
A raw asyncio loop doing as many callbacks would instead measure the whole framework
against nothing, which says nothing about the simulator. Runs alternate (sim, local,
sim, ...) so that load from other users of the machine hits both; figures are medians.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import statistics
import time

import ftactors as ft

from ._harness import add_repetitions, machine_info, table, usage_error, write_results


class SimWorkload(ft.Rank):
    """Per round: a ring pass, an allreduce and a bcast; returns (t0, t1, messages)."""

    async def main(self, rounds: int) -> tuple[float, float, int]:
        comm, me, n = self.comm, self.rank, self.size
        right, left = (me + 1) % n, (me - 1) % n
        await comm.barrier()
        sent0, t0 = self.ft.sent.total(), time.perf_counter()
        for r in range(rounds):
            if me == 0:
                await comm.send(r, dest=right)
                await comm.recv(source=left)
            else:
                await comm.send(await comm.recv(source=left), dest=right)
            await comm.allreduce(me)
            await comm.bcast(r if me == 0 else None, root=0)
        await comm.barrier()
        return t0, time.perf_counter(), self.ft.sent.total() - sent0


def run_once(transport: str, ranks: int, rounds: int, seed: int = 0) -> dict:
    """One run of the workload: messages, wall seconds, messages per wall second; on sim
    also the events and callbacks the simulator ran. Memory: the process's peak resident
    size and its growth over the run per rank (meaningful in a fresh process, where the
    peak is this run's: see ``run_apart``)."""
    rss0 = _rss_bytes()
    t_run = time.perf_counter()
    result = ft.run(SimWorkload, ranks, args=(rounds,), transport=transport, seed=seed)
    run_s = time.perf_counter() - t_run
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    starts, ends, counts = zip(*result.results)
    wall = max(ends) - min(starts)
    figure = {"messages": sum(counts), "wall_s": wall, "msgs_per_s": sum(counts) / wall,
              "run_wall_s": run_s, "peak_rss_bytes": peak,
              "bytes_per_rank": max(peak - rss0, 0) / ranks}
    if transport == "sim":
        figure["virtual_s"] = result.metrics["wall_s"]
        figure["events"] = result.metrics["sim_events"]
        figure["callbacks"] = result.metrics["sim_callbacks"]
    return figure


def run_apart(transport: str, ranks: int, rounds: int, seed: int = 0) -> dict:
    """``run_once`` in a forked child process, so that the peak memory it reports is
    this run's alone (not an earlier run's high-water mark)."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, transport, ranks, rounds, seed))
    child.start()
    send.close()
    try:
        outcome = recv.recv()
    except EOFError:
        outcome = RuntimeError(f"the {transport} run of {ranks} ranks died "
                               f"(exit code {child.join() or child.exitcode})")
    child.join()
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _child(send, *args) -> None:
    try:
        send.send(run_once(*args))
    except Exception as exc:  # reported in the parent
        send.send(RuntimeError(f"{type(exc).__name__}: {exc}"))
    send.close()


def _rss_bytes() -> int:
    """This process's resident size now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def add_arguments(parser) -> None:
    parser.add_argument("--ranks", type=int, default=1024, help="number of ranks (default 1024)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds of ring pass + allreduce + bcast (default 10)")
    add_repetitions(parser, 3, "runs of each transport, alternating; figures are medians")
    parser.add_argument("--baseline", choices=("local", "none"), default="local",
                        help="the local transport's run beside each sim run (default local; "
                             "'none': the sim alone, for large rank counts)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sim's network jitter")


def main(args) -> int:
    if args.ranks < 2 or args.rounds < 1 or args.repetitions < 1:
        return usage_error("sim", "needs --ranks >= 2, --rounds >= 1, --repetitions >= 1")
    print(f"sim benchmark: {args.ranks} ranks, {args.rounds} rounds, "
          f"{args.repetitions} repetition(s), sim vs local")
    machine = machine_info()
    runs: dict[str, list[dict]] = {"sim": []}
    if args.baseline == "local":
        runs["local"] = []
    for _ in range(args.repetitions):
        for transport in runs:
            runs[transport].append(run_apart(transport, args.ranks, args.rounds, args.seed))
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    print(table([("transport", "messages", "wall s", "run wall s", "msgs/s", "virtual s",
                  "events", "peak MB", "KB/rank")]
                + [(t, f"{m['messages']:.0f}", f"{m['wall_s']:.3f}", f"{m['run_wall_s']:.1f}",
                    f"{m['msgs_per_s']:.0f}",
                    f"{m['virtual_s']:.6f}" if "virtual_s" in m else "-",
                    f"{m['events']:.0f}" if "events" in m else "-",
                    f"{m['peak_rss_bytes'] / 2**20:.0f}", f"{m['bytes_per_rank'] / 1024:.1f}")
                   for t, m in med.items()]))
    sim = med["sim"]
    print(f"a simulated run of {args.ranks} ranks here: {sim['run_wall_s']:.1f} s wall "
          f"(start-up included), {sim['events']:.0f} events ({sim['callbacks']:.0f} "
          f"callbacks), peak memory {sim['peak_rss_bytes'] / 2**20:.0f} MB, "
          f"{sim['bytes_per_rank'] / 1024:.1f} KB per rank")
    ratio = None
    if "local" in med:
        ratio = med["sim"]["msgs_per_s"] / med["local"]["msgs_per_s"]
        print(f"sim / local messages per wall second: {ratio:.2f}x")
    write_results(args, "sim", {
        "ranks": args.ranks, "rounds": args.rounds,
        "repetitions": args.repetitions, "seed": args.seed,
        "sim": med["sim"], "local": med.get("local"), "ratio_sim_over_local": ratio,
        "runs": runs,
    }, machine)
    return 0
