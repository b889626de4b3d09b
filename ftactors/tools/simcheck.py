"""``ftactors sim-check``: the deterministic simulator as a protocol checker.

Many seeded runs of a small program that keeps every channel busy across every safe
point, each rank's channel to itself included (``Flood``: each message says who sent
it, in which iteration and which one, and the receiver checks it at once), each under a
random failure schedule drawn from the run's seed: one to three kills at random ranks
and iterations, biased towards checkpoint iterations (a kill at a checkpoint's safe
point strikes during it), and sometimes a kill of another rank as recovery starts, at a
moment no iteration reaches (a host starting, the wiring, ``main()`` returning, a rank
that returned, a time from the start of the run) or of a spare (starting, idle, being
promoted). Network faults are drawn too (``network_faults``): in one run of five the
kills at iterations and times are disconnects instead (nobody dies), and in one run of
four a set of ranks is cut off the others for a while.
Each run must pass these checks:

* it ends (a run that can never progress ends at once with ``ft.Deadlock``, so a lost
  message is caught, not waited for; the failure names every rank's wait, and with
  ``--app`` the likely causes are read from them: ``_simcheck_stalls``);
* no message lost, duplicated or out of channel order: Flood fails at the first wrong
  message, and the digests and totals equal the failure-free run's;
* a run whose kills are all disconnects declares no rank failed;
* no duplicate dropped by any receiver, for the protocols whose recovery lines are exact
  cuts (``exact`` below): a duplicate there means an orphan message, one a restored
  state holds as received that its sender's restored state had not sent;
* for GroupCoordination, its logs stay bounded (garbage collection works);
* for DDVPiggyback, after every garbage collection every cluster keeps exactly the CLCs
  a single failure could still send it back to, never more than there are clusters, the
  coordinator no more parts than those and one CLC being taken, and the logs no more
  than a bound (``_simcheck_invariants``);
* for a multi-level stack (``rs+standby+ready-flush``), every recovery names its level,
  the last level never gives up in a run that ends, and no recovery is made by a level
  that cannot hold the loss or past one that surely can (``level_problem``).

A run that fails prints its seed and the command that replays it; the same seed makes
the same run, event for event. ``StandbyReplacement`` and ``RSBackup`` legitimately give
up (``RankFailed``) when a failure takes data that no copy or code can rebuild (a rank
and its partner, too many ranks of a group), and StandbyReplacement when no spare is
left; each give-up is checked against the failed ranks and the placement of the copies
(not the protocol's own bookkeeping), or the spares the timeline shows, and counted as
such when it was forced, failed otherwise; a stack's give-up by its last level's reason.

Flood crosses every cluster border at every step, so DDVPiggyback's runs often storm
(``ForcedCheckpointStorm``): the protocol working as written for such a program. The
summary counts the runs that stormed instead of warning once a run.
"""
from __future__ import annotations

import argparse
import random
import resource
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import ftactors as ft

from ._simcheck_invariants import (hc3i_unbounded, level_problem, needless_give_up,
                                   part_level_problem)
from ._simcheck_programs import program_causes, run_causes, watched
from ._simcheck_stalls import stall_causes
from ..protocols import ForcedCheckpointStorm
from .apps_cli import protocol_arg
from .programs import add_program_arguments, program_from_args
from ..runtime import RANK_MOMENTS, SPARE_MOMENTS, describe, kill_text

ITERATIONS, PER_PEER, INTERVAL = 9, 2, 3
JITTER_S = 2e-5
"""Random delay of every message: the runs see many orders of arrival."""


class Flood(ft.Rank):
    """Every rank sends ``per_peer`` messages to every rank, itself included, each
    iteration, on several tags, and receives them in the next one (so messages to self
    cross safe points like the others); a ring message through a posted ``irecv``, a
    message to self received in the same iteration and an ``allreduce`` every iteration.
    Every message is checked on arrival; the digest of what was received is compared
    with a failure-free run. With ``reach``, "every rank" is the ranks within ``reach``
    of it on a ring (a halo exchange): the traffic of a large run grows with its ranks,
    not with their square."""

    async def main(self, iterations=12, per_peer=3, request_at=(), reach=None):
        comm, r, n = self.comm, self.rank, self.size
        self.register("digest", [])
        self.register("total", 0.0)
        peers = flood_peers(r, n, reach)
        async for i in self.iterations(iterations):
            if i > 0:
                self.digest.append(await self._take(i - 1, per_peer, peers))
            ring = comm.irecv(source=(r - 1) % n, tag=5)
            mine = comm.irecv(source=r, tag=6)
            sends = [comm.isend((r, i, j, float(r * 1000 + i * 10 + j)), dest=p, tag=10 + j)
                     for p in peers for j in range(per_peer)]
            if r == 0 and i in request_at:
                self.request_checkpoint()
            comm.isend(("self", r, i), dest=r, tag=6)
            await comm.send(("ring", r, i), dest=(r + 1) % n, tag=5)
            for req, expect in ((ring, ("ring", (r - 1) % n, i)), (mine, ("self", r, i))):
                got = await req.wait()
                if got != expect:
                    raise AssertionError(f"rank {r} expected {expect} in iteration {i}, "
                                         f"got {got}")
            self.total = await comm.allreduce(self.total + r + i)
            await ft.waitall(sends)
        self.digest.append(await self._take(iterations - 1, per_peer, peers))
        return {"digest": list(self.digest), "total": self.total}

    async def _take(self, i, per_peer, peers):
        got = []
        for src in peers:
            for j in range(per_peer):
                m = await self.comm.recv(source=src, tag=10 + j)
                if m[:3] != (src, i, j):
                    raise AssertionError(f"rank {self.rank} expected {(src, i, j)}, got {m}")
                got.append(m[3])
        return sum(got)


def flood_peers(rank: int, size: int, reach: int | None) -> list[int]:
    """Whom ``rank`` floods (and hears from): every rank, or those within ``reach`` of
    it on the ring, itself included."""
    if reach is None or 2 * reach + 1 >= size:
        return list(range(size))
    return sorted({(rank + d) % size for d in range(-reach, reach + 1)})


HALO_FROM = 64
"""From this many ranks on, sim-check's Flood reaches its ring neighbours only (``reach``
1) unless told otherwise: every rank to every rank is n^2 messages per iteration."""


@dataclass
class Setup:
    """How one protocol or stack is checked: its mixins (outermost first), options, and
    what it promises."""

    name: str
    mixins: tuple[type, ...]
    options: dict
    ranks: int = 6
    spares: int = 0
    exact: bool = True          # restarts are exact cuts: no duplicate is ever dropped
    may_give_up: bool = False   # RankFailed is a correct outcome for some schedules
    bounded_log: bool = False   # GroupCoordination's logs
    bounded_clcs: bool = False  # DDVPiggyback's stored CLCs, parts and logs after GC

    @property
    def levels(self) -> list[str]:
        """A multi-level stack's levels, cheapest first (the order recovery tries them);
        empty for one protocol."""
        if len(self.mixins) < 2:
            return []
        return [p.protocol_name for p in sorted(self.mixins, key=lambda p: p.level_cost)
                if p.recovery_policy is not None or p.part_level is not None]

    @property
    def keeps_parts(self) -> str | None:
        """In a stack whose consistency protocol hands its parts to the levels
        (``Protocol.hands_parts``), the option that defines its units; else None."""
        lead = next((p for p in self.mixins if p.hands_parts), None)
        return None if lead is None or len(self.mixins) < 2 else {"groups": "groups", "hc3i": "clusters"}[
            lead.protocol_name]


RS_TOPOLOGY = {"rs_group_size": 2, "rs_ranks_per_node": 2, "rs_block_bytes": 512}
"""8 ranks on virtual nodes of 2, groups of 2: group 0 is ranks 0 and 2, and so on."""


def setups() -> dict[str, Setup]:
    """The protocols and stacks sim-check knows, by their command-line names. A stack's
    levels have distinct intervals: partner copies every 2 iterations, RS rounds every 3,
    global sets every 4."""
    from ftactors.protocols import (DDVPiggyback, GroupCoordination, ReadyMessageFlush,
                                    RSBackup, StandbyReplacement)
    partner, encoded, stable = {"backup_interval": 2}, {**RS_TOPOLOGY, "rs_interval": 3}, {
        "checkpoint_interval": 4}
    return {
        "standby": Setup("standby", (StandbyReplacement,), {"backup_interval": INTERVAL},
                         spares=3, may_give_up=True),
        "ready-flush": Setup("ready-flush", (ReadyMessageFlush,),
                             {"checkpoint_interval": INTERVAL}),
        "groups": Setup("groups", (GroupCoordination,),
                        {"groups": "fixed:2", "group_checkpoint_interval": INTERVAL},
                        bounded_log=True),
        "hc3i": Setup("hc3i", (DDVPiggyback,), {"clusters": "fixed:2"}, exact=False,
                      bounded_clcs=True),
        "rs": Setup("rs", (RSBackup,), {**RS_TOPOLOGY, "rs_interval": INTERVAL},
                    ranks=8, spares=3, may_give_up=True),
        "standby+ready-flush": Setup("standby+ready-flush",
                                     (StandbyReplacement, ReadyMessageFlush),
                                     {**partner, **stable}, spares=3),
        "rs+ready-flush": Setup("rs+ready-flush", (RSBackup, ReadyMessageFlush),
                                {**encoded, **stable}, ranks=8, spares=3),
        "rs+standby": Setup("rs+standby", (RSBackup, StandbyReplacement),
                            {**encoded, **partner}, ranks=8, spares=3, may_give_up=True),
        "standby+groups": Setup(
            "standby+groups", (StandbyReplacement, GroupCoordination),
            {"groups": "fixed:2", "group_checkpoint_interval": INTERVAL}, spares=3,
            bounded_log=True),
        "standby+hc3i": Setup("standby+hc3i", (StandbyReplacement, DDVPiggyback),
                              {"clusters": "fixed:2"}, spares=3, exact=False,
                              bounded_clcs=True),
        "rs+standby+ready-flush": Setup(
            "rs+standby+ready-flush", (RSBackup, StandbyReplacement, ReadyMessageFlush),
            {**encoded, **partner, **stable}, ranks=8, spares=3),
        "rs+groups": Setup("rs+groups", (RSBackup, GroupCoordination),
                           {"groups": "fixed:2", "group_checkpoint_interval": INTERVAL,
                            "rs_block_bytes": 1024}, spares=2, bounded_log=True),
        "rs+hc3i": Setup("rs+hc3i", (RSBackup, DDVPiggyback),
                         {"clusters": "fixed:2", "rs_block_bytes": 1024}, spares=2,
                         exact=False, bounded_clcs=True),
        "rs+standby+groups": Setup(
            "rs+standby+groups", (RSBackup, StandbyReplacement, GroupCoordination),
            {"groups": "fixed:2", "group_checkpoint_interval": INTERVAL,
             "rs_block_bytes": 1024}, spares=2, bounded_log=True),
        "rs+standby+hc3i": Setup(
            "rs+standby+hc3i", (RSBackup, StandbyReplacement, DDVPiggyback),
            {"clusters": "fixed:2", "rs_block_bytes": 1024}, spares=2, exact=False,
            bounded_clcs=True),
    }


def schedule(seed: int, ranks: int, spares: int = 0, length_s: float = 0.0,
             iterations: int = ITERATIONS) -> list[ft.Kill]:
    """The failures of run ``seed``: 1-3 kills at (rank, iteration), a third of them at
    checkpoint iterations, and in one run of four a kill as the first recovery starts;
    in one run of three a kill at a moment no iteration reaches (a host starting, the
    wiring, ``main()`` returning, a returned rank) or at a time within the failure-free
    run's ``length_s`` from its start; with ``spares``, in one run of four a spare's
    death (starting, idle or being promoted). ``iterations``: the safe points the
    program offers (Flood's ``ITERATIONS``, or a user's program's failure-free count)."""
    rng = random.Random(seed)
    kills = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        if rng.random() < 1 / 3 and iterations > INTERVAL:
            it = rng.choice(range(INTERVAL, iterations, INTERVAL))
        else:
            it = rng.randrange(1, max(2, iterations))
        kills.append(ft.Kill(rng.randrange(ranks), iteration=it))
    if rng.random() < 0.25:
        kills.append(ft.Kill(rng.randrange(ranks), recovery_round=0))
    if rng.random() < 1 / 3:
        moment = rng.choice((*RANK_MOMENTS, "time"))
        if moment == "time":
            kills.append(ft.Kill(rng.randrange(ranks), time_s=rng.uniform(0, length_s)))
        else:
            kills.append(ft.Kill(rng.randrange(ranks), moment=moment))
    if spares and rng.random() < 0.25:
        kills.append(ft.Kill(spare=rng.randrange(spares), moment=rng.choice(SPARE_MOMENTS)))
    return kills


def network_faults(seed: int, ranks: int, length_s: float) -> tuple[str, list]:
    """The network faults of run ``seed`` (drawn apart from ``schedule``'s, which stays
    the same): the kills' method (``"disconnect"`` in one run of five: its kills close
    connections instead), and in one run of four a partition of some of the ranks (up
    to ``PARTITION_MAX``) at a
    time within the failure-free run's ``length_s``, for up to a quarter of it."""
    rng = random.Random(f"network {seed}")
    method = "disconnect" if rng.random() < 0.2 else "sigkill"
    partitions = []
    if length_s > 0 and rng.random() < 0.25:
        # at most PARTITION_MAX ranks cut off: the wires cut grow with their product
        cut = rng.sample(range(ranks), rng.randrange(1, min(ranks, PARTITION_MAX + 1)))
        partitions.append(ft.Partition(tuple(cut), rng.uniform(0, length_s),
                                       rng.uniform(0.01, 0.25) * length_s))
    return method, partitions


PARTITION_MAX = 8
"""Ranks a partition cuts off at most (the setups' 6 or 8 ranks: any of them)."""


@dataclass
class Outcome:
    seed: int
    ok: bool
    gave_up: bool = False
    problem: str = ""
    kills: list = field(default_factory=list)
    stormed: bool = False
    network: str = ""  # the run's network faults, if any
    events: list = field(default_factory=list)  # a failed run's timeline (a program's)
    causes: list = field(default_factory=list)  # its likely causes, in the program's terms
    ours: bool = False  # the answer was right and a check of ftactors itself failed
    waits: dict = field(default_factory=dict)  # a stalled run: rank -> its wait, in words
    stall: dict = field(default_factory=dict)  # rank -> its wait's fields (``ft.Deadlock``)


@dataclass
class Target:
    """What runs under the protocol: Flood, or a user's program (``program``, watched).
    ``wrong(result)`` says what is wrong with a run's answer ("" when it is right)."""

    cls: type
    kwargs: dict
    wrong: Callable[[Any], str]
    args: tuple = ()
    iterations: int = ITERATIONS
    length_s: float = 0.0
    program: Any = None
    reference: list = field(default_factory=list)  # failure-free timelines (a program's)


def flood_target(ranks: int, reach: int | None = None) -> Target:
    """Flood (reaching ``reach`` ranks either side, None: every rank) and its
    failure-free digests."""
    kwargs = {"iterations": ITERATIONS, "per_peer": PER_PEER, "reach": reach}
    plain = ft.run(Flood, ranks, transport="sim", kwargs=kwargs)
    reference = [(x["digest"], x["total"]) for x in plain.results]

    def wrong(result):
        return ("" if [(x["digest"], x["total"]) for x in result.results] == reference
                else "the results differ from the failure-free run's")
    return Target(Flood, kwargs, wrong, length_s=plain.metrics["wall_s"])


def check_run(cls, setup: Setup, seed: int, target: Target, ranks: int | None = None
              ) -> Outcome:
    """One seeded run of ``cls`` (the protocol mixed into the target's program) on
    ``ranks`` (default the setup's) and its checks."""
    ranks = ranks or setup.ranks
    kills = schedule(seed, ranks, setup.spares, target.length_s, target.iterations)
    method, partitions = network_faults(seed, ranks, target.length_s)
    if method == "disconnect":
        kills = [k for k in kills if k.iteration is not None or k.time_s is not None]
    out = Outcome(seed, False, kills=kills, network=", ".join(
        [f"kills are {method}s"] * (method == "disconnect") + [repr(p) for p in partitions]))
    r = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ForcedCheckpointStorm)  # counted (docstring)
            r = ft.run(cls, ranks, transport="sim", seed=seed, spares=setup.spares,
                       args=target.args, kwargs=target.kwargs, chaos=ft.Chaos(kill=kills, method=method, partitions=partitions),
                       timeout_s=600, sim_jitter_s=JITTER_S, **setup.options)
    except ft.Deadlock as exc:
        out.problem = ("the run stalled: every live rank waited and nothing in flight "
                       "could wake any of them")
        out.events, out.waits, out.stall = list(exc.events), exc.waits, exc.details
        return out
    except TimeoutError as exc:
        out.problem = ("the run stalled: it was still busy at the time limit (ranks that "
                       "never wait for long, or work that never ends)")
        out.events = list(getattr(exc, "events", []))
        out.waits = getattr(exc, "waits", {})
        return out
    except ft.RankFailed as exc:
        out.gave_up = True
        out.problem = (_needless_give_up(setup, exc, ranks) if setup.may_give_up
                       else f"gave up: {exc}")
        if out.problem and setup.may_give_up:
            out.problem += f" ({exc})"
        out.ok = not out.problem
        out.events = [] if out.ok else list(exc.events)
        return out
    except Exception as exc:  # noqa: BLE001 - any error is the finding
        out.problem = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        out.events = list(getattr(exc, "events", []))
        return out
    out.stormed = bool(r.events_of("hc3i_storm"))
    wrong = target.wrong(r)
    out.ours = not wrong  # every check below is of the protocols, not of the program
    if wrong:
        out.problem = wrong
    elif method == "disconnect" and r.metrics["failures"]:
        out.problem = f"{r.metrics['failures']} rank(s) declared failed for network faults"
    elif setup.exact and r.metrics["duplicates_dropped"]:
        out.problem = (f"{r.metrics['duplicates_dropped']} duplicate(s) dropped: a recovery "
                       "line held a message its sender had not sent (an orphan)")
    elif setup.keeps_parts and part_level_problem(r.events, setup.levels, units(setup, ranks)):
        out.problem = part_level_problem(r.events, setup.levels, units(setup, ranks))
    elif (setup.levels and not setup.keeps_parts
          and level_problem(r.events, setup.levels, ranks, setup.options)):
        out.problem = level_problem(r.events, setup.levels, ranks, setup.options)
    elif setup.bounded_log and _log_grew(r):
        out.problem = "a log grew past its bound (garbage collection)"
    elif setup.bounded_clcs and hc3i_unbounded(r.events, ranks, _hc3i_log_bound(ranks)):
        out.problem = hc3i_unbounded(r.events, ranks, _hc3i_log_bound(ranks))
    else:
        out.ok, out.ours = True, False
    if not out.ok and target.program is not None:
        out.events = list(r.events)
    return out


def units(setup: Setup, ranks: int):
    """The groups or clusters, on ``ranks``, of a stack whose levels keep its parts."""
    from ftactors.protocols.shared.units import load_groups
    return load_groups(setup.options[setup.keeps_parts], ranks)


def _needless_give_up(setup: Setup, exc, ranks: int) -> str:
    """Why a give-up was not forced ("" when it was). A stack gives up only when its
    costliest level does: that level's own reason (its ``level_exhausted`` event) is
    judged as that protocol's give-up would be."""
    if not setup.levels:
        return needless_give_up(setup.name, exc, ranks, setup.options)
    top = setup.levels[-1]
    reasons = [e.detail["reason"] for e in exc.events
               if e.kind == "level_exhausted" and e.detail["level"] == top]
    if not reasons:
        return f"the stack gave up without its last level ({top}) giving up"
    last = ft.RankFailed(exc.ranks, reasons[-1])
    last.events = exc.events
    return needless_give_up(top, last, ranks, setup.options)


def _log_bound(n: int) -> int:
    """Logged messages a sender may hold: twice a checkpoint interval's traffic to every
    peer, with collectives (HC3I's forced CLCs come far more often than that)."""
    return 2 * INTERVAL * (n - 1) * (PER_PEER + 4)


def _hc3i_log_bound(n: int) -> int:
    """Logged messages all ranks together may hold after a collection: two iterations of
    every rank's traffic to every peer, with collectives. (A CLC is forced about once per
    crossing message, so what a collection keeps is the traffic since the older kept CLC;
    2,663 collections of 120 runs kept at most 134 of this bound's 360.)"""
    return 2 * n * (n - 1) * (PER_PEER + 4)


def _log_grew(result) -> bool:
    """More logged messages at a checkpoint than a sender can send between two of its
    group's checkpoints."""
    bound = _log_bound(result.metrics["ranks"])
    return any(e.detail["log_messages"] > bound
               for e in result.events_of("group_checkpoint_part"))


def program_target(program, ranks: int) -> Target:
    """A user's program (``programs.Program``), watched (``_simcheck_programs``): its
    failure-free answer and timeline from two runs of different seeds, which must agree.

    Raises:
        ValueError: the two failure-free runs' answers differ (the program is not
            deterministic: nothing to compare a failure's run with).
    """
    cls = watched(program.cls)
    runs = [ft.run(cls, ranks, transport="sim", seed=seed, sim_jitter_s=JITTER_S,
                   args=program.args, kwargs=program.kwargs) for seed in (0, 1)]
    answers = [program.answer(r) for r in runs]
    if not all(ok for ok, _ in answers):
        raise ValueError(f"the failure-free {program.name} on {ranks} ranks does not verify")
    first = answers[0][1]
    same = program.judge(answers[1], first)
    if not same.ok:
        causes = program_causes(program.cls, runs[0].events)
        raise ValueError(f"two failure-free runs of {program.name} (seeds 0 and 1, "
                         f"messages delayed differently) give different answers: {same.why}."
                         " Nothing to compare a failure's run with"
                         + "".join(f"\n  likely cause: {c}" for c in causes))
    iterations = max((e.detail["iteration"] + 1 for e in runs[0].events_of("watch")),
                     default=0)

    def wrong(result):
        return program.judge(program.answer(result), first).why
    return Target(cls, program.kwargs, wrong, program.args, iterations,
                  runs[0].metrics["wall_s"], program, [r.events for r in runs])


def default_reach(ranks: int) -> int | None:
    """Flood's reach on ``ranks`` when none is given: every rank below ``HALO_FROM``."""
    return None if ranks < HALO_FROM else 1


def sim_check(name: str, runs: int, seed: int, *, mixins: tuple | None = None,
              progress=None, program=None, ranks: int | None = None,
              reach: int | None = None) -> list[Outcome]:
    """``runs`` seeded runs (seeds ``seed`` .. ``seed + runs - 1``) of protocol or stack
    ``name`` (or ``mixins`` with ``name``'s settings: a test's deliberately broken
    protocol) mixed into Flood (reaching ``reach`` ranks either side; default
    ``default_reach``), or into ``program`` (a ``programs.Program``: the user's), on
    ``ranks`` (default the setup's)."""
    setup = setups()[name]
    mixins = mixins or setup.mixins
    ranks = ranks or setup.ranks
    setup = at_scale(setup, ranks)
    target = (flood_target(ranks, default_reach(ranks) if reach is None else reach)
              if program is None else program_target(program, ranks))
    cls = type("".join(m.__name__ for m in mixins) + target.cls.__name__,
               (*mixins, target.cls), {})
    outcomes = []
    with warnings.catch_warnings():
        # random schedules: a kill aimed at a life already gone, or a stack without
        # spares, is part of the draw; each run is judged by its own checks instead
        warnings.simplefilter("ignore", ft.FaultToleranceWarning)
        for k in range(runs):
            outcome = check_run(cls, setup, seed + k, target, ranks)
            if not outcome.ok and program is not None and not outcome.ours:
                outcome.causes = likely_causes(target, outcome, setup)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcomes)
    return outcomes


def at_scale(setup: Setup, ranks: int) -> Setup:
    """``setup`` for a run on ``ranks``: from ``HALO_FROM`` ranks on, its groups or
    clusters are the ``"default"`` policy (consecutive ranks in groups of about
    sqrt(ranks), the group paper's bound) instead of pairs: 2,048 clusters of 2 at 4,096
    ranks would make each DDVPiggyback garbage collection (a cascade per cluster over
    every cluster) cost clusters^2."""
    if ranks < HALO_FROM:
        return setup
    return replace(setup, options={k: "default" if k in ("groups", "clusters") else v
                                   for k, v in setup.options.items()})


def likely_causes(target: Target, outcome: Outcome, setup: Setup) -> list[str]:
    """What a failed run of a user's program most likely did wrong, in the program's
    terms: a stall's from what its ranks waited for (``_simcheck_stalls``), the run's
    own findings, then the program's (``_simcheck_programs``). That the code names a
    wildcard receive is a cause only of a wrong answer under a protocol that restarts
    part of the ranks (which needs the first life's order of arrival); it is never
    offered for a stall, whose waits say what happened."""
    partial = any(p.hands_parts for p in setup.mixins)
    return [*stall_causes(outcome.stall), *run_causes(outcome.events, *target.reference),
            *program_causes(target.program.cls, target.reference[0],
                            wildcards=partial and not outcome.waits)]


def add_sim_check(sub) -> None:
    p = sub.add_parser("sim-check", help="seeded sim runs with random failures, checked",
                       description=__doc__.split("\n\n")[1] + " With --app, the program "
                       "is yours instead of Flood: its answer is checked against its "
                       "failure-free run, and a failed run names the likely cause.")
    p.add_argument("--protocol", required=True, type=_known_setup, metavar="NAME[+NAME...]",
                   help="the protocol or stack to check: " + ", ".join(setups()))
    p.add_argument("--runs", type=int, default=100, help="runs (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    p.add_argument("--app", default=None, metavar="PROGRAM",
                   help="check your program (path/to/file.py:Class or package.module:Class, "
                        "or a shipped app) instead of Flood")
    p.add_argument("--ranks", type=int, default=None,
                   help="ranks (default: the protocol's setting, 6 or 8)")
    p.add_argument("--reach", type=int, default=None,
                   help=f"Flood sends to the ranks within REACH of it on a ring (a halo "
                        f"exchange) instead of every rank (default: every rank below "
                        f"{HALO_FROM} ranks, 1 from there)")
    add_program_arguments(p)
    p.set_defaults(func=_cmd_sim_check)


def _known_setup(text: str) -> str:
    """``--protocol``: a protocol or stack sim-check has settings for; a stack the
    framework refuses is named with the refusal."""
    if text in setups():
        return text
    protocol_arg(text)  # a refused stack or an unknown name: the reason
    raise argparse.ArgumentTypeError(f"sim-check has no settings for {text!r}; it checks "
                                     f"{', '.join(setups())}")


def _cmd_sim_check(args) -> int:
    if args.runs < 1 or (args.ranks is not None and args.ranks < 1) or (
            args.reach is not None and args.reach < 1):
        print("ftactors sim-check: --runs, --ranks and --reach must be >= 1", file=sys.stderr)
        return 2
    if args.reach is not None and args.app is not None:
        print("ftactors sim-check: --reach is Flood's; your program (--app) has its own "
              "traffic", file=sys.stderr)
        return 2
    try:
        program = None if args.app is None else program_from_args(args.app, args)
    except ValueError as exc:
        print(f"ftactors sim-check: {exc}", file=sys.stderr)
        return 2
    if program is None and (args.arg or args.kwarg or args.check):
        print("ftactors sim-check: --arg, --kwarg and --check need --app", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    last = [t0]

    def progress(outcomes):
        now = time.perf_counter()
        if now - last[0] >= 5 or len(outcomes) == args.runs:
            last[0] = now
            bad = sum(not o.ok for o in outcomes)
            print(f"  {len(outcomes)}/{args.runs} runs, {bad} failed, "
                  f"{now - t0:.0f} s", flush=True)

    try:
        outcomes = sim_check(args.protocol, args.runs, args.seed, progress=progress,
                             program=program, ranks=args.ranks, reach=args.reach)
    except ValueError as exc:  # a program without a reproducible failure-free answer
        print(f"ftactors sim-check: {exc}", file=sys.stderr)
        return 1
    failed = [o for o in outcomes if not o.ok]
    gave_up = sum(o.gave_up and o.ok for o in outcomes)
    stormed = sum(o.stormed for o in outcomes)
    what = ("" if program is None else f" --app {shlex.quote(args.app)}" + "".join(
        f" {a}" for a in program.argv())) + (f" --ranks {args.ranks}" if args.ranks else "") + (
        f" --reach {args.reach}" if args.reach else "")
    for o in failed:
        kills = ", ".join(kill_text(describe(k)) for k in o.kills)
        network = f"\n  network faults: {o.network}" if o.network else ""
        ours = ("\n  the program's answer was right: this failed check is of ftactors "
                "itself, not of the program (please report it with the replay line)"
                if o.ours and program is not None else "")
        waits = "".join(f"\n  {w}" for w in o.waits.values())
        print(f"FAILED seed {o.seed}: {o.problem}{ours}{waits}\n  kills {kills}{network}\n"
              f"  replay: ftactors sim-check{what} --protocol {args.protocol} --runs 1 "
              f"--seed {o.seed}"
              + "".join(f"\n  likely cause: {c}" for c in o.causes))
    print(f"sim-check {f'{args.app} x ' if args.app else ''}{args.protocol}: "
          f"{len(outcomes) - len(failed)} "
          f"of {len(outcomes)} runs passed ({gave_up} gave up correctly: data lost beyond "
          f"repair, or no spare left) in {time.perf_counter() - t0:.1f} s, peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB"
          + (f"; {stormed} stormed (forced CLCs: the program crosses clusters at every step)"
             if stormed else ""))
    return 1 if failed else 0
