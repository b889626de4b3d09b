"""``ftactors report``: a results directory written as ``ftactors chaos`` writes it
(results.parquet + events/<run_id>.parquet, docs: the chaos interface) turned into plots
and an HTML page; the timeline's data-to-marks step; bad input."""
from __future__ import annotations

import json
import os
from html.parser import HTMLParser

import matplotlib.image as mpimg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftactors.tools import cli
from ftactors.tools.run_metrics import EVENT_SCHEMA, RESULT_SCHEMA
from ftactors.tools.report import build_report
from ftactors.tools.report_data import (Life, Mark, ReportError, Span, overhead_series,
                                        phase_means, protocol_stacks, read_events,
                                        read_results, recovery_samples, timeline_marks,
                                        timeline_runs, verified_cells)

def ev(time, kind, rank=-1, **detail):
    return {"time": time, "kind": kind, "rank": rank, "detail": detail}


def run_events(n, kill=None, checkpoint_kind="backup", every_s=0.25, end_s=2.5,
               phases=("notified", "repaired")):
    """A plausible timeline: n ranks start, checkpoint every ``every_s``, maybe one kill
    (rank, time) with detection, a recovery round with phases and a new life, finish."""
    events = [ev(0.0, "run_start", ranks=n)] + [ev(0.001 * r, "start", r, epoch=0)
                                                for r in range(n)]
    t = every_s
    while t < end_s:
        if checkpoint_kind == "checkpoint":  # the coordinator's: every rank
            events.append(ev(t, "checkpoint", position=[0, int(t * 10)]))
        else:
            events += [ev(t + 0.002 * r, checkpoint_kind, r) for r in range(n)]
        t += every_s
    if kill:
        rank, tk = kill
        events += [ev(tk, "killed", rank, how="sigkill"),
                   ev(tk + 0.02, "failure_detected", rank, reason="died"),
                   ev(tk + 0.02, "recovery_start", round=0, failed=[rank]),
                   ev(tk + 0.02, "recovery_phase", round=0, phase="start")]
        for i, phase in enumerate(phases):
            events.append(ev(tk + 0.05 * (i + 1), "recovery_phase", round=0, phase=phase))
        events += [ev(tk + 0.12, "start", rank, epoch=1),
                   ev(tk + 0.2, "recovery_end", round=0)]
    events += [ev(end_s + 0.001 * r, "finish", r) for r in range(n)]
    events.append(ev(end_s + 0.01, "run_end"))
    return sorted(events, key=lambda e: e["time"])


def row(run_id, app, protocol, schedule, seed, outcome, *, interval=None, unit="",
        wall_s=3.0, kills=1, detect_s=0.02, recover_s=0.2, phases=None, error=""):
    verified = outcome == "verified"
    return {"experiment": "unit", "run_id": run_id, "app": app, "protocol": protocol,
            "schedule": schedule, "ranks": 4, "seed": seed, "transport": "sim",
            "cluster": "local", "interval": interval, "interval_unit": unit,
            "outcome": outcome, "verified": verified, "identical": verified, "error": error,
            "wall_s": wall_s, "baseline_wall_s": 2.5, "overhead": wall_s / 2.5,
            "kills": kills, "failures": kills, "recoveries": kills if recover_s else 0,
            "checkpoints": 9, "lost_work_s": 0.05 * kills, "detect_s": detect_s,
            "recover_s": recover_s,
            "phases_json": json.dumps(phases if phases is not None else
                                      ({"detect": detect_s, "start->notified": 0.05,
                                        "notified->repaired": 0.05, "repaired->end": 0.1}
                                       if kills else {})),
            "replay": f"ftactors chaos experiment.yaml --only {run_id}  # seed {seed}",
            "events_path": f"events/{run_id}.parquet"}


def write_results(d, rows, events_by_run):
    """Write a results directory exactly as the chaos interface specifies."""
    os.makedirs(d / "events", exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=RESULT_SCHEMA), d / "results.parquet")
    for run_id, events in events_by_run.items():
        table = pa.Table.from_pylist(
            [{**e, "detail": json.dumps(e["detail"])} for e in events], schema=EVENT_SCHEMA)
        pq.write_table(table, d / "events" / f"{run_id}.parquet")
    (d / "experiment.yaml").write_text("name: unit\ntransport: sim\n")
    return d


@pytest.fixture
def results(tmp_path):
    """Five runs: standby verified and wrong, ready-flush verified (coordinator
    checkpoints) and timed out (its event file missing), and a bare run with no kills."""
    rows = [
        row("r000", "cg", "standby", "kill-one", 0, "verified", interval=2, unit="iterations"),
        row("r001", "cg", "standby", "kill-one", 1, "wrong", interval=2, unit="iterations",
            wall_s=3.2, error="norms differ at iteration 7"),
        row("r002", "cg", "rf-k4", "kill-one", 0, "verified", interval=4, unit="iterations",
            wall_s=2.9, phases={"detect": 0.02, "start->restore_chosen": 0.3}),
        row("r003", "cg", "rf-k4", "random-two", 0, "timeout", interval=4, unit="iterations",
            wall_s=300.0, kills=2, detect_s=None, recover_s=None, phases={}),
        row("r004", "stencil", "none", "none", 0, "verified", kills=0, detect_s=None,
            recover_s=None, wall_s=2.5),
    ]
    events = {"r000": run_events(4, kill=(1, 1.05)),
              "r001": run_events(4, kill=(2, 0.6)),
              "r002": run_events(4, kill=(3, 1.3), checkpoint_kind="checkpoint", every_s=0.5,
                                 phases=("restore_chosen",)),
              "r004": run_events(4)}
    return write_results(tmp_path / "unit", rows, events)


class PageParser(HTMLParser):
    """Image sources, the runs table's first cells and the replay blocks of a page."""

    def __init__(self):
        super().__init__()
        self.images, self.first_cells, self.replays = [], [], []
        self._row_cells, self._in_td, self._in_replay = None, False, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        elif tag == "tr":
            self._row_cells = []
        elif tag == "td":
            self._in_td = True
            self._row_cells.append("")
        elif tag == "pre" and attrs.get("class") == "replay":
            self._in_replay = True
            self.replays.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False
        elif tag == "tr" and self._row_cells:
            self.first_cells.append(self._row_cells[0])
        elif tag == "pre":
            self._in_replay = False

    def handle_data(self, data):
        if self._in_td:
            self._row_cells[-1] += data
        if self._in_replay:
            self.replays[-1] += data


def parse_page(path):
    parser = PageParser()
    with open(path, encoding="utf-8") as f:
        parser.feed(f.read())
    return parser


# ------------------------------------------------------------------------ whole report
def test_report_writes_every_file_and_the_page_shows_them(results):
    report = build_report(str(results))
    out = results / "report"
    pngs = sorted(p for p in os.listdir(out) if p.endswith(".png"))
    assert pngs == sorted(["verified.png", "recovery.png", "overhead.png",
                           "timeline-r000.png", "timeline-r001.png", "timeline-r002.png",
                           "timeline-r004.png"])
    for name in pngs:
        image = mpimg.imread(out / name)
        assert image.shape[0] > 200 and image.shape[1] > 400, name
    page = parse_page(out / "index.html")
    assert sorted(page.images) == pngs  # every image, once
    assert page.first_cells == ["r000", "r001", "r002", "r003", "r004"]  # every run
    # the runs that did not verify, and only those, with their replay commands
    assert page.replays == ["ftactors chaos experiment.yaml --only r001  # seed 1",
                            "ftactors chaos experiment.yaml --only r003  # seed 0"]
    text = (out / "index.html").read_text()
    assert "norms differ at iteration 7" in text and "name: unit" in text
    # r003's events are missing: listed, no timeline, and the page says so
    assert any("r003" in n and "does not exist" in n for n in report.notes)
    assert "r003" not in report.timelines
    assert "r003: no timeline: event file" in text


def test_a_run_whose_kill_never_fired_is_shown_not_tested(tmp_path):
    untested = {**row("r001", "cg", "standby", "late", 0, "untested"), "identical": True,
                "kills_unfired": 1, "error": "1 planned kill(s) never fired: ..."}
    rows = [row("r000", "cg", "standby", "late", 0, "verified"), untested]
    d = write_results(tmp_path / "unit", rows,
                      {"r000": run_events(4, kill=(1, 1.05)), "r001": run_events(4)})
    build_report(str(d))
    text = (d / "report" / "index.html").read_text()
    assert ("2 runs: <b>1 verified</b>, <b>1 not verified</b> (<b>1 NOT TESTED</b>: a "
            "planned kill never fired)") in text
    assert "<b>NOT TESTED</b>: 1 planned kill(s) never fired" in text
    assert "r001" in parse_page(d / "report" / "index.html").replays[0]


def test_cli_writes_to_out_and_caps_timelines(results, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert cli.main(["report", str(results), "--out", str(out), "--max-timelines", "1"]) == 0
    assert "wrote 5 images" in capsys.readouterr().out
    # r001 (wrong) is always drawn; of the verified runs only the first; r003 has no events
    assert sorted(p for p in os.listdir(out) if p.startswith("timeline-")) == [
        "timeline-r000.png", "timeline-r001.png"]
    assert not (results / "report").exists()
    assert "Timelines of 2 verified run(s) left out" in (out / "index.html").read_text()


def test_report_to_a_pyarrow_uri(results, tmp_path):
    out = tmp_path / "via-uri"
    report = build_report(f"file://{results}", f"file://{out}", max_timelines=0)
    assert report.html == f"file://{out}/index.html"
    assert {"index.html", "verified.png", "timeline-r001.png"} <= set(os.listdir(out))


def test_report_without_intervals_or_recoveries_skips_those_plots(tmp_path):
    d = write_results(tmp_path / "plain", [
        row("r000", "cg", "none", "none", 0, "verified", kills=0, detect_s=None,
            recover_s=None)], {"r000": run_events(2)})
    report = build_report(str(d))
    assert report.images == ["verified.png", "timeline-r000.png"]
    assert any("overhead plot skipped" in n for n in report.notes)
    assert any("recovery plot skipped" in n for n in report.notes)
    assert sorted(parse_page(d / "report" / "index.html").images) == sorted(report.images)


# ---------------------------------------------------------------------- timeline marks
def test_timeline_marks_kills_detections_recoveries_and_lives():
    events = run_events(4, kill=(1, 1.05), every_s=0.5)
    tl = timeline_marks(events, ranks=4)
    assert tl.nranks == 4 and tl.t_end == pytest.approx(2.51)
    assert tl.kills == (Mark(1.05, 1, "killed"),)
    assert tl.detections == (Mark(pytest.approx(1.07), 1, "failure_detected"),)
    assert tl.recoveries == (Span(pytest.approx(1.07), pytest.approx(1.25), 0, True),)
    assert [m.kind for m in tl.phases] == ["notified", "repaired"]  # "start" is the span
    # rank-side backups tick their own rank: 4 rounds (0.5 .. 2.0) x 4 ranks
    assert sorted((m.rank, round(m.time, 3)) for m in tl.checkpoints) == sorted(
        (r, round(t + 0.002 * r, 3)) for r in range(4) for t in (0.5, 1.0, 1.5, 2.0))
    # rank 1 has two lives: killed, then a new one that finishes
    assert [life for life in tl.lives if life.rank == 1] == [
        Life(1, 0.001, 1.05, "killed"), Life(1, pytest.approx(1.17), 2.501, "finish")]
    assert all(life.ended_by == "finish" for life in tl.lives if life.rank != 1)


def test_coordinator_checkpoints_tick_every_rank_or_the_named_ones():
    events = [ev(0.0, "start", 0), ev(1.0, "checkpoint", position=[0, 4]),
              ev(2.0, "group_checkpoint", group=1, ranks=[2, 3]),
              ev(3.0, "hc3i_initiate", 1, sn=2)]
    tl = timeline_marks(events, ranks=4)
    assert [(m.time, m.rank, m.kind) for m in tl.checkpoints] == [
        (1.0, 0, "checkpoint"), (1.0, 1, "checkpoint"), (1.0, 2, "checkpoint"),
        (1.0, 3, "checkpoint"), (2.0, 2, "group_checkpoint"), (2.0, 3, "group_checkpoint"),
        (3.0, 1, "hc3i_initiate")]


def test_timeline_marks_edge_cases():
    # the killed rank's own start went down with it; a hang; a recovery round restarted by
    # a second failure and one the run ended in; a rank named only in events
    events = [ev(0.0, "start", 0), ev(0.5, "killed", 1), ev(0.55, "killed", 2, how="sigstop"),
              ev(0.6, "hang_detected", 2),
              ev(0.6, "recovery_start", round=0), ev(0.8, "recovery_start", round=1),
              ev(0.9, "recovery_end", round=1), ev(1.0, "recovery_start", round=2),
              ev(1.5, "start", 5)]
    tl = timeline_marks(events, ranks=3)
    assert tl.nranks == 6
    assert Life(1, 0.0, 0.5, "killed", started=False) in tl.lives
    assert Life(0, 0.0, 1.5, "open") in tl.lives
    assert tl.kills == (Mark(0.5, 1, "killed"), Mark(0.55, 2, "stopped"))  # a hang
    assert tl.detections == (Mark(0.6, 2, "hang_detected"),)
    assert tl.recoveries == (Span(0.6, 0.8, 0, False), Span(0.8, 0.9, 1, True),
                             Span(1.0, 1.5, 2, False))
    assert timeline_marks([], ranks=2).lives == ()


def _red_pixels(png):
    rgb = mpimg.imread(png)[..., :3]
    return int(((rgb[..., 0] > 0.75) & (rgb[..., 1] < 0.3) & (rgb[..., 2] < 0.3)).sum())


def test_drawn_timeline_shows_the_kill_in_red(tmp_path):
    from ftactors.tools.report_draw import draw_timeline
    killed = timeline_marks(run_events(4, kill=(1, 1.05)), ranks=4)
    calm = timeline_marks(run_events(4), ranks=4)
    draw_timeline(killed, tmp_path / "killed.png", "with a kill")
    draw_timeline(calm, tmp_path / "calm.png", "no kill")
    assert _red_pixels(tmp_path / "calm.png") == 0
    assert _red_pixels(tmp_path / "killed.png") > 100  # the cross and its legend entry


# ------------------------------------------------------------------- summary plots' data
def test_summary_data(results):
    rows = read_results(str(results))
    # overhead: finished runs with an interval (r003 timed out; r004 has no interval)
    assert overhead_series(rows) == {"iterations": {
        "standby": [(2.0, 3.0 / 2.5), (2.0, 3.2 / 2.5)], "rf-k4": [(4.0, 2.9 / 2.5)]}}
    samples = recovery_samples(rows)
    assert list(samples) == ["standby", "rf-k4", "none"]
    assert samples["standby"] == {"detect_s": [0.02, 0.02], "recover_s": [0.2, 0.2]}
    assert samples["none"] == {"detect_s": [], "recover_s": []}
    order, means = phase_means(rows)
    assert order == ["detect", "start->notified", "notified->repaired", "repaired->end",
                     "start->restore_chosen"]
    assert means["rf-k4"] == {"detect": 0.02, "start->notified": 0.0,
                              "notified->repaired": 0.0, "repaired->end": 0.0,
                              "start->restore_chosen": 0.3}
    assert "none" not in means
    protocols, schedules, cells = verified_cells(rows)
    assert protocols == ["standby", "rf-k4", "none"]
    assert schedules == ["kill-one", "random-two", "none"]
    assert cells == {("standby", "kill-one"): (1, 2), ("rf-k4", "kill-one"): (1, 1),
                     ("rf-k4", "random-two"): (0, 1), ("none", "none"): (1, 1)}
    assert [r["run_id"] for r in timeline_runs(rows, 1)] == ["r000", "r001", "r003"]
    assert [r["run_id"] for r in timeline_runs(rows, 0)] == ["r001", "r003"]


def test_overhead_series_per_app_when_several_and_per_unit():
    rows = [row("a", "cg", "p", "s", 0, "verified", interval=2, unit="iterations"),
            row("b", "hpl", "p", "s", 0, "verified", interval=0.5, unit="s"),
            row("c", "hpl", "p", "s", 0, "failed", interval=0.5, unit="s")]
    assert overhead_series(rows) == {"iterations": {"p / cg": [(2.0, 1.2)]},
                                     "s": {"p / hpl": [(0.5, 1.2)]}}


def test_aliases_of_one_stack_make_one_overhead_series():
    stacks = protocol_stacks("protocols:\n"
                             "  rf-k2: {protocol: ready-flush, checkpoint_interval: 2}\n"
                             "  rf-k4: {protocol: ready-flush, checkpoint_interval: 4}\n"
                             "  both: {protocol: [rs, standby]}\n  standby: {spares: 2}\n")
    assert stacks == {"rf-k2": "ready-flush", "rf-k4": "ready-flush", "both": "rs+standby",
                      "standby": "standby"}
    rows = [row("a", "cg", "rf-k4", "s", 0, "verified", interval=4, unit="iterations"),
            row("b", "cg", "rf-k2", "s", 0, "wrong", interval=2, unit="iterations",
                wall_s=5.0)]
    assert overhead_series(rows, stacks) == {"iterations": {
        "ready-flush": [(2.0, 2.0), (4.0, 1.2)]}}
    assert protocol_stacks(None) == protocol_stacks("[unclosed") == protocol_stacks("3") == {}


# ---------------------------------------------------------------------------- bad input
def test_missing_directory_or_results_file(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "ftactors report: results file" in err and "results.parquet" in err
    assert not (tmp_path / "report").exists()


def test_corrupt_results_file(results, capsys):
    data = (results / "results.parquet").read_bytes()
    (results / "results.parquet").write_bytes(data[: len(data) // 2])
    assert cli.main(["report", str(results)]) == 2
    assert "is not a readable Parquet file" in capsys.readouterr().err


def test_missing_and_mistyped_columns_are_named(results, capsys):
    table = pq.read_table(results / "results.parquet")
    pq.write_table(table.drop_columns(["verified", "replay"]), results / "results.parquet")
    assert cli.main(["report", str(results)]) == 2
    assert "lacks column(s): verified, replay" in capsys.readouterr().err
    bad = table.set_column(table.schema.get_field_index("ranks"), "ranks",
                           pa.array(["four"] * table.num_rows))
    pq.write_table(bad, results / "results.parquet")
    with pytest.raises(ReportError, match="wrong type"):
        read_results(str(results))


def test_no_runs_and_repeated_ids(results):
    table = pq.read_table(results / "results.parquet")
    pq.write_table(table.slice(0, 0), results / "results.parquet")
    with pytest.raises(ReportError, match="has no runs"):
        read_results(str(results))
    pq.write_table(pa.concat_tables([table.slice(0, 1), table.slice(0, 1)]),
                   results / "results.parquet")
    with pytest.raises(ReportError, match="repeated run_id"):
        read_results(str(results))


def test_corrupt_or_incomplete_event_file_still_renders(results):
    (results / "events" / "r000.parquet").write_bytes(b"not parquet")
    pq.write_table(pa.table({"time": [0.0]}), results / "events" / "r002.parquet")
    with pytest.raises(ReportError, match="lacks column"):
        read_events(str(results), "events/r002.parquet")
    report = build_report(str(results))
    assert sorted(report.timelines) == ["r001", "r004"]
    notes = " ".join(report.notes)
    assert "r000: no timeline" in notes and "not a readable Parquet file" in notes
    assert "r002: no timeline" in notes and "lacks column(s): kind, rank, detail" in notes
    page = parse_page(results / "report" / "index.html")
    assert page.first_cells == ["r000", "r001", "r002", "r003", "r004"]


def test_bad_max_timelines(results, capsys):
    assert cli.main(["report", str(results), "--max-timelines", "-1"]) == 2
    assert "--max-timelines must be >= 0" in capsys.readouterr().err


# ------------------------------------------------------------------ on ftactors chaos
def test_report_on_a_tiny_sim_chaos_matrix(tmp_path, capsys):
    """``ftactors chaos --report`` on sim: standby recovers, the bare app (no protocol)
    gives up; the report shows every kill and recovery of each run."""
    import yaml
    exp = {"name": "tiny", "transport": "sim",
           "matrix": {"app": ["stencil"], "protocol": ["standby", "none"], "ranks": [4],
                      "schedule": ["one"], "seed": [3]},
           "apps": {"stencil": {"ny": 24, "nx": 24, "iterations": 12}},
           "protocols": {"standby": {"spares": 2, "backup_interval": 2}},
           "schedules": {"one": {"kill": [[1, 5]]}}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(exp))
    out = tmp_path / "tiny"
    assert cli.main(["chaos", str(tmp_path / "tiny.yaml"), "--out", str(out),
                     "--report"]) == 1  # the bare run does not verify
    assert f"wrote {out}/report/index.html" in capsys.readouterr().out
    rows = read_results(str(out))
    assert [(r["protocol"], r["outcome"]) for r in rows] == [("standby", "verified"),
                                                             ("none", "failed")]
    page = parse_page(out / "report" / "index.html")
    assert page.first_cells == ["r000", "r001"]
    assert page.replays == [rows[1]["replay"]]
    assert sorted(page.images) == sorted(p for p in os.listdir(out / "report")
                                         if p.endswith(".png"))
    assert {"timeline-r000.png", "timeline-r001.png", "recovery.png", "overhead.png",
            "verified.png"} <= set(page.images)
    for r in rows:
        tl = timeline_marks(read_events(str(out), r["events_path"]), r["ranks"])
        assert [(m.rank, m.kind) for m in tl.kills] == [(1, "killed")] and r["kills"] == 1
        assert len(tl.recoveries) == r["recoveries"]
        assert all(s.finished for s in tl.recoveries)
    assert _red_pixels(out / "report" / "timeline-r000.png") > 100
