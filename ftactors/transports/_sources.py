"""The source lines of user code shipped by value, so that tracebacks show them.

Ray workers cannot import a user module that lives in a script, a notebook or a file
only the driver can read, so ``ray.py`` pickles such modules by value
(``cloudpickle.register_pickle_by_value``). Their code objects keep their file names
and line numbers, but a worker that cannot read the file (another node, a notebook
cell, code compiled from a string) prints a traceback without a line of the user's code.
The driver therefore ships the lines its own ``linecache`` has for those files, and the
worker puts them in its ``linecache`` (as IPython does for cells): a traceback of a rank
shows the user's file names, line numbers and lines, as it would on ``local``.
"""
from __future__ import annotations

import inspect
import linecache
from types import ModuleType


def collect(modules: list[ModuleType]) -> dict[str, list[str]]:
    """``{file name: lines}`` for the code of ``modules``, as the driver knows it."""
    names: set[str] = set()
    for mod in modules:
        if getattr(mod, "__file__", None):
            names.add(mod.__file__)
        for obj in vars(mod).values():
            names.update(_code_files(obj, mod.__name__))
    out = {}
    for name in sorted(names):
        lines = linecache.getlines(name)
        if lines:
            out[name] = lines
    return out


def _code_files(obj, module: str) -> set[str]:
    """The file names of the functions ``obj`` is or defines, if it is ``module``'s."""
    if getattr(obj, "__module__", None) != module:
        return set()
    if inspect.isfunction(obj):
        return {obj.__code__.co_filename}
    if inspect.isclass(obj):
        return {f.__code__.co_filename for f in vars(obj).values() if inspect.isfunction(f)}
    return set()


def install(sources: dict[str, list[str]]) -> None:
    """Make ``sources`` what this process's tracebacks show for those files (no
    modification time: ``linecache.checkcache`` keeps such entries)."""
    for name, lines in sources.items():
        linecache.cache[name] = (sum(len(line) for line in lines), None, list(lines), name)
