"""Smoke test of ``ftactors bench hc3i`` at a small size: it runs through the bench
registry and writes JSON with every figure and table. Counts are checked for shape and
for what must hold whatever the seed, never for the paper's values."""
import json

from .test_bench_smoke import bench


def test_hc3i_bench_json(tmp_path):
    out = tmp_path / "hc3i.json"
    assert bench("hc3i", "--ranks", "6", "--hours", "2", "--quick", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "hc3i" and data["ranks_per_cluster"] == 6
    assert [row["interval_min"] for row in data["fig6_7"]] == [30, 120]
    for row in data["fig6_7"]:
        assert row["unforced"][1] == 0  # cluster 1's timer is infinite
        assert row["unforced"][0] <= 2 * 60 / row["interval_min"]  # the timer restarts
    assert [row["c1_to_c0"] for row in data["fig9"]] == [11, 103]
    assert all(len(row["forced"]) == 2 for row in data["fig9"])
    for name, n in (("table2", 2), ("table3", 3)):
        gcs = data[name]["gc"]
        assert gcs and all(len(g["before"]) == n and len(g["after"]) == n for g in gcs)
        assert all(a <= b for g in gcs for a, b in zip(g["after"], g["before"]))
    trans = data["transitive"]["three_clusters"]
    assert trans["transitive"] is True and len(trans["forced"]) == 3
    assert data["table3"]["messages"]["1->2"] > 0


def test_hc3i_bench_rejects_bad_sizes():
    assert bench("hc3i", "--ranks", "1") == 2
