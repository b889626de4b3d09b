"""The drawing of ``ftactors report``: thin ``draw_*`` functions that put the plot
primitives of ``report_data`` on an Agg canvas (never pyplot: no window, and the caller's
matplotlib state stays untouched) and save a PNG.
"""
from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .report_data import Timeline
from .run_metrics import CHECKPOINT_KINDS

_CHECKPOINT_COLORS = {"checkpoint": "#1f4e9c", "backup": "#3b82c4",
                      "group_checkpoint": "#128a84", "rs_checkpoint": "#7b4fb0",
                      "hc3i_initiate": "#2a9d4b"}
_CHECKPOINT_LABELS = {"checkpoint": "checkpoint (all ranks)", "backup": "backup",
                      "group_checkpoint": "group checkpoint", "rs_checkpoint": "RS checkpoint",
                      "hc3i_initiate": "HC3I checkpoint initiated"}
_OUTCOME_COLORS = {"verified": "#d9f2d9", "wrong": "#f8d0d0", "failed": "#fde2c4",
                   "timeout": "#e6dcf5", "deadlock": "#e6dcf5", "error": "#e0e0e0",
                   "untested": "#fff3b0"}


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
        if span.level is not None:  # which level of a multi-level stack recovered it
            ax.text(x0, -0.72, f" {span.level}", fontsize="small", fontweight="bold",
                    color="#8a5300", va="top", ha="left", zorder=6)
    if tl.recoveries:
        handles.append(Patch(color="#f2b134", alpha=0.3, label="recovery round"
                             + (" (level that recovered it)" if any(
                                 s.level for s in tl.recoveries) else "")))
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
                ax.boxplot(vals, positions=[y], orientation="horizontal", widths=0.5, showfliers=False,
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
