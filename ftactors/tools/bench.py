"""``ftactors bench ...``: the benchmarks of a source checkout.

The benchmarks are not part of the installed package: they are the repository's top-level
``benchmarks/`` package, next to ``ftactors/``, and use only ftactors' public names. So
``ftactors bench`` looks for them beside the ``ftactors`` it runs from: a source checkout
(or an editable install of one) has them, and they register their subcommands as they
always did; a wheel has none, and ``ftactors bench`` then says in one line where to run
it from and exits 2 (every other subcommand works as before).

They are loaded from that folder by its path, as the package ``benchmarks``, and not
looked up on ``sys.path``: another distribution's top-level ``benchmarks`` (a common
name) must not stand in for them, and the checkout's root stays off this process's
``sys.path``.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
"""Where ``ftactors/`` is: in a source checkout, the repository, with ``benchmarks/``."""

NAME = "benchmarks"


def load_benchmarks() -> ModuleType:
    """The ``benchmarks`` package of the checkout at ``ROOT``, imported once per process.

    Raises:
        ImportError: ``ROOT`` has no ``benchmarks/`` (ftactors is installed from a wheel),
            another ``benchmarks`` is imported already, or the package failed to import.
    """
    init = ROOT / NAME / "__init__.py"
    loaded = sys.modules.get(NAME)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() != init.resolve():
            raise ImportError(f"another {NAME!r} is imported already ({loaded.__file__})")
        return loaded
    if not init.is_file():
        raise ModuleNotFoundError(f"no {NAME}/ next to {ROOT / 'ftactors'}", name=NAME)
    spec = importlib.util.spec_from_file_location(
        NAME, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[NAME]
        raise
    return module


def add_bench(sub) -> None:
    """Register ``bench`` and the benchmarks' own subcommands; without the benchmarks, a
    ``bench`` that says what to do."""
    try:
        package = load_benchmarks()
    except ImportError as exc:
        why = unavailable(exc)
        p = sub.add_parser("bench", help="benchmarks (from a source checkout only)",
                           description=why)
        p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=lambda args: _refuse(why))
        return
    package.add_bench(sub)


def unavailable(exc: ImportError) -> str:
    """The one line ``ftactors bench`` prints when the benchmarks cannot be imported."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == NAME:
        return (f"ftactors bench: the benchmarks are not installed with ftactors ({exc}); "
                f"run it from a source checkout: pip install -e '.[bench]' in a clone of "
                f"the repository")
    return f"ftactors bench: cannot import the benchmarks: {' '.join(str(exc).split())}"


def _refuse(why: str) -> int:
    print(why, file=sys.stderr)
    return 2
