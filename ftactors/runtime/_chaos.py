"""Failure injection: which ranks die, when, and how.

``Chaos`` is a plan, not an action: the coordinator turns it into kills. Kills at an
iteration fire inside the rank at that safe point (before the protocols see it), kills at
a time fire from the coordinator, random kills are drawn from ``seed`` so a failing
experiment can be replayed exactly. Every kill is recorded in the run's timeline.

Kills at a *moment* strike where no iteration can: a rank's host as it starts
(``"start"``, before the rank runs), while the ranks are wired (``"wire"``), as its
``main()`` returns with the result not yet handed over (``"return"``), or once the
coordinator holds its result (``"finished"``); and spares (``Kill(spare=i, ...)``, the
i-th spare the run starts, refills included) as they start (``"starting"``), once they
wait (``"idle"``) or as they are promoted (``"promoted"``).

Network faults strike live ranks and kill nobody: ``method="disconnect"`` turns each kill
into the loss of every direct connection of that rank at that iteration or time (a reset,
a NIC flap), and ``Partition`` cuts a set of ranks off the others for some seconds. The
channels must lose nothing through them (``transports/direct``), and the coordinator must
not declare any rank failed.

A run carries its plan as a ``KillPlan`` (which kills are due where, which fired) inside
a ``ChaosFabric`` (``runtime/_chaos_fabric``), the one place kills are matched and fired.
Each firing's event names the kill by its index in the plan (``kill=i``), so the tally
of unfired kills (``runtime/_notices``) needs no rule per kind of kill.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

KILL_METHODS = ("sigkill", "ray.kill", "sigstop", "stall", "disconnect")
RANK_MOMENTS = ("start", "wire", "return", "finished")
"""Moments of a rank's life a ``Kill(rank, moment=...)`` strikes (module docstring)."""
SPARE_MOMENTS = ("starting", "idle", "promoted")
"""Moments of a spare's life a ``Kill(spare=i, moment=...)`` strikes."""


@dataclass(frozen=True)
class Kill:
    """One planned failure: ``rank`` dies at ``iteration`` (of its first safe-point loop
    that reaches it), at ``time_s`` seconds after the run started (its first host being
    started: a rank whose host is not up yet then dies as soon as it is), at ``moment``
    (``RANK_MOMENTS``, see the module docstring), or while recovery round
    ``recovery_round`` (0, 1, ...) reaches ``recovery_phase`` (``"start"``, or a phase the
    stack's recovery policy announces, such as ``"notified"`` or ``"repaired"``);
    ``incarnation`` says which life of the rank (0 = the original, 1 = its first
    replacement, ...) an iteration or moment kill is for. ``spare=i`` (no rank) kills the
    i-th spare the run starts at a ``SPARE_MOMENTS`` moment."""

    rank: int | None = None
    iteration: int | None = None
    time_s: float | None = None
    incarnation: int = 0
    recovery_round: int | None = None
    recovery_phase: str = "start"
    moment: str | None = None
    spare: int | None = None

    def __post_init__(self):
        if (self.rank is None) == (self.spare is None):
            raise ValueError(f"a Kill names a rank or a spare (one of them), got "
                             f"rank={self.rank!r}, spare={self.spare!r}")
        moments = RANK_MOMENTS if self.spare is None else SPARE_MOMENTS
        if self.spare is not None and (self.moment is None or self.iteration is not None
                                       or self.time_s is not None
                                       or self.recovery_round is not None):
            raise ValueError(f"a spare's Kill takes a moment ({', '.join(SPARE_MOMENTS)}) "
                             f"and nothing else, got {self!r}")
        if self.moment is not None and self.moment not in moments:
            raise ValueError(f"Kill moment must be one of {', '.join(moments)}, "
                             f"got {self.moment!r}")
        if self.spare is not None and self.spare < 0:
            raise ValueError(f"a Kill's spare is an index >= 0, got {self.spare}")
        when = [self.iteration is not None, self.time_s is not None,
                self.recovery_round is not None, self.moment is not None]
        if self.rank is not None and sum(when) != 1:
            raise ValueError(f"a rank's Kill takes one of iteration, time_s, recovery_round "
                             f"or moment, got {self!r}")


@dataclass(frozen=True)
class Partition:
    """A network fault: ``ranks`` cannot reach the other ranks, nor be reached by them,
    from ``time_s`` seconds after the run started (once the ranks are wired) for
    ``seconds``; connections among ``ranks``, and among the others, stay up."""

    ranks: tuple
    time_s: float
    seconds: float

    def __post_init__(self):
        object.__setattr__(self, "ranks", tuple(sorted({int(r) for r in self.ranks})))
        if not self.ranks or self.time_s < 0 or self.seconds <= 0:
            raise ValueError(f"a Partition takes some ranks, a time >= 0 and seconds > 0, "
                             f"got {self!r}")


@dataclass(frozen=True)
class Chaos:
    """A failure plan for ``ft.run(chaos=...)``.

    Args:
        kill: ``(rank, iteration)`` pairs, or ``Kill`` records.
        kill_at: ``(rank, seconds)`` pairs: seconds after the run started (the moment
            ``ft.run`` starts its first host, once Ray is up), so start-up and wiring
            can be struck too; a rank whose host is not up yet dies as soon as it is.
        random_kills: this many extra kills of random ranks at random times in
            ``[0, horizon_s)``, drawn from ``seed``.
        mtbf_s: add a Poisson failure process with this mean time between failures
            (exponential gaps, random ranks, up to ``horizon_s``), drawn from ``seed``.
        horizon_s: the time window for random and Poisson kills.
        method: ``"sigkill"`` (the rank's process gets SIGKILL), ``"ray.kill"``, or
            ``"sigstop"`` (the process hangs: only heartbeats can tell; time kills only),
            or ``"stall"`` (not a failure: the process freezes for ``stall_s`` seconds and
            goes on, as a paging or starved one does; time kills only). On ``local`` and
            ``sim`` a stalled rank's answers to heartbeats wait out the stall.
            ``"disconnect"`` is not a failure either: every direct connection of the
            rank closes at that iteration or time, and the channels reconnect and resend.
        stall_s: how long a ``"stall"`` lasts (seconds).
        job_lost_at: the whole job is lost at the top of this iteration (of the first
            loop that reaches it), as when its driver or its whole allocation goes:
            every rank (whatever its incarnation) dies there and the coordinator gives
            up without a recovery; ``ft.run`` raises ``ft.JobLost``. Stable checkpoint
            sets written before stay: ``ft.run(restart_from=...)`` resumes from them.
        partitions: ``Partition`` records, or ``(ranks, time_s, seconds)`` tuples:
            network partitions that heal (module docstring).
        seed: the seed of every random draw; printed with any failure so it can be replayed.
    """

    kill: tuple = ()
    kill_at: tuple = ()
    random_kills: int = 0
    mtbf_s: float | None = None
    horizon_s: float = 10.0
    method: str = "sigkill"
    stall_s: float = 5.0
    seed: int = 0
    job_lost_at: int | None = None
    partitions: tuple = ()
    kills: tuple = field(init=False, default=())

    def __post_init__(self):
        if self.method not in KILL_METHODS:
            raise ValueError(f"Chaos method must be one of {KILL_METHODS}, got {self.method!r}")
        if self.method == "stall" and (self.kill or self.stall_s <= 0):
            raise ValueError("a stall is timed: use kill_at (or random_kills, mtbf_s) with "
                             f"stall_s > 0, got kill={self.kill!r}, stall_s={self.stall_s!r}")
        if self.random_kills < 0:
            raise ValueError(f"random_kills must be >= 0, got {self.random_kills}")
        if self.job_lost_at is not None and not (
                isinstance(self.job_lost_at, int) and not isinstance(self.job_lost_at, bool)
                and self.job_lost_at >= 0):
            raise ValueError(f"job_lost_at must be an iteration >= 0, got {self.job_lost_at!r}")
        if self.mtbf_s is not None and self.mtbf_s <= 0:
            raise ValueError(f"mtbf_s must be > 0, got {self.mtbf_s}")
        kills = [k if isinstance(k, Kill) else Kill(int(k[0]), iteration=int(k[1]))
                 for k in self.kill]
        kills += [Kill(int(r), time_s=float(t)) for r, t in self.kill_at]
        if self.method in ("sigstop", "stall", "disconnect") and any(
                k.moment is not None or k.recovery_round is not None or k.rank is None
                for k in kills):
            raise ValueError(f"method {self.method!r} strikes ranks at an iteration or a time; "
                             f"a kill at a moment, a spare or a recovery round is a death "
                             f"(sigkill or ray.kill)")
        object.__setattr__(self, "kills", tuple(kills))
        object.__setattr__(self, "partitions", tuple(
            p if isinstance(p, Partition) else Partition(tuple(p[0]), float(p[1]), float(p[2]))
            for p in self.partitions))

    def plan(self, ranks: int) -> list[Kill]:
        """All kills for a run of ``ranks`` ranks, random ones drawn from ``seed``.

        Raises:
            ValueError: a kill names a rank that does not exist, or a negative time or
                iteration; a partition names such a rank, or every rank.
        """
        for k in self.kills:
            if k.rank is None:
                continue  # a spare: the run starts as many as it needs
            if not 0 <= k.rank < ranks:
                raise ValueError(f"chaos kill names rank {k.rank}, but the run has ranks 0..{ranks - 1}")
            if k.iteration is not None and k.iteration < 0:
                raise ValueError(f"chaos kill of rank {k.rank} at negative iteration {k.iteration}")
            if k.time_s is not None and k.time_s < 0:
                raise ValueError(f"chaos kill of rank {k.rank} at negative time {k.time_s}")
        for p in self.partitions:
            if p.ranks[0] < 0 or p.ranks[-1] >= ranks or len(p.ranks) == ranks:
                raise ValueError(f"a partition cuts some of ranks 0..{ranks - 1} off the "
                                 f"others, got ranks {list(p.ranks)}")
        rng = random.Random(self.seed)
        out = list(self.kills)
        out += [Kill(rng.randrange(ranks), time_s=rng.uniform(0, self.horizon_s))
                for _ in range(self.random_kills)]
        if self.mtbf_s is not None:
            t = rng.expovariate(1.0 / self.mtbf_s)
            while t < self.horizon_s:
                out.append(Kill(rng.randrange(ranks), time_s=t))
                t += rng.expovariate(1.0 / self.mtbf_s)
        return out


class Strike(NamedTuple):
    """What a rank's host does to itself (a ``RankSpec``'s ``chaos``): at the top of
    iteration ``at`` (or at ``"return"``, as ``main()`` returns) it dies (``"die"``) or
    closes its direct connections (``"disconnect"``); ``kill`` is the plan's index of the
    kill it fires (None: the job's loss, ``Chaos.job_lost_at``)."""

    at: int | str
    action: str
    kill: int | None


class KillPlan:
    """A run's planned kills and which of them fired, each known by its index in the plan
    (its identity). No I/O: ``ChaosFabric`` does the killing.

    A *point* is where a run is, named with a ``Kill``'s own fields: a moment of a rank's
    life (``rank``, ``incarnation``, ``moment``), of a spare's (``spare``, ``moment``), a
    recovery phase (``recovery_round``, ``recovery_phase``). A kill is due at a point when
    each field the point names equals the kill's: one rule for every kind of kill."""

    def __init__(self, kills, method: str = "sigkill", job_lost_at: int | None = None):
        self.kills: tuple[Kill, ...] = tuple(kills)
        self.method = method
        self.job_lost_at = job_lost_at
        self.fired: set[int] = set()

    def due(self, **point) -> list[int]:
        """The unfired kills due at ``point``, in plan order."""
        return [i for i, kill in enumerate(self.kills) if i not in self.fired
                and all(getattr(kill, name) == value for name, value in point.items())]

    def fire(self, i: int) -> Kill:
        """Kill ``i`` fires now: it is never due again."""
        assert i not in self.fired, f"kill {i} fired twice"
        self.fired.add(i)
        return self.kills[i]

    def timed(self) -> list[int]:
        """The kills at a time (those of a rank's first life: a time names no other)."""
        return [i for i, kill in enumerate(self.kills)
                if kill.time_s is not None and kill.incarnation == 0]

    def on_host(self, rank: int, incarnation: int) -> tuple[Strike, ...]:
        """What life ``incarnation`` of rank ``rank`` does to itself: its deaths at an
        iteration (its own kills, then the job's loss, which every life dies of), or
        with ``method="disconnect"`` its network faults instead, and its death at
        ``"return"``."""
        mine = [(i, kill) for i, kill in enumerate(self.kills)
                if kill.rank == rank and kill.incarnation == incarnation]
        its = [Strike(kill.iteration, "die", i) for i, kill in mine if kill.iteration is not None]
        cuts = []
        if self.method == "disconnect":  # network faults: nobody dies there
            its, cuts = [], [s._replace(action="disconnect") for s in its]
        if self.job_lost_at is not None:
            its.append(Strike(self.job_lost_at, "die", None))
        at_return = [Strike("return", "die", i) for i, kill in mine if kill.moment == "return"]
        return tuple(its + cuts + at_return[:1])
