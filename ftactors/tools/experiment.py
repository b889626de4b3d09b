"""Chaos experiments as data: the YAML file (or flags) that names a matrix of runs.

An experiment is a matrix (app x protocol stack x ranks x failure schedule x seed) plus
the settings each axis value stands for. Loading it checks everything before anything
runs: the apps' settings, the protocol options, every schedule against every rank count,
and node kills against the cluster, so a typo costs a second, not an hour of runs.
See ``docs/chaos.md`` ("Chaos experiments") for the file format, and
``docs/architecture/tools.md`` ("Chaos experiments") for how each part is read.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import numbers
from dataclasses import dataclass, field
from typing import Any

import ftactors as ft
from ..runtime import INTERVAL, RunConfig, option_values, protocol_classes, with_role
from .apps_cli import APPS, app_module, parse_pair, protocol_stack, stack_names
from .programs import FORMS, Program, is_reference, literal, parse_kwargs, resolve

MATRIX_AXES = ("app", "protocol", "ranks", "schedule", "seed")
TOP_KEYS = ("name", "transport", "cluster", "timeout_s", "matrix", "apps", "protocols",
            "schedules")
SCHEDULE_KEYS = ("kill", "kill_at", "random_kills", "mtbf_s", "horizon_s", "method",
                 "recovery_kills", "moment_kills", "spare_kills", "node_kills", "job_kill",
                 "partitions")


class ExperimentError(ValueError):
    """The experiment file or flags are wrong; the message says where."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where the runs go: ``local`` (an embedded Ray, or none for local/sim), ``nodes``
    (a ``ray.cluster_utils.Cluster`` of ``nodes`` worker nodes started for the
    experiment: node kills remove one for real) or ``address`` (a running cluster)."""

    kind: str = "local"
    nodes: int = 0
    address: str | None = None

    @property
    def label(self) -> str:
        return {"local": "local", "nodes": f"nodes:{self.nodes}"}.get(self.kind, self.address)


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix, ready to run."""

    run_id: str
    app: str
    protocol: str
    ranks: int
    schedule: str
    seed: int
    stack: tuple
    app_kwargs: dict
    options: dict
    spares: int
    chaos: ft.Chaos
    node_kills: tuple = ()   # (worker node index, seconds after the start)
    resume_from: str | None = None  # a job kill: the stable store the next job resumes from
    interval: float | None = None
    interval_unit: str = ""
    program: Any = None      # the app resolved (programs.Program), named as in the matrix


@dataclass
class Experiment:
    name: str
    transport: str
    cluster: ClusterSpec
    timeout_s: float
    runs: list[RunSpec]
    source: dict = field(default_factory=dict)


def load_experiment(path: str) -> Experiment:
    """Read and check an experiment file (YAML or JSON).

    Raises:
        ExperimentError: the file cannot be read or says something wrong.
    """
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ExperimentError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ExperimentError(f"{path} is not valid YAML: {exc}") from None
    return experiment_from_dict(data, where=path)


def experiment_from_dict(data, where: str = "experiment") -> Experiment:
    """Check an experiment given as a dict (the parsed file) and expand its matrix.

    Raises:
        ExperimentError: anything wrong, named by its place in the file.
    """
    if not isinstance(data, dict):
        raise ExperimentError(f"{where}: expected a mapping at the top, got {type(data).__name__}")
    _no_unknown(data, TOP_KEYS, where)
    name = str(data.get("name") or "experiment")
    transport = data.get("transport", "ray")
    if transport not in ("ray", "local", "sim"):
        raise ExperimentError(f"{where}: transport must be ray, local or sim, got {transport!r}")
    cluster = _cluster(data.get("cluster", "local"), transport, where)
    timeout_s = data.get("timeout_s", 600)
    if not isinstance(timeout_s, numbers.Real) or timeout_s <= 0:
        raise ExperimentError(f"{where}: timeout_s must be a number > 0, got {timeout_s!r}")
    matrix = data.get("matrix")
    if not isinstance(matrix, dict):
        raise ExperimentError(f"{where}: needs a 'matrix' with {', '.join(MATRIX_AXES)}")
    _no_unknown(matrix, MATRIX_AXES, f"{where}: matrix")
    axes = {axis: _axis(matrix, axis, where) for axis in MATRIX_AXES}
    sections = {key: data.get(key) or {} for key in ("apps", "protocols", "schedules")}
    for key, section in sections.items():
        if not isinstance(section, dict):
            raise ExperimentError(f"{where}: '{key}' must be a mapping of names to settings")
    runs = []
    for i, cell in enumerate(itertools.product(*(axes[a] for a in MATRIX_AXES))):
        app, protocol, ranks, schedule, seed = cell
        runs.append(_run_spec(f"r{i:03d}", app, protocol, ranks, schedule, seed, sections,
                              transport, cluster, where))
    return Experiment(name, transport, cluster, float(timeout_s), runs, data)


def experiment_from_flags(args) -> dict:
    """The experiment dict that ``ftactors chaos`` flags (no file) describe."""
    schedule = {}
    if args.kill:
        schedule["kill"] = [parse_pair(s, "--kill", "RANK:ITERATION") for s in args.kill]
    if args.kill_at:
        schedule["kill_at"] = [parse_pair(s, "--kill-at", "RANK:SECONDS", float)
                               for s in args.kill_at]
    for flag, key in (("moment_kill", "moment_kills"), ("spare_kill", "spare_kills")):
        if getattr(args, flag):
            schedule[key] = [parse_pair(s, f"--{flag.replace('_', '-')}", "INDEX:MOMENT", str)
                             for s in getattr(args, flag)]
    if args.random_kills:
        schedule["random_kills"] = args.random_kills
    if args.mtbf is not None:
        schedule["mtbf_s"] = args.mtbf
    if args.horizon is not None:
        schedule["horizon_s"] = args.horizon
    if args.method is not None:
        schedule["method"] = args.method
    if args.partition:
        schedule["partitions"] = [parse_partition(s) for s in args.partition]
    from ftactors.protocols import PROTOCOLS
    stacks = _csv(args.protocol)
    everywhere = [n for p in stacks for n in stack_names(p)]
    option_values(args, PROTOCOLS, everywhere)  # a flag no stack takes is refused
    protocols = {p: {**({"spares": args.spares} if args.spares else {}),
                     **option_values(args, PROTOCOLS, stack_names(p), refuse=False)}
                 for p in stacks}
    apps = {}
    given = [getattr(args, "arg", []), getattr(args, "kwarg", []), getattr(args, "check", None)]
    if any(given):  # every program named in --app takes them
        program = {"args": [literal(a) for a in given[0]], "kwargs": parse_kwargs(given[1]),
                   **({"check": given[2]} if given[2] else {})}
        apps = {a: program for a in _csv(args.app) if is_reference(a)}
        if not apps:
            raise ExperimentError("--arg, --kwarg and --check are for programs "
                                  "(--app package.module:Class or path/to/file.py:Class)")
    return {"name": args.name, "transport": args.transport,
            "cluster": {"address": args.address} if args.address else "local",
            "timeout_s": args.timeout,
            "matrix": {"app": _csv(args.app), "protocol": list(protocols),
                       "ranks": [int(r) for r in _csv(args.ranks)], "schedule": ["flags"],
                       "seed": [int(s) for s in _csv(args.seeds)]},
            "apps": apps, "protocols": protocols, "schedules": {"flags": schedule}}


#: ``ftactors run`` flags that say what to do with a run here, not what the run is
RUN_HERE = {"json": "--json", "trace": "--trace", "restart_from": "--restart-from",
            "migrate": "--migrate", "address": "--address"}


def experiment_from_run(args) -> dict:
    """The experiment of one run that ``ftactors run`` flags describe (``args`` parsed
    by ``ftactors run``'s own parser, ``apps_cli.add_run``): the app or program with
    its settings, the protocol stack with its options and spares, the ranks, seed,
    transport, timeout and ``--kill``s. Like every chaos run it is judged against the
    failure-free run of the bare program.

    Raises:
        ExperimentError: a flag of ``RUN_HERE`` was given (they write files or reach a
            cluster from the machine that runs the command, not from a job).
    """
    given = [flag for dest, flag in RUN_HERE.items() if getattr(args, dest, None)]
    if given:
        raise ExperimentError(f"{', '.join(given)}: not for one run as an experiment (its "
                              f"results and events are recorded in the results directory)")
    from ftactors.protocols import PROTOCOLS
    options = option_values(args, PROTOCOLS, stack_names(args.protocol))
    if args.app_module is None:  # a program: its --arg, --kwarg, --check
        settings = {"args": [literal(a) for a in args.arg], "kwargs": parse_kwargs(args.kwarg),
                    **({"check": args.check} if args.check else {})}
        name = args.app.rpartition(":")[2]
    else:  # a shipped app: its own flags, named as in an experiment's apps: entry
        settings = {key: getattr(args, key) for key in vars(app_defaults(args.app_module))}
        name = args.app
    kills = [parse_pair(s, "--kill", "RANK:ITERATION") for s in args.kill]
    return {"name": f"run-{name}", "transport": args.transport,
            **({"timeout_s": args.timeout} if args.timeout is not None else {}),
            "matrix": {"app": [args.app], "protocol": [args.protocol], "ranks": [args.ranks],
                       "schedule": ["flags"], "seed": [args.seed]},
            "apps": {args.app: settings},
            "protocols": {args.protocol: {**({"spares": args.spares} if args.spares else {}),
                                          **options}},
            "schedules": {"flags": {"kill": kills} if kills else {}}}


def parse_partition(spec: str) -> list:
    """``"RANK[,RANK...]:SECONDS:FOR_SECONDS"`` (``--partition``) as ``[ranks, time_s,
    seconds]``, a ``partitions:`` entry of a schedule.

    Raises:
        ValueError: ``spec`` is not of that form.
    """
    try:
        ranks, at, seconds = spec.split(":")
        return [[int(r) for r in ranks.split(",")], float(at), float(seconds)]
    except ValueError:
        raise ValueError(f"--partition takes RANK[,RANK...]:SECONDS:FOR_SECONDS, "
                         f"got {spec!r}") from None


# ------------------------------------------------------------------------ pieces
def _no_unknown(d: dict, known, where: str) -> None:
    unknown = sorted(set(d) - set(known), key=str)
    if unknown:
        raise ExperimentError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; "
                              f"known: {', '.join(known)}")


def _axis(matrix: dict, axis: str, where: str) -> list:
    values = matrix.get(axis)
    if values is None and axis == "seed":
        values = [0]
    if not isinstance(values, list):
        values = [values]
    if not values or any(v is None for v in values):
        raise ExperimentError(f"{where}: matrix.{axis} needs at least one value")
    if axis in ("ranks", "seed") and not all(isinstance(v, int) and not isinstance(v, bool)
                                            and v >= (1 if axis == "ranks" else 0)
                                            for v in values):
        raise ExperimentError(f"{where}: matrix.{axis} must be integers "
                              f"{'>= 1' if axis == 'ranks' else '>= 0'}, got {values!r}")
    if axis == "protocol":  # a stack given as a list of names: its + form
        values = ["+".join(map(str, v)) if isinstance(v, list) else v for v in values]
    return [v if axis in ("ranks", "seed") else str(v) for v in values]


def _cluster(spec, transport: str, where: str) -> ClusterSpec:
    if spec in (None, "local"):
        return ClusterSpec()
    if isinstance(spec, dict) and set(spec) == {"nodes"}:
        n = spec["nodes"]
        if not isinstance(n, int) or n < 1:
            raise ExperimentError(f"{where}: cluster.nodes must be an int >= 1, got {n!r}")
        if transport != "ray":
            raise ExperimentError(f"{where}: cluster: {{nodes: {n}}} needs transport: ray")
        return ClusterSpec("nodes", nodes=n)
    if isinstance(spec, dict) and set(spec) == {"address"} and isinstance(spec["address"], str):
        if transport != "ray":
            raise ExperimentError(f"{where}: a cluster address needs transport: ray")
        return ClusterSpec("address", address=spec["address"])
    raise ExperimentError(f"{where}: cluster must be 'local', {{nodes: N}} or "
                          f"{{address: ADDRESS}}, got {spec!r}")


PROGRAM_KEYS = ("program", "args", "kwargs", "check")
"""The settings of a program's ``apps:`` entry."""


def app_program(app: str, settings, ranks: int, where: str) -> Program:
    """The program a matrix ``app`` names: a shipped app with its settings
    (``app_kwargs``), or a program (``package.module:Class``, ``path/to/file.py:Class``,
    or a name whose ``apps:`` entry has ``program:`` such a reference) with its ``args``
    list, ``kwargs`` map and ``check`` (``module:function``). It keeps the name ``app``."""
    if not isinstance(settings, dict):
        raise ExperimentError(f"{where}: apps.{app} must be a mapping, got {settings!r}")
    ref = settings.get("program", app)
    if not is_reference(str(ref)):
        if "program" in settings:
            raise ExperimentError(f"{where}: apps.{app}.program must be a program "
                                  f"(package.module:Class or path/to/file.py:Class), got {ref!r}")
        kwargs = app_kwargs(app, settings, ranks, where)
        return dataclasses.replace(_resolved(app, where), kwargs=kwargs)
    _no_unknown(settings, PROGRAM_KEYS, f"{where}: apps.{app}")
    args, kwargs = settings.get("args") or [], settings.get("kwargs") or {}
    if not isinstance(args, list):
        raise ExperimentError(f"{where}: apps.{app}.args must be a list, got {args!r}")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) and k.isidentifier()
                                               for k in kwargs):
        raise ExperimentError(f"{where}: apps.{app}.kwargs must map argument names to "
                              f"values, got {kwargs!r}")
    return dataclasses.replace(_resolved(str(ref), where, args, kwargs, settings.get("check")),
                               name=app)


def _resolved(ref: str, where: str, *how) -> Program:
    try:
        return resolve(ref, *how)
    except ValueError as exc:
        raise ExperimentError(f"{where}: {exc}") from None


def app_kwargs(app: str, settings: dict, ranks: int, where: str) -> dict:
    """``main()``'s kwargs for ``app`` from its settings (named like the options of
    ``ftactors run APP``, with ``_`` for ``-``), checked by the app itself."""
    if app not in APPS:
        raise ExperimentError(f"{where}: unknown app {app!r}; known: {', '.join(APPS)}, or a "
                              f"program as {FORMS}")
    mod = app_module(app)
    args = app_defaults(mod)
    known = vars(args).keys()
    if not isinstance(settings, dict):
        raise ExperimentError(f"{where}: apps.{app} must be a mapping, got {settings!r}")
    _no_unknown(settings, sorted(known), f"{where}: apps.{app}")
    for key, value in settings.items():
        setattr(args, key, value)
    args.ranks = ranks
    try:
        return mod.kwargs_from_args(args)
    except (ValueError, TypeError) as exc:
        raise ExperimentError(f"{where}: apps.{app} with {ranks} ranks: {exc}") from None


def app_defaults(mod) -> argparse.Namespace:
    """A shipped app's own options (its ``add_arguments``) at their defaults."""
    parser = argparse.ArgumentParser(prog=mod.__name__.rpartition(".")[2], add_help=False)
    mod.add_arguments(parser)
    return parser.parse_args([])


def _protocol(key: str, section: dict, where: str) -> tuple[tuple, dict, int]:
    """(stack names, ft.run options, spares) of a ``protocols:`` entry, or of a bare name
    or stack (``rs+standby``). An entry's ``protocol`` is a name, a stack or a list of
    names (``[rs, standby, ready-flush]``, the first outermost)."""
    from ftactors.protocols import PROTOCOLS
    entry = section.get(key)
    if entry is None:
        unknown = [n for n in stack_names(key) if n not in PROTOCOLS]
        if unknown:
            raise ExperimentError(f"{where}: protocol {key!r} is neither in 'protocols:' nor "
                                  f"one of none, {', '.join(PROTOCOLS)} (or a stack of them "
                                  f"joined by +)")
        entry = {}
    if not isinstance(entry, dict):
        raise ExperimentError(f"{where}: protocols.{key} must be a mapping, got {entry!r}")
    options = dict(entry)
    names = options.pop("protocol", key)
    if not isinstance(names, (str, list)) or not all(isinstance(n, str) for n in names):
        raise ExperimentError(f"{where}: protocols.{key}.protocol must be a name or a list "
                              f"of names, got {names!r}")
    spares = options.pop("spares", 0)
    return tuple(stack_names(names)), options, spares


def _chaos(key: str, section: dict, seed: int, where: str) -> tuple[ft.Chaos, tuple]:
    """The ``ft.Chaos`` of a ``schedules:`` entry at ``seed``, and its node kills."""
    if key not in section:
        raise ExperimentError(f"{where}: schedule {key!r} is not in 'schedules:'")
    spec = section[key] or {}
    if not isinstance(spec, dict):
        raise ExperimentError(f"{where}: schedules.{key} must be a mapping, got {spec!r}")
    _no_unknown(spec, SCHEDULE_KEYS, f"{where}: schedules.{key}")
    try:
        kills = [_kill(k) for k in spec.get("kill", ())]
        kills += [ft.Kill(int(k[0]), recovery_round=int(k[1]),
                          recovery_phase=str(k[2]) if len(k) > 2 else "start")
                  for k in spec.get("recovery_kills", ())]
        kills += [ft.Kill(int(k[0]), moment=str(k[1])) for k in spec.get("moment_kills", ())]
        kills += [ft.Kill(spare=int(k[0]), moment=str(k[1]))
                  for k in spec.get("spare_kills", ())]
        node_kills = tuple((int(n), float(t)) for n, t in spec.get("node_kills", ()))
        chaos = ft.Chaos(kill=tuple(kills), kill_at=tuple(tuple(k) for k in spec.get("kill_at", ())),
                         random_kills=int(spec.get("random_kills", 0)),
                         mtbf_s=spec.get("mtbf_s"), horizon_s=float(spec.get("horizon_s", 10.0)),
                         method=spec.get("method", "sigkill"), seed=seed,
                         job_lost_at=_job_kill(spec.get("job_kill")),
                         partitions=tuple(tuple(p) for p in spec.get("partitions", ())))
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise ExperimentError(f"{where}: schedules.{key}: {exc}") from None
    return chaos, node_kills


def _job_kill(spec) -> int | None:
    """The iteration of ``job_kill: {iteration: N}`` (None: no job kill)."""
    if spec is None:
        return None
    if not (isinstance(spec, dict) and set(spec) == {"iteration"}
            and isinstance(spec["iteration"], int) and not isinstance(spec["iteration"], bool)):
        raise ValueError(f"job_kill must be {{iteration: N}} (the whole job is lost at the "
                         f"top of iteration N), got {spec!r}")
    return spec["iteration"]


def stable_store(stack, options: dict) -> tuple[str, str] | None:
    """``(option, store)``: where a stack with these options writes the checkpoint sets
    that ``restart_from`` reads (the costliest level's first: ReadyMessageFlush's
    ``checkpoint_dir`` unless it keeps the object store only, then RSBackup's
    ``rs_stable_store``, then StandbyReplacement's ``stable_store``); None: nowhere."""
    if "ready-flush" in stack and options.get("checkpoint_storage", "object") != "object":
        return "checkpoint_dir", options.get("checkpoint_dir", "ftactors-checkpoints")
    for name, option in (("rs", "rs_stable_store"), ("standby", "stable_store")):
        if name in stack and options.get(option) is not None:
            return option, options[option]
    return None


def _resume_store(run_id: str, stack, options: dict, where: str) -> tuple[dict, str]:
    """A job kill's options and store: the stack's stable store, with this run's own
    folder in it (a set another run left there must not be the one resumed from).

    Raises:
        ExperimentError: the stack keeps no set on stable storage.
    """
    found = stable_store(stack, options)
    if found is None:
        raise ExperimentError(
            f"{where}: job_kill needs stable storage, but {'+'.join(stack) or 'none'} with "
            f"these options keeps every state in memory or the object store, which die "
            f"with the job: give ready-flush checkpoint_storage: stable (or both), or "
            f"rs_stable_store, or standby's stable_store")
    option, store = found
    store = f"{store.rstrip('/')}/{run_id}"
    return {**options, option: store}, store


def _kill(k) -> ft.Kill:
    if isinstance(k, dict):
        return ft.Kill(int(k["rank"]), iteration=int(k["iteration"]),
                       incarnation=int(k.get("incarnation", 0)))
    rank, iteration = k
    return ft.Kill(int(rank), iteration=int(iteration))


def _run_spec(run_id, app, protocol, ranks, schedule, seed, sections, transport, cluster,
              where) -> RunSpec:
    here = f"{where} ({run_id}: {app} x {protocol} x {ranks} ranks x {schedule} x seed {seed})"
    program = app_program(app, sections["apps"].get(app) or {}, ranks, here)
    stack, options, spares = _protocol(protocol, sections["protocols"], here)
    chaos, node_kills = _chaos(schedule, sections["schedules"], seed, here)
    resume_from = None
    if chaos.job_lost_at is not None:
        options, resume_from = _resume_store(run_id, stack, options, here)
    if node_kills and cluster.kind != "nodes":
        raise ExperimentError(f"{here}: node kills need a local multi-node cluster "
                              f"(cluster: {{nodes: N}}); use rank kills on {cluster.label}")
    for node, at in node_kills:
        if not 0 <= node < cluster.nodes or at < 0:
            raise ExperimentError(f"{here}: node kill ({node}, {at}) needs a worker node "
                                  f"0..{cluster.nodes - 1} and a time >= 0")
    try:
        cls = protocol_stack(program.cls, stack)
        RunConfig.of(cls, ranks, args=program.args, kwargs=program.kwargs, transport=transport,
                     spares=spares, seed=seed, chaos=chaos, **options)  # checks, starts nothing
    except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
        raise ExperimentError(f"{here}: {exc}") from None
    interval = run_interval(cls, options)
    if "auto" in (options.get("level_intervals"), options.get("checkpoint_interval")):
        interval = (None, "auto")  # chosen as the run goes (level_intervals_chosen events)
    return RunSpec(run_id, app, protocol, ranks, schedule, seed, stack, program.kwargs, options,
                   spares, chaos, node_kills, resume_from,
                   None if interval[0] is None else float(interval[0]), interval[1], program)


def run_interval(cls: type, options: dict) -> tuple:
    """``(value, unit)``: the checkpoint interval a run is plotted against, the first
    number among the options given that set one (role ``INTERVAL``), the costliest
    level's first; ``(None, "")``: none."""
    protocols = sorted(protocol_classes(cls), key=lambda p: -p.level_cost)
    units = {o.name: o.unit for p in protocols for o in p.OPTIONS}
    return next(((options[k], units[k]) for k in with_role(protocols, INTERVAL)
                 if isinstance(options.get(k), numbers.Real)), (None, ""))


def _csv(text) -> list[str]:
    return [v.strip() for v in str(text).split(",") if v.strip()]
