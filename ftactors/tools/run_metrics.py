"""What a run's timeline says about its failures: counts, lost work and recovery times.

Chaos experiments and reports read runs through these numbers, computed from the events
alone (``RunResult.events`` or a stored timeline), so a run that ended in an error is
measured the same way as one that finished. Every protocol's checkpoint event counts as a
checkpoint, whatever the protocol calls it.
"""
from __future__ import annotations

import json
from collections import defaultdict
from statistics import fmean

#: the events that mark a stored recovery point, by protocol
CHECKPOINT_KINDS = ("checkpoint", "backup", "group_checkpoint", "rs_checkpoint",
                    "hc3i_initiate")


def timeline_start(events) -> float:
    """The time the run began: its ``run_start`` event, else its first event."""
    starts = [ev.time for ev in events if ev.kind == "run_start"]
    return starts[0] if starts else (events[0].time if events else 0.0)


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


def failure_metrics(events) -> dict:
    """Counts and timings of one run's failures, from its events (in time order):

    ``kills``, ``failures`` (detected), ``recoveries`` (completed), ``checkpoints``
    (distinct recovery points stored), ``lost_work_s`` (for each kill, the time since the
    last checkpoint before it, or since the start), ``detect_s`` and ``recover_s`` (means;
    None without any), ``phases_json`` (total seconds per phase: ``detect``, then each
    step between recovery marks, such as ``start->notified``).
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
    }
