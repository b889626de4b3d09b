"""``ftactors chaos``: run a matrix of failure experiments, verify and record every run.

Each run is checked against the failure-free run of the bare app (same app, settings and
ranks), as ``programs.Program.judge`` says: a shipped app by its own verification and
that answer, a user's program (``--app path/to/file.py:Class``) by its check or bit for
bit. The failure-free run also gives the wall-time baseline the overhead is measured against, in the same experiment on the same machine.
Results go to a directory (or a pyarrow URI such as ``s3://...``): ``results.parquet``,
one row per run, rewritten after every run so a long experiment that dies keeps what it
measured; ``events/<run>.parquet``, each run's timeline; and ``experiment.yaml``, the
experiment as run, which replays any run with ``--only``. Node kills remove a worker of
a local ``ray.cluster_utils.Cluster`` without grace while the run goes.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

import ftactors as ft
from ..base import open_filesystem
from ..runtime import KILL_METHODS, add_option_flags, kill_text
from .node_loss import remove_node, shutdown_cluster
from .apps_cli import protocol_stack
from .experiment import (Experiment, ExperimentError, RunSpec, experiment_from_dict,
                         experiment_from_flags, load_experiment)
from .report import write_report
from .programs import add_program_arguments, same_answer  # noqa: F401 - where the tests and users found it
from .run_metrics import RESULT_SCHEMA, UNTESTED, events_table, failure_metrics

#: options the runner sets itself: each run's progress, a job kill's restart
CHAOS_SETS = ("progress", "progress_interval_s", "restart_from_any")


class ResultsDir:
    """The results of one experiment: a local directory or a pyarrow filesystem URI."""

    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.root = open_filesystem(uri, "results directory")
        self.fs.create_dir(f"{self.root}/events", recursive=True)

    def write_text(self, name: str, text: str) -> None:
        with self.fs.open_output_stream(f"{self.root}/{name}") as out:
            out.write(text.encode())

    def write_table(self, name: str, table: pa.Table) -> None:
        pq.write_table(table, f"{self.root}/{name}", filesystem=self.fs)


# --------------------------------------------------------------------------- runs
class _Place:
    """Where runs go: the Ray address, and for a local multi-node cluster its workers."""

    def __init__(self, exp: Experiment, progress=None):
        self.exp = exp
        self.progress = progress  # RunsLine: each protocol run's reports go there
        self.address = exp.cluster.address
        self.cluster = None
        self.workers: list = []
        self.head: str | None = None  # the head node's id (the driver and the spares)

    def rank_nodes(self, ranks: int) -> list[str]:
        """Ranks spread over the worker nodes in blocks (ranks 0..k-1 on node 0, ...)."""
        per = math.ceil(ranks / len(self.workers))
        return [self.workers[r // per].node_id for r in range(ranks)]

    async def kill_node(self, index: int) -> None:
        """Remove worker ``index`` without grace, then add a fresh node in its place so
        the next run finds the cluster whole."""
        await asyncio.to_thread(remove_node, self.cluster, self.workers[index])
        self.workers[index] = await asyncio.to_thread(self._add_worker)

    def _add_worker(self):
        node = self.cluster.add_node(num_cpus=2, object_store_memory=128 << 20)
        self.cluster.wait_for_nodes()
        return node


@contextlib.contextmanager
def _placed(exp: Experiment, progress=None, cluster=None):
    """Where ``exp``'s runs go; for ``cluster: {nodes: N}`` a local cluster of N worker
    nodes: ``cluster`` (a ``ray.cluster_utils.Cluster`` this process drives, connected)
    with N workers added for the experiment and removed after it, else one of its own."""
    place = _Place(exp, progress)
    if exp.cluster.kind != "nodes":
        yield place
        return
    import ray
    own = cluster is None
    if own:
        from ray.cluster_utils import Cluster
        if ray.is_initialized():
            raise ExperimentError("cluster: {nodes: N} starts its own Ray cluster, but this "
                                  "process is already connected to Ray")
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "include_dashboard": False, "object_store_memory": 256 << 20})
    elif not ray.is_initialized():
        raise ExperimentError("a cluster given for cluster: {nodes: N} needs this process "
                              "connected to it")
    place.cluster = cluster
    before = set(cluster.worker_nodes)
    try:
        place.workers = [place._add_worker() for _ in range(exp.cluster.nodes)]
        place.address = cluster.address
        if own:
            ray.init(address=place.address, logging_level="WARNING")
        place.head = ray.get_runtime_context().get_node_id()
        yield place
    finally:
        if own:
            ray.shutdown()
            shutdown_cluster(cluster)
        else:  # the workers added, and those that replaced killed ones
            for node in set(cluster.worker_nodes) - before:
                cluster.remove_node(node)


async def _execute(cls, spec: RunSpec, exp: Experiment, place: _Place, *, chaos=None,
                   options=None, spares=0, shown=True):
    """One run: (result or None, error or None, wall seconds (virtual on sim), events
    of node kills). ``shown``: its progress goes to ``place.progress`` (if any)."""
    options = dict(spec.options if options is None else options)
    if place.workers:
        options.setdefault("rank_nodes", place.rank_nodes(spec.ranks))
        options.setdefault("spare_nodes", [place.head])  # node kills spare the spares
    if place.progress is not None and shown:
        options["progress"] = place.progress
    kw = dict(args=spec.program.args, kwargs=spec.app_kwargs, transport=exp.transport,
              address=place.address,
              seed=spec.seed, spares=spares, chaos=chaos, timeout_s=exp.timeout_s, **options)
    extra = []
    t0 = time.perf_counter()
    try:
        if chaos is not None and spec.node_kills:
            run = await ft.launch(cls, spec.ranks, **kw)
            killer = asyncio.ensure_future(_node_kills(run, spec, place, extra))
            try:
                result = await run
            finally:
                killer.cancel()
        else:
            result = await ft.run_async(cls, spec.ranks, **kw)
    except (ft.RankError, ft.RankFailed, ft.ProtocolError, ft.Deadlock, TimeoutError) as exc:
        return None, exc, time.perf_counter() - t0, extra
    # the run's own clock: from its fabric being up to its end (no Ray start-up inside)
    return result, None, result.metrics["wall_s"], extra


async def _node_kills(run, spec: RunSpec, place: _Place, extra: list) -> None:
    """Remove worker nodes at the schedule's times (seconds after every rank is wired),
    recording a kill of each rank there."""
    await run.nodes()  # waits until the ranks are up
    start = run.clock()
    for index, at in sorted(spec.node_kills, key=lambda k: k[1]):
        await asyncio.sleep(max(0.0, start + at - run.clock()))
        node_id = place.workers[index].node_id
        ranks = [r for r in range(spec.ranks) if await run.node_of(r) == node_id]
        now = run.clock()  # the run's clock, that of its events
        extra.extend(ft.Event(now, "killed", r, {"how": "node", "node": index}) for r in ranks)
        extra.append(ft.Event(now, "node_killed", -1, {"node": index, "ranks": ranks}))
        await place.kill_node(index)


def _node_kills_unfired(spec: RunSpec, events) -> list[dict]:
    """The node kills of ``spec`` that tested nothing (as ``kills_unfired``): the run
    ended before the node's time came, or none of its ranks was detected failed (they
    returned before their node went)."""
    fired = [ev for ev in events if ev.kind == "node_killed"]  # in the order planned
    unfired = []
    for i, (index, at) in enumerate(sorted(spec.node_kills, key=lambda k: k[1])):
        kill = {"node": index, "at_s": at}
        if i >= len(fired):
            unfired.append({"kill": kill, "why": "the run ended first"})
            continue
        ranks = fired[i].detail["ranks"]
        if not any(ev.kind == "failure_detected" and ev.rank in ranks
                   and ev.time >= fired[i].time for ev in events):
            unfired.append({"kill": kill, "why": f"no rank of the node ({ranks}) was "
                                                 f"detected failed: they returned first"})
    return unfired


def _timeline(result, exc, extra) -> list:
    """A run's events (a failed run's from its error) with the runner's own, in order."""
    events = result.events if result is not None else list(getattr(exc, "events", []))
    return sorted([*events, *extra], key=lambda ev: ev.time)


async def _lost_and_resumed(cls, spec: RunSpec, exp: Experiment, place: _Place):
    """A job kill: the job runs until ``Chaos(job_lost_at=N)`` loses it whole, then a new
    job starts with ``restart_from`` its stable store, as ``ftactors run --restart-from``
    does. Returns the new job's result or error, both jobs' wall time and timeline (the
    second after a ``job_resumed`` event), and where it resumed from."""
    fs, root = open_filesystem(spec.resume_from, "checkpoint store")
    fs.delete_dir_contents(root, missing_dir_ok=True)  # this run's folder (_resume_store)
    at = spec.chaos.job_lost_at
    lost, exc, wall, extra = await _execute(cls, spec, exp, place, chaos=spec.chaos,
                                            spares=spec.spares)
    first = _timeline(lost, exc, extra)
    if not isinstance(exc, ft.JobLost):
        exc = exc or ft.ProtocolError(f"job_kill at iteration {at}: the job ended first, so "
                                      f"nothing was lost or resumed")
        return None, exc, wall, first, ""
    try:
        result, exc, wall2, extra = await _execute(
            cls, spec, exp, place, options={**spec.options, "restart_from": spec.resume_from},
            spares=spec.spares)
    except ft.ConfigError as error:  # no complete set was stored before the loss
        return None, error, wall, first, ""
    second = _timeline(result, exc, extra)
    restored = [ev.detail["position"] for ev in second if ev.kind == "restored"]
    position = restored[0] if restored else None
    resumed = "the start" if position is None else f"iteration {position[1]}"
    # each job has its own clock (sim's starts at 0 again): the second follows the first
    start = second[0].time if second else 0.0
    shift = max(0.0, (first[-1].time if first else 0.0) - start)
    marker = ft.Event(start + shift, "job_resumed", -1,
                      {"store": spec.resume_from, "position": position, "lost_at": at})
    second = [ev._replace(time=ev.time + shift) for ev in second]
    return result, exc, wall + wall2, [*first, marker, *second], resumed


def _outcome(exc) -> str:
    if exc is None:
        return "verified"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ft.Deadlock):
        return "deadlock"
    return "failed" if isinstance(exc, ft.RankFailed) else "error"


async def _baseline(spec: RunSpec, exp: Experiment, place: _Place) -> dict:
    """The failure-free bare program: its answer and wall time."""
    program = spec.program
    result, exc, wall, _ = await _execute(program.cls, spec, exp, place, options={},
                                          shown=False)
    if exc is not None:
        raise RuntimeError(f"the failure-free {spec.app} on {spec.ranks} ranks failed: {exc}")
    verified, answer = program.answer(result)
    if not verified:
        raise RuntimeError(f"the failure-free {spec.app} on {spec.ranks} ranks does not verify")
    return {"answer": answer, "wall_s": wall}


async def run_one(spec: RunSpec, exp: Experiment, place: _Place, baseline: dict,
                  replay: str) -> tuple[dict, list]:
    """Run one cell of the matrix; its results row and timeline."""
    program = spec.program
    cls = protocol_stack(program.cls, spec.stack)
    if spec.resume_from is not None:
        result, exc, wall, events, resumed = await _lost_and_resumed(cls, spec, exp, place)
    else:
        result, exc, wall, extra = await _execute(cls, spec, exp, place, chaos=spec.chaos,
                                                  spares=spec.spares)
        events, resumed = _timeline(result, exc, extra), ""
    outcome, verified, identical, why = _outcome(exc), False, False, ""
    unfired = [] if result is None else [*result.metrics.get("kills_unfired", []),
                                         *_node_kills_unfired(spec, events)]
    if result is not None:
        verdict = program.judge(program.answer(result), baseline["answer"])
        identical, why = verdict.identical, verdict.why
        verified = verdict.ok and not unfired
        outcome = UNTESTED if verdict.ok and unfired else "verified" if verified else "wrong"
    row = {"experiment": exp.name, "run_id": spec.run_id, "app": spec.app,
           "protocol": spec.protocol, "schedule": spec.schedule, "ranks": spec.ranks,
           "seed": spec.seed, "transport": exp.transport, "cluster": exp.cluster.label,
           "interval": spec.interval, "interval_unit": spec.interval_unit,
           "outcome": outcome, "verified": verified, "identical": identical,
           "error": (f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}" if exc is not None
                     else unfired_text(unfired) if unfired else why),
           "kills_unfired": len(unfired),
           "wall_s": wall, "baseline_wall_s": baseline["wall_s"],
           "overhead": wall / baseline["wall_s"] if baseline["wall_s"] else None,
           **failure_metrics(events), "resumed_from": resumed, "replay": replay,
           "events_path": f"events/{spec.run_id}.parquet"}
    return row, events


async def run_experiment(exp: Experiment, out: str, *, only=None, echo=print,
                         progress: RunsLine | None = None, cluster=None) -> list[dict]:
    """Run ``exp`` (or only the run ids in ``only``) and write its results to ``out``;
    returns the rows. ``echo`` gets a line per run as it ends; ``progress`` (None: none)
    shows the runs done and verified and where the current one is. ``cluster``: for
    ``cluster: {nodes: N}``, a local ``ray.cluster_utils.Cluster`` this process already
    drives, to add the experiment's workers to instead of starting one (None: its own)."""
    import yaml
    runs = [s for s in exp.runs if only is None or s.run_id in only]
    if only is not None and len(runs) != len(set(only)):
        missing = sorted(set(only) - {s.run_id for s in runs})
        raise ExperimentError(f"no run {', '.join(missing)} in {exp.name} "
                              f"(runs r000..r{len(exp.runs) - 1:03d})")
    store = ResultsDir(out)
    store.write_text("experiment.yaml", yaml.safe_dump(exp.source, sort_keys=False))
    rows, baselines = [], {}
    with _placed(exp, progress, cluster) as place:
        if exp.transport == "ray":  # start Ray now, not inside the first baseline's time
            from ..transports.ray import ensure_ray
            ensure_ray(place.address)
        for k, spec in enumerate(runs, 1):
            key = (spec.program.key, spec.ranks)
            if key not in baselines:
                baselines[key] = await _baseline(spec, exp, place)
            replay = f"ftactors chaos {out}/experiment.yaml --only {spec.run_id} --out {out}-replay"
            if progress is not None:
                progress.started(k, len(runs), spec, rows)
            row, events = await run_one(spec, exp, place, baselines[key], replay)
            rows.append(row)
            if progress is not None:
                progress.ended(rows)
            store.write_table(row["events_path"], events_table(events))
            store.write_table("results.parquet", pa.Table.from_pylist(rows, RESULT_SCHEMA))
            echo(f"  [{k}/{len(runs)}] {spec.run_id} {spec.app} x {spec.protocol} x "
                 f"{spec.ranks} ranks x {spec.schedule} x seed {spec.seed}: {row['outcome']}, "
                 f"{row['kills']} kill(s), {row['recoveries']} recover(ies)"
                 + (f" ({row['levels']})" if row["levels"] else "") + ", "
                 f"{row['wall_s']:.3g} s (x{row['overhead']:.2f})")
    return rows


class RunsLine:
    """``ftactors chaos``'s progress on stderr: the runs done and verified, the run under
    way and where it is (its ``ft.Progress`` reports). On a terminal one line redrawn in
    place; elsewhere a line per run ended and per failure or recovery."""

    def __init__(self, out=None):
        self.out = out if out is not None else sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.head = self.current = self.run = ""

    def started(self, k: int, total: int, spec: RunSpec, rows: list[dict]) -> None:
        verified = sum(r["verified"] for r in rows)
        self.run = spec.run_id
        self.head = (f"[run {k}/{total}, {verified} of {len(rows)} verified] {spec.run_id} "
                     f"{spec.app} x {spec.protocol} x {spec.ranks} ranks x {spec.schedule} "
                     f"x seed {spec.seed}")
        self.current = "starting"
        self._draw()

    def __call__(self, p) -> None:
        """A report of the run under way (``ft.run(progress=...)``)."""
        for line in p.news:
            self.clear()
            self.out.write(f"  {self.run}: {line}\n")
        self.current = p.status()
        self._draw()

    def ended(self, rows: list[dict]) -> None:
        verified = sum(r["verified"] for r in rows)
        self.head, self.current = f"[{len(rows)} run(s) done, {verified} verified]", ""
        if self.tty:
            self._draw()
        else:
            self.out.write(self.head + "\n")
            self.out.flush()

    def clear(self) -> None:
        """Take the line away (before a line of one's own on the same terminal)."""
        if self.tty:
            self.out.write("\r\033[K")
            self.out.flush()

    def _draw(self) -> None:
        if self.tty:
            self.out.write("\r\033[K" + self.head + (f": {self.current}" if self.current
                                                      else ""))
            self.out.flush()


def unfired_text(unfired: list[dict]) -> str:
    """The kills of a plan that never fired, and why, in one line."""
    return (f"{len(unfired)} planned kill(s) never fired: "
            + "; ".join(f"{kill_text(k['kill'])}: {k['why']}" for k in unfired))


def print_verdicts(rows: list[dict], where: str, err=None, label: str = "") -> bool:
    """Print each run that did not verify (NOT TESTED: one whose kills did not all
    fire), with its seed and replay command (to ``err``, default stdout), then the
    counts; True when every run verified."""
    bad = [r for r in rows if not r["verified"]]
    for r in bad:
        verdict = "NOT TESTED" if r["outcome"] == UNTESTED else "NOT VERIFIED"
        print(f"{verdict} {r['run_id']} (seed {r['seed']}): {r['outcome']}"
              + (f", {r['error']}" if r["error"] else "") + f"\n  replay: {r['replay']}",
              file=err)
    untested = sum(r["outcome"] == UNTESTED for r in bad)
    print(f"{label}{len(rows) - len(bad)} of {len(rows)} run(s) verified"
          + (f", {untested} NOT TESTED (a planned kill never fired)" if untested else "")
          + f"; results in {where}")
    return bool(rows) and not bad


# ---------------------------------------------------------------------------- CLI
def add_chaos(sub) -> None:
    p = sub.add_parser(
        "chaos", help="run a matrix of failure experiments and record verified results",
        description="Run app x protocol x ranks x schedule x seed from an experiment file "
                    "(see docs/chaos.md), or one built from flags.")
    p.add_argument("experiment", nargs="?", help="an experiment YAML file")
    p.add_argument("--out", default=None, metavar="DIR_OR_URI",
                   help="results directory (default ./chaos-results/NAME)")
    p.add_argument("--only", default=None, metavar="RUN_ID[,RUN_ID]",
                   help="run only these cells of the matrix (replay)")
    p.add_argument("--report", action="store_true", help="write the report when done")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show the runs done and verified and where the current run is, on "
                        "stderr (default: on a terminal only)")
    g = p.add_argument_group("an experiment from flags (without a file)")
    g.add_argument("--name", default="flags")
    g.add_argument("--app", default="cg",
                   help="app(s), comma-separated: cg, hpl, stencil, coupled, or programs as "
                        "package.module:Class or path/to/file.py:Class")
    add_program_arguments(g)
    g.add_argument("--protocol", default="standby",
                   help="protocol(s) or stacks (rs+standby), comma-separated")
    g.add_argument("--ranks", default="4", help="rank count(s), comma-separated")
    g.add_argument("--seeds", default="0", help="seed(s), comma-separated")
    g.add_argument("--spares", type=int, default=0)
    g.add_argument("--transport", default="ray", choices=("ray", "local", "sim"))
    g.add_argument("--address", default=None, help="a Ray cluster's address")
    g.add_argument("--timeout", type=float, default=600, metavar="SECONDS", help="per run")
    g.add_argument("--kill", action="append", default=[], metavar="RANK:ITERATION")
    g.add_argument("--kill-at", action="append", default=[], metavar="RANK:SECONDS",
                   help="seconds from the start of the run (start-up and wiring included)")
    g.add_argument("--moment-kill", action="append", default=[], metavar="RANK:MOMENT",
                   help="a kill at start, wire, return or finished")
    g.add_argument("--spare-kill", action="append", default=[], metavar="SPARE:MOMENT",
                   help="the i-th spare's death: starting, idle or promoted")
    g.add_argument("--random-kills", type=int, default=0, metavar="K")
    g.add_argument("--mtbf", type=float, default=None, metavar="SECONDS",
                   help="Poisson kills with this mean time between failures")
    g.add_argument("--horizon", type=float, default=None, metavar="SECONDS",
                   help="window of random and Poisson kills (default 10)")
    g.add_argument("--method", default=None, choices=KILL_METHODS,
                   help="how kills strike (default sigkill); disconnect: a network fault, "
                        "the rank's direct connections close")
    g.add_argument("--partition", action="append", default=[],
                   metavar="RANK[,RANK...]:SECONDS:FOR_SECONDS",
                   help="cut these ranks off the others at SECONDS for FOR_SECONDS")
    from ftactors.protocols import PROTOCOLS  # each stack takes the flags of its protocols
    add_option_flags(p, PROTOCOLS, skip=CHAOS_SETS)
    p.set_defaults(func=_cmd_chaos)


def _cmd_chaos(args) -> int:
    try:
        exp = (load_experiment(args.experiment) if args.experiment else
               experiment_from_dict(experiment_from_flags(args), where="flags"))
        only = None if args.only is None else [r.strip() for r in args.only.split(",")]
        out = args.out or f"chaos-results/{exp.name}"
        print(f"chaos {exp.name}: {len(exp.runs if only is None else only)} run(s) on "
              f"{exp.transport} ({exp.cluster.label}), results in {out}", flush=True)
        shown = sys.stderr.isatty() if args.progress is None else args.progress
        line = RunsLine() if shown else None

        def echo(text: str) -> None:
            if line is not None:
                line.clear()
            print(text, flush=True)

        rows = asyncio.run(run_experiment(exp, out, only=only, echo=echo, progress=line))
        if line is not None:
            line.clear()
    except (ExperimentError, ValueError) as exc:
        print(f"ftactors chaos: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a failure-free baseline failed: nothing to compare with
        print(f"ftactors chaos: {exc}", file=sys.stderr)
        return 1
    verified = print_verdicts(rows, f"{out}/results.parquet", label=f"chaos {exp.name}: ")
    if args.report:
        try:
            print(f"wrote {write_report(out)}")
        except ValueError as exc:  # ReportError
            print(f"ftactors chaos --report: {exc}", file=sys.stderr)
            return 2
    return 0 if verified else 1
