"""``level_intervals="auto"``: the intervals of every level of a stack planned together
at run time, from the costs the run measures and the MTBF of each failure kind.

A stack such as ``RSBackup + StandbyReplacement + ReadyMessageFlush`` keeps states at
several levels (partner copies, RS blocks, global sets). With ``level_intervals="auto"``
and ``level_mtbf_s`` (seconds per failure kind, each kind named by the lowest level that
recovers it: ``{"standby": 600, "pair@rs": 7200, "ready-flush": 86400}``) the run
chooses every level's interval with ``_multilevel.optimal_plan`` and applies it:

*Measured costs.* Every rank takes a checkpoint of every level at iteration 1 of its
first loop, so the costs are measured, not guessed (as ReadyMessageFlush's single-level
``auto`` takes its first checkpoint at once). Each rank reports, for each checkpoint of
an auto level, what it held the rank: from its arrival at the safe point to its leaving
the checkpoint (``level_cost``, on the run's clock: virtual on sim), and its mean
seconds of work per iteration since its last report (stalls left out). A level's stall
is the span from the first rank's arrival to the last rank's leaving (a moving mean over
its checkpoints, ``NEWEST``; the iteration time too); the model's cost
of a level-L checkpoint is the sum of the stalls of levels 1..L, since the schedule is
nested (every level-L position is a position of every lower level, as the model
assumes: a level-L checkpoint leaves what every lower level restores from). RSBackup's
encoding runs beside the application: only the part the next checkpoint waits for is in
its stall.

*Restart costs* (``R``) are, for each level: given (``level_restart_s``), else the
last recovery by that level measured in this run (recovery round start to end, from
``runtime/_escalation``: detection is not included), else *estimated* as that level's
checkpoint cost (restoring moves the state the checkpoint saved). Each plan records
which. ``R`` only enters through ``e^(R/M)`` and the recovery's own failures, so an
estimate off by a few times moves the plan little while ``R`` << ``M``.

*The plan* (``LevelPlanner``, coordinator side): once every level has a measured stall
and the ranks an iteration time, ``optimal_plan`` gives ``tau`` (seconds of work between
level-1 checkpoints) and ``k_L``; level 1 is due every ``round(tau / iteration_s)``
iterations (at least 1), level L every ``k_2 ... k_L`` times that: whole iterations,
nested. It is planned again when a measured cost or the iteration time moves by more
than ``REPLAN_FACTOR`` from the ones the plan in force used, and applied only if the
iterations change; and after every recovery round (the ranks may have been restored to
before the plan). Each plan applied is a ``level_intervals_chosen`` event (inputs,
sources, ``tau``, ``k``, intervals in seconds and iterations, expected waste, the
position it takes effect at).

*No finite plan.* Costs measured far above what the MTBFs leave room for (a loaded
machine, MTBFs given for another scale) make every plan's expected run time infinite
(or a level not worth taking at all). The run does not go on unprotected, measuring
only: it takes every level at every iteration, the plan that loses least work per
failure, records it with the model's reason (``fallback``) and warns once
(``LevelPlanWarning``), and plans again when the costs move.

*Agreement.* Every level decides "due" from the iteration alone, so every rank must
switch plans at the same position. The coordinator asks every rank for its next safe
point (each waits there until told), takes the largest and sends it with the plan
(ReadyMessageFlush's request protocol): no rank has passed that position, and every
rank adopts the plan there, before any level looks at it. The plan in force is saved
in every snapshot (a plan decided but not yet reached is not: the ranks of one cut may
not all have heard of it), so ranks restored from one recovery line agree too.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import warnings
from dataclasses import dataclass, field

from ftactors.base import ConfigError
from ftactors.runtime import (INTERVAL, NewFailure, Option, Protocol, declared_values,
                              parts_lead, protocol_classes, with_role)

from .flush import checkpoint_position
from .multilevel import FailureKind, Level, Plan, optimal_plan

AUTO = "auto"
FIRST = 1
"""The iteration (of every loop, until a plan is in force) at which every level takes a
checkpoint to measure its cost; ranks restored past it without a plan measure at the
iteration after their restore."""
REPLAN_FACTOR = 1.5
"""A measured cost or iteration time this many times larger or smaller than the plan in
force used makes the coordinator plan again."""
NEWEST = 0.3
"""The weight of the newest measurement in a level's moving mean stall (and the
iteration time's): a level's stall differs with what precedes it at a position (a
higher level's flush just synchronised the ranks, or not), and the last one alone made
plans flip between two values."""
COST_FLOOR_S = 1e-9
"""A stall measured as zero (sim without latency) is taken as this (the model needs C > 0)."""
RETRIES = 20
"""Requests a plan may go unplaced (no rank in a loop) before waiting for new costs."""


class LevelPlanWarning(UserWarning):
    """``level_intervals="auto"`` found no plan with a finite expected run time for the
    costs measured and the MTBFs given: every level checkpoints at every iteration."""


OPTIONS = (
    Option("level_intervals", str, None, "\"auto\": plan the intervals of every level of "
           "the stack together from the costs measured in the run and level_mtbf_s",
           choices=(AUTO,)),
    Option("level_mtbf_s", dict, None, "with level_intervals=\"auto\": {LEVEL or "
           "KIND@LEVEL: seconds}, the MTBF of the failures each level is the lowest to "
           "recover (LEVEL: standby, rs, ready-flush)", "s"),
    Option("level_restart_s", dict, None, "with level_intervals=\"auto\": {LEVEL: "
           "seconds}, a level's recovery time (default: measured in the run, else "
           "estimated)", "s"),
)
"""The options of every level this module plans (its ``PlannedLevel`` protocols take them)."""


@dataclass(frozen=True)
class Settings:
    """A stack's auto plan settings: its levels (protocol names, cheapest first), the
    failure kinds (each with the index of its level) and the restart times given."""
    levels: tuple[str, ...]
    kinds: tuple[FailureKind, ...]
    restart_s: dict


def settings(stack: type, options: dict) -> Settings | None:
    """The auto plan settings of ``stack`` with ``options``; None: not asked for.

    Raises:
        ConfigError: its MTBFs missing, naming no level of
            the stack, not positive; a level with no MTBF; a level's own interval given
            too; ``level_mtbf_s`` or ``level_restart_s`` without it; a stack whose
            consistency protocol hands its parts to the levels.
    """
    mode, mtbf, restart = (options.get(o.name) for o in OPTIONS)
    if mode is None:
        given = [k for k in ("level_mtbf_s", "level_restart_s") if options.get(k) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply with level_intervals={AUTO!r}")
        return None
    levels = sorted((p for p in protocol_classes(stack) if issubclass(p, PlannedLevel)),
                    key=lambda p: p.level_cost)
    own = [k for k in with_role(levels, INTERVAL) if options.get(k) is not None]
    if own:
        raise ConfigError(f"level_intervals={AUTO!r} chooses every level's interval: drop "
                          f"{', '.join(own)}")
    lead = parts_lead(stack)
    if lead is not None:
        raise ConfigError(f"level_intervals={AUTO!r} plans levels that take rounds of their "
                          f"own; with {lead.__name__} the levels keep its parts, made at its "
                          f"own checkpoints")
    names = tuple(p.protocol_name for p in levels)
    if not isinstance(mtbf, dict) or not mtbf:
        raise ConfigError(f"level_intervals={AUTO!r} needs level_mtbf_s: the mean time "
                          f"between failures (s) of each failure kind, named by the lowest "
                          f"level that recovers it, e.g. {{{names[0]!r}: 3600}} (levels of "
                          f"this stack: {', '.join(names)})")
    kinds = []
    for key, seconds in mtbf.items():
        kind, _, level = str(key).rpartition("@")
        index = _level_index(level, names, f"level_mtbf_s {key!r}")
        kinds.append(FailureKind(kind or level, _seconds(seconds, f"level_mtbf_s {key!r}",
                                                         positive=True), index))
    for i, name in enumerate(names):
        if not any(k.level == i for k in kinds):
            raise ConfigError(f"level_mtbf_s names no failure that level {name!r} is the "
                              f"lowest to recover: give it an MTBF or drop the level")
    if restart is not None and not isinstance(restart, dict):
        raise ConfigError(f"level_restart_s must map levels to seconds, got {restart!r}")
    restart_s = {_level_index(level, names, f"level_restart_s {level!r}"):
                 _seconds(s, f"level_restart_s {level!r}", positive=False)
                 for level, s in (restart or {}).items()}
    return Settings(names, tuple(kinds), restart_s)


def _level_index(level: str, names: tuple[str, ...], what: str) -> int:
    name = str(level).strip().replace("-", "_")
    if name not in names:
        raise ConfigError(f"{what}: {level!r} is not a level of this stack (its levels: "
                          f"{', '.join(names)})")
    return names.index(name)


def _seconds(value, what: str, positive: bool) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and (value > 0 if positive else value >= 0)):
        raise ConfigError(f"{what} must be a number of seconds {'> 0' if positive else '>= 0'}, "
                          f"got {value!r}")
    return float(value)


# ------------------------------------------------------------------------ rank side
@dataclass
class _RankPlan:
    """One rank's view of the plan (under ``self._levels_plan``)."""

    periods: dict | None = None                   # level -> iterations; None: measuring
    first: int = FIRST                            # where a measuring rank checkpoints
    undecided: dict = field(default_factory=dict)  # request -> future of (position, periods)
    pending: list = field(default_factory=list)   # (position, periods) decided, not reached
    last_at: float | None = None                  # arrival at the last safe point (run clock)
    last_pos: tuple | None = None
    stalled_s: float = 0.0                        # held since that arrival (not work)
    work_s: float = 0.0                           # work since the last report
    iterations: int = 0


class PlannedLevel(Protocol):
    """Base of the level protocols whose intervals ``level_intervals="auto"`` plans
    together (StandbyReplacement, RSBackup, ReadyMessageFlush): the rank side of the
    plan (adoption at an agreed position, cost reports, the plan in snapshots)."""

    @classmethod
    def check_stack_options(cls, stack: type, options: dict) -> None:
        settings(stack, options)
        super().check_stack_options(stack, options)

    async def on_start(self) -> None:
        auto = declared_values(OPTIONS, getattr(self, "options", {}))["level_intervals"] == AUTO
        self._levels_plan = _RankPlan() if auto else None
        await super().on_start()

    def planned_due(self, name: str, iteration: int) -> bool | None:
        """Whether level ``name`` is due at ``iteration`` under the plan; None: its
        interval is not planned (the level follows its own options)."""
        plan = self._levels_plan
        if plan is None:
            return None
        if iteration <= 0:
            return False
        if plan.periods is None:
            return iteration == plan.first
        return iteration % plan.periods[name] == 0

    def planned_cost(self, name: str, at: float) -> None:
        """Level ``name``'s checkpoint held this rank from ``at`` (the run's clock) to
        now: report it to the planner, with this rank's work per iteration."""
        plan = self._levels_plan
        if plan is None:
            return
        ft = self.ft
        end = ft.link.clock()
        plan.stalled_s += end - at
        iteration_s = plan.work_s / plan.iterations if plan.iterations else None
        plan.work_s, plan.iterations = 0.0, 0
        ft.report("level_cost", level=name, position=ft.position, at=at, end=end,
                  iteration_s=iteration_s)

    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        plan = self._levels_plan
        if plan is None:
            return
        clock, pos = self.ft.link.clock, self.ft.position
        now = clock()
        if plan.last_pos is not None and pos == (plan.last_pos[0], plan.last_pos[1] + 1):
            plan.work_s += now - plan.last_at - plan.stalled_s
            plan.iterations += 1
        while not all(f.done() for f in plan.undecided.values()):
            # a plan is being agreed: wait here (never past its position)
            await next(f for f in plan.undecided.values() if not f.done())
        plan.pending += [f.result() for f in plan.undecided.values()
                         if f.result()[0] is not None]
        plan.undecided.clear()
        due = [p for p in plan.pending if p[0] <= pos]
        if due:
            plan.periods = due[-1][1]
            plan.pending = [p for p in plan.pending if p[0] > pos]
        plan.last_at, plan.last_pos, plan.stalled_s = now, pos, clock() - now

    def ft_rpc_levels_notify(self, request: int) -> tuple | None:
        """A plan is to be agreed: stop at the next safe point until told where it takes
        effect; returns that next safe point (None: none left in this loop)."""
        nxt = self.ft.next_safe_point()
        if nxt is not None and self._levels_plan is not None:
            self._levels_plan.undecided[request] = asyncio.get_running_loop().create_future()
        return nxt

    def ft_rpc_levels_decide(self, request: int, position, periods: dict | None) -> None:
        """The plan of ``request`` takes effect at ``position`` (None: it does not)."""
        fut = self._levels_plan.undecided.get(request)
        if fut is not None and not fut.done():
            fut.set_result((None if position is None else tuple(position), periods))

    def protocol_state(self) -> dict:
        state = super().protocol_state()
        if self._levels_plan is not None:
            state["level_plan"] = {"periods": self._levels_plan.periods}
        return state

    def restore_protocol_state(self, state: dict) -> None:
        super().restore_protocol_state(state)
        if self._levels_plan is not None:
            self._levels_plan.periods = state.get("level_plan", {}).get("periods")

    async def on_restored(self) -> None:
        plan = self._levels_plan
        if plan is not None:  # what was being agreed belongs to the execution abandoned
            position = self.ft.restored_from[0]
            # restored past the first measurement (a new job from a set taken before any
            # plan, say): measure at the next iteration, the same for every rank restored
            # from this line, else nothing would ever be measured again
            plan.first = FIRST if position is None else max(FIRST, position[1] + 1)
            plan.undecided.clear()
            plan.pending.clear()
            plan.last_pos, plan.stalled_s = None, 0.0
            plan.work_s, plan.iterations = 0.0, 0
        await super().on_restored()


# ----------------------------------------------------------------- coordinator side
@dataclass
class _Inputs:
    """What one plan was made from."""
    stall_s: dict
    restart_s: dict
    iteration_s: float


class LevelPlanner:
    """Coordinator side: gathers the measured costs, plans, agrees the plan with the
    ranks and records it (see the module docstring). Run beside a stack's levels by
    ``runtime/_escalation.Escalation``."""

    @classmethod
    def for_run(cls, ctx, stack: type) -> LevelPlanner | None:
        found = settings(stack, ctx.options)
        return None if found is None else cls(ctx, found)

    def __init__(self, ctx, found: Settings):
        self.c = ctx
        self.settings = found
        self.parts: dict[tuple, list] = {}   # (level, position) -> rank reports
        self.stall_s: dict[str, float] = {}  # level -> its moving mean stall
        self.measured_restart: dict[str, float] = {}
        self.iteration_s: float | None = None
        self.current: _Inputs | None = None
        self.periods: dict | None = None
        self.stale = False                   # a recovery may have restored an older plan
        self.warned = False                  # LevelPlanWarning given
        self.wake = asyncio.Event()
        self.running = asyncio.Event()
        self.running.set()
        self.busy: set[asyncio.Task] = set()
        self._ids = itertools.count()

    def on_report(self, event) -> None:
        if event.kind != "level_cost":
            return
        d = event.detail
        key = (d["level"], tuple(d["position"]))
        reports = self.parts.setdefault(key, [])
        reports.append(d)
        if len(reports) < self.c.n:
            return
        del self.parts[key]
        stall = max(r["end"] for r in reports) - min(r["at"] for r in reports)
        self.stall_s[key[0]] = _mean(self.stall_s.get(key[0]), stall)
        times = [r["iteration_s"] for r in reports if r["iteration_s"] is not None]
        if times:  # the slowest rank sets the pace
            self.iteration_s = _mean(self.iteration_s, max(times))
        self.wake.set()

    async def level_recovered(self, level: str, seconds: float) -> None:
        """A recovery round by ``level`` took ``seconds``: its measured restart cost."""
        self.measured_restart[level] = seconds

    async def abandon(self, failed: set[int]) -> None:
        """A recovery round begins: agreements under way and cost reports of the
        execution being abandoned are dropped."""
        self.running.clear()
        for task in list(self.busy):
            task.cancel()
        self.parts.clear()

    async def recovered(self) -> None:
        """The round is over: the restored ranks may hold an older plan; agree it again."""
        self.running.set()
        self.stale = self.periods is not None
        self.wake.set()

    async def service(self) -> None:
        tries = 0
        while True:
            if tries == 0:
                await self.wake.wait()
            self.wake.clear()
            await self.running.wait()
            inputs = self._inputs()
            if inputs is None:  # a level not measured yet
                tries = 0
                continue
            reason = self._reason(inputs)
            if reason is None:
                tries = 0
                continue
            plan = self._plan(inputs)
            periods = dict(zip(self.settings.levels, plan["intervals_iterations"]))
            if periods == self.periods and not self.stale:
                self.current, tries = inputs, 0  # the same iterations: nothing to agree
                continue
            position = await self._agree(periods)
            if position is None:  # no rank in a loop, or a failure: try again shortly
                tries = tries + 1 if tries < RETRIES else 0
                if tries:
                    await self.c.sleep(max(inputs.iteration_s, 1e-3))
                continue
            tries = 0
            self.current, self.periods, self.stale = inputs, periods, False
            self.c.events.record("level_intervals_chosen", reason=reason, position=position,
                                 **plan)

    def _inputs(self) -> _Inputs | None:
        """The costs a plan would use now; None until every level was measured."""
        names = self.settings.levels
        if self.iteration_s is None or any(n not in self.stall_s for n in names):
            return None
        restart = {}
        for i, n in enumerate(names):
            if i in self.settings.restart_s:
                restart[n] = (self.settings.restart_s[i], "given")
            elif n in self.measured_restart:
                restart[n] = (self.measured_restart[n], "measured")
            else:
                restart[n] = (None, "estimated")  # the level's checkpoint cost (_plan)
        return _Inputs({n: max(self.stall_s[n], COST_FLOOR_S) for n in names}, restart,
                       max(self.iteration_s, COST_FLOOR_S))

    def _reason(self, inputs: _Inputs) -> str | None:
        """Why plan now (None: the plan in force still fits the measurements)."""
        if self.current is None:
            return "first costs measured"
        if self.stale:
            return "after a recovery"
        old = self.current
        moved = [n for n in self.settings.levels
                 if _moved(old.stall_s[n], inputs.stall_s[n])
                 or _moved(old.restart_s[n][0], inputs.restart_s[n][0])]
        if moved:
            return f"costs of {', '.join(moved)} changed"
        if _moved(old.iteration_s, inputs.iteration_s):
            return "iteration time changed"
        return None

    def _plan(self, inputs: _Inputs) -> dict:
        """The optimal plan for ``inputs``, as the event records it."""
        names, total, levels, rows = self.settings.levels, 0.0, [], []
        for n in names:
            total += inputs.stall_s[n]  # nested: a level-L position takes levels 1..L
            restart, source = inputs.restart_s[n]
            restart = total if restart is None else restart
            levels.append(Level(n, total, restart))
            rows.append({"level": n, "stall_s": inputs.stall_s[n], "checkpoint_s": total,
                         "restart_s": restart, "restart": source})
        kinds, fallback = self.settings.kinds, {}
        try:
            plan = optimal_plan(levels, kinds)
        except ValueError as exc:  # no finite plan: the densest one (module docstring)
            plan = Plan(tuple(levels), kinds, inputs.iteration_s, (1,) * len(levels),
                        math.inf)
            fallback = {"fallback": str(exc)}
            if not self.warned:
                self.warned = True
                warnings.warn_explicit(
                    f"level_intervals='auto': {exc} (levels {', '.join(names)}: "
                    f"checkpoint costs {', '.join(f'{lv.checkpoint_s:.3g}' for lv in levels)} "
                    f"s, level_mtbf_s {dict((k.name, k.mtbf_s) for k in kinds)}); every "
                    f"level checkpoints at every iteration until the costs allow a plan",
                    LevelPlanWarning, "ftactors", 0, module="ftactors.protocols.shared.level_plan")
        first = max(1, round(plan.tau_s / inputs.iteration_s))
        iterations = [first * round(span / plan.tau_s) for span in plan.intervals_s]
        return {**fallback, "iteration_s": inputs.iteration_s, "levels": rows,
                "failures": [{"kind": k.name, "level": names[k.level], "mtbf_s": k.mtbf_s}
                             for k in self.settings.kinds],
                "tau_s": plan.tau_s, "every": list(plan.every),
                "intervals_s": plan.intervals_s, "intervals_iterations": iterations,
                "waste": plan.waste}

    async def _agree(self, periods: dict) -> tuple | None:
        """Agree ``periods`` with every rank; the position they take effect at, or None
        (a rank has no safe point left in its loop, a failure, or a round began)."""
        task = asyncio.ensure_future(self._notify_and_decide(periods))
        self.busy.add(task)
        task.add_done_callback(self.busy.discard)
        await asyncio.wait([task])
        return None if task.cancelled() else task.result()

    async def _notify_and_decide(self, periods: dict) -> tuple | None:
        c = self.c
        await c.wired.wait()
        request = next(self._ids)
        try:
            nexts = await asyncio.gather(*(
                c.call(r, PlannedLevel.ft_rpc_levels_notify, request) for r in range(c.n)))
            position = checkpoint_position(nexts)
            await asyncio.gather(*(
                c.call(r, PlannedLevel.ft_rpc_levels_decide, request, position, periods)
                for r in range(c.n)))
        except NewFailure:  # the recovery that follows restores every rank
            return None
        return position


def _mean(mean: float | None, sample: float) -> float:
    """The moving mean of a measured cost with a new ``sample`` (the sample alone first)."""
    return sample if mean is None else (1 - NEWEST) * mean + NEWEST * sample


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return (old is None) != (new is None)
    return not old / REPLAN_FACTOR <= new <= old * REPLAN_FACTOR


PlannedLevel.stack_helper = LevelPlanner
