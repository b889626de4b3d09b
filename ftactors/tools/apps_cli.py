"""``ftactors run APP`` and ``ftactors demo``: the apps from the command line.

Every app module (``ftactors.apps.<name>``) exposes the same small contract, so this
file knows nothing about any app in particular:

* ``RANK_CLASS``: the ``ft.Rank`` subclass;
* ``add_arguments(parser)``: its own options;
* ``kwargs_from_args(args) -> dict``: ``main()``'s kwargs, raising ``ValueError`` with a
  clear message for bad options (then the command exits with code 2);
* ``summarize(result) -> (verified, lines, record)``: the verification verdict, the lines
  to print (ending with ``VERIFICATION SUCCESSFUL`` or ``VERIFICATION FAILED``) and a
  JSON-able record.
"""
from __future__ import annotations

import argparse
import sys

from ..runtime import add_option_flags, option_values, stack_refusal, working_stacks
# public beside stack_names and protocol_stack: every stack of two or more protocols that
# --protocol takes (bench nodes runs each)
from ._common import write_json
from .programs import (APPS, add_program_arguments, app_module, is_reference, program_from_args,
                       resolve)


def stack_names(protocol) -> list[str]:
    """The protocol names of a stack given as ``"rs+standby+ready-flush"``, a list of
    names, or None / ``"none"`` (no protocol: an empty list)."""
    if protocol is None:
        return []
    names = protocol.split("+") if isinstance(protocol, str) else list(protocol)
    return [n.strip() for n in names if n.strip() not in ("", "none")]


def protocol_stack(app_cls: type, protocol) -> type:
    """The app class with the named protocol mixins in front, the first outermost, as
    ``stack_names`` reads ``protocol`` (``"rs+standby"``, ``["rs", "standby"]``; None or
    "none": the bare app).

    Raises:
        ValueError: an unknown protocol name, or a stack the framework refuses (two
            protocols of one role, a wrong order, a pair not built): the refusal's reason.
    """
    names = stack_names(protocol)
    if not names:
        return app_cls
    from ftactors.protocols import PROTOCOLS
    unknown = [n for n in names if n not in PROTOCOLS]
    if unknown:
        raise ValueError(f"unknown protocol {unknown[0]!r}; known: none, {', '.join(PROTOCOLS)}"
                         f" (a stack joins names with +)")
    mixins = tuple(PROTOCOLS[n] for n in names)
    try:
        return type("".join(m.__name__ for m in mixins) + app_cls.__name__, (*mixins, app_cls),
                    {"__module__": __name__})
    except TypeError as exc:  # check_stack's refusal, prefixed by the class name
        why = str(exc).partition(": ")[2] or str(exc)
        right = sorted(names, key=lambda n: PROTOCOLS[n].stack_order)
        if right != names and stack_refusal(PROTOCOLS[n] for n in right) is None:
            why += f" (--protocol {'+'.join(right)})"
        raise ValueError(f"protocol stack {'+'.join(names)} refused: {why}") from None


def protocol_arg(text: str) -> str:
    """``--protocol``: one protocol or a stack (``standby+ready-flush``), checked at once
    so a refused stack is a usage error (exit 2) naming the reason."""
    import ftactors as ft
    try:
        protocol_stack(ft.Rank, text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _protocol_names() -> list[str]:
    from ftactors.protocols import PROTOCOLS
    return ["none", *PROTOCOLS]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, default=4, help="number of ranks (default 4)")
    p.add_argument("--transport", choices=("ray", "local", "sim"), default="ray")
    p.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    p.add_argument("--protocol", default="none", type=protocol_arg, metavar="NAME[+NAME...]",
                   help="fault-tolerance protocol mixed into the app, or a stack of them "
                        "joined by + (standby+ready-flush); names: "
                        + ", ".join(_protocol_names()))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="PATH", help="write the result record as JSON")
    p.add_argument("--trace", default=None, metavar="PATH", help="write a Parquet message trace")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS")
    p.add_argument("--spares", type=int, default=0, help="standby ranks (StandbyReplacement)")
    p.add_argument("--kill", action="append", default=[], metavar="RANK:ITERATION",
                   help="SIGKILL RANK at the top of ITERATION (repeatable)")
    p.add_argument("--restart-from", default=None, metavar="DIR_OR_URI",
                   help="start from the newest complete checkpoint there of this job (same "
                        "app, settings, ranks and protocols: a lost job)")
    p.add_argument("--migrate", action="append", default=[], metavar="RANK@SECONDS[:NODE]",
                   help="move RANK to another node (NODE id; default: another live node) "
                        "SECONDS after the start (repeatable; Ray; --protocol ready-flush)")
    from ftactors.protocols import PROTOCOLS
    add_option_flags(p, PROTOCOLS)


def parse_pair(spec: str, flag: str, form: str, kind=int) -> list:
    """``"RANK:VALUE"`` from a command-line flag as ``[rank, kind(value)]``.

    Raises:
        ValueError: ``spec`` is not of the ``form`` the message names.
    """
    try:
        rank, value = spec.split(":")
        return [int(rank), kind(value)]
    except ValueError:
        raise ValueError(f"{flag} takes {form}, got {spec!r}") from None


def _parse_kills(specs: list[str]) -> list[tuple[int, int]]:
    return [tuple(parse_pair(spec, "--kill", "RANK:ITERATION")) for spec in specs]


def _parse_moves(specs: list[str]) -> list[tuple[int, float, str | None]]:
    moves = []
    for spec in specs:
        head, _, node = spec.partition(":")
        try:
            rank, at = head.split("@")
            moves.append((int(rank), float(at), node or None))
        except ValueError:
            raise ValueError(f"--migrate takes RANK@SECONDS[:NODE], got {spec!r}") from None
    return moves


def _protocol_options(args) -> dict:
    """ft.run options from the option flags that were given; a protocol's flag needs that
    protocol in the stack (the options of every protocol in a stack are taken together)."""
    from ftactors.protocols import PROTOCOLS
    names = stack_names(args.protocol)
    options = option_values(args, PROTOCOLS, names)
    if args.migrate and "ready-flush" not in names:
        raise ValueError(f"--migrate needs ready-flush in --protocol (got --protocol "
                         f"{args.protocol})")
    return options


async def _run_moving(cls, moves, **kw):
    """Run with ``ft.launch`` and move ranks at the given times."""
    import asyncio

    import ftactors as ft
    run = await ft.launch(cls, **kw)
    t0 = asyncio.get_running_loop().time()
    for rank, at, node in sorted(moves, key=lambda m: m[1]):
        await asyncio.sleep(max(0.0, t0 + at - asyncio.get_running_loop().time()))
        if node is None:
            here = await run.node_of(rank)
            others = [n for n in await run.nodes() if n != here]
            node = others[0] if others else None
        info = await run.migrate(rank, node)
        where = f"node {node[:12]}" if node else "a new actor on the same node (only one)"
        print(f"  rank {rank} moved to {where} in {info['total_s']:.3f}s ({info['bytes']} "
              f"bytes of state, {len(info['partners'])} partner(s))", flush=True)
    return await run


class _Programs(dict):
    """The ``run`` subcommands by app name, where a program reference (``X:Class``) is a
    subcommand too: its parser is made when it is named."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and is_reference(name))

    def __missing__(self, name):
        if not is_reference(name):
            raise KeyError(name)
        self[name] = self._make(name)
        return self[name]


class _AppAction(argparse._SubParsersAction):
    """``ftactors run APP``: the shipped apps' subcommands, and any program reference."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _Programs(self._program_parser)

    def _program_parser(self, name: str) -> argparse.ArgumentParser:
        ap = self._parser_class(prog=f"{self._prog_prefix} {name}")
        _add_common(ap)
        add_program_arguments(ap)
        ap.set_defaults(func=_cmd_run, app_module=None)
        return ap


def add_run(sub) -> None:
    p = sub.add_parser("run", help="run an app (cg, hpl, stencil, coupled, or a program of "
                                   "yours) and verify it")
    apps = p.add_subparsers(dest="app", required=True, action=_AppAction, metavar="APP",
                            help="cg, hpl, stencil, coupled, or a program: "
                                 "package.module:Class or path/to/file.py:Class (then "
                                 "--arg, --kwarg KEY=VALUE, --check MODULE:FUNCTION)")
    for name in APPS:
        mod = app_module(name)
        ap = apps.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        _add_common(ap)
        mod.add_arguments(ap)
        ap.set_defaults(func=_cmd_run, app_module=mod)


def _cmd_run(args) -> int:
    import dataclasses

    import ftactors as ft

    mod = args.app_module
    if args.ranks < 1:
        print(f"ftactors run {args.app}: --ranks must be >= 1, got {args.ranks}", file=sys.stderr)
        return 2
    try:
        program = (program_from_args(args.app, args) if mod is None else
                   dataclasses.replace(resolve(args.app), kwargs=mod.kwargs_from_args(args)))
        kwargs = program.kwargs
        kills = _parse_kills(args.kill)
        cls = protocol_stack(program.cls, args.protocol)
        chaos = ft.Chaos(kill=kills) if kills else None
        if chaos is not None:
            chaos.plan(args.ranks)
        if args.spares and not getattr(cls, "uses_spares", False):
            raise ValueError(f"--spares needs a protocol that promotes them (--protocol standby)")
        options = _protocol_options(args)
        moves = _parse_moves(args.migrate)
        if moves and args.transport == "sim":
            raise ValueError("--migrate needs --transport ray or local")
    except ValueError as exc:
        print(f"ftactors run {args.app}: {exc}", file=sys.stderr)
        return 2
    settings = [*map(repr, program.args), *(f"{k}={v}" for k, v in kwargs.items())]
    print(f"{args.app}: {args.ranks} ranks on {args.transport}, protocol {args.protocol}"
          + "".join(f", {s}" for s in settings)
          + (f", spares={args.spares}, kills={kills}" if kills or args.spares else ""), flush=True)
    kw = dict(ranks=args.ranks, args=program.args, kwargs=kwargs, transport=args.transport,
              address=args.address, seed=args.seed, timeout_s=args.timeout, trace=args.trace,
              spares=args.spares, chaos=chaos, restart_from=args.restart_from,
              **{"progress": sys.stderr.isatty(), **options})
    try:
        if moves:
            import asyncio
            result = asyncio.run(_run_moving(cls, moves, **kw))
        else:
            result = ft.run(cls, **kw)
        if mod is None:
            verified, lines, record = _program_summary(program, result, args, stack_names(
                args.protocol) or chaos is not None or args.restart_from)
    except ft.ConfigError as exc:
        print(f"ftactors run {args.app}: {exc}", file=sys.stderr)
        return 2
    except (ft.RankError, ft.RankFailed, TimeoutError, ft.ProtocolError, ft.Deadlock) as exc:
        print(f"run failed: {exc}", file=sys.stderr)
        return 1
    for line in failure_story(result):
        print(line)
    if args.restart_from:
        restored = result.events_of("restored")
        at = restored[0].detail["position"] if restored else None
        print(f"  resumed from {args.restart_from}: "
              + ("the start" if at is None else f"the set at iteration {at[1]}"))
    for plan in result.events_of("level_intervals_chosen"):
        print(level_plan_line(plan.detail))
    chosen = result.events_of("checkpoint_interval_chosen")
    if chosen:
        d = chosen[-1].detail
        print(f"  checkpoint interval auto: {len(chosen)} checkpoint(s) measured, the last "
              f"cost {d['cost_s']:.3g}s: Daly's interval {d['interval_s']:.3g}s for MTBF "
              f"{d['mtbf_s']:g}s")
    if mod is not None:
        verified, lines, record = mod.summarize(result)
    for line in lines:
        print(line)
    record.update(app=args.app, ranks=args.ranks, transport=args.transport,
                  protocol=args.protocol, verified=verified, metrics=result.metrics)
    write_json(args.json, record)
    return 0 if verified else 1


def _program_summary(program, result, args, compare: bool) -> tuple[bool, list[str], dict]:
    """``summarize`` for a program: its answer judged (``Program.judge``) against the
    failure-free run, which is run now (bare, same ranks, transport and seed) when this
    one had a protocol, kills or a restart, else is this run itself."""
    import ftactors as ft
    reference = result
    if compare:
        print("  the failure-free answer: the bare program, no failure ...", flush=True)
        reference = ft.run(program.cls, args.ranks, args=program.args, kwargs=program.kwargs,
                           transport=args.transport, address=args.address, seed=args.seed,
                           timeout_s=args.timeout)
    verdict = program.judge(program.answer(result), program.answer(reference)[1])
    shown = repr(result.results[0]) if result.results else "nothing"
    lines = [f"  rank 0 returned {shown[:200]}{'...' if len(shown) > 200 else ''}",
             f"  checked by {program.checked_by}"
             + ("" if compare else " (no failure in this run: it is its own reference)"),
             "VERIFICATION SUCCESSFUL" + (" (bit-identical)" if verdict.identical else "")
             if verdict.ok else f"VERIFICATION FAILED: {verdict.why}"]
    return verdict.ok, lines, {"results": list(result.results), "identical": verdict.identical,
                               "checked_by": program.checked_by}


def level_plan_line(plan: dict) -> str:
    """One ``level_intervals_chosen`` event as a line: where it took effect and why, each
    level's interval and the costs it was planned from."""
    levels = ", ".join(f"{row['level']} every {it}" for row, it in
                       zip(plan["levels"], plan["intervals_iterations"]))
    costs = ", ".join(f"{row['level']} {row['stall_s']:.3g}s (restart {row['restart_s']:.3g}s "
                      f"{row['restart']})" for row in plan["levels"])
    return (f"  level intervals auto from iteration {plan['position'][1]} "
            f"({plan['reason']}): {levels} iterations; stalls {costs}, iteration "
            f"{plan['iteration_s']:.3g}s; expected waste {100 * plan['waste']:.3g}%")


def failure_story(result) -> list[str]:
    """One line per kill, detection and recovery in the run's timeline."""
    t0 = result.events[0].time if result.events else 0.0
    lines = []
    for ev in result.events:
        d = ev.detail
        if ev.kind == "killed":
            where = f"at iteration {d['iteration']}" if "iteration" in d else "now"
            lines.append(f"  {ev.time - t0:7.3f}s  rank {ev.rank} killed ({d.get('how')}) {where}")
        elif ev.kind == "failure_detected":
            took = f" after {d['detection_s'] * 1e3:.0f} ms" if "detection_s" in d else ""
            lines.append(f"  {ev.time - t0:7.3f}s  rank {ev.rank} failure detected{took}")
        elif ev.kind == "recovery_line":
            pos = d["position"]
            lines.append(f"  {ev.time - t0:7.3f}s  rolling back to "
                         + ("the start" if pos is None else f"iteration {pos[1]}"))
        elif ev.kind == "replaced":
            lines.append(f"  {ev.time - t0:7.3f}s  spare promoted to rank {ev.rank} "
                         f"({d['spares_left']} spare(s) left)")
        elif ev.kind == "rollback":
            pos = d["position"]
            lines.append(f"  {ev.time - t0:7.3f}s  restarting every rank from "
                         + ("the start" if pos is None else f"the checkpoint at iteration {pos[1]}"))
        elif ev.kind == "group_rollback":
            at = ", ".join(f"group {g} ({'the start' if pos is None else f'iteration {pos[1]}'})"
                           for g, pos in d["positions"].items())
            lines.append(f"  {ev.time - t0:7.3f}s  restarting ranks {d['ranks']} only: {at}")
        elif ev.kind == "group_resumed":
            lines.append(f"  {ev.time - t0:7.3f}s  {d['resent']} logged message(s) resent; "
                         "the other groups never stopped")
        elif ev.kind == "hc3i_rollback":
            why = "failed" if d["failed"] else "depends on a rolled-back cluster"
            lines.append(f"  {ev.time - t0:7.3f}s  cluster {d['cluster']} ({why}) back to "
                         f"its CLC {d['sn']}: ranks {d['ranks']}")
        elif ev.kind == "hc3i_recovered":
            lines.append(f"  {ev.time - t0:7.3f}s  {d['resent']} logged message(s) resent; "
                         "clusters off the recovery line never stopped")
        elif ev.kind == "level_exhausted":
            lines.append(f"  {ev.time - t0:7.3f}s  level {d['level']} cannot recover "
                         f"{d['failed']}: {d['reason']}")
        elif ev.kind == "recovery_level":
            lines.append(f"  {ev.time - t0:7.3f}s  recovered by level {d['level']}")
        elif ev.kind == "recovery_end":
            lines.append(f"  {ev.time - t0:7.3f}s  all ranks RUNNING again")
    return lines


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="CG on an embedded Ray, surviving killed ranks")
    p.add_argument("--class", dest="problem_class", default="S", choices=("S", "W", "A"))
    p.add_argument("--ranks", type=int, default=4)
    p.set_defaults(func=_cmd_demo)


def demo_argv(problem_class: str = "S", ranks: int = 4) -> list[str]:
    """The ``ftactors run`` command line the demo stands for: NAS CG with
    StandbyReplacement on an embedded Ray, two spares, rank 1 killed at iteration 4 and the
    last rank at iteration 10."""
    n = max(2, ranks)
    return ["run", "cg", "--class", problem_class, "--ranks", str(n), "--transport", "ray",
            "--protocol", "standby", "--spares", "2", "--timeout", "600",
            "--kill", "1:4", "--kill", f"{n - 1}:10"]


def _cmd_demo(args) -> int:
    """Run ``demo_argv`` through the ``run`` parser (``add_run``, as ``ftactors run``
    builds it), so the demo takes every ``run`` option's default exactly as it does."""
    parser = argparse.ArgumentParser(prog="ftactors")
    add_run(parser.add_subparsers(dest="cmd", required=True))
    argv = demo_argv(args.problem_class, args.ranks)
    print("ftactors " + " ".join(argv), flush=True)
    run_args = parser.parse_args(argv)
    return run_args.func(run_args)
