"""What ``ftactors report`` shows, as data: a chaos results directory read and checked,
and its rows and events turned into plot primitives (``timeline_marks``,
``overhead_series``, ``recovery_samples``, ``phase_means``, ``verified_cells``).

Pure functions of the rows and events, with no drawing in them, so the tests assert on
what a picture will show; ``report_draw`` draws them. A results directory that cannot be
read raises :class:`ReportError`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..base import open_filesystem
from .run_metrics import CHECKPOINT_KINDS, EVENT_SCHEMA, RESULT_SCHEMA, UNTESTED

# The columns the report reads, with the types chaos writes; others are ignored.
READ_SCHEMA = pa.schema([RESULT_SCHEMA.field(name) for name in (
    "run_id", "app", "protocol", "schedule", "ranks", "seed", "outcome", "verified", "wall_s",
    "overhead", "interval", "interval_unit", "detect_s", "recover_s", "phases_json", "replay",
    "events_path")])
# Shown in the runs table when present (in this order, after the required ones).
OPTIONAL_COLUMNS = ("experiment", "transport", "cluster", "identical", "error",
                    "baseline_wall_s", "kills", "kills_unfired", "failures", "recoveries",
                    "levels",
                    "resumed_from", "checkpoints", "lost_work_s")
DETECTION_KINDS = ("failure_detected", "hang_detected")
COMPLETED = ("verified", "wrong", UNTESTED)  # outcomes of runs that ran to the end
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
    table = _conform(table, READ_SCHEMA, f"results file in {results_dir!r}",
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
    ``recovery_end`` (a failure restarted it, or the run ended in it). ``level``: the
    level of a multi-level stack that recovered it (``recovery_level``), else None."""

    start: float
    end: float
    round: int | None
    finished: bool
    level: str | None = None


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
    level = None  # the recovery_level of the open round
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
        elif kind == "recovery_level":
            level = detail.get("level")
        elif kind == "recovery_end":
            if open_round is not None:
                recoveries.append(Span(open_round[0], t, open_round[1], True, level))
                open_round, level = None, None
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
