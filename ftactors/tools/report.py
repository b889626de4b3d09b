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

Every picture goes through two steps: a pure function of ``report_data`` turns rows or
events into plot primitives (``timeline_marks``, ``overhead_series``, ``recovery_samples``,
``phase_means``, ``verified_cells``), which the tests assert on, and a thin ``draw_*`` of
``report_draw`` puts those on an Agg canvas. This module writes the page and is the
command.

A results directory that cannot be read (no ``results.parquet``, not Parquet, missing
columns, values of the wrong type, no runs) raises :class:`ReportError` (exit code 2). A
run whose event file is missing or unreadable is still listed, without a timeline, and the
page says why. Directories may be pyarrow filesystem URIs (``s3://...``, ``file://...``).
"""
from __future__ import annotations

import html
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from .report_data import (COMPLETED, UNTESTED, ReportError, _first_line, _fs, _is_number,
                          _join, overhead_series, phase_means, protocol_stacks, read_events,
                          read_results, recovery_samples, timeline_marks, timeline_runs,
                          verified_cells)
from .report_draw import (_OUTCOME_COLORS, draw_overhead, draw_recovery, draw_timeline,
                          draw_verified)


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
                  "kills_unfired", "failures", "recoveries", "levels", "resumed_from",
                  "checkpoints", "lost_work_s", "detect_s", "recover_s", "error")


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
    untested = sum(r["outcome"] == UNTESTED for r in bad)
    columns = [c for c in _TABLE_COLUMNS if c in rows[0]]
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1>",
           f"<p>{len(rows)} runs: <b>{n_ok} verified</b>, <b>{len(bad)} not verified</b>"
           + (f" (<b>{untested} NOT TESTED</b>: a planned kill never fired)" if untested
              else "") + ". "
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
                   f"{e(_cell(r['seed']))}): <b>{e(_verdict(r))}</b>{e(why)}</p>")
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


def _verdict(r: dict) -> str:
    """A run's verdict in words: verified, NOT TESTED (a planned kill never fired) or
    NOT verified (its outcome)."""
    if r["verified"]:
        return "verified"
    return "NOT TESTED" if r["outcome"] == UNTESTED else f"NOT verified ({r['outcome']})"


def _run_title(r: dict) -> str:
    return (f"{r['run_id']}: {r['app']}, protocol {r['protocol']}, schedule "
            f"{r['schedule']}, {r['ranks']} ranks, seed {r['seed']} - {_verdict(r)}")


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
