"""``ftactors report RESULTS_DIR``: PNG plots and an HTML page from a chaos experiment.

Theory of operation
-------------------
``ftactors chaos`` leaves a results directory: ``results.parquet`` (one row per run) and
``events/<run_id>.parquet`` (each run's timeline: ``time``, ``kind``, ``rank``, ``detail``).
The report reads both and writes, into ``RESULTS_DIR/report/`` (or ``--out``):

* ``timeline-<run_id>.png``: ranks by time for every run that did not verify and the first
  ``--max-timelines`` of the others. Each rank's lives (start to finish or kill), its
  checkpoints as ticks (a coordinator's checkpoint ticks every rank), kills as red crosses,
  detections, recovery rounds shaded from ``recovery_start`` to ``recovery_end`` with the
  round's phases as dotted lines;
* ``verified.png``: the verified fraction per protocol and failure schedule;
* ``recovery.png``: detection and recovery times per protocol, each run a dot, and the mean
  recovery phases stacked;
* ``overhead.png``: wall time over the failure-free bare app against the checkpoint
  interval, a series per protocol and app (skipped, with a note, when no run has an
  interval);
* ``index.html``: one page with no outside resources: the runs table coloured by outcome,
  the replay command of every run that did not verify, notes, and the images.

Every picture goes through two steps: a pure function turns rows or events into plot
primitives (``timeline_marks``, ``overhead_series``, ``recovery_samples``, ``phase_means``,
``verified_cells``), which the tests assert on, and a thin ``draw_*`` puts those on an Agg
canvas (never pyplot: no window, and the caller's matplotlib state stays untouched).

A results directory that cannot be read (no ``results.parquet``, not Parquet, missing
columns, values of the wrong type, no runs) raises :class:`ReportError` (exit code 2). A
run whose event file is missing or unreadable is still listed, without a timeline, and the
page says why. Directories may be pyarrow filesystem URIs (``s3://...``, ``file://...``).
"""
from __future__ import annotations

import html
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..base._storage import open_filesystem
from .chaos import EVENT_SCHEMA
from .run_metrics import CHECKPOINT_KINDS

__all__ = ["ReportError", "Report", "Timeline", "Mark", "Life", "Span", "build_report",
           "read_results", "read_events", "timeline_marks", "overhead_series",
           "recovery_samples", "phase_means", "protocol_stacks", "verified_cells", "timeline_runs",
           "write_report", "add_report"]

# The columns the report reads, with the types of the chaos interface; others are ignored.
RESULT_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("app", pa.string()), ("protocol", pa.string()),
    ("schedule", pa.string()), ("ranks", pa.int64()), ("seed", pa.int64()),
    ("outcome", pa.string()), ("verified", pa.bool_()), ("wall_s", pa.float64()),
    ("overhead", pa.float64()), ("interval", pa.float64()), ("interval_unit", pa.string()),
    ("detect_s", pa.float64()), ("recover_s", pa.float64()), ("phases_json", pa.string()),
    ("replay", pa.string()), ("events_path", pa.string()),
])
# Shown in the runs table when present (in this order, after the required ones).
OPTIONAL_COLUMNS = ("experiment", "transport", "cluster", "identical", "error",
                    "baseline_wall_s", "kills", "failures", "recoveries", "checkpoints",
                    "lost_work_s")
DETECTION_KINDS = ("failure_detected", "hang_detected")
COMPLETED = ("verified", "wrong")  # outcomes of runs that ran to the end
COORDINATOR = -1


class ReportError(ValueError):
    """The results directory cannot be reported on; the message says why."""


# ------------------------------------------------------------------------------ files
def _fs(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it, for a local path or a pyarrow URI."""
    try:
        return open_filesystem(path, "directory")
    except ValueError as exc:
        raise ReportError(str(exc)) from exc


def _join(base: str, rel: str) -> str:
    return rel if rel.startswith("/") else f"{base.rstrip('/')}/{rel}"


def _read_parquet(fs: pafs.FileSystem, path: str, what: str) -> pa.Table:
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise ReportError(f"{what} {path!r} does not exist")
    if info.type != pafs.FileType.File:
        raise ReportError(f"{what} {path!r} is not a file")
    if info.size == 0:
        raise ReportError(f"{what} {path!r} is empty")
    try:
        return pq.read_table(path, filesystem=fs)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ReportError(f"{what} {path!r} is not a readable Parquet file: "
                          f"{_first_line(exc)}") from exc


def _conform(table: pa.Table, schema: pa.Schema, what: str, keep=()) -> pa.Table:
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise ReportError(f"{what} lacks column(s): {', '.join(missing)} (written by an "
                          f"older or other tool than ftactors chaos?)")
    try:
        conformed = table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ReportError(f"{what} has columns of the wrong type: {_first_line(exc)}") from exc
    for name in keep:
        if name in table.column_names and name not in schema.names:
            conformed = conformed.append_column(name, table[name])
    return conformed


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_results(results_dir: str) -> list[dict]:
    """The runs of ``results_dir/results.parquet``, one dict per row, in file order.

    Raises:
        ReportError: no such directory or file, not Parquet, missing or mistyped
            columns (named), no runs.
    """
    fs, base = _fs(results_dir)
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise ReportError(f"results directory {results_dir!r} does not exist")
    if info.type != pafs.FileType.Directory:
        raise ReportError(f"{results_dir!r} is not a directory (give the directory that "
                          f"holds results.parquet)")
    table = _read_parquet(fs, _join(base, "results.parquet"), "results file")
    table = _conform(table, RESULT_SCHEMA, f"results file in {results_dir!r}",
                     keep=OPTIONAL_COLUMNS)
    rows = table.to_pylist()
    if not rows:
        raise ReportError(f"results file in {results_dir!r} has no runs")
    ids = [r["run_id"] for r in rows]
    if None in ids or len(set(ids)) != len(ids):
        raise ReportError(f"results file in {results_dir!r} has missing or repeated run_id "
                          f"values")
    return rows


def read_events(results_dir: str, events_path: str) -> list[dict]:
    """One run's events (``time``, ``kind``, ``rank``, ``detail`` as a dict), by time.

    Raises:
        ReportError: the file is missing, unreadable or lacks event columns.
    """
    fs, base = _fs(results_dir)
    if not events_path:
        raise ReportError("the run names no event file")
    table = _read_parquet(fs, _join(base, events_path), "event file")
    table = _conform(table, EVENT_SCHEMA, f"event file {events_path!r}")
    events = []
    for ev in table.to_pylist():
        if ev["time"] is None or ev["kind"] is None or not math.isfinite(ev["time"]):
            continue
        ev["rank"] = COORDINATOR if ev["rank"] is None else ev["rank"]
        ev["detail"] = _detail(ev["detail"])
        events.append(ev)
    events.sort(key=lambda ev: ev["time"])  # stable: equal times keep the file's order
    return events


def _detail(text) -> dict:
    if isinstance(text, dict):
        return text
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# ------------------------------------------------------------------- timeline marks
@dataclass(frozen=True)
class Mark:
    """A point on the timeline: ``kind`` at ``time`` on ``rank``."""

    time: float
    rank: int
    kind: str


@dataclass(frozen=True)
class Life:
    """One life of a rank: from ``start`` to ``end``, which was ``"finish"``,
    ``"killed"``, ``"replaced"`` (a new life began without a kill seen) or ``"open"``
    (still running at the last event). ``started`` is False when no start event was
    seen (the rank died with its own log; the life is drawn from the run's start)."""

    rank: int
    start: float
    end: float
    ended_by: str
    started: bool = True


@dataclass(frozen=True)
class Span:
    """A recovery round from ``start`` to ``end``; ``finished`` is False when it had no
    ``recovery_end`` (a failure restarted it, or the run ended in it)."""

    start: float
    end: float
    round: int | None
    finished: bool


@dataclass(frozen=True)
class Timeline:
    """Everything a timeline picture shows, in seconds since the run's first event."""

    nranks: int
    t_end: float
    lives: tuple[Life, ...]
    checkpoints: tuple[Mark, ...]
    kills: tuple[Mark, ...]
    detections: tuple[Mark, ...]
    recoveries: tuple[Span, ...]
    phases: tuple[Mark, ...]  # rank is COORDINATOR, kind the phase name
    starts: tuple[Mark, ...] = ()
    finishes: tuple[Mark, ...] = ()


def timeline_marks(events: Iterable[dict], ranks: int) -> Timeline:
    """Turn a run's events into timeline primitives (pure: no drawing).

    Args:
        events: dicts with ``time``, ``kind``, ``rank`` (-1 = coordinator) and
            ``detail`` (a dict), in time order.
        ranks: the run's rank count (lanes 0..ranks-1; more if events name higher ranks).
    """
    events = [ev for ev in events if ev["time"] is not None]
    t_end = max((ev["time"] for ev in events), default=0.0)
    nranks = max([ranks, *(ev["rank"] + 1 for ev in events if ev["rank"] is not None)])
    all_ranks = range(nranks)
    checkpoints, kills, detections, phases, starts, finishes = [], [], [], [], [], []
    recoveries: list[Span] = []
    open_round: tuple[float, int | None] | None = None
    for ev in events:
        t, kind, rank, detail = ev["time"], ev["kind"], ev["rank"], ev["detail"]
        if kind in CHECKPOINT_KINDS:
            on = _ranks_of(detail, all_ranks) if rank == COORDINATOR else [rank]
            checkpoints += [Mark(t, r, kind) for r in on]
        elif kind == "killed" and rank >= 0:  # a SIGSTOP hangs the rank, it does not die
            kills.append(Mark(t, rank, "stopped" if detail.get("how") == "sigstop" else kind))
        elif kind in DETECTION_KINDS and rank >= 0:
            detections.append(Mark(t, rank, kind))
        elif kind == "start" and rank >= 0:
            starts.append(Mark(t, rank, kind))
        elif kind == "finish" and rank >= 0:
            finishes.append(Mark(t, rank, kind))
        elif kind == "recovery_start":
            if open_round is not None:  # restarted with the new failure: a new round
                recoveries.append(Span(open_round[0], t, open_round[1], False))
            open_round = (t, detail.get("round"))
        elif kind == "recovery_end":
            if open_round is not None:
                recoveries.append(Span(open_round[0], t, open_round[1], True))
                open_round = None
        elif kind == "recovery_phase" and detail.get("phase") not in (None, "start"):
            phases.append(Mark(t, COORDINATOR, str(detail["phase"])))
    if open_round is not None:
        recoveries.append(Span(open_round[0], t_end, open_round[1], False))
    lives = _lives(events, nranks, t_end)
    return Timeline(nranks, t_end, tuple(lives), tuple(checkpoints), tuple(kills),
                    tuple(detections), tuple(recoveries), tuple(phases), tuple(starts),
                    tuple(finishes))


def _ranks_of(detail: dict, all_ranks: range) -> list[int]:
    """The ranks a coordinator event concerns: its ``ranks``/``members`` list, else all."""
    for key in ("ranks", "members"):
        value = detail.get(key)
        if isinstance(value, list) and value and all(isinstance(r, int) for r in value):
            return [r for r in value if r in all_ranks]
    return list(all_ranks)


def _lives(events: list[dict], nranks: int, t_end: float) -> list[Life]:
    """Each rank's lives: a start opens one, a kill or finish closes it."""
    lives: list[Life] = []
    t0 = min((ev["time"] for ev in events), default=0.0)
    for rank in range(nranks):
        current: tuple[float, bool] | None = None  # (start, started)
        seen = False
        for ev in events:
            if ev["rank"] != rank or ev["kind"] not in ("start", "killed", "finish"):
                continue
            kind, t = ev["kind"], ev["time"]
            if kind == "start":
                if current is not None:
                    lives.append(Life(rank, current[0], t, "replaced", current[1]))
                current = (t, True)
            else:
                if current is None and not seen:  # its start went down with it
                    current = (t0, False)
                if current is not None:
                    lives.append(Life(rank, current[0], t, kind, current[1]))
                current = None
            seen = True
        if current is not None:
            lives.append(Life(rank, current[0], t_end, "open", current[1]))
    return lives


# -------------------------------------------------------------- the summary plots' data
def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def protocol_stacks(experiment_yaml: str | None) -> dict[str, str]:
    """``{protocols: key: stack name}`` from an experiment file (``rf-k2: {protocol:
    ready-flush, ...}`` gives ``ready-flush``; a list stack is joined with ``+``), so
    entries that differ only in their interval make one overhead series. Empty when the
    text is missing or not such a file."""
    import yaml
    try:
        data = yaml.safe_load(experiment_yaml or "")
    except yaml.YAMLError:
        return {}
    protocols = data.get("protocols") if isinstance(data, dict) else None
    if not isinstance(protocols, dict):
        return {}
    out = {}
    for key, entry in protocols.items():
        names = entry.get("protocol", key) if isinstance(entry, dict) else key
        out[str(key)] = "+".join(map(str, names)) if isinstance(names, list) else str(names)
    return out


def overhead_series(rows: list[dict], stacks: dict[str, str] | None = None,
                    ) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``{interval unit: {series label: [(interval, overhead), ...]}}`` for the runs that
    ran to the end (verified or wrong) with an interval and an overhead, sorted by
    interval. Series are per protocol stack (``stacks`` maps a row's protocol key to its
    stack; by default the key is the name), and per app when there are several apps."""
    stacks = stacks or {}
    usable = [r for r in rows if r["outcome"] in COMPLETED and _is_number(r["interval"])
              and _is_number(r["overhead"])]
    several_apps = len({r["app"] for r in usable}) > 1
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in usable:
        stack = stacks.get(r["protocol"], r["protocol"])
        label = f"{stack} / {r['app']}" if several_apps else stack
        unit = r["interval_unit"] or "(no unit)"
        out.setdefault(unit, {}).setdefault(label, []).append((r["interval"], r["overhead"]))
    for series in out.values():
        for points in series.values():
            points.sort()
    return out


def recovery_samples(rows: list[dict]) -> dict[str, dict[str, list[float]]]:
    """``{protocol: {"detect_s": [...], "recover_s": [...]}}``, one value per run that has
    one, protocols in first-seen order (every protocol listed, maybe with no values)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        per = out.setdefault(r["protocol"], {"detect_s": [], "recover_s": []})
        for key in ("detect_s", "recover_s"):
            if _is_number(r[key]):
                per[key].append(float(r[key]))
    return out


def phase_means(rows: list[dict]) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The phases in first-seen order and ``{protocol: {phase: mean seconds}}``, the mean
    over that protocol's runs with any phase time (a phase absent from such a run counts
    as 0 there). Unparseable ``phases_json`` values are skipped."""
    order: list[str] = []
    per_protocol: dict[str, list[dict[str, float]]] = {}
    for r in rows:
        try:
            phases = json.loads(r["phases_json"] or "{}")
        except (TypeError, ValueError):
            continue
        if not isinstance(phases, dict):
            continue
        phases = {str(k): float(v) for k, v in phases.items() if _is_number(v)}
        if not phases:
            continue
        for name in phases:
            if name not in order:
                order.append(name)
        per_protocol.setdefault(r["protocol"], []).append(phases)
    means = {p: {name: sum(run.get(name, 0.0) for run in runs) / len(runs) for name in order}
             for p, runs in per_protocol.items()}
    return order, means


def verified_cells(rows: list[dict],
                   ) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[int, int]]]:
    """Protocols, schedules (first-seen order) and ``{(protocol, schedule): (verified,
    runs)}``."""
    protocols, schedules, cells = [], [], {}
    for r in rows:
        p, s = r["protocol"], r["schedule"]
        if p not in protocols:
            protocols.append(p)
        if s not in schedules:
            schedules.append(s)
        ok, n = cells.get((p, s), (0, 0))
        cells[(p, s)] = (ok + bool(r["verified"]), n + 1)
    return protocols, schedules, cells


def timeline_runs(rows: list[dict], max_timelines: int) -> list[dict]:
    """Every run that did not verify, and the first ``max_timelines`` of the others, in
    results order."""
    picked, others = [], 0
    for r in rows:
        if not r["verified"]:
            picked.append(r)
        elif others < max_timelines:
            picked.append(r)
            others += 1
    return picked


# --------------------------------------------------------------------------- drawing
_CHECKPOINT_COLORS = {"checkpoint": "#1f4e9c", "backup": "#3b82c4",
                      "group_checkpoint": "#128a84", "rs_checkpoint": "#7b4fb0",
                      "hc3i_initiate": "#2a9d4b"}
_CHECKPOINT_LABELS = {"checkpoint": "checkpoint (all ranks)", "backup": "backup",
                      "group_checkpoint": "group checkpoint", "rs_checkpoint": "RS checkpoint",
                      "hc3i_initiate": "HC3I checkpoint initiated"}
_OUTCOME_COLORS = {"verified": "#d9f2d9", "wrong": "#f8d0d0", "failed": "#fde2c4",
                   "timeout": "#e6dcf5", "error": "#e0e0e0"}


def _time_unit(span_s: float) -> tuple[float, str]:
    """A scale factor and unit that keep axis numbers readable for this span."""
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if span_s * scale >= 1.0:
            return scale, unit
    return 1e6, "µs"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def draw_timeline(tl: Timeline, path: str, title: str, *, bad: bool = False) -> None:
    """Draw a :class:`Timeline` (ranks down, time across) into a PNG."""
    fig = _new_figure(11.5, float(np.clip(1.9 + 0.42 * tl.nranks, 3.4, 14)))
    ax = fig.add_subplot()
    scale, unit = _time_unit(tl.t_end)
    x_max = max(tl.t_end * scale, 1e-9)
    min_w = x_max * 0.004  # a zero-length recovery round (sim) stays visible
    handles = []
    # recovery rounds, full height, under everything
    for span in tl.recoveries:
        x0, x1 = span.start * scale, span.end * scale
        ax.axvspan(x0, max(x1, x0 + min_w), color="#f2b134", alpha=0.3, linewidth=0,
                   zorder=0)
    if tl.recoveries:
        handles.append(Patch(color="#f2b134", alpha=0.3, label="recovery round"))
    for m in tl.phases:
        ax.axvline(m.time * scale, color="#b8860b", linestyle=":", linewidth=1, zorder=1)
    if tl.phases:
        handles.append(Line2D([], [], color="#b8860b", linestyle=":",
                              label="recovery phase boundary"))
    # lives
    for life in tl.lives:
        ax.hlines(life.rank, life.start * scale, life.end * scale, color="0.45",
                  linewidth=2.2, linestyle="-" if life.started else "--", zorder=2)
    if tl.lives:
        handles.append(Line2D([], [], color="0.45", linewidth=2.2, label="rank running"))
    if any(not life.started for life in tl.lives):
        handles.append(Line2D([], [], color="0.45", linewidth=2.2, linestyle="--",
                              label="running (start not logged)"))
    unfinished = [life for life in tl.lives if life.ended_by == "open"]
    if unfinished:
        ax.scatter([life.end * scale for life in unfinished], [life.rank for life in unfinished],
                   marker="|", s=160, linewidths=2.2, color="0.2", zorder=4)
        handles.append(Line2D([], [], color="0.2", marker="|", linestyle="none",
                              markersize=12, markeredgewidth=2.2,
                              label="stopped without finishing"))
    # checkpoint ticks, one colour per kind
    for kind in CHECKPOINT_KINDS:
        marks = [m for m in tl.checkpoints if m.kind == kind]
        if not marks:
            continue
        xs = np.array([m.time for m in marks]) * scale
        ys = np.array([m.rank for m in marks])
        ax.vlines(xs, ys - 0.3, ys + 0.3, color=_CHECKPOINT_COLORS[kind], linewidth=1.3,
                  zorder=3)
        handles.append(Line2D([], [], color=_CHECKPOINT_COLORS[kind], marker="|",
                              linestyle="none", markersize=11, markeredgewidth=1.6,
                              label=_CHECKPOINT_LABELS[kind]))
    point_styles = (
        (tl.starts, "start", dict(marker=">", color="#2e8b57", s=36, offset=0.0)),
        (tl.finishes, "finish", dict(marker="s", color="black", s=26, offset=0.0)),
        ([m for m in tl.detections if m.kind == "failure_detected"], "failure detected",
         dict(marker="v", color="#e67e00", s=70, offset=-0.32)),
        ([m for m in tl.detections if m.kind == "hang_detected"], "hang detected",
         dict(marker="D", color="#8e44ad", s=50, offset=0.32)),
        ([m for m in tl.kills if m.kind == "killed"], "killed",
         dict(marker="X", color="#d62728", s=150, offset=0.0)),
        ([m for m in tl.kills if m.kind == "stopped"], "stopped (SIGSTOP: hangs)",
         dict(marker="X", color="white", edge="#d62728", s=150, offset=0.0)),
    )
    for z, (marks, label, style) in enumerate(point_styles):
        if not marks:
            continue
        offset = style.pop("offset")
        edge = style.pop("edge", "white" if label == "killed" else "none")
        ax.scatter([m.time * scale for m in marks], [m.rank + offset for m in marks],
                   zorder=5 + z, edgecolors=edge, linewidths=1.6 if edge != "white" else 0.8,
                   label=label, **style)
        handles.append(Line2D([], [], marker=style["marker"], color=style["color"],
                              markeredgecolor=edge if edge not in ("white", "none") else None,
                              markeredgewidth=1.4, linestyle="none",
                              markersize=9 if "X" == style["marker"] else 7, label=label))
    ax.set_ylim(tl.nranks - 0.4, -0.75)
    step = max(1, int(np.ceil(tl.nranks / 24)))
    ax.set_yticks(range(0, tl.nranks, step))
    for rank in range(tl.nranks):
        ax.axhline(rank, color="0.92", linewidth=0.6, zorder=0)
    ax.set_xlim(-0.02 * x_max, 1.02 * x_max)
    ax.set_ylabel("rank")
    ax.set_xlabel(f"time since the run's first event ({unit})")
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  fontsize="small", frameon=False, borderaxespad=0)
    ax.set_title(title, fontsize="medium", color="#b00020" if bad else "black", loc="left")
    fig.tight_layout()
    fig.savefig(path)


def draw_overhead(series: dict[str, dict[str, list[tuple[float, float]]]], path: str) -> None:
    """Overhead against checkpoint interval: one panel per interval unit, each run a
    dot, each series' mean per interval a line."""
    units = list(series)
    fig = _new_figure(6.2 * len(units) + 2.8, 4.6)
    axes = fig.subplots(1, len(units), squeeze=False)[0]
    for ax, unit in zip(axes, units):
        for i, (label, points) in enumerate(sorted(series[unit].items())):
            color = f"C{i % 10}"
            xs = np.array([p[0] for p in points])
            ys = np.array([p[1] for p in points])
            ax.scatter(xs, ys, color=color, alpha=0.45, s=22, edgecolors="none")
            grid = np.unique(xs)
            ax.plot(grid, [ys[xs == x].mean() for x in grid], color=color, marker="o",
                    markersize=5, linewidth=1.6, label=f"{label} ({_runs(len(points))})")
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        if unit == "iterations":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"checkpoint interval ({unit})")
        ax.set_ylabel("overhead (wall time / failure-free bare app)")
        ax.grid(alpha=0.3)
        ax.set_title(f"overhead vs checkpoint interval ({unit})", fontsize="medium")
        ax.margins(x=0.08, y=0.12)
    handles, labels = axes[-1].get_legend_handles_labels()
    for ax in axes[:-1]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    handles.append(Line2D([], [], color="0.4", linestyle="--", label="1 = no overhead"))
    labels.append("1 = no overhead")
    axes[-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    fontsize="small", frameon=False, borderaxespad=0,
                    title="mean of runs (dots: each run)", title_fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def draw_recovery(samples: dict[str, dict[str, list[float]]], phase_order: list[str],
                  means: dict[str, dict[str, float]], path: str) -> None:
    """Detection and recovery time per protocol (each run a dot over a box) and the mean
    recovery phases stacked, protocols down the side."""
    protocols = list(samples)
    values = [v for per in samples.values() for key in per for v in per[key]]
    values += [v for per in means.values() for v in per.values()]
    scale, unit = _time_unit(max(values, default=1.0))
    panels = [("detect_s", "detection time\n(kill -> failure detected)"),
              ("recover_s", "recovery time\n(recovery start -> end)")]
    with_phases = bool(phase_order)
    fig = _new_figure(13 if with_phases else 9.5, float(np.clip(2.2 + 0.5 * len(protocols),
                                                                3.6, 12)))
    axes = fig.subplots(1, 3 if with_phases else 2, sharey=True)
    rng = np.random.default_rng(0)
    ys = np.arange(len(protocols))
    for ax, (key, title) in zip(axes, panels):
        for y, p in zip(ys, protocols):
            vals = np.array(samples[p][key]) * scale
            if len(vals) == 0:
                ax.text(0.02, y, "no data", transform=ax.get_yaxis_transform(),
                        va="center", ha="left", fontsize="small", color="0.5")
                continue
            if len(vals) >= 3:
                ax.boxplot(vals, positions=[y], vert=False, widths=0.5, showfliers=False,
                           manage_ticks=False, medianprops={"color": "black"},
                           boxprops={"color": "0.5"}, whiskerprops={"color": "0.5"},
                           capprops={"color": "0.5"})
            ax.scatter(vals, y + rng.uniform(-0.15, 0.15, len(vals)), s=20, alpha=0.7,
                       color="#3b82c4", edgecolors="none", zorder=3)
        top = max((v for p in protocols for v in samples[p][key]), default=0.0) * scale
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(f"time ({unit})")
        ax.set_xlim(-0.03 * (top or 1.0), top * 1.1 if top > 0 else 1.0)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels([f"{p}\n({len(samples[p]['recover_s'])} recovered)"
                             for p in protocols])
    axes[0].set_ylim(len(protocols) - 0.5, -0.5)
    axes[0].set_ylabel("protocol")
    if with_phases:
        ax = axes[2]
        left = np.zeros(len(protocols))
        for i, name in enumerate(phase_order):
            widths = np.array([means.get(p, {}).get(name, 0.0) for p in protocols]) * scale
            ax.barh(ys, widths, left=left, height=0.5, color=f"C{i % 10}", label=name)
            left += widths
        for y, p in zip(ys, protocols):
            if p not in means:
                ax.text(0.02, y, "no phases", transform=ax.get_yaxis_transform(),
                        va="center", ha="left", fontsize="small", color="0.5")
        ax.set_title("time per phase, mean of runs\n(summed over a run's recoveries)",
                     fontsize="medium")
        ax.set_xlabel(f"time ({unit})")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small",
                  frameon=False, title="phase", borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path)


def draw_verified(protocols: list[str], schedules: list[str],
                  cells: dict[tuple[str, str], tuple[int, int]], path: str) -> None:
    """A protocol x schedule grid coloured by verified fraction, each cell 'k/n'."""
    grid = np.full((len(protocols), len(schedules)), np.nan)
    for (p, s), (ok, n) in cells.items():
        grid[protocols.index(p), schedules.index(s)] = ok / n
    width = float(np.clip(3.5 + 1.25 * len(schedules), 5.5, 16))
    height = float(np.clip(1.8 + 0.55 * len(protocols), 3.0, 12))
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    cmap = LinearSegmentedColormap.from_list(
        "verified", ["#d62728", "#f2d04a", "#2ca02c"]).with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    for (p, s), (ok, n) in cells.items():
        ax.text(schedules.index(s), protocols.index(p), f"{ok}/{n}", ha="center",
                va="center", fontsize="medium", fontweight="bold")
    ax.set_xticks(range(len(schedules)))
    ax.set_xticklabels(schedules, rotation=30 if len(schedules) > 4 else 0,
                       ha="right" if len(schedules) > 4 else "center")
    ax.set_yticks(range(len(protocols)))
    ax.set_yticklabels(protocols)
    ax.set_xlabel("failure schedule")
    ax.set_ylabel("protocol")
    ax.set_title("verified runs (verified / runs) per protocol and schedule",
                 fontsize="medium")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    bar.set_label("verified fraction")
    fig.tight_layout()
    fig.savefig(path)


# ------------------------------------------------------------------------------ page
@dataclass
class Report:
    """What :func:`build_report` wrote: the page, the images and the notes on it."""

    out_dir: str
    html: str
    images: list[str] = field(default_factory=list)
    timelines: dict[str, str] = field(default_factory=dict)  # run_id -> image file
    notes: list[str] = field(default_factory=list)


_TABLE_COLUMNS = ("run_id", "app", "protocol", "schedule", "ranks", "seed", "outcome",
                  "verified", "identical", "wall_s", "overhead", "interval", "kills",
                  "failures", "recoveries", "checkpoints", "lost_work_s", "detect_s",
                  "recover_s", "error")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.4g}"
    return str(value)


_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.text { text-align: left; }
td.ok { background: #9ee09e; } td.bad { background: #f08a8a; }
pre { background: #f6f6f6; padding: 6px; overflow-x: auto; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #8a5300; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #444; }
"""


def render_html(rows: list[dict], report: Report, *, title: str,
                sections: list[tuple[str, str | None, str]], experiment_yaml: str | None) -> str:
    """The page: summary, notes, runs table, replay commands, images.

    ``sections`` are (heading, image file or None, text under it)."""
    e = html.escape
    n_ok = sum(bool(r["verified"]) for r in rows)
    bad = [r for r in rows if not r["verified"]]
    columns = [c for c in _TABLE_COLUMNS if c in rows[0]]
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1>",
           f"<p>{len(rows)} runs: <b>{n_ok} verified</b>, <b>{len(bad)} not verified</b>. "
           f"Rows are coloured by outcome; the verified cell is green or red.</p>"]
    if report.notes:
        out.append("<h2>Notes</h2><ul>")
        out += [f"<li class='note'>{e(note)}</li>" for note in report.notes]
        out.append("</ul>")
    out.append("<h2>Runs</h2><table><tr>" + "".join(f"<th>{e(c)}</th>" for c in columns)
               + "</tr>")
    for r in rows:
        color = _OUTCOME_COLORS.get(r["outcome"], "#ffffff")
        cells = [f"<tr id='run-{e(r['run_id'])}' style='background:{color}'>"]
        for c in columns:
            value = _cell(r.get(c))
            if c == "run_id" and r["run_id"] in report.timelines:
                value_html = f"<a href='#timeline-{e(r['run_id'])}'>{e(value)}</a>"
            else:
                value_html = e(value)
            cls = ("ok" if r[c] else "bad") if c == "verified" else (
                "text" if isinstance(r.get(c), str) else "")
            cells.append(f"<td class='{cls}'>{value_html}</td>")
        out.append("".join(cells) + "</tr>")
    out.append("</table>")
    out.append("<h2>Runs that did not verify</h2>")
    if not bad:
        out.append("<p>None: every run verified.</p>")
    for r in bad:
        why = f": {r['error']}" if r.get("error") else ""
        out.append(f"<p><a href='#run-{e(r['run_id'])}'>{e(r['run_id'])}</a> "
                   f"({e(r['app'])}, {e(r['protocol'])}, {e(r['schedule'])}, seed "
                   f"{e(_cell(r['seed']))}): <b>{e(str(r['outcome']))}</b>{e(why)}</p>")
        out.append(f"<pre class='replay'>{e(r['replay'] or '(no replay command recorded)')}"
                   f"</pre>")
    for heading, image, text in sections:
        out.append(f"<h2>{e(heading)}</h2>")
        if text:
            out.append(f"<p>{e(text)}</p>")
        if image:
            out.append(f"<img src='{e(image)}' alt='{e(heading)}'>")
    if report.timelines:
        out.append("<h2>Timelines</h2><p>Ranks down, time across: grey lines are rank "
                   "lives, ticks checkpoints, red crosses kills, triangles detections, "
                   "shaded bands recovery rounds.</p>")
    by_id = {r["run_id"]: r for r in rows}
    for run_id, image in report.timelines.items():
        r = by_id[run_id]
        out.append(f"<figure id='timeline-{e(run_id)}'><img src='{e(image)}' "
                   f"alt='timeline of {e(run_id)}'><figcaption>{e(run_id)}: "
                   f"{e(str(r['outcome']))}</figcaption></figure>")
    if experiment_yaml is not None:
        out.append("<h2>Experiment</h2><details><summary>experiment.yaml</summary>"
                   f"<pre>{e(experiment_yaml)}</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _run_title(r: dict) -> str:
    verdict = "verified" if r["verified"] else f"NOT verified ({r['outcome']})"
    return (f"{r['run_id']}: {r['app']}, protocol {r['protocol']}, schedule "
            f"{r['schedule']}, {r['ranks']} ranks, seed {r['seed']} - {verdict}")


def build_report(results_dir: str, out: str | None = None, *, max_timelines: int = 8) -> Report:
    """Read ``results_dir`` and write the PNGs and ``index.html`` into ``out`` (default
    ``results_dir/report``).

    Raises:
        ReportError: see :func:`read_results`; also ``max_timelines < 0`` or an output
            directory that cannot be written.
    """
    if max_timelines < 0:
        raise ReportError(f"--max-timelines must be >= 0, got {max_timelines}")
    rows = read_results(results_dir)
    out = out or _join(results_dir.rstrip("/"), "report")
    remote = "://" in out
    local_dir = tempfile.mkdtemp(prefix="ftactors-report-") if remote else out
    try:
        os.makedirs(local_dir, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"cannot create the output directory {out!r}: "
                          f"{exc.strerror or exc}") from exc
    report = Report(out_dir=out, html=os.path.join(local_dir, "index.html"))
    sections: list[tuple[str, str | None, str]] = []

    protocols, schedules, cells = verified_cells(rows)
    draw_verified(protocols, schedules, cells, os.path.join(local_dir, "verified.png"))
    report.images.append("verified.png")
    sections.append(("Verified fraction", "verified.png", ""))

    samples = recovery_samples(rows)
    order, means = phase_means(rows)
    if any(per[k] for per in samples.values() for k in per) or order:
        draw_recovery(samples, order, means, os.path.join(local_dir, "recovery.png"))
        report.images.append("recovery.png")
        sections.append(("Detection and recovery time", "recovery.png",
                         "Each dot is one run's mean over its failures; boxes from 3 runs."))
    else:
        report.notes.append("No run has a detection or recovery time: recovery plot skipped.")
        sections.append(("Detection and recovery time", None, "No run recovered."))

    experiment_yaml = _experiment_yaml(results_dir)
    series = overhead_series(rows, protocol_stacks(experiment_yaml))
    if series:
        draw_overhead(series, os.path.join(local_dir, "overhead.png"))
        report.images.append("overhead.png")
        left_out = sum(1 for r in rows if _is_number(r["interval"])
                       and r["outcome"] not in COMPLETED)
        text = "Runs that ran to the end (verified or wrong)."
        if left_out:
            text += f" {left_out} run(s) with an interval that did not finish are left out."
        sections.append(("Overhead vs checkpoint interval", "overhead.png", text))
    else:
        report.notes.append("No finished run has a checkpoint interval and an overhead: "
                            "overhead plot skipped.")
        sections.append(("Overhead vs checkpoint interval", None,
                         "No finished run has a checkpoint interval."))

    chosen = timeline_runs(rows, max_timelines)
    for r in chosen:
        try:
            events = read_events(results_dir, r["events_path"])
        except ReportError as exc:
            report.notes.append(f"{r['run_id']}: no timeline: {exc}")
            continue
        name = f"timeline-{_safe(r['run_id'])}.png"
        tl = timeline_marks(events, r["ranks"] or 1)
        draw_timeline(tl, os.path.join(local_dir, name), _run_title(r), bad=not r["verified"])
        report.images.append(name)
        report.timelines[r["run_id"]] = name
    if len(chosen) < len(rows):
        report.notes.append(f"Timelines of {len(rows) - len(chosen)} verified run(s) left out "
                            f"(--max-timelines {max_timelines}).")

    experiment = rows[0].get("experiment") or os.path.basename(results_dir.rstrip("/"))
    page = render_html(rows, report, title=f"ftactors report: {experiment}",
                       sections=sections, experiment_yaml=experiment_yaml)
    with open(report.html, "w", encoding="utf-8") as f:
        f.write(page)
    if remote:
        _upload(local_dir, out)
        report.html = _join(out, "index.html")
    return report


def write_report(results_dir: str, out: str | None = None, *, max_timelines: int = 8) -> str:
    """:func:`build_report`, returning where the page is (for ``ftactors chaos --report``)."""
    return build_report(results_dir, out, max_timelines=max_timelines).html


def _safe(run_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)


def _experiment_yaml(results_dir: str) -> str | None:
    fs, base = _fs(results_dir)
    try:
        with fs.open_input_stream(_join(base, "experiment.yaml")) as f:
            return f.read().decode("utf-8", errors="replace")
    except (OSError, FileNotFoundError):
        return None


def _upload(local_dir: str, out: str) -> None:
    fs, base = _fs(out)
    try:
        fs.create_dir(base, recursive=True)
        pafs.copy_files(local_dir, base, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out!r}: {_first_line(exc)}") from exc


# ------------------------------------------------------------------------------- CLI
def add_report(sub) -> None:
    p = sub.add_parser("report", help="plots and an HTML page from ftactors chaos results",
                       description="Read a chaos results directory (results.parquet and "
                                   "events/<run_id>.parquet) and write PNG plots (a timeline "
                                   "per run, verified fraction, recovery time, overhead vs "
                                   "checkpoint interval) and index.html.")
    p.add_argument("results_dir", metavar="RESULTS_DIR",
                   help="the directory ftactors chaos wrote (a path or a pyarrow URI)")
    p.add_argument("--out", "-o", default=None, metavar="DIR",
                   help="where to write (default RESULTS_DIR/report)")
    p.add_argument("--max-timelines", type=int, default=8, metavar="N",
                   help="timelines of verified runs to draw, besides every run that did not "
                        "verify (default 8)")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    try:
        report = build_report(args.results_dir, args.out, max_timelines=args.max_timelines)
    except ReportError as exc:
        print(f"ftactors report: {exc}", file=sys.stderr)
        return 2
    for note in report.notes:
        print(f"  note: {note}")
    print(f"wrote {len(report.images)} images and {report.html}")
    return 0
