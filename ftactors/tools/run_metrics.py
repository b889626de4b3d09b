"""A chaos experiment's files and what a run's timeline says about its failures.

``RESULT_SCHEMA`` (one row per run, ``results.parquet``) and ``EVENT_SCHEMA`` (one
timeline per run, ``events/RUN.parquet``) are what ``chaos`` writes and ``report`` and
``advise`` read. The failure numbers (counts, lost work, recovery times) are computed
from the events alone (``RunResult.events`` or a stored timeline), so a run that ended
in an error is measured the same way as one that finished. Every protocol's checkpoint
event counts as a checkpoint, whatever the protocol calls it.
"""
from __future__ import annotations

import json
from collections import defaultdict
from statistics import fmean

import pyarrow as pa

from ..base import CHECKPOINT_KINDS



def timeline_start(events) -> float:
    """The time the run began: its ``run_start`` event, else its first event."""
    starts = [ev.time for ev in events if ev.kind == "run_start"]
    return starts[0] if starts else (events[0].time if events else 0.0)

UNTESTED = "untested"
"""The outcome of a run that finished with the right answer while a kill of its plan never
fired (``RunResult.metrics["kills_unfired"]``): it did not survive what it was meant to
test, so it is NOT TESTED, not verified."""

#: a results file's columns: one row per run of the matrix
RESULT_SCHEMA = pa.schema([
    ("experiment", pa.string()), ("run_id", pa.string()), ("app", pa.string()),
    ("protocol", pa.string()), ("schedule", pa.string()), ("ranks", pa.int64()),
    ("seed", pa.int64()), ("transport", pa.string()), ("cluster", pa.string()),
    ("interval", pa.float64()), ("interval_unit", pa.string()), ("outcome", pa.string()),
    ("verified", pa.bool_()), ("identical", pa.bool_()), ("error", pa.string()),
    ("wall_s", pa.float64()), ("baseline_wall_s", pa.float64()), ("overhead", pa.float64()),
    ("kills", pa.int64()), ("kills_unfired", pa.int64()), ("failures", pa.int64()),
    ("recoveries", pa.int64()),
    ("checkpoints", pa.int64()), ("lost_work_s", pa.float64()), ("detect_s", pa.float64()),
    ("recover_s", pa.float64()), ("phases_json", pa.string()), ("levels", pa.string()),
    ("resumed_from", pa.string()), ("replay", pa.string()),
    ("events_path", pa.string()),
])

#: a stored timeline's columns: seconds since the run's start, kind, rank, detail (JSON)
EVENT_SCHEMA = pa.schema([("time", pa.float64()), ("kind", pa.string()),
                          ("rank", pa.int64()), ("detail", pa.string())])


def events_table(events) -> pa.Table:
    """A run's timeline as a table: seconds since its start, kind, rank, detail (JSON)."""
    t0 = timeline_start(events)
    return pa.Table.from_pylist(
        [{"time": ev.time - t0, "kind": ev.kind, "rank": ev.rank,
          "detail": json.dumps(ev.detail, default=str)} for ev in events], EVENT_SCHEMA)


def _checkpoint_key(ev) -> tuple:
    """One stored recovery point, however many ranks report their part of it."""
    d = ev.detail
    where = d.get("position", d.get("sn"))
    who = ev.rank if ev.kind == "hc3i_initiate" else d.get("group")
    return ev.kind, who, repr(where)


def _recovery_rounds(events) -> list[list]:
    """The recovery marks (start, phases, end) of each recovery, in order; a round that
    a new failure restarted goes on in the next round."""
    rounds, current = [], None
    for ev in events:
        if ev.kind == "recovery_start":
            if current is None:
                current = [("start", ev.time)]
        elif ev.kind == "recovery_phase" and current is not None and ev.detail["phase"] != "start":
            current.append((ev.detail["phase"], ev.time))
        elif ev.kind == "recovery_end" and current is not None:
            current.append(("end", ev.time))
            rounds.append(current)
            current = None
    return rounds


RESTART_FROM = "restart-from"
"""The level of a lost job resumed by a new one from stable storage (a job kill)."""


def recovery_levels(events) -> list[str]:
    """The levels each recovery of a multi-level stack went through, in order: the
    levels that could not recover it, then the one that did (``"standby>rs"``), from the
    ``level_exhausted`` and ``recovery_level`` events; a round that no level recovered
    ends with ``>none``; a lost job resumed by a new one (``job_resumed``) is
    ``restart-from``."""
    out, tried = [], []
    for ev in events:
        if ev.kind == "level_exhausted":
            tried.append(ev.detail["level"])
        elif ev.kind in ("recovery_level", "job_resumed"):
            level = ev.detail["level"] if ev.kind == "recovery_level" else RESTART_FROM
            out.append(">".join([*tried, level]))
            tried = []
    if tried:
        out.append(">".join([*tried, "none"]))
    return out


def failure_metrics(events) -> dict:
    """Counts and timings of one run's failures, from its events (in time order):

    ``kills``, ``failures`` (detected), ``recoveries`` (completed), ``checkpoints``
    (distinct recovery points stored), ``lost_work_s`` (for each kill, the time since the
    last checkpoint before it, or since the start), ``detect_s`` and ``recover_s`` (means;
    None without any), ``phases_json`` (total seconds per phase: ``detect``, then each
    step between recovery marks, such as ``start->notified``), ``levels`` (a stack's
    ``recovery_levels``, comma-separated; empty for a single protocol).
    """
    t0 = timeline_start(events)
    kills = [ev for ev in events if ev.kind == "killed"]
    checkpoints = [ev for ev in events if ev.kind in CHECKPOINT_KINDS]
    lost = 0.0
    for k in kills:
        before = [ev.time for ev in checkpoints if ev.time <= k.time]
        lost += k.time - max(before, default=t0)
    detections = []
    for ev in events:
        if ev.kind in ("failure_detected", "hang_detected"):
            killed = [k.time for k in kills if k.rank == ev.rank and k.time <= ev.time]
            if killed and ev.kind == "failure_detected":
                detections.append(ev.time - killed[-1])
    phases: dict[str, float] = defaultdict(float)
    if detections:
        phases["detect"] = sum(detections)
    rounds = _recovery_rounds(events)
    for marks in rounds:
        for (a, ta), (b, tb) in zip(marks, marks[1:]):
            phases[f"{a}->{b}"] += tb - ta
    return {
        "kills": len(kills),
        "failures": sum(ev.kind == "failure_detected" for ev in events),
        "recoveries": sum(ev.kind == "recovery_end" for ev in events),
        "checkpoints": len({_checkpoint_key(ev) for ev in checkpoints}),
        "lost_work_s": lost,
        "detect_s": fmean(detections) if detections else None,
        "recover_s": fmean(m[-1][1] - m[0][1] for m in rounds) if rounds else None,
        "phases_json": json.dumps(phases),
        "levels": ", ".join(recovery_levels(events)),
    }
