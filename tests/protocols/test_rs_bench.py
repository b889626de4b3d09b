"""Smoke test of ``ftactors bench rs``: a small run through the bench registry writes JSON
with every field. Performance is not asserted (the machine is shared); the tolerance
table is deterministic (seeded) and checked against the placement's properties."""
import argparse
import json

from ftactors.bench import add_bench


def bench(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_bench(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["bench", *argv])
    return args.func(args)


def test_rs_bench_json(tmp_path):
    out = tmp_path / "rs.json"
    assert bench("rs", "--groups", "1,2", "--group-size", "2", "--state-mib", "0.05",
                 "--rounds", "2", "--block-kib", "16", "--nodes", "8", "--ranks-per-node",
                 "2", "--trials", "50", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert [r["groups"] for r in data["encode"]] == [1, 2]
    for run in data["encode"]:
        assert run["ranks"] == 2 * run["groups"] and run["placed_groups"] == run["groups"]
        assert run["rounds"] == 2
        assert run["encode_s_per_rank"] > 0 and run["ratio_to_memcpy"] > 0
        assert run["encode_s_max_rank"] >= run["encode_s_per_rank"]
    assert data["encode"][0]["ratio_to_first"] == 1.0 and data["memcpy_s"] > 0
    rows = data["tolerance"]["rows"]
    assert [r["failed_nodes"] for r in rows] == [1, 2, 3, 4]
    # one node: every group loses at most one block, always survivable
    assert rows[0]["interleaved"] == rows[0]["plain"] == 1.0
    # two nodes with groups of 2 (m = k = 2): interleaved sectors keep every pair of a
    # group and its parity holders apart, so only a whole group plus a holder is fatal
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("interleaved", "plain"))
    assert rows[1]["interleaved"] >= rows[1]["plain"]


def test_rs_bench_rejects_bad_settings():
    assert bench("rs", "--groups", "0") == 2
