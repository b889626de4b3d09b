"""``ftactors bench`` finds the benchmarks of the source checkout it runs from; without
them (ftactors installed from a wheel) it says in one line where to run it and exits 2,
and every other subcommand works. A wheel ships ``ftactors`` alone."""
import os
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import setuptools

from ftactors.tools import bench
from ftactors.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


def expected_line(root: Path) -> str:
    return (f"ftactors bench: the benchmarks are not installed with ftactors (no benchmarks/ "
            f"next to {root / 'ftactors'}); run it from a source checkout: pip install -e "
            f"'.[bench]' in a clone of the repository")


def test_the_checkouts_benchmarks_are_loaded():
    package = bench.load_benchmarks()
    assert bench.ROOT == ROOT
    assert Path(package.__file__) == ROOT / "benchmarks" / "__init__.py"
    assert bench.load_benchmarks() is package  # once per process


@pytest.fixture
def no_benchmarks(tmp_path, monkeypatch):
    """As from a wheel: no ``benchmarks/`` next to ``ftactors``, none imported yet."""
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    for name in [n for n in sys.modules if n.split(".")[0] == "benchmarks"]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


@pytest.mark.parametrize("argv", [["bench"], ["bench", "sim", "--quick"],
                                  ["bench", "nodes", "--cells", "rs:cg", "--json", "x.json"]])
def test_without_the_benchmarks_bench_says_where_to_run_it_and_exits_2(no_benchmarks, argv,
                                                                         capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [expected_line(no_benchmarks)]
    assert "benchmarks" not in sys.modules


def test_without_the_benchmarks_the_other_subcommands_work(no_benchmarks, capsys):
    assert main(["options", "standby"]) == 0
    assert "backup_interval" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # wrapped (long paths at their "-")
    assert "the benchmarks are not installed with ftactors" in shown
    assert "run it from a source checkout: pip install -e '.[bench]'" in shown


def test_benchmarks_that_fail_to_import_are_named_in_one_line(no_benchmarks, capsys):
    (no_benchmarks / "benchmarks").mkdir()
    (no_benchmarks / "benchmarks" / "__init__.py").write_text("import no_such_module_here\n")
    assert main(["bench", "sim"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ftactors bench: cannot import the benchmarks: No module named 'no_such_module_here'"]
    assert "benchmarks" not in sys.modules


def test_another_benchmarks_package_is_not_taken_for_them(no_benchmarks, monkeypatch, capsys):
    (no_benchmarks / "benchmarks").mkdir()
    (no_benchmarks / "benchmarks" / "__init__.py").write_text("")
    other = types.ModuleType("benchmarks")
    other.__file__ = "/elsewhere/benchmarks/__init__.py"
    monkeypatch.setitem(sys.modules, "benchmarks", other)
    assert main(["bench", "sim"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ftactors bench: cannot import the benchmarks: another 'benchmarks' is imported "
        "already (/elsewhere/benchmarks/__init__.py)"]


def test_an_installed_copy_of_the_package_alone_says_where_to_run_it(tmp_path):
    """``ftactors/`` alone on the path, as a wheel installs it, in a process of its own."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "ftactors", site / "ftactors",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "ftactors", "bench", "sim", "--quick"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.splitlines() == [expected_line(site)]


def test_a_wheel_ships_ftactors_alone():
    """``pyproject.toml``'s package discovery, as setuptools runs it: ``ftactors`` and its
    subpackages, not ``benchmarks`` (nor ``tests``) as top-level packages of their own."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    finder = (setuptools.find_namespace_packages if find.get("namespaces", True)
              else setuptools.find_packages)
    found = finder(str(ROOT), include=find.get("include", ["*"]),
                   exclude=find.get("exclude", ()))
    assert "ftactors" in found and "ftactors.tools" in found
    assert [p for p in found if p.split(".")[0] != "ftactors"] == []
    assert (ROOT / "benchmarks" / "__init__.py").is_file()  # there to be left out
