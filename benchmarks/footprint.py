"""Every protocol's footprint on real apps with no failure: time, object store, checkpoints, logs.

One invocation on Ray (``--transport`` for a dry run elsewhere) runs each app (CG class W,
the stencil and the coupled app, 4 ranks) bare and then under every protocol, each
checkpointing every ``--every`` iterations (DDVPiggyback: an unforced CLC every
``--clc-interval-s`` seconds with its default clusters), and prints one table:

* **wall**: the run's own clock (``metrics["wall_s"]``: from the ranks' start to the
  end, their processes' start included: every run starts its own, ``reuse_processes=False``,
  or the first run alone would pay for it), the median of ``--repetitions`` runs interleaved with the bare app's (this machine is
  shared: a single run's ratio can be off by 2x either way), and its ratio to the bare
  app's median measured in the same invocation;
* **peak store**: the largest number of bytes Ray's object store held while the run
  went (sampled every ``--sample-s`` seconds from the GCS; the largest of the repeats),
  and how far above the bare run's that is: what the protocol keeps there (checkpoint
  parts, parity blocks);
* **checkpoints**: distinct recovery points stored, and for DDVPiggyback how many of its
  CLCs were forced by messages from other clusters (a storm shows here);
* **logged**: bytes of messages kept in sender logs (GroupCoordination, DDVPiggyback);
* **failures**: failures and hangs detected (all repeats): with nothing killed, 0.

``--apps`` takes programs too (``examples/poisson.py:Poisson``, ``package.module:Class``,
with ``--arg``/``--kwarg``): each run's answer is judged against the bare run's
(``programs.Program.judge``: its check, else bit for bit), as a shipped app's is by its
own verification and that answer.

Targets (issue 19), for CG W: every protocol at most 1.5x the bare run, at most 512 MiB
of peak object store above the bare run, and no failure reported. The command exits 1
when a run failed to verify or reported a failure (performance is printed, not judged).
"""
from __future__ import annotations

import threading

import ftactors as ft
from ftactors.tools.apps_cli import protocol_stack, stack_names
from ftactors.tools.programs import (add_program_arguments, is_reference, literal, parse_kwargs,
                                     program_from_args, resolve)
from ftactors.tools.run_metrics import failure_metrics

from ._harness import add_repetitions, usage_error, write_results

MIB = 1 << 20
APPS = {"cg": {"problem_class": "W"},
        "stencil": {"ny": 768, "nx": 768, "iterations": 60},
        "coupled": {"ny": 384, "nx": 768, "iterations": 60, "couple_every": 5}}
QUICK = {"cg": {"problem_class": "S"},
         "stencil": {"ny": 128, "nx": 128, "iterations": 30},
         "coupled": {"ny": 64, "nx": 128, "iterations": 30, "couple_every": 5}}
PROTOCOLS = ("standby", "ready-flush", "groups", "rs", "hc3i")
TARGET_RATIO, TARGET_STORE = 1.5, 512 * MIB


def protocol_options(protocol: str, every: int, clc_interval_s: float) -> dict:
    """``ft.run`` options that make ``protocol`` (a name or a stack, ``rs+standby``: each
    of its levels) checkpoint every ``every`` iterations."""
    each = {"standby": {"backup_interval": every},
            "ready-flush": {"checkpoint_interval": every},
            "groups": {"group_checkpoint_interval": every},
            "rs": {"rs_interval": every},
            "hc3i": {"clc_interval_s": clc_interval_s}}
    return {k: v for name in stack_names(protocol) for k, v in each[name].items()}


def add_arguments(parser) -> None:
    parser.add_argument("--apps", default=",".join(APPS),
                        help="apps to run (cg,stencil,coupled), or programs "
                             "(path/to/file.py:Class, package.module:Class)")
    add_program_arguments(parser)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="protocols or stacks (rs+standby), comma-separated")
    parser.add_argument("--ranks", type=int, default=4)
    add_repetitions(parser, 3, "runs per configuration, interleaved; wall is their median")
    parser.add_argument("--every", type=int, default=3, help="iterations between checkpoints")
    parser.add_argument("--clc-interval-s", type=float, default=2.0,
                        help="DDVPiggyback's unforced CLC interval")
    parser.add_argument("--sample-s", type=float, default=0.5,
                        help="object-store sampling period")
    parser.add_argument("--transport", default="ray", choices=("ray", "local", "sim"))
    parser.add_argument("--quick", action="store_true", help="small problems (CG class S)")


class StorePeak:
    """The largest object-store usage seen while it runs (Ray only; 0 elsewhere)."""

    def __init__(self, transport: str, period_s: float):
        self.period_s = period_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = None
        self._read = _store_reader() if transport == "ray" else None

    def __enter__(self):
        if self._read is not None:
            self.peak = self._read()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.period_s):
            self.peak = max(self.peak, self._read())

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.peak = max(self.peak, self._read())


def _store_reader():
    """A function returning the bytes Ray's object store holds now (the GCS's figure)."""
    import ray
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    from ftactors.transports.ray import ensure_ray
    ensure_ray()
    address = ray.get_runtime_context().gcs_address
    return lambda: get_memory_info_reply(
        get_state_from_address(address)).store_stats.object_store_bytes_used


def measure(program, protocol: str | None, args, reference=None) -> dict:
    """One run of ``program`` (``programs.Program``) under ``protocol`` (None: bare) and
    its footprint; verified against ``reference`` (the bare run's answer; None: this is
    the bare run, judged against itself). The row's ``answer`` is what is compared."""
    options = {} if protocol is None else protocol_options(protocol, args.every,
                                                           args.clc_interval_s)
    cls = protocol_stack(program.cls, protocol)
    if args.transport == "ray":  # every run starts its processes, as the first one does:
        options["reuse_processes"] = False  # else the bare run first pays it alone
    with StorePeak(args.transport, args.sample_s) as store:
        r = ft.run(cls, args.ranks, transport=args.transport, args=program.args,
                   kwargs=program.kwargs, timeout_s=1800, **options)
    answer = program.answer(r)
    verified = program.judge(answer, answer[1] if reference is None else reference).ok
    commits = r.events_of("hc3i_commit")
    return {"app": program.name, "protocol": protocol or "none", "verified": bool(verified),
            "wall_s": r.metrics["wall_s"], "peak_store_bytes": store.peak,
            "checkpoints": failure_metrics(r.events)["checkpoints"] if not commits
            else len(commits),
            "forced": sum(1 for e in commits if e.detail["forced"]),
            "logged_bytes": r.metrics["logged_bytes"],
            "failures": r.metrics["failures"] + len(r.events_of("hang_detected")),
            "failure_reasons": [e.detail.get("reason", e.kind) for e in r.events
                                if e.kind in ("failure_detected", "hang_detected")],
            "storms": len(r.events_of("hc3i_storm")), "answer": answer[1]}


def _program(app: str, args):
    """The program ``--apps`` names with ``--arg``/``--kwarg``/``--check``: a reference,
    or a shipped app on its problem (``--kwarg`` changes it)."""
    if is_reference(app):
        return program_from_args(app, args)
    problems = QUICK if args.quick else APPS
    if app not in problems:
        raise ValueError(f"no footprint problem for app {app!r}: {', '.join(problems)}, or "
                         f"a program (path/to/file.py:Class, package.module:Class)")
    return resolve(app, [literal(a) for a in args.arg],
                   {**problems[app], **parse_kwargs(args.kwarg)}, args.check)


def combine(runs: list[dict]) -> dict:
    """One row from the repeats of a configuration: the median wall time, the largest
    peak store, every failure, and the counts of the median run."""
    runs = sorted(runs, key=lambda r: r["wall_s"])
    row = dict(runs[len(runs) // 2])
    row.pop("answer")  # compared already (``measure``); not a figure
    row["wall_runs_s"] = [r["wall_s"] for r in runs]
    row["peak_store_bytes"] = max(r["peak_store_bytes"] for r in runs)
    row["failures"] = sum(r["failures"] for r in runs)
    row["failure_reasons"] = [x for r in runs for x in r["failure_reasons"]]
    row["storms"] = sum(r["storms"] for r in runs)
    row["verified"] = all(r["verified"] for r in runs)
    return row


def main(args) -> int:
    apps = [a for a in args.apps.split(",") if a]
    protocols = [p for p in args.protocols.split(",") if p]
    if args.repetitions < 1:
        return usage_error("footprint", "--repetitions must be >= 1")
    try:
        for p in protocols:
            protocol_stack(ft.Rank, p)
        programs = [_program(app, args) for app in apps]
    except ValueError as exc:  # an unknown name, a refused stack, a bad program
        return usage_error("footprint", str(exc))
    print(f"bench footprint: {', '.join(apps)} on {args.ranks} ranks ({args.transport}), "
          f"a checkpoint every {args.every} iterations (hc3i: a CLC every "
          f"{args.clc_interval_s:g} s), no failures, {args.repetitions} repetition(s)", flush=True)
    rows = []
    for program in programs:
        app, reference = program.name, None
        runs: dict = {p: [] for p in [None, *protocols]}
        for k in range(args.repetitions):  # interleaved: the machine's load hits all alike
            for p in runs:  # the bare run first: its answer is the reference
                runs[p].append(measure(program, p, args, reference))
                reference = runs[None][0]["answer"]
                print(f"  {app} {p or 'none'} #{k + 1}: {runs[p][-1]['wall_s']:.1f} s",
                      flush=True)
        bare = combine(runs[None])
        for p, got in runs.items():
            row = bare if p is None else combine(got)
            row["ratio"] = row["wall_s"] / bare["wall_s"]
            row["store_above_bare"] = row["peak_store_bytes"] - bare["peak_store_bytes"]
            rows.append(row)
    w = max(12, *(len(r["protocol"]) for r in rows))
    a = max(8, *(len(r["app"]) for r in rows))
    print(f"\n  {'app':{a}s} {'protocol':{w}s} {'wall s':>8s} {'x bare':>7s} {'peak store':>11s} "
          f"{'above bare':>11s} {'ckpts':>6s} {'forced':>7s} {'logged':>10s} {'failures':>8s} "
          f"{'ok':>3s}")
    for r in rows:
        print(f"  {r['app']:{a}s} {r['protocol']:{w}s} {r['wall_s']:8.2f} {r['ratio']:7.2f} "
              f"{r['peak_store_bytes'] / MIB:8.1f} MiB {r['store_above_bare'] / MIB:7.1f} MiB "
              f"{r['checkpoints']:6d} {r['forced']:7d} {r['logged_bytes'] / MIB:6.1f} MiB "
              f"{r['failures']:8d} {'yes' if r['verified'] else 'NO':>3s}")
    for r in rows:
        for reason in sorted(set(r["failure_reasons"])):
            print(f"  {r['app']} {r['protocol']}: failure reported with nothing killed: "
                  f"{reason} (x{r['failure_reasons'].count(reason)})")
    cg = [r for r in rows if r["app"] == "cg" and r["protocol"] != "none"]
    targets = {
        "cg_wall_le_1.5x_bare": bool(cg) and all(r["ratio"] <= TARGET_RATIO for r in cg),
        "cg_store_le_512MiB_above_bare": bool(cg) and all(
            r["store_above_bare"] <= TARGET_STORE for r in cg),
        "no_failure_reported": all(r["failures"] == 0 for r in rows),
        "all_verified": all(r["verified"] for r in rows),
    }
    print()
    for name, ok in targets.items():
        print(f"  target {name}: {'met' if ok else 'NOT met'}")
    write_results(args, "footprint", {
        "ranks": args.ranks, "transport": args.transport, "every": args.every,
        "clc_interval_s": args.clc_interval_s, "quick": args.quick,
        "repetitions": args.repetitions, "rows": rows, "targets": targets})
    # the figures are reported, not asserted (a shared machine); a wrong answer or a
    # failure reported with nothing killed is an error
    return 0 if targets["no_failure_reported"] and targets["all_verified"] else 1
