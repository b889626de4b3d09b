"""Smoke tests of ``ftactors bench sim`` and ``ftactors bench transport``: they run at a
small size through the bench registry and write JSON with every field. Performance is
never asserted here (the machine is shared); only the shape of the results is."""
import json
import subprocess
import sys

import pytest

from ftactors.tools.cli import main

# The quick benches run stacks without spares, and checkpoint on request, on purpose;
# the warnings are tested in tests/runtime/test_notices.py.
pytestmark = [pytest.mark.filterwarnings("ignore::ftactors.NoSparesWarning"),
              pytest.mark.filterwarnings("ignore::ftactors.NoCheckpointWarning")]


def bench(*argv: str) -> int:
    """Run ``ftactors bench ARGV`` as the command line does."""
    return main(["bench", *argv])


def test_sim_bench_json(tmp_path):
    out = tmp_path / "sim.json"
    assert bench("sim", "--ranks", "16", "--rounds", "2", "--repetitions", "1",
                 "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "sim"
    assert (data["ranks"], data["rounds"], data["repetitions"]) == (16, 2, 1)
    for transport in ("sim", "local"):
        fig = data[transport]
        assert fig["messages"] > 16 * 2  # at least the ring passes
        assert fig["wall_s"] > 0 and fig["msgs_per_s"] > 0 and fig["run_wall_s"] > 0
        assert len(data["runs"][transport]) == 1
    assert data["sim"]["messages"] == data["local"]["messages"]  # the same workload
    assert data["sim"]["virtual_s"] > 0
    assert data["ratio_sim_over_local"] > 0
    assert data["machine"]["cpus"] >= 1
    # what a simulated run costs: its events and callbacks, its peak memory per rank
    assert data["sim"]["callbacks"] >= data["sim"]["events"] >= data["sim"]["messages"] / 2
    assert data["sim"]["peak_rss_bytes"] > 0 and data["sim"]["bytes_per_rank"] >= 0


def test_sim_bench_without_baseline(tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert bench("sim", "--ranks", "16", "--rounds", "1", "--repetitions", "1",
                 "--baseline", "none", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["local"] is None and data["ratio_sim_over_local"] is None
    assert "a simulated run of 16 ranks here" in capsys.readouterr().out


def test_sim_bench_rejects_bad_sizes():
    assert bench("sim", "--ranks", "1") == 2


def test_transport_bench_json(tmp_path, ray_session):
    out = tmp_path / "transport.json"
    assert bench("transport", "--quick", "--repetitions", "1", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "transport" and data["quick"] is True
    reps = data["repetitions"]
    figures = data["figures"]
    sizes = {"bandwidth_65536", "bandwidth_131072", "bandwidth_1048576", "bandwidth_16777216"}
    assert set(figures) == {"latency", "throughput"} | sizes
    for key, fig in figures.items():
        for side in ("ftactors", "ray", "socket"):
            assert fig[side] > 0
            assert len(fig[f"{side}_samples"]) == reps
        assert fig["ratio"] > 0 and fig["ratio_socket"] > 0
        assert ("targets" in fig) == ("met" in fig)
    targeted = {k for k, f in figures.items() if "targets" in f}
    assert targeted == {"latency", "throughput"} | sizes
    assert set(figures["latency"]["targets"]) == {"ray", "socket"}
    assert data["targets_met"] == all(figures[k]["met"] for k in targeted)
    assert {"python", "platform", "cpus", "ray", "numpy"} <= set(data["machine"])


def test_transport_bench_measures_more_sizes_on_request():
    """``--sizes-kib`` adds array sizes (either side of a crossover) to the plan, each
    with a bandwidth row of its own; a size that is no whole number of float64 is refused."""
    from benchmarks import transport
    plan = transport.plan_of(transport.QUICK, "96, 104,16384")
    assert list(plan["arrays"]) == sorted({96 << 10, 104 << 10, *transport.SIZES})
    assert plan["arrays"][96 << 10] == transport.EXTRA_BYTES["quick"] // (96 << 10)
    assert plan["arrays"][16 << 20] == transport.QUICK["arrays"][16 << 20]  # as it was
    labels = [label for _, label, _, _ in transport.figures_of(plan["arrays"])]
    assert labels[2:5] == ["64 KiB bandwidth", "96 KiB bandwidth", "104 KiB bandwidth"]
    with pytest.raises(ValueError, match="multiple of 8"):
        transport.plan_of(transport.QUICK, "0.001")
    assert bench("transport", "--sizes-kib", "-8") == 2


def test_transport_bench_passes_options_to_the_ftactors_side():
    """``--option NAME=VALUE`` (a Python literal, repeatable) becomes an option of the
    ftactors side's ``ft.run``, to measure either side of a threshold; anything else is
    a usage error."""
    from benchmarks import transport
    assert transport.options_of(["shared_memory_bytes=None", " object_store_bytes = 1073741824"]) == {
        "shared_memory_bytes": None, "object_store_bytes": 1 << 30}
    for bad in ("shared_memory_bytes", "=3", "x=not a literal"):
        with pytest.raises(ValueError, match="--option"):
            transport.options_of([bad])
    assert bench("transport", "--option", "x") == 2


def test_erasure_bench_json(tmp_path):
    out = tmp_path / "erasure.json"
    assert bench("erasure", "--codes", "4x2", "--sizes-mib", "0.25",
                 "--repeat", "1", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "erasure"
    (row,) = data["results"]
    assert (row["k"], row["m"]) == (4, 2)
    for key in ("memcpy_MBps", "encode_MBps", "decode_MBps", "gf_mul_block_GBps",
                "partial_products_GBps", "encode_over_memcpy", "decode_over_memcpy"):
        assert row[key] > 0, key


def test_checkpoint_bench_json(tmp_path):
    out = tmp_path / "checkpoint.json"
    assert bench("checkpoint", "--ray-ranks", "none", "--local-ranks", "3", "--sim-ranks", "8",
                 "--state-mib", "0.01", "--checkpoints", "2", "--interval", "2",
                 "--compute-ms", "1", "--storage", "both", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "checkpoint"
    assert data["settings"]["storage"] == "both" and data["sim_network"]["sim_latency_s"] > 0
    got = {(c["mode"], c["transport"], c["ranks"]) for c in data["configs"]}
    assert got == {(mode, transport, n) for mode in ("interval", "requested")
                   for transport, n in (("local", 3), ("sim", 8))}
    for c in data["configs"]:
        s, b = c["summary"], c["baseline"]
        assert s["checkpoints"] >= 1 and len(c["rows"]) == s["checkpoints"]
        if c["transport"] == "sim" or c["mode"] == "interval":
            assert s["checkpoints"] == 2  # deterministic (virtual time / known positions)
        for row in c["rows"]:
            assert len(row["flush_s"]) == len(row["save_s"]) == c["ranks"]
            assert row["spread_s"] >= max(row["flush_s"]) >= 0 and min(row["save_s"]) > 0
            assert row["bytes"] > c["ranks"] * 0.01 * (1 << 20)
            if c["mode"] == "requested":
                assert row["notify_to_last_rm_s"] >= row["spread_s"]
        assert b["allreduce_s"]["median"] > 0 and b["iteration_s"]["median"] > 0
        assert s["spread_over_allreduce"] > 0
        assert ("notify_to_last_rm_s" in s) == (c["mode"] == "requested")
        # the bare workload next to the checkpointed one: interval mode, not on sim
        bare = c["mode"] == "interval" and c["transport"] != "sim"
        assert ("plain_over_bare" in b) == bare
        if bare:
            assert b["bare_iteration_s"]["median"] > 0 and b["plain_over_bare"] > 0
    assert bench("checkpoint", "--ray-ranks", "none", "--sim-ranks", "1") == 2


def test_groups_bench_json(tmp_path):
    out = tmp_path / "groups.json"
    assert bench("groups", "--ray-ranks", "none", "--local-ranks", "4", "--sim-ranks", "8",
                 "--iterations", "5", "--interval", "2", "--compute-ms", "1",
                 "--sim-send-overhead-us", "5", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["transport"], r["ranks"], r["formation"]) for r in rows] == [
        (t, n, f) for t, n in (("local", 4), ("sim", 8)) for f in ("NORM", "GP1", "GP4", "GP")]
    for r in rows:
        assert r["restarted"] >= 1 and r["checkpoint_s"] > 0 and r["overhead"] > 0
        assert (r["logged_messages"] == 0) == (r["formation"] == "NORM")
        assert (r["resent_messages"] == 0) == (r["formation"] == "NORM")
        assert r["restarted"] == (r["ranks"] if r["formation"] == "NORM" else
                                  r["ranks"] // r["groups"])
    # a group of one has nobody to coordinate with: no virtual time passes on sim
    (gp1,) = [r for r in rows if r["formation"] == "GP1" and r["transport"] == "sim"]
    assert gp1["coordination_s"] == 0 and gp1["coordination_vs_norm"] == 0


def test_groups_bench_rejects_bad_settings():
    assert bench("groups", "--ray-ranks", "none", "--sim-ranks", "2") == 2
    assert bench("groups", "--ray-ranks", "none", "--sim-ranks", "8", "--iterations", "4",
                 "--interval", "2") == 2


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
    # two nodes, groups of 2 (sectors of 2 nodes): on the interleaved ring a whole sector
    # lost keeps its groups' parity (held in another sector); on the plain ring the next
    # group, which holds it, is on the same two nodes (seeded draws: some hit a sector)
    assert rows[1]["interleaved"] == 1.0 and rows[1]["plain"] < 1.0
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("interleaved", "plain"))


def test_rs_bench_rejects_bad_settings():
    assert bench("rs", "--groups", "0") == 2


def test_solver_bench_table_from_samples():
    """The solver table's ratios, target verdicts and the row of a missing mpi4py (the
    CG runs themselves are too slow for a test; ``bench solver`` is run by hand)."""
    from benchmarks import solver
    samples = {("W", 8): {"serial": [1.0, 3.0], "mpi4py": "not installed: " + solver.MPI_HINT,
                          "ray": [40.0, 50.0], "direct": [8.0, 9.0]},
               ("S", 4): {"serial": [0.5, 0.5], "mpi4py": "not installed: " + solver.MPI_HINT,
                          "ray": [20.0, 20.0], "direct": [2.0, 2.0]}}
    summary = solver.summarize(samples)
    w = summary["table"][("W", 8)]
    assert w["_baseline"] == "serial" and w["direct"]["ratio"] == 8.5 / 2.0
    assert w["mpi4py"] == {"missing": "not installed: " + solver.MPI_HINT}
    (target,) = summary["targets"]  # no mpi4py: only direct vs ray can be judged
    assert target["figure"] == "direct/ray" and target["ratio"] == 8.5 / 45.0 and target["met"]
    text = solver.format_table(summary)
    assert "pip install 'ftactors[bench]'" in text and "direct/ray" in text
    assert summary["above_floor"] == {}  # no asyncio row
    floor = solver.summarize({("S", 4): {"mpi4py": [1.0], "asyncio": [2.0], "direct": [5.0]}})
    assert floor["above_floor"] == {"CG S x4": 2.5}
    assert "asyncio floor, CG S x4: direct/asyncio 2.50x" in solver.format_table(floor)
    (target,) = floor["targets"]  # issue #42's: what ftactors adds to the floor
    assert target["figure"] == "direct/asyncio" and target["bound"] == 1.15
    assert not target["met"]
    alone = solver.summarize({("B", 2): {"direct": [200.0]}})  # no baseline: no ratio
    assert alone["table"][("B", 2)]["direct"] == {"seconds": 200.0, "samples": [200.0]}
    assert "no ratios" in solver.format_table(alone) and alone["targets"] == []


def test_solver_bench_rejects_bad_ways():
    assert bench("solver", "--ways", "serial,telepathy") == 2
    assert bench("solver", "--repetitions", "0") == 2
    assert bench("solver", "--cases", "Q:4") == 2
    assert bench("solver", "--cases", "S:0") == 2


def test_solver_bench_json(tmp_path):
    """The smallest real table: CG S on 2 local ranks and on the asyncio floor's 2
    processes (which raises unless NPB verifies its zeta), and the halo exchange on 1,
    against the serial kernels (the stencil's checksum checked against the serial run's)."""
    out = tmp_path / "solver.json"
    assert bench("solver", "--cases", "S:2,halo:1", "--ways", "serial,asyncio,local",
                 "--repetitions", "1", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert list(data["table"]) == ["CG S x2", "halo x1"]
    for cell in data["table"].values():
        assert cell["_baseline"] == "serial" and cell["serial"]["ratio"] == 1.0
        assert cell["local"]["seconds"] > 0 and len(cell["local"]["samples"]) == 1
    assert data["table"]["CG S x2"]["asyncio"]["seconds"] > 0
    assert data["table"]["halo x1"]["asyncio"] == {"missing": "the asyncio floor runs CG only"}
    assert data["targets"] == [] and data["above_floor"] == {}  # no target case, no direct


def test_the_asyncio_floor_refuses_what_its_doubling_cannot_run():
    from benchmarks import _cg_asyncio, solver
    assert "power-of-two" in solver.unavailable("S", 3, "asyncio", None)
    assert solver.unavailable("S", 4, "asyncio", None) is None
    with pytest.raises(ValueError, match="power-of-two"):
        _cg_asyncio.main("S", 6)


@pytest.mark.parametrize("grid", [(2, 1), (2, 2)])
def test_the_mpi4py_stencil_is_bit_identical_to_the_serial_run(grid):
    """The halo row's baseline computes what ftactors' stencil does (rows and columns)."""
    from ftactors.apps import _stencil_ref as ref
    from benchmarks import solver
    exe = solver.mpiexec()
    if exe is None:
        pytest.skip(f"mpi4py is not installed: {solver.MPI_HINT}")
    ny, nx, iterations = 12, 20, 7
    argv = [sys.executable, "-m", "benchmarks._stencil_mpi",
            *map(str, (ny, nx, iterations, *grid))]
    out = subprocess.run([exe, "-n", str(grid[0] * grid[1]), *argv], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["checksum"] == ref.checksum(ref.stencil_serial(ny, nx, iterations))
    assert result["time_s"] > 0


def test_kernel_bench_json(tmp_path, ray_session):
    """The CG S kernel in a plain process, in a rank and in a rank at Ray's niceness."""
    out = tmp_path / "kernel.json"
    assert bench("kernel", "--class", "S", "--repetitions", "1", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "kernel" and data["problem_class"] == "S"
    rows = data["rows"]
    assert list(rows) == ["plain", "rank", "rank-nice15"]
    assert rows["plain"]["ratio"] == rows["plain"]["cpu_ratio"] == 1.0
    for fig in rows.values():
        assert fig["seconds"] > 0 and len(fig["samples"]) == 1 and fig["ratio"] > 0
        assert fig["cpu_s"] > 0 and len(fig["cpu_samples"]) == 1 and fig["cpu_ratio"] > 0
    target = data["target"]
    assert target["figure"] == "rank/plain" and target["met"] == (target["ratio"] <= 1.05)


def test_kernel_bench_rejects_bad_settings():
    assert bench("kernel", "--class", "Q") == 2
    assert bench("kernel", "--ways", "plain,abacus") == 2
    assert bench("kernel", "--repetitions", "0") == 2


def test_footprint_bench_json(tmp_path):
    """Every protocol and the bare app, on two apps, in one table; nothing killed, so
    nothing failed; DDVPiggyback's CLCs are counted (forced ones separately)."""
    out = tmp_path / "footprint.json"
    assert bench("footprint", "--quick", "--transport", "local", "--repetitions", "1",
                 "--apps", "cg,coupled", "--clc-interval-s", "0.001", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    rows = {(r["app"], r["protocol"]): r for r in data["rows"]}
    protocols = ("none", "standby", "ready-flush", "groups", "rs", "hc3i")
    assert set(rows) == {(a, p) for a in ("cg", "coupled") for p in protocols}
    for (app, p), r in rows.items():
        assert r["verified"] and r["failures"] == 0 and r["wall_s"] > 0
        assert (r["checkpoints"] > 0) == (p != "none"), (app, p)
        assert r["forced"] <= r["checkpoints"]
    assert rows[("cg", "none")]["ratio"] == 1.0
    assert rows[("cg", "groups")]["logged_bytes"] > 0  # its groups talk to each other
    assert set(data["targets"]) == {"cg_wall_le_1.5x_bare", "cg_store_le_512MiB_above_bare",
                                    "no_failure_reported", "all_verified"}


def test_collectives_bench_rows_and_rank_side():
    """The collectives table from samples, and the ranks' side on the local transport
    (one call of every op and size under both schedules; Ray and mpi4py are run by hand)."""
    import ftactors as ft
    from benchmarks import collectives
    plan = {"repetitions": 1, "calls": {"65536": 1}}
    samples = ft.run(collectives.CollectivesBench, 3, args=(plan,), transport="local").results[0]
    assert set(samples) == {f"{op} 65536 {side}" for op in collectives.OPS
                            for side in collectives.SCHEDULES}
    samples["Allreduce 65536 mpi4py"] = [0.5 * samples["Allreduce 65536 new"][0]]
    rows = collectives.summarize(samples, plan)
    assert [r["op"] for r in rows] == list(collectives.OPS)
    assert rows[0]["new_over_mpi4py"] == 2.0 and "mpi4py_ms" not in rows[1]
    assert "Allreduce 65536 B" in collectives.format_table(rows)
    assert bench("collectives", "--sizes", "big") == 2
    assert bench("collectives", "--ranks", "1") == 2


def test_collectives_bench_json(tmp_path, ray_session):
    """The command on Ray ranks (and mpi4py when it is installed), one call per schedule."""
    out = tmp_path / "collectives.json"
    assert bench("collectives", "--ranks", "2", "--sizes", "0.125", "--repetitions", "1",
                 "--quick", "--json", str(out)) == 0
    from benchmarks.collectives import OPS
    data = json.loads(out.read_text())
    assert data["benchmark"] == "collectives" and data["ranks"] == 2
    assert [r["op"] for r in data["rows"]] == list(OPS)
    assert all(r["old_ms"] > 0 and r["new_ms"] > 0 for r in data["rows"]), data["rows"]
