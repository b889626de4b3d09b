"""Message traces: recording, Parquet round trip, schema errors and the diagram."""
from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftactors.runtime._trace import TRACE_SCHEMA, TraceBuffer, plot_trace, read_trace, write_trace

COLUMNS = ["t_send", "t_recv", "source", "dest", "tag", "bytes", "kind", "comm"]


def _ring_buffers(nranks: int, steps: int, seed: int = 0) -> list[TraceBuffer]:
    """Per-rank buffers of a ring exchange plus a gather to rank 0 and a control message."""
    rng = np.random.default_rng(seed)
    buffers = [TraceBuffer() for _ in range(nranks)]
    for step in range(steps):
        t = 100.0 + step * 0.01
        for src in range(nranks):
            dst = (src + 1) % nranks
            ts = t + rng.uniform(0, 1e-3)
            buffers[dst].record(ts, ts + rng.uniform(1e-4, 2e-3), src, dst, 7, 4096, "app", "world")
        for src in range(1, nranks):
            buffers[0].record(t + 5e-3, t + 6e-3, src, 0, -3, 8, "coll", "world")
    buffers[1].record(100.002, 100.004, 0, 1, -9, 32, "ctrl", "ctl")
    return buffers


def test_schema_columns_and_types():
    assert TRACE_SCHEMA.names == COLUMNS
    types = {f.name: f.type for f in TRACE_SCHEMA}
    assert types["t_send"] == pa.float64() and types["t_recv"] == pa.float64()
    assert types["source"] == pa.int32() and types["dest"] == pa.int32()
    assert types["tag"] == pa.int32() and types["bytes"] == pa.int64()
    assert types["kind"] == pa.string() and types["comm"] == pa.string()


def test_buffer_records_rows_and_extends():
    a, b = TraceBuffer(), TraceBuffer()
    a.record(1.0, 1.5, 0, 1, 3, 100, "app", "world")
    b.record(0.5, 0.7, 2, 1, 4, 8, "ctrl", "c1")
    assert len(a) == 1
    rows = a.rows()
    assert rows == {"t_send": [1.0], "t_recv": [1.5], "source": [0], "dest": [1], "tag": [3],
                    "bytes": [100], "kind": ["app"], "comm": ["world"]}
    rows["tag"].append(99)  # rows() is a copy
    assert len(a.tag) == 1
    a.extend(b.rows())
    assert len(a) == 2 and a.rows()["kind"] == ["app", "ctrl"]


def test_buffer_extend_rejects_bad_columns():
    buf = TraceBuffer()
    bad = TraceBuffer().rows()
    del bad["dest"]
    with pytest.raises(ValueError, match="dest"):
        buf.extend(bad)
    ragged = TraceBuffer().rows()
    ragged["tag"] = [1]
    with pytest.raises(ValueError, match="length"):
        buf.extend(ragged)
    assert len(buf) == 0


def test_write_read_round_trip(tmp_path):
    buffers = _ring_buffers(4, 5)
    expected = sum(len(b) for b in buffers)
    path = tmp_path / "sub" / "trace.parquet"
    assert write_trace(path, [b.rows() for b in buffers]) == expected
    table = read_trace(path)
    assert table.schema.equals(TRACE_SCHEMA)
    assert pq.read_schema(path).remove_metadata().equals(TRACE_SCHEMA)
    assert table.num_rows == expected
    t_send = table["t_send"].to_numpy()
    assert np.all(np.diff(t_send) >= 0)
    merged = {c: sum((b.rows()[c] for b in buffers), []) for c in COLUMNS}
    want = sorted(zip(*(merged[c] for c in COLUMNS)))
    got = sorted(zip(*(table[c].to_pylist() for c in COLUMNS)))
    assert got == want


def test_write_is_independent_of_buffer_order(tmp_path):
    rows = [b.rows() for b in _ring_buffers(4, 3)]
    write_trace(tmp_path / "a.parquet", rows)
    write_trace(tmp_path / "b.parquet", rows[::-1])
    assert read_trace(tmp_path / "a.parquet").equals(read_trace(tmp_path / "b.parquet"))


def test_write_empty_trace(tmp_path):
    assert write_trace(tmp_path / "e.parquet", []) == 0
    assert write_trace(tmp_path / "e2.parquet", [TraceBuffer().rows()]) == 0
    assert read_trace(tmp_path / "e.parquet").num_rows == 0


def test_write_rejects_values_outside_schema(tmp_path):
    buf = TraceBuffer()
    buf.record(1.0, 2.0, 0, 2**40, 0, 1, "app", "world")  # dest overflows int32
    with pytest.raises(ValueError, match="schema"):
        write_trace(tmp_path / "t.parquet", [buf.rows()])


def test_read_missing_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_trace(tmp_path / "nope.parquet")


def test_read_empty_file(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        read_trace(path)


def test_read_non_parquet_file(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_text("t_send,t_recv\n1,2\n")
    with pytest.raises(ValueError, match="not a readable Parquet"):
        read_trace(path)


def test_read_missing_column_is_named(tmp_path):
    rows = _ring_buffers(2, 1)[0].rows()
    del rows["dest"]
    path = tmp_path / "nodest.parquet"
    pq.write_table(pa.table(rows), path)
    with pytest.raises(ValueError, match="dest") as exc:
        read_trace(path)
    assert "source" not in str(exc.value)


def _assert_real_picture(png):
    assert png.is_file() and png.stat().st_size > 10_000
    pixels = mpimg.imread(png)[..., :3]
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    not_white = (pixels < 0.95).any(axis=-1).mean()
    assert 0.01 < not_white < 0.9
    # Message colours (the blue of "app"), not only black axes and text.
    blue = (pixels[..., 2] > pixels[..., 0] + 0.2).mean()
    assert blue > 0.001


@pytest.mark.parametrize("nranks", [4, 64])
def test_plot_writes_a_real_png(tmp_path, nranks):
    path = tmp_path / "trace.parquet"
    write_trace(path, [b.rows() for b in _ring_buffers(nranks, 10)])
    png = tmp_path / f"trace-{nranks}.png"
    plot_trace(path, png, title=f"{nranks} ranks")
    _assert_real_picture(png)


def test_plot_from_table_subsamples_deterministically(tmp_path):
    path = tmp_path / "trace.parquet"
    write_trace(path, [b.rows() for b in _ring_buffers(16, 40)])
    table = read_trace(path)
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    plot_trace(table, first, max_messages=200)
    plot_trace(path, second, max_messages=200)
    _assert_real_picture(first)
    assert first.read_bytes() == second.read_bytes()


def test_plot_empty_trace(tmp_path):
    write_trace(tmp_path / "e.parquet", [])
    plot_trace(tmp_path / "e.parquet", tmp_path / "e.png")
    assert (tmp_path / "e.png").stat().st_size > 1000


def test_plot_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        plot_trace(tmp_path / "nope.parquet", tmp_path / "x.png")
    with pytest.raises(ValueError, match="dest"):
        plot_trace(pa.table({"t_send": [1.0]}), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_subsample_keeps_rare_kinds_whole(tmp_path):
    from ftactors.runtime._trace import _subsample

    path = tmp_path / "trace.parquet"
    write_trace(path, [b.rows() for b in _ring_buffers(16, 40)])
    table = read_trace(path)
    sample = _subsample(table, 100)
    assert sample.num_rows == 100
    assert sample["kind"].to_pylist().count("ctrl") == 1
    assert np.all(np.diff(sample["t_send"].to_numpy()) >= 0)
    assert _subsample(table, table.num_rows) is table
