"""Deaths from outside: SIGKILL a rank or spare process at a random moment of a Ray run.

Nothing in the framework is told: a thread of the driver finds the run's rank-actor
processes (the descendants of this process titled ``ray::RankActor...``, so only this
process's own Ray is touched), waits a random delay after the first of them appeared,
and SIGKILLs one of them at random (a rank or a spare, whatever it is doing then: being
started, wired, solving, returning, idle). Every trial must give the failure-free
answer. Half the trials strike in the first second after the first actor started (the
start-up and the wiring), the others anywhere in the failure-free run's length. Prints
per protocol the trials, how many verified, and what the others raised.
"""
from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import ftactors as ft
from ftactors.tools.procs import descendants, title

from ._harness import table, write_results

POLL_S = 0.005


def rank_actor_pids() -> dict[int, str]:
    """The rank-actor processes among this process's descendants: pid -> title."""
    titles = {pid: title(pid) for pid in descendants(os.getpid())}
    return {pid: t for pid, t in titles.items() if t and t.startswith("ray::RankActor")}


class Killer(threading.Thread):
    """SIGKILLs one rank-actor process of the next run, ``delay_s`` after its first one
    appeared (processes alive before it started are not the run's)."""

    def __init__(self, delay_s: float, rng: random.Random):
        super().__init__(daemon=True)
        self.delay_s = delay_s
        self.rng = rng
        self.old = set(rank_actor_pids())
        self.stop = threading.Event()
        self.hit: tuple[float, str] | None = None  # (seconds after the first actor, title)

    def _fresh(self) -> dict[int, str]:
        return {p: t for p, t in rank_actor_pids().items() if p not in self.old}

    def run(self) -> None:
        while not self._fresh():
            if self.stop.wait(POLL_S):
                return
        first = time.monotonic()
        if self.stop.wait(self.delay_s):
            return
        procs = self._fresh()
        while not procs:  # between two lives: strike the next one
            if self.stop.wait(POLL_S):
                return
            procs = self._fresh()
        pid = self.rng.choice(sorted(procs))
        os.kill(pid, signal.SIGKILL)
        self.hit = (time.monotonic() - first, procs[pid])

    def __enter__(self) -> "Killer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join()


def trial(cls, ranks: int, delay_s: float, rng: random.Random, *, timeout_s: float = 300,
          **run_kw):
    """One run of ``cls`` with one outside SIGKILL ``delay_s`` after its first actor
    started: ``(result or the exception raised, the killer's hit)`` (None: the run
    ended before the kill, which tested nothing). The run starts processes of its own
    (``reuse_processes=False``): a death during start-up needs a start."""
    with Killer(delay_s, rng) as killer:
        try:
            outcome = ft.run(cls, ranks, timeout_s=timeout_s, reuse_processes=False,
                             **run_kw)
        except Exception as exc:  # noqa: BLE001 - what a user would see is the finding
            outcome = exc
    return outcome, killer.hit


def delays(trials: int, length_s: float, seed: int) -> list[float]:
    """Half in the first second after the first actor, half within ``length_s``."""
    rng = random.Random(seed)
    return [rng.uniform(0, 1.0) if k % 2 == 0 else rng.uniform(0, length_s)
            for k in range(trials)]


def protocols(spares: int = 2) -> dict[str, tuple[tuple, dict, int]]:
    """The measured stacks: mixins, options, spares (4 ranks)."""
    from ftactors.protocols import (GroupCoordination, ReadyMessageFlush, RSBackup,
                                    StandbyReplacement)
    rs = {"rs_group_size": 2, "rs_interval": 4}
    return {
        "standby": ((StandbyReplacement,), {"backup_interval": 3}, spares),
        "ready-flush": ((ReadyMessageFlush,), {"checkpoint_interval": 3}, 0),
        "groups": ((GroupCoordination,), {"groups": "fixed:2",
                                          "group_checkpoint_interval": 3}, 0),
        "rs+standby": ((RSBackup, StandbyReplacement), {**rs, "backup_interval": 2}, spares),
        "rs+standby+ready-flush": ((RSBackup, StandbyReplacement, ReadyMessageFlush),
                                   {**rs, "backup_interval": 2, "checkpoint_interval": 6},
                                   spares),
    }


def add_arguments(p) -> None:
    p.add_argument("--class", dest="problem_class", default="W", help="CG class (default W)")
    p.add_argument("--ranks", type=int, default=4, help="Ray ranks (default 4)")
    p.add_argument("--trials", type=int, default=12, help="trials per protocol (default 12)")
    p.add_argument("--protocols", default=",".join(protocols()),
                   help="comma-separated, of: " + ", ".join(protocols()))
    p.add_argument("--seed", type=int, default=0, help="seed of the delays and victims")
    p.add_argument("--length-s", type=float, default=None,
                   help="the failure-free run's length on Ray, for the delays (default: "
                        "measured)")


def main(args) -> int:
    from ftactors.apps.cg import CG
    kwargs = {"problem_class": args.problem_class}
    reference = ft.run(CG, args.ranks, transport="local", kwargs=kwargs).results
    length_s = args.length_s
    if length_s is None:  # the second failure-free run on Ray (the first one warms it up)
        length_s = [ft.run(CG, args.ranks, kwargs=kwargs).metrics["wall_s"]
                    for _ in range(2)][-1]
    rows, out = [], {}
    for name in args.protocols.split(","):
        mixins, options, spares = protocols()[name]
        cls = type("".join(m.__name__ for m in mixins) + "CG", (*mixins, CG), {})
        rng = random.Random(args.seed)
        verified, raised, hits = 0, Counter(), []
        for delay in delays(args.trials, length_s, args.seed):
            outcome, hit = trial(cls, args.ranks, delay, rng, kwargs=kwargs, spares=spares,
                                 **options)
            hits.append(hit)
            if hit is None:  # the run ended first: nothing was survived
                raised["NOT TESTED (the kill never fired)"] += 1
            elif isinstance(outcome, Exception):
                raised[f"{type(outcome).__module__}.{type(outcome).__name__}"] += 1
            elif [x["zetas"] for x in outcome.results] == [x["zetas"] for x in reference]:
                verified += 1
            else:
                raised["wrong answer"] += 1
            print(f"  {name}: delay {delay:.2f} s, hit {hit}, "
                  f"{'verified' if not isinstance(outcome, Exception) else outcome!r}",
                  flush=True)
        struck = sum(h is not None for h in hits)
        rows.append([name, str(args.trials), str(struck), str(verified),
                     ", ".join(f"{k} x{v}" for k, v in raised.items()) or "-"])
        out[name] = {"trials": args.trials, "struck": struck, "verified": verified,
                     "raised": dict(raised), "hits": hits}
    print(table([["protocol", "trials", "struck", "verified", "what the others raised"],
                 *rows]))
    write_results(args, "deaths", {"class": args.problem_class, "ranks": args.ranks,
                         "failure_free_s": length_s, "protocols": out})
    return 0 if all(v["verified"] == v["trials"] for v in out.values()) else 1
