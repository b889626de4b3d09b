"""``ftactors advise``: how often to checkpoint, and what it costs.

``ftactors advise --mtbf 3600 --checkpoint-cost 12`` (or ``--results DIR``: the costs
measured in a chaos experiment's runs) prints Young's and Daly's intervals
(``protocols/shared/intervals.py``; also in iterations with ``--iteration-s``) for
``checkpoint_interval`` / ``checkpoint_interval_s``, with the expected waste (wall time
over work, minus one) of each in Daly's model.

With ``--level NAME:cost=S,restart=S`` (once per level, cheapest first) and
``--mtbf KIND@LEVEL=S`` (once per failure kind, naming the lowest level that recovers it;
``--mtbf LEVEL=S`` names the kind after its level) it prints the multi-level plan of
``protocols/shared/multilevel.py`` instead, against the best plan of the top level alone.
"""
from __future__ import annotations

import sys
from statistics import fmean

from ..protocols.shared.intervals import daly, expected_wall, young
from ..protocols.shared.multilevel import FailureKind, Level, optimal_plan, top_level_plan, waste
from .report_data import read_events, read_results
from .run_metrics import CHECKPOINT_KINDS


def advice(mtbf_s: float, checkpoint_s: float, restart_s: float = 0.0,
           iteration_s: float | None = None) -> dict:
    """Both intervals, their expected waste, and (with ``iteration_s``) in iterations."""
    rows = {}
    for name, tau in (("young", young(checkpoint_s, mtbf_s)),
                      ("daly", daly(checkpoint_s, mtbf_s))):
        row = {"interval_s": tau,
               "waste": expected_wall(1.0, tau, checkpoint_s, restart_s, mtbf_s) - 1.0}
        if iteration_s:
            row["interval_iterations"] = max(1, round(tau / iteration_s))
        rows[name] = row
    return {"mtbf_s": mtbf_s, "checkpoint_s": checkpoint_s, "restart_s": restart_s,
            "iteration_s": iteration_s, **rows}


def parse_level(text: str) -> Level:
    """``NAME:cost=S[,restart=S]`` as a ``Level`` (restart 0 when not given).

    Raises:
        ValueError: any other shape, an unknown key, or a value that is not a number.
    """
    name, sep, fields = text.partition(":")
    if not (sep and name.strip()):
        raise ValueError(f"--level {text!r}: expected NAME:cost=SECONDS[,restart=SECONDS]")
    values = {}
    for field in fields.split(","):
        key, eq, value = (part.strip() for part in field.partition("="))
        if not eq or key not in ("cost", "restart") or key in values:
            raise ValueError(f"--level {text!r}: expected NAME:cost=SECONDS[,restart=SECONDS], "
                             f"not {field.strip()!r}")
        values[key] = _seconds(value, f"--level {text!r}: {key}")
    if "cost" not in values:
        raise ValueError(f"--level {text!r}: cost=SECONDS is required")
    return Level(name.strip(), values["cost"], values.get("restart", 0.0))


def parse_failure(text: str, level_names: list[str]) -> FailureKind:
    """``KIND@LEVEL=S`` (or ``LEVEL=S``: the failures that level is the lowest to recover)
    as a ``FailureKind`` of the named level.

    Raises:
        ValueError: any other shape, a level not among ``level_names``, a bad number.
    """
    what, eq, value = text.rpartition("=")
    kind, at, level = what.rpartition("@")
    kind, level = (kind.strip(), level.strip()) if at else (what.strip(), what.strip())
    if not (eq and kind and level):
        raise ValueError(f"--mtbf {text!r}: with --level, expected KIND@LEVEL=SECONDS "
                         f"(or LEVEL=SECONDS)")
    if level not in level_names:
        raise ValueError(f"--mtbf {text!r}: no level {level!r} (the levels are "
                         f"{', '.join(level_names)})")
    return FailureKind(kind, _seconds(value, f"--mtbf {text!r}"), level_names.index(level))


def _seconds(value: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not a number of seconds") from None


def multilevel_advice(levels: list[Level], kinds: list[FailureKind],
                      iteration_s: float | None = None) -> dict:
    """The multi-level plan, level by level (interval of work in seconds, and in whole
    iterations with ``iteration_s``; checkpoints of that level per hour of work), its
    expected waste, and the best plan of the top level alone.

    Raises:
        ValueError: see ``_multilevel.check``; ``iteration_s`` not positive.
    """
    if iteration_s is not None and not iteration_s > 0:
        raise ValueError(f"--iteration-s must be positive seconds, got {iteration_s!r}")
    plan, alone = optimal_plan(levels, kinds), top_level_plan(levels, kinds)
    rows = [{"level": lv.name, "checkpoint_s": lv.checkpoint_s, "restart_s": lv.restart_s,
             "every": k, "interval_s": span, "per_hour": rate}
            for lv, k, span, rate in zip(levels, plan.every, plan.intervals_s, plan.per_hour())]
    out = {"levels": rows, "waste": plan.waste, "iteration_s": iteration_s,
           "top_alone": {"level": levels[-1].name, "interval_s": alone.tau_s,
                         "waste": alone.waste}}
    if iteration_s:
        first = max(1, round(plan.tau_s / iteration_s))
        for row, span in zip(rows, plan.intervals_s):
            row["interval_iterations"] = first * round(span / plan.tau_s)
        out["waste_in_iterations"] = waste(levels, kinds, first * iteration_s, plan.every)
    return out


def measured_costs(results_dir: str, protocol: str | None = None) -> dict:
    """The mean checkpoint and recovery costs that the runs of a chaos results directory
    measured (only ``protocol``'s runs, when given): a checkpoint's ``cost_s`` where its
    protocol records one, else its ``flush_s + save_s``; a recovery's start to end.

    Raises:
        ValueError: unreadable results, or no run that measured a checkpoint.
    """
    rows = [r for r in read_results(results_dir) if protocol in (None, r["protocol"])]
    costs = []
    for row in rows:
        for ev in read_events(results_dir, row["events_path"]):
            d = ev["detail"]
            if ev["kind"] in CHECKPOINT_KINDS and ("cost_s" in d or "flush_s" in d):
                costs.append(d["cost_s"] if "cost_s" in d else d["flush_s"] + d.get("save_s", 0.0))
    if not costs:
        which = f"protocol {protocol!r}'s runs" if protocol else "any run"
        raise ValueError(f"no checkpoint cost was measured in {which} of {results_dir}")
    recoveries = [r["recover_s"] for r in rows if r["recover_s"] is not None]
    return {"checkpoint_s": fmean(costs), "checkpoints": len(costs), "runs": len(rows),
            "restart_s": fmean(recoveries) if recoveries else 0.0,
            "recoveries": len(recoveries)}


def add_advise(sub) -> None:
    p = sub.add_parser("advise", help="optimal checkpoint intervals (Young, Daly, multi-level)",
                       description="Young's and Daly's optimal checkpoint intervals for a "
                                   "checkpoint cost and a mean time between failures, and "
                                   "the expected waste of each (Daly's model); with --level, "
                                   "the intervals of every level planned together.")
    p.add_argument("--mtbf", action="append", required=True, metavar="SECONDS|KIND@LEVEL=S",
                   help="mean time between failures of the whole job; with --level, once "
                        "per failure kind: KIND@LEVEL=SECONDS names the lowest level that "
                        "recovers it (LEVEL=SECONDS: the kind is named after its level)")
    p.add_argument("--level", action="append", default=None,
                   metavar="NAME:cost=S[,restart=S]",
                   help="a checkpoint level (once per level, cheapest first): the time its "
                        "checkpoint holds the job and the time a recovery from it takes")
    p.add_argument("--checkpoint-cost", type=float, default=None, metavar="SECONDS",
                   help="time a checkpoint holds the job (e.g. from ftactors bench checkpoint)")
    p.add_argument("--restart-cost", type=float, default=None, metavar="SECONDS",
                   help="time a recovery takes (default 0, or measured with --results)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="take the costs not given from the runs of a chaos results directory")
    p.add_argument("--protocol", default=None,
                   help="with --results: only this protocol's runs (a matrix protocol name)")
    p.add_argument("--iteration-s", type=float, default=None, metavar="SECONDS",
                   help="seconds per iteration, to give the interval in iterations")
    p.set_defaults(func=_cmd_advise)


def _cmd_advise(args) -> int:
    if args.level:
        return _cmd_advise_levels(args)
    checkpoint_s, restart_s = args.checkpoint_cost, args.restart_cost
    try:
        if len(args.mtbf) > 1 or "=" in args.mtbf[0]:
            raise ValueError("give --mtbf SECONDS once, or --mtbf KIND@LEVEL=SECONDS once per "
                             "failure kind with the levels (--level NAME:cost=S,restart=S)")
        mtbf_s = _seconds(args.mtbf[0], "--mtbf")
        if args.results is not None:
            m = measured_costs(args.results, args.protocol)
            print(f"measured in {args.results}: {m['checkpoints']} checkpoint(s) and "
                  f"{m['recoveries']} recover(ies) in {m['runs']} run(s)")
            checkpoint_s = m["checkpoint_s"] if checkpoint_s is None else checkpoint_s
            restart_s = m["restart_s"] if restart_s is None else restart_s
        elif checkpoint_s is None:
            raise ValueError("give --checkpoint-cost, or --results DIR to measure it")
        a = advice(mtbf_s, checkpoint_s, restart_s or 0.0, args.iteration_s)
    except ValueError as exc:  # ReportError too
        print(f"ftactors advise: {exc}", file=sys.stderr)
        return 2
    print(f"MTBF {a['mtbf_s']:g} s, checkpoint cost {a['checkpoint_s']:g} s, restart cost "
          f"{a['restart_s']:g} s")
    for name, label in (("young", "Young (1974)"), ("daly", "Daly (2006)")):
        row = a[name]
        every = (f" = every {row['interval_iterations']} iterations"
                 if "interval_iterations" in row else "")
        print(f"  {label:13} checkpoint every {row['interval_s']:.1f} s of work{every}; "
              f"expected waste {row['waste']:.1%}")
    return 0


def _cmd_advise_levels(args) -> int:
    try:
        single = [flag for flag, value in (("--checkpoint-cost", args.checkpoint_cost),
                                           ("--restart-cost", args.restart_cost),
                                           ("--results", args.results),
                                           ("--protocol", args.protocol)) if value is not None]
        if single:
            raise ValueError(f"{', '.join(single)}: single-level options; with --level give "
                             f"each level's cost= and restart=")
        levels = [parse_level(text) for text in args.level]
        names = [lv.name for lv in levels]
        if len(set(names)) < len(names):
            raise ValueError(f"two levels share a name: {', '.join(names)}")
        kinds = [parse_failure(text, names) for text in args.mtbf]
        a = multilevel_advice(levels, kinds, args.iteration_s)
    except ValueError as exc:
        print(f"ftactors advise: {exc}", file=sys.stderr)
        return 2
    print("failures: " + ", ".join(f"{k.name} every {k.mtbf_s:g} s -> {names[k.level]}"
                                   for k in kinds))
    iterations = a["iteration_s"] is not None
    width = max(len("level"), *map(len, names))
    print(f"  {'level':{width}} {'cost s':>7} {'restart s':>9} {'every':>6} {'interval s':>11}"
          + (f" {'iterations':>10}" if iterations else "") + f" {'per hour':>9}")
    for row in a["levels"]:
        print(f"  {row['level']:{width}} {row['checkpoint_s']:7g} {row['restart_s']:9g} "
              f"{row['every']:>6} {row['interval_s']:11.1f}"
              + (f" {row['interval_iterations']:>10}" if iterations else "")
              + f" {row['per_hour']:9.2f}")
    print("  every: this level takes the place of every k-th checkpoint of the level below;"
          "\n  interval: work between checkpoints of this level or higher; per hour: of work, "
          "of this level only")
    line = f"expected waste {_percent(a['waste'])}"
    if iterations:
        line += f" ({_percent(a['waste_in_iterations'])} in whole iterations)"
    print(line)
    if len(levels) > 1:
        print(_top_alone_line(a["top_alone"], a["waste"]))
    return 0


def _top_alone_line(alone: dict, plan_waste: float) -> str:
    """How the best plan of the top level alone compares with the multi-level plan."""
    head = (f"{alone['level']} alone (every failure recovered from it), every "
            f"{alone['interval_s']:.1f} s of work: expected waste {_percent(alone['waste'])}; ")
    ratio = alone["waste"] / plan_waste
    return head + (f"the levels waste {ratio:.1f}x less" if ratio >= 1 else
                   f"the levels waste {1 / ratio:.1f}x more (a lower level's restart costs "
                   f"more than the top's)")


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%"
