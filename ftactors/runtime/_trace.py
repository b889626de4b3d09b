"""Message traces: record cheaply per rank, store as Parquet, draw as a message diagram.

Theory of operation
-------------------
Every message a rank receives is one trace row: when it was sent and received, between
which world ranks, with which tag, how many payload bytes, what kind of traffic it was
(``"app"`` for user messages, ``"coll"`` for collectives, ``"ctrl"`` for protocol
control, ...) and on which communicator.

Recording sits on the receive hot path, so :class:`TraceBuffer` is eight plain Python
lists and :meth:`TraceBuffer.record` is eight appends: no Arrow, no locks, no dict.
At the end of a run each rank ships :meth:`TraceBuffer.rows` to the driver, which merges
them with :func:`write_trace` into one Parquet file sorted by send time, with the
columns and types of :data:`TRACE_SCHEMA`. :func:`read_trace` checks a file against
that schema so a wrong or damaged file fails with a message naming the problem;
:func:`read_traffic` asks only for ``source``, ``dest`` and ``bytes`` (and uses ``kind``
when present), so traces converted from other tools, Parquet or CSV, serve for traffic
analysis.

:func:`plot_trace` draws the classic ranks-by-time diagram: one horizontal lane per
rank (rank 0 at the top), one arrow per message from ``(t_send, source)`` to
``(t_recv, dest)``, coloured by kind. It renders with the Agg canvas directly, never
through pyplot, so it opens no window and leaves the caller's matplotlib state alone.
Large traces are thinned to a fixed-seed random sample (a stride would alias with the
periodic patterns of iterative codes) that keeps rare kinds such as control traffic
whole, and the title says so.
"""
from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

__all__ = ["TRACE_SCHEMA", "TRAFFIC_COLUMNS", "TraceBuffer", "write_trace", "read_trace",
           "read_traffic", "plot_trace"]

TRACE_SCHEMA = pa.schema(
    [
        pa.field("t_send", pa.float64()),  # seconds (wall clock of the sender)
        pa.field("t_recv", pa.float64()),  # seconds (wall clock of the receiver)
        pa.field("source", pa.int32()),  # world rank
        pa.field("dest", pa.int32()),  # world rank
        pa.field("tag", pa.int32()),
        pa.field("bytes", pa.int64()),  # payload bytes
        pa.field("kind", pa.string()),  # "app", "coll", "ctrl", ...
        pa.field("comm", pa.string()),  # communicator id
    ]
)
"""Columns and types of a trace file, in order."""

_COLUMNS = tuple(TRACE_SCHEMA.names)

_KIND_COLORS = {"app": "tab:blue", "coll": "tab:orange", "ctrl": "tab:red"}
_OTHER_COLORS = ("tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
_SAMPLE_SEED = 0


# --------------------------------------------------------------------------- recording


class TraceBuffer:
    """Per-rank, in-memory message recorder (column lists, append-only)."""

    __slots__ = _COLUMNS

    def __init__(self) -> None:
        for name in _COLUMNS:
            setattr(self, name, [])

    def record(self, t_send, t_recv, source, dest, tag, nbytes, kind, comm) -> None:
        """Append one received message (hot path: eight list appends)."""
        self.t_send.append(t_send)
        self.t_recv.append(t_recv)
        self.source.append(source)
        self.dest.append(dest)
        self.tag.append(tag)
        self.bytes.append(nbytes)
        self.kind.append(kind)
        self.comm.append(comm)

    def rows(self) -> dict[str, list]:
        """A copy of the recorded columns, ``{column name: list}`` (see TRACE_SCHEMA)."""
        return {name: list(getattr(self, name)) for name in _COLUMNS}

    def extend(self, other_columns: dict[str, list]) -> None:
        """Append the rows of another column dict (e.g. another buffer's ``rows()``).

        Raises:
            ValueError: a column is missing or the columns differ in length.
        """
        _check_columns(other_columns)
        for name in _COLUMNS:
            getattr(self, name).extend(other_columns[name])

    def __len__(self) -> int:
        return len(self.t_send)


def _check_columns(columns: dict[str, list]) -> int:
    """Check a column dict has every trace column, all the same length; return it.

    Raises:
        ValueError: naming the missing columns, or giving each column's length.
    """
    missing = [name for name in _COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"trace columns missing: {', '.join(missing)}")
    lengths = {name: len(columns[name]) for name in _COLUMNS}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"trace columns differ in length: {lengths}")
    return lengths["t_send"]


# --------------------------------------------------------------------------- Parquet


def write_trace(path: str | os.PathLike, columns_list: Iterable[dict[str, list]]) -> int:
    """Merge per-rank column dicts, sort by send time and write one Parquet file.

    Rows are ordered by ``t_send``, ties broken by ``source``, ``t_recv`` then ``dest``,
    so the file does not depend on the order the ranks' buffers arrive in. Missing
    parent directories are created.

    Args:
        path: the Parquet file to write (replaced if it exists).
        columns_list: one ``{column: list}`` dict per rank (``TraceBuffer.rows()``).

    Returns:
        The number of rows written.

    Raises:
        ValueError: a column dict lacks columns, has ragged columns, or holds values
            that do not convert to the schema's types.
    """
    tables = [_to_table(columns) for columns in columns_list]
    table = pa.concat_tables(tables) if tables else TRACE_SCHEMA.empty_table()
    order = [("t_send", "ascending"), ("source", "ascending"),
             ("t_recv", "ascending"), ("dest", "ascending")]
    table = table.sort_by(order)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(table, path)
    return table.num_rows


def _to_table(columns: dict[str, list]) -> pa.Table:
    _check_columns(columns)
    try:
        return pa.Table.from_pydict({n: columns[n] for n in _COLUMNS}, schema=TRACE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ValueError(f"trace values do not fit the trace schema: {exc}") from exc


def read_trace(path: str | os.PathLike) -> pa.Table:
    """Read a trace file written by :func:`write_trace`, checked against TRACE_SCHEMA.

    Extra columns are dropped and the columns come back in schema order and types.

    Raises:
        ValueError: the file does not exist, is empty, is not Parquet (or CSV, by its
            name), lacks trace columns (they are named) or has columns that do not cast
            to the schema.
    """
    return _conform(_read_table(path), f"trace file {os.fspath(path)!r}")


TRAFFIC_COLUMNS = ("source", "dest", "bytes")
"""What a trace must hold to say who sends how much to whom (``read_traffic``)."""


def read_traffic(path_or_table) -> pa.Table:
    """The ``source``, ``dest`` and ``bytes`` columns of a trace, and ``kind`` when it has
    one: all that traffic analysis (Algorithm 2 of the group protocol) needs, so a trace
    converted from another tool (an MPI tracer's send log, as a Parquet or CSV file) is
    enough. Other columns are dropped; types are those of TRACE_SCHEMA.

    Raises:
        ValueError: an unreadable file (see :func:`read_trace`), or one that lacks one of
            the three columns: the message names what it needs and what the file has.
    """
    if isinstance(path_or_table, pa.Table):
        table, what = path_or_table, "trace table"
    else:
        table, what = _read_table(path_or_table), f"trace file {os.fspath(path_or_table)!r}"
    missing = [name for name in TRAFFIC_COLUMNS if name not in table.column_names]
    if missing:
        raise ValueError(
            f"{what} lacks column(s) {', '.join(missing)}: a traffic trace needs source, "
            f"dest and bytes (kind, when present, selects the message kinds); it has "
            f"{', '.join(table.column_names) or 'no columns'}")
    names = [*TRAFFIC_COLUMNS, *(["kind"] if "kind" in table.column_names else [])]
    schema = pa.schema([TRACE_SCHEMA.field(name) for name in names])
    try:
        return table.select(names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ValueError(f"{what} has columns that do not match the trace schema: {exc}") from exc


def _read_table(path: str | os.PathLike) -> pa.Table:
    """A trace file as read: CSV when its name ends in .csv (or .csv.gz), else Parquet.

    Raises:
        ValueError: the file does not exist, is empty or cannot be read as its format.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"trace file {path!r} does not exist")
    if os.path.getsize(path) == 0:
        raise ValueError(f"trace file {path!r} is empty")
    if path.lower().endswith((".csv", ".csv.gz")):
        try:
            return pa_csv.read_csv(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"trace file {path!r} is not a readable CSV file: {exc}") from exc
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"trace file {path!r} is not a readable Parquet file: {exc}") from exc


def _conform(table: pa.Table, what: str) -> pa.Table:
    """Select and cast the trace columns of ``table``.

    Raises:
        ValueError: naming missing columns or the cast that failed.
    """
    missing = [name for name in _COLUMNS if name not in table.column_names]
    if missing:
        raise ValueError(f"{what} lacks trace column(s): {', '.join(missing)}")
    try:
        return table.select(list(_COLUMNS)).cast(TRACE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ValueError(f"{what} has columns that do not match the trace schema: {exc}") from exc


# --------------------------------------------------------------------------- plotting


def plot_trace(path_or_table, out_png, *, title=None, max_messages=20000) -> None:
    """Draw the ranks-by-time message diagram of a trace into a PNG.

    Args:
        path_or_table: a trace file path or a ``pyarrow.Table`` with the trace columns.
        out_png: the image to write.
        title: the figure title; by default the message and rank counts. A note is
            appended when the trace was subsampled.
        max_messages: draw at most this many messages (a fixed-seed random sample
            that keeps rare kinds whole, so the same trace gives the same picture).

    Raises:
        ValueError: see :func:`read_trace`; also if ``max_messages < 1``.
    """
    # drawn here only: every rank process imports this module (TraceBuffer, through
    # ftactors itself), and matplotlib at import time cost each one ~0.3 s of its start
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, got {max_messages}")
    if isinstance(path_or_table, pa.Table):
        table = _conform(path_or_table, "trace table")
    else:
        table = read_trace(path_or_table)
    table = _plottable(table)
    total = table.num_rows
    nranks = _rank_count(table)
    shown = _subsample(table, max_messages)

    fig = Figure(figsize=(12, float(np.clip(1.5 + 0.16 * nranks, 3.5, 13))), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    scale, unit = _time_unit(table)
    t0 = _start_time(table)
    handles = _draw_messages(ax, shown, t0, scale, _kind_counts(table))
    _style_axes(ax, nranks, unit)
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  title="kind", fontsize="small", frameon=False)
    ax.set_title(_title(title, total, shown.num_rows, nranks), fontsize="medium")
    fig.tight_layout()
    fig.savefig(out_png)


def _plottable(table: pa.Table) -> pa.Table:
    """Drop rows without times or ranks; label a missing kind ``"?"``."""
    kind = pc.fill_null(table["kind"], "?")
    table = table.set_column(table.schema.get_field_index("kind"), "kind", kind)
    valid = pc.is_valid(table["t_send"])
    for name in ("t_recv", "source", "dest"):
        valid = pc.and_(valid, pc.is_valid(table[name]))
    return table.filter(valid)


def _rank_count(table: pa.Table) -> int:
    if table.num_rows == 0:
        return 1
    top = max(pc.max(table["source"]).as_py(), pc.max(table["dest"]).as_py())
    return int(top) + 1


def _subsample(table: pa.Table, max_messages: int) -> pa.Table:
    """At most ``max_messages`` rows, chosen with a fixed seed, kept in time order.

    The budget is shared fairly between kinds: a kind with few messages (control
    traffic, typically the interesting part) is kept whole, the rest is split among
    the larger kinds.
    """
    if table.num_rows <= max_messages:
        return table
    rng = np.random.default_rng(_SAMPLE_SEED)
    kinds = table["kind"].to_numpy(zero_copy_only=False)
    groups = sorted((np.flatnonzero(kinds == k) for k in np.unique(kinds)), key=len)
    keep, budget = [], max_messages
    for left, rows in zip(range(len(groups), 0, -1), groups):
        take = min(len(rows), budget // left)
        keep.append(rng.choice(rows, size=take, replace=False))
        budget -= take
    return table.take(pa.array(np.sort(np.concatenate(keep))))


def _start_time(table: pa.Table) -> float:
    if table.num_rows == 0:
        return 0.0
    return min(pc.min(table["t_send"]).as_py(), pc.min(table["t_recv"]).as_py())


def _time_unit(table: pa.Table) -> tuple[float, str]:
    """A scale factor and unit name that keep the time axis numbers readable."""
    if table.num_rows == 0:
        return 1.0, "s"
    t0 = _start_time(table)
    span = max(pc.max(table["t_send"]).as_py(), pc.max(table["t_recv"]).as_py()) - t0
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if span * scale >= 1.0:
            return scale, unit
    return 1e6, "µs"


def _kind_counts(table: pa.Table) -> dict[str, int]:
    counts = table["kind"].value_counts().to_pylist()
    return {c["values"]: c["counts"] for c in counts}


def _kind_color(kind: str, others: list[str]) -> str:
    if kind in _KIND_COLORS:
        return _KIND_COLORS[kind]
    return _OTHER_COLORS[others.index(kind) % len(_OTHER_COLORS)]


def _draw_messages(ax, shown: pa.Table, t0: float, scale: float, counts: dict[str, int]):
    """One arrow per message, one quiver per kind; return the legend handles.

    Rarer kinds are drawn on top and more opaque, so a few control messages stay
    visible among thousands of application messages.
    """
    from matplotlib.lines import Line2D
    others = sorted(k for k in counts if k not in _KIND_COLORS)
    kinds = [k for k in _KIND_COLORS if k in counts] + others
    kind_col = shown["kind"].to_numpy(zero_copy_only=False)
    x0 = (shown["t_send"].to_numpy() - t0) * scale
    x1 = (shown["t_recv"].to_numpy() - t0) * scale
    y0 = shown["source"].to_numpy()
    y1 = shown["dest"].to_numpy()
    handles = []
    for kind in kinds:
        color = _kind_color(kind, others)
        sel = kind_col == kind
        n = int(sel.sum())
        if n:
            ax.quiver(x0[sel], y0[sel], x1[sel] - x0[sel], y1[sel] - y0[sel],
                      angles="xy", scale_units="xy", scale=1, units="dots", width=1.2,
                      headwidth=4, headlength=5, headaxislength=4.5, minlength=0.5,
                      color=color, alpha=0.9 if n <= 2000 else 0.4,
                      zorder=3 - n / shown.num_rows)
        handles.append(Line2D([], [], color=color, marker=">", markersize=5,
                              label=f"{kind} ({counts[kind]:,})"))
    return handles


def _style_axes(ax, nranks: int, unit: str) -> None:
    """Rank lanes top to bottom (rank 0 first), tick labels thinned for many ranks."""
    ax.set_ylim(nranks - 0.5, -0.5)
    step = max(1, int(np.ceil(nranks / 32)))
    ax.set_yticks(range(0, nranks, step))
    for rank in range(nranks):
        ax.axhline(rank, color="0.88", linewidth=0.6, zorder=1)
    ax.set_ylabel("rank")
    ax.set_xlabel(f"time since first message ({unit})")
    ax.tick_params(axis="y", labelsize="small" if nranks <= 32 else "x-small")
    ax.margins(x=0.02)


def _title(title: str | None, total: int, shown: int, nranks: int) -> str:
    text = title or f"message trace: {total:,} messages, {nranks} ranks"
    if shown < total:
        text += f"\n(showing a fixed random sample of {shown:,} of {total:,} messages)"
    return text
