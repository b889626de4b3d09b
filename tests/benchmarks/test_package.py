"""The benchmarks package (``benchmarks/``, outside the installed ftactors): it uses only
ftactors' public names, and the processes a bench starts can import it.

The benchmarks are written as a user writes a program against an installed ftactors: a
private module or name (``_``-prefixed: ``ftactors.apps._npb_cg``, ``ft._run``) may
change with any commit, and a benchmark that leaned on one would break unseen. Read from
the source: every import (function-local ones too), every ``importlib.import_module``
of a constant name, and every ``_`` attribute of a name bound by an ftactors import.
"""
import ast
import os
import subprocess
import sys
from pathlib import Path

import benchmarks

PACKAGE = Path(benchmarks.__file__).resolve().parent

ALLOWED: dict[str, str] = {
    # "FILE: ftactors.dotted.name": why no public name serves the benchmark. None today:
    # the serial kernels are public in ftactors.apps.cg/stencil/hpl, the process tree and
    # node loss in ftactors.tools.procs/node_loss, working_stacks in tools.apps_cli,
    # OWN_ROUNDS and with_role in tools.options.
}


def _private(dotted: str) -> bool:
    """A part of ``dotted`` is ``_``-prefixed (dunders such as ``__version__`` are not)."""
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               for p in dotted.split("."))


def _called(call: ast.Call) -> str | None:
    """The name a call calls: ``import_module`` in ``importlib.import_module(...)``."""
    return getattr(call.func, "attr", None) or getattr(call.func, "id", None)


def private_uses(source: str) -> list[str]:
    """The private ftactors names a module of the benchmarks uses, in source order (a
    relative import that leaves the package too: it reached into ftactors)."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    bound: set[str] = set()  # local names an ftactors import binds (ft, PROTOCOLS, ...)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ftactors":
                    bound.add(alias.asname or "ftactors")
                    if _private(alias.name):
                        found.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                found.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.level == 0 and node.module.split(".")[0] == "ftactors":
                for alias in node.names:
                    bound.add(alias.asname or alias.name)
                    if _private(f"{node.module}.{alias.name}"):
                        found.append((node.lineno, f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Call) and _called(node) == "import_module" and node.args:
            name = getattr(node.args[0], "value", None)
            if isinstance(name, str) and name.split(".")[0] == "ftactors" and _private(name):
                found.append((node.lineno, name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value  # ft in ft._run, PROTOCOLS in PROTOCOLS["rs"]._own, ft.run(...)._x
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append((node.lineno, ast.unparse(node)))
    return [name for _, name in sorted(found)]


def uses() -> list[str]:
    return [f"{path.name}: {name}" for path in sorted(PACKAGE.glob("*.py"))
            for name in private_uses(path.read_text())]


def test_the_benchmarks_use_only_public_names():
    assert [u for u in uses() if u not in ALLOWED] == []


def test_every_allowed_private_name_is_still_used():
    assert sorted(set(ALLOWED) - set(uses())) == []


def test_the_check_sees_every_kind_of_private_use():
    source = """
import ftactors as ft
import ftactors.runtime._options
from ftactors.apps import _npb_cg as npb
from ftactors.tools._common import write_json
from ftactors.protocols import PROTOCOLS, _hidden
from ...runtime import _protocol
from ._harness import table
import importlib

def f():
    from ftactors.transports.ray import ensure_ray
    importlib.import_module("ftactors.runtime._trace")
    return ft.__version__, ft._run.run, PROTOCOLS["rs"]._own, table._x, npb.CG_CLASSES
"""
    assert private_uses(source) == [
        "ftactors.runtime._options", "ftactors.apps._npb_cg", "ftactors.tools._common.write_json",
        "ftactors.protocols._hidden", "...runtime", "ftactors.runtime._trace",
        "PROTOCOLS['rs']._own", "ft._run"]


def test_a_process_a_bench_starts_imports_the_benchmarks(tmp_path, monkeypatch):
    """Importing the package put the checkout's root first on ``PYTHONPATH`` (once), so
    ``python -m benchmarks.X`` from any folder (mpiexec's ranks, the kernel's plain
    process) and a Ray started after it import the benchmarks and their ftactors."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", ""]))
    benchmarks._importable_by_children()
    benchmarks._importable_by_children()
    assert os.environ["PYTHONPATH"] == os.pathsep.join([str(benchmarks.ROOT), "/elsewhere"])
    done = subprocess.run([sys.executable, "-c", "import benchmarks, ftactors; "
                           "print(benchmarks.__file__); print(ftactors.__file__)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(PACKAGE / "__init__.py"),
                                   str(benchmarks.ROOT / "ftactors" / "__init__.py")]
