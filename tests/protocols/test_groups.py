"""Group definitions and trace-based group formation (Ho, Wang & Lau, Algorithm 2, Table 1)."""
from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ftactors as ft
from ftactors.runtime._trace import TraceBuffer, write_trace
from ftactors.apps.hpl import HPL
from ftactors.apps.stencil import Layout, Stencil
from ftactors.tools.cli import main
from ftactors.protocols.shared.units import (Groups, PairTraffic, default_group_size, form_groups,
                                       load_groups, pairs_from_trace, ranks_in_trace,
                                       suggest_groups, traffic_inside, validate_groups)

TABLE_1 = [[0, 4, 8, 12, 16, 20, 24, 28], [1, 5, 9, 13, 17, 21, 25, 29],
           [2, 6, 10, 14, 18, 22, 26, 30], [3, 7, 11, 15, 19, 23, 27, 31]]
"""The paper's Table 1: HPL on 32 processes, P x Q = 8 x 4, row-major mapping."""


def _grid_trace(path, p=8, q=4, steps=3):
    """A trace of a p x q row-major grid whose heaviest traffic runs down the columns.

    Per step: a ring down every process column (8 KiB app messages) and a binomial
    broadcast down it (4 KiB collective messages); a ring along every process row
    (2 KiB app messages); a small allreduce-like message to rank 0; and a 1 MiB control
    message between row neighbours 2c and 2c+1 (a protocol's backup, say), which would
    turn the grouping around if control traffic counted.
    """
    n = p * q
    bufs = [TraceBuffer() for _ in range(n)]
    t = 0.0

    def msg(src, dst, nbytes, kind, comm="w"):
        nonlocal t
        t += 1e-4
        bufs[dst].record(t, t + 5e-5, src, dst, 1, nbytes, kind, comm)

    for _ in range(steps):
        for r in range(n):
            row, col = divmod(r, q)
            msg(r, ((row + 1) % p) * q + col, 8192, "app", f"w.2:{col}")
            msg(r, row * q + (col + 1) % q, 2048, "app", f"w.1:{row}")
            if r:
                msg(r, 0, 64, "coll", "w/c")
        for col in range(q):  # binomial tree bcast from process row 0 of each column
            for i in range(1, p):
                parent = i & (i - 1)
                msg(parent * q + col, i * q + col, 4096, "coll", f"w.2:{col}/c")
        for r in range(0, n, 2):
            msg(r, r + 1, 1 << 20, "ctrl", "ctl")
    write_trace(path, [b.rows() for b in bufs])
    return path


# --------------------------------------------------------------------------- Table 1


def test_table1_from_a_column_dominated_8x4_trace(tmp_path):
    trace = _grid_trace(tmp_path / "grid.parquet")
    pairs = pairs_from_trace(trace)
    assert ranks_in_trace(trace) == 32
    assert suggest_groups(pairs, 8) == TABLE_1
    # the input list is sorted by bytes, then count, descending; ctrl messages are left out
    assert [(p.bytes, p.count) for p in pairs] == sorted(
        ((p.bytes, p.count) for p in pairs), reverse=True)
    assert all(p.bytes < 1 << 20 for p in pairs)
    # counted, the control traffic (a protocol's, not the program's) pairs row neighbours
    with_ctrl = suggest_groups(pairs_from_trace(trace, kinds=("app", "coll", "ctrl")), 8)
    assert with_ctrl != TABLE_1 and [0, 1] == with_ctrl[0][:2]
    # collective messages are real traffic: the broadcasts alone find the columns too
    assert suggest_groups(pairs_from_trace(trace, kinds=("coll",)), 8) == TABLE_1


@pytest.fixture(scope="module")
def hpl_traces(tmp_path_factory):
    """Real HPL traces (local transport): 8 x 4 (the paper's grid), 4 x 2 and 2 x 4."""
    root = tmp_path_factory.mktemp("hpl")
    traces = {}
    for p, q in ((8, 4), (4, 2), (2, 4)):
        path = root / f"hpl{p}x{q}.parquet"
        res = ft.run(HPL, ranks=p * q, transport="local", trace=str(path),
                     kwargs={"n": 160, "nb": 16, "p": p, "q": q})
        assert all(r["verified"] for r in res.results)
        traces[p, q] = path
    return traces


def _columns(p, q):
    return [[row * q + col for row in range(p)] for col in range(q)]


def _mean_bytes_per_pair(pairs, q):
    """Mean bytes of a column pair and of a row pair (row-major grid with q columns)."""
    col = [t.bytes for t in pairs if (t.ranks[1] - t.ranks[0]) % q == 0]
    row = [t.bytes for t in pairs if t.ranks[0] // q == t.ranks[1] // q]
    return sum(col) / len(col), sum(row) / len(row)


@pytest.mark.parametrize("p, q", [(8, 4), (4, 2), (2, 4)])
def test_hpl_trace_gives_the_process_columns(hpl_traces, p, q):
    # Our HPL (apps/hpl.py, row-major grid, rank = myrow * q + mycol) gives the process
    # COLUMNS, as the paper's HPL did (Table 1: Q groups of P ranks c, c+Q, c+2Q, ...).
    # Three of a panel step's four communications run down the columns (col_comm): the
    # allgather of the panel inside the column that owns it (the whole remaining panel
    # reaches every member: our stand-in for HPL's per-column pivot messages), the pivot
    # row swaps (an alltoall per column) and the U12 broadcast down every column. Along
    # the rows (row_comm) runs only the panel broadcast, and each process row sends just
    # its 1/P share of the panel. So a column pair carries about twice the bytes of a row
    # pair, and the heaviest pairs (the tree edges of the column collectives) connect
    # each column before a row pair comes up: with G = P the columns fill up and no row
    # pair can merge them. (In total bytes the rows can still match the columns when
    # Q > P, e.g. 2 x 4, since a row has more pairs; Algorithm 2 ranks pairs, not
    # communicators. With few panels per process column, n/nb < ~2Q, the columns that
    # own the late, small panels fall to the level of row pairs and mixed groups appear.)
    pairs = pairs_from_trace(hpl_traces[p, q])
    col, row = _mean_bytes_per_pair(pairs, q)
    assert col > 1.5 * row
    assert (pairs[0].ranks[1] - pairs[0].ranks[0]) % q == 0  # the heaviest pair: a column
    assert suggest_groups(pairs, p, ranks_in_trace(hpl_traces[p, q])) == _columns(p, q)
    if (p, q) == (8, 4):
        assert _columns(p, q) == TABLE_1


def test_stencil_trace_gives_blocks_of_neighbours(tmp_path):
    trace = tmp_path / "stencil.parquet"
    res = ft.run(Stencil, ranks=16, transport="local", trace=str(trace),
                 kwargs={"ny": 32, "nx": 32, "iterations": 20, "verify": False})
    layout = Layout.whole(32, 32, 16)
    assert (layout.py, layout.px) == (4, 4) == tuple(res.results[0]["grid"])
    pairs = pairs_from_trace(trace)
    groups = suggest_groups(pairs, 4)
    assert sorted(r for g in groups for r in g) == list(range(16))
    assert [len(g) for g in groups] == [4, 4, 4, 4]
    for group in groups:  # each group is a connected block of halo-exchange neighbours
        reached, todo = {group[0]}, [group[0]]
        while todo:
            for nb in layout.neighbours(todo.pop()):
                if nb in group and nb not in reached:
                    reached.add(nb)
                    todo.append(nb)
        assert reached == set(group), f"group {group} is not a block of neighbours"
    # today the ties fall so that the groups are the four 2 x 2 quadrants
    assert groups == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]
    inside, total = traffic_inside(pairs, groups)
    assert inside > total / 2


# --------------------------------------------------------------------------- Algorithm 2


def P(a, b, count, nbytes):
    return PairTraffic((a, b), count, nbytes)


def test_sorted_by_bytes_then_count_then_pair():
    # bytes first: (1, 2) has fewer messages but more bytes
    assert suggest_groups([P(0, 1, 100, 50), P(1, 2, 1, 60)], 2) == [[0], [1, 2]]
    # equal bytes: more messages first
    assert suggest_groups([P(0, 1, 1, 100), P(1, 2, 5, 100)], 2) == [[0], [1, 2]]
    # full tie: lower pair first
    assert suggest_groups([P(1, 2, 1, 100), P(0, 1, 1, 100)], 2) == [[0, 1], [2]]


def test_pairs_for_the_same_ranks_are_added_up():
    # (0, 1) and (1, 0) together outweigh (1, 2): Algorithm 2's preprocessing
    pairs = [((0, 1), 1, 10), ((1, 0), 1, 10), ((1, 2), 1, 15)]
    assert form_groups(pairs, 2) == [((0, 1), 2, 20)]
    assert suggest_groups(pairs, 2) == [[0, 1], [2]]


def test_same_group_adds_traffic_and_different_groups_merge_whole():
    pairs = [P(0, 1, 1, 100), P(2, 3, 1, 90), P(1, 2, 2, 80), P(0, 3, 3, 70)]
    # (1, 2) joins the groups {0, 1} and {2, 3} (size 4 <= G); (0, 3) is then inside
    assert form_groups(pairs, 4) == [((0, 1, 2, 3), 7, 340)]
    # with G = 3 the two groups of two cannot merge: (1, 2) and (0, 3) cross groups
    assert form_groups(pairs, 3) == [((0, 1), 1, 100), ((2, 3), 1, 90)]


def test_a_full_group_does_not_take_the_other_rank_which_stays_free():
    # {0, 1} is full (G = 2): (1, 2) changes nothing, rank 2 is not put in a second group
    # with rank 1, and still pairs with rank 3 later
    pairs = [P(0, 1, 1, 100), P(1, 2, 1, 90), P(2, 3, 1, 10)]
    assert form_groups(pairs, 2) == [((0, 1), 1, 100), ((2, 3), 1, 10)]
    # without a free partner rank 2 ends alone
    assert suggest_groups(pairs[:2], 2) == [[0, 1], [2]]


def test_a_rank_never_moves_between_groups():
    # 2 is bound to 3 first; its heavier-looking later pair with 1 does not steal it
    pairs = [P(2, 3, 1, 100), P(0, 1, 1, 90), P(1, 2, 1, 80)]
    assert suggest_groups(pairs, 2) == [[0, 1], [2, 3]]
    assert suggest_groups(pairs, 3) == [[0, 1], [2, 3]]
    assert suggest_groups(pairs, 4) == [[0, 1, 2, 3]]


def test_g_one_silent_ranks_and_bounds():
    pairs = [P(0, 1, 1, 10), P(1, 2, 1, 10)]
    assert suggest_groups(pairs, 1) == [[0], [1], [2]]  # a pair would break G = 1
    assert form_groups(pairs, 1) == []
    assert suggest_groups(pairs, 5, nranks=5) == [[0, 1, 2], [3], [4]]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ft.ConfigError, match="maximum group size"):
            suggest_groups(pairs, bad)
    with pytest.raises(ft.ConfigError, match="rank 2, more than the 2 ranks"):
        suggest_groups(pairs, 2, nranks=2)
    with pytest.raises(ft.ConfigError, match="itself"):
        suggest_groups([P(1, 1, 1, 1)], 2)
    with pytest.raises(ft.ConfigError, match="not a rank"):
        suggest_groups([P(-1, 1, 1, 1)], 2)
    assert default_group_size(32) == 6 and default_group_size(16) == 4
    assert default_group_size(1) == 1 and default_group_size(17) == 5


def test_groups_never_exceed_g_on_a_dense_pattern():
    n = 23
    pairs = [P(a, b, 1, (a * 7 + b * 13) % 31 + 1) for a in range(n) for b in range(a + 1, n)]
    for g in range(1, n + 2):
        groups = suggest_groups(pairs, g)
        assert sorted(r for grp in groups for r in grp) == list(range(n))
        assert max(len(grp) for grp in groups) <= g


# --------------------------------------------------------------------------- bad traces


def _one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ftactors groups suggest: ")
    assert match in err, err


def test_bad_traces(tmp_path, capsys):
    missing = tmp_path / "missing.parquet"
    with pytest.raises(ValueError, match="does not exist"):
        pairs_from_trace(missing)
    _one_line_error(capsys, ["groups", "suggest", str(missing), "--max-size", "4"],
                    "does not exist")

    empty_file = tmp_path / "empty.parquet"
    empty_file.write_bytes(b"")
    _one_line_error(capsys, ["groups", "suggest", str(empty_file)], "is empty")

    text = tmp_path / "notes.parquet"
    text.write_text("source,dest,bytes\n0,1,10\n")
    _one_line_error(capsys, ["groups", "suggest", str(text)], "not a readable Parquet file")

    no_bytes = tmp_path / "nobytes.parquet"
    pq.write_table(pa.table({"source": [0], "dest": [1], "kind": ["app"]}), no_bytes)
    _one_line_error(capsys, ["groups", "suggest", str(no_bytes)],
                    "lacks column(s) bytes: a traffic trace needs source, dest and bytes "
                    "(kind, when present, selects the message kinds); it has source, dest, "
                    "kind")
    no_ranks = tmp_path / "noranks.csv"
    no_ranks.write_text("from,to,bytes\n0,1,10\n")
    _one_line_error(capsys, ["groups", "suggest", str(no_ranks)],
                    "lacks column(s) source, dest: a traffic trace needs source, dest and "
                    "bytes")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("source,dest,bytes\n0,1\n")
    _one_line_error(capsys, ["groups", "suggest", str(bad_csv)], "not a readable CSV file")

    no_rows = tmp_path / "norows.parquet"
    write_trace(no_rows, [])
    with pytest.raises(ValueError, match="no messages"):
        pairs_from_trace(no_rows)
    _one_line_error(capsys, ["groups", "suggest", str(no_rows)], "no messages")

    ctrl_only = tmp_path / "ctrl.parquet"
    buf = TraceBuffer()
    buf.record(0.0, 0.1, 0, 1, 0, 100, "ctrl", "ctl")
    buf.record(0.0, 0.1, 1, 1, 0, 100, "app", "w")  # to itself: not a pair
    write_trace(ctrl_only, [buf.rows()])
    _one_line_error(capsys, ["groups", "suggest", str(ctrl_only)],
                    "2 messages but none of kind app or coll between two different ranks")

    good = _grid_trace(tmp_path / "grid.parquet", steps=1)
    _one_line_error(capsys, ["groups", "suggest", str(good), "--max-size", "0"],
                    "maximum group size must be an integer >= 1, got 0")
    _one_line_error(capsys, ["groups", "suggest", str(good), "--ranks", "8"],
                    "--ranks 8 is fewer than the trace shows (32)")


def _minimal_columns(full_trace) -> dict:
    """The three columns another tool's trace has (no kind: its control messages are not
    in it), from a grid trace: its app and coll rows."""
    t = pq.read_table(full_trace).to_pydict()
    rows = [i for i, k in enumerate(t["kind"]) if k != "ctrl"]
    return {c: [t[c][i] for i in rows] for c in ("source", "dest", "bytes")}


def test_suggest_takes_a_three_column_parquet_or_csv_trace(tmp_path, capsys):
    cols = _minimal_columns(_grid_trace(tmp_path / "grid.parquet"))
    minimal = tmp_path / "tracer.parquet"
    pq.write_table(pa.table(cols), minimal)
    csv = tmp_path / "tracer.csv"
    csv.write_text("source,dest,bytes\n" + "".join(
        f"{s},{d},{b}\n" for s, d, b in zip(cols["source"], cols["dest"], cols["bytes"])))
    for trace in (minimal, csv):
        out = tmp_path / f"{trace.suffix[1:]}.json"
        assert main(["groups", "suggest", str(trace), "--max-size", "8", "-o", str(out)]) == 0
        text = capsys.readouterr().out
        assert "4 groups of at most 8 ranks for 32 ranks" in text
        assert "(no kind column: all)" in text
        data = json.loads(out.read_text())
        assert data["groups"] == TABLE_1 and data["kinds"] is None
    # the same columns as an ft.run(..., trace=PATH) group policy
    assert load_groups(f"trace:{csv}", 32).groups == tuple(
        tuple(g) for g in suggest_groups(pairs_from_trace(minimal), 6, 32))


def test_cli_suggest_prints_and_writes_a_loadable_definition(tmp_path, capsys):
    trace = _grid_trace(tmp_path / "grid.parquet")
    out = tmp_path / "groups.json"
    assert main(["groups", "suggest", str(trace), "--max-size", "8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "4 groups of at most 8 ranks for 32 ranks" in text
    assert "group 0: 0, 4, 8, 12, 16, 20, 24, 28" in text
    assert f"wrote {out}" in text
    data = json.loads(out.read_text())
    assert data["groups"] == TABLE_1 and data["max_size"] == 8
    assert data["source"] == str(trace) and data["nranks"] == 32
    assert data["kinds"] == ["app", "coll"]
    assert load_groups(str(out), 32).groups == tuple(map(tuple, TABLE_1))
    with pytest.raises(ft.ConfigError, match="is for 32 ranks, the run has 16"):
        load_groups(out, 16)
    # no --max-size: the paper's default ceil(sqrt(n)); --ranks adds silent ranks alone
    assert main(["groups", "suggest", str(trace), "--ranks", "34", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["max_size"] == 6 and data["nranks"] == 34
    assert data["groups"][-2:] == [[32], [33]]
    assert max(len(g) for g in data["groups"]) <= 6


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["groups", "suggest", "--help"])
    assert exc.value.code == 0
    assert "--max-size" in capsys.readouterr().out


# --------------------------------------------------------------------------- definitions


def test_policies():
    assert load_groups("one", 5).groups == ((0, 1, 2, 3, 4),)
    assert load_groups("single", 3).groups == ((0,), (1,), (2,))
    assert load_groups("fixed:4", 10).groups == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9))
    assert load_groups("fixed:20", 3).groups == ((0, 1, 2),)
    default = load_groups(None, 10)  # ceil(sqrt(10)) = 4 consecutive ranks
    assert default.groups == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9))
    assert load_groups("default", 10) == default
    assert load_groups(None, 16).groups == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                            (12, 13, 14, 15))
    for bad, match in [("fixed:0", ">= 1"), ("fixed:x", "integer"), ("fixed:", "integer"),
                       ("trace:", "give a trace file"), ("nonsense", "neither a policy")]:
        with pytest.raises(ft.ConfigError, match=match):
            load_groups(bad, 4)
    with pytest.raises(ft.ConfigError, match="number of ranks"):
        load_groups("one", 0)


def test_trace_policy(tmp_path):
    trace = _grid_trace(tmp_path / "grid.parquet")
    groups = load_groups(f"trace:{trace}", 32)  # G = ceil(sqrt(32)) = 6
    assert groups.max_size <= 6 and groups.source == f"trace:{trace}"
    assert groups.groups == tuple(map(tuple, suggest_groups(pairs_from_trace(trace), 6)))
    with pytest.raises(ft.ConfigError, match="ranks up to 31, more than the 16"):
        load_groups(f"trace:{trace}", 16)
    with pytest.raises(ft.ConfigError, match="does not exist"):
        load_groups(f"trace:{tmp_path / 'nope.parquet'}", 4)


def test_groups_lookup():
    g = Groups([[3, 1], [0, 2]], 4)
    assert g.groups == ((1, 3), (0, 2))  # ranks sorted, group order kept
    assert g.group_of(3) == 0 and g.members(2) == (0, 2) and len(g) == 2
    assert g.same_group(1, 3) and not g.same_group(0, 1)
    assert load_groups(g, 4) is g
    assert pickle.loads(pickle.dumps(g)) == g and pickle.loads(pickle.dumps(g)).group_of(3) == 0
    with pytest.raises(ft.ConfigError, match="is for 4 ranks, the run has 5"):
        load_groups(g, 5)
    assert load_groups([[0, 1], [2]], 3).to_json()["groups"] == [[0, 1], [2]]
    # numpy ranks and arrays are fine (e.g. groups cut out of np.arange)
    assert Groups(np.arange(6).reshape(2, 3), 6).groups == ((0, 1, 2), (3, 4, 5))
    assert suggest_groups([((np.int32(0), np.int64(1)), 1, 5)], np.int64(2)) == [[0, 1]]


@pytest.mark.parametrize("groups, nranks, match", [
    ([[0, 1], [2]], 4, "rank 3 is in no group"),
    ([[0], [1]] + [[r] for r in range(4, 20)], 20, r"ranks 2, 3 are in no group"),
    ([[0, 1], [1, 2, 3]], 4, "rank 1 is in groups 0 and 1"),
    ([[0, 0, 1, 2, 3]], 4, "rank 0 is twice in group 0"),
    ([[0, 1, 2, 3, 4]], 4, r"rank 4 in group 0 is out of range for 4 ranks \(0..3\)"),
    ([[0, 1], [], [2, 3]], 4, "group 1 is empty"),
    ([[0, 1], [2, "3"]], 4, "group 1 holds '3', which is not a rank"),
    ([[0, 1], [2, 3.0]], 4, "which is not a rank"),
    ([[0, 1], [2, True]], 4, "which is not a rank"),
    ([[0, 1], 2, [3]], 4, "group 1 must be a list of ranks"),
    ({"groups": [[0, 1, 2, 3]]}, 4, "expected a list of groups"),
    ("0123", 4, "expected a list of groups"),
    ([[0]], 0, "number of ranks must be an integer >= 1"),
])
def test_validation_errors(groups, nranks, match):
    with pytest.raises(ft.ConfigError, match=match):
        validate_groups(groups, nranks)


def test_many_missing_ranks_are_summarised():
    with pytest.raises(ft.ConfigError, match=r"ranks 1, 2, .*10, \.\.\. \(99 in all\)"):
        validate_groups([[0]], 100)


def test_definition_files(tmp_path, monkeypatch):
    obj = tmp_path / "groups.json"
    obj.write_text(json.dumps({"groups": [[0, 2], [1, 3]], "note": "hand-written"}))
    assert load_groups(str(obj), 4).groups == ((0, 2), (1, 3))
    bare = tmp_path / "bare.json"
    bare.write_text("[[0, 1, 2], [3]]")
    assert load_groups(bare, 4).groups == ((0, 1, 2), (3,))
    for name, content, match in [
        ("broken.json", "[[0, 1", "not valid JSON"),
        ("nokey.json", '{"ranks": [[0, 1, 2, 3]]}', 'no "groups" key'),
        ("short.json", "[[0, 1], [2]]", "rank 3 is in no group"),
    ]:
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(ft.ConfigError, match=match) as exc:
            load_groups(str(path), 4)
        assert name in str(exc.value)
    with pytest.raises(ft.ConfigError, match="neither a policy .* nor an existing file"):
        load_groups(str(tmp_path / "absent.json"), 4)

    yml = tmp_path / "groups.yaml"
    yml.write_text("groups:\n  - [0, 1]\n  - [2, 3]\n")
    try:
        import yaml  # noqa: F401
    except ImportError:
        pass
    else:
        assert load_groups(yml, 4).groups == ((0, 1), (2, 3))
        bad = tmp_path / "bad.yml"
        bad.write_text("groups: [[0, 1]\n")
        with pytest.raises(ft.ConfigError, match="not valid YAML"):
            load_groups(bad, 4)
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(ft.ConfigError, match="needs PyYAML, which is not installed"):
        load_groups(yml, 4)
