"""Shipping the user's code by value, with its source lines, so that ranks run it and
their tracebacks show it.

Ray workers cannot import a user module that lives in a script, a notebook or a file
only the driver can read, so such modules are pickled by value (``ship``:
``cloudpickle.register_pickle_by_value``). Their code objects keep their file names
and line numbers, but a worker that cannot read the file (another node, a notebook
cell, code compiled from a string) prints a traceback without a line of the user's code.
The driver therefore ships the lines its own ``linecache`` has for those files, and the
worker puts them in its ``linecache`` (as IPython does for cells): a traceback of a rank
shows the user's file names, line numbers and lines, as it would on ``local``.

That needs the file names to arrive too, and cloudpickle does not promise them: it
promises a function that runs. From 3.1.3 on it writes every code object it pickles by
value with the file name ``<dynamic-code>`` (cloudpipe/cloudpickle#560, for payloads that
do not depend on where a notebook put its cell), so a worker's traceback named no file
and no line could be looked up. ``dumps`` therefore pickles code objects itself, whole,
with ``marshal``: the standard library's format for code objects (what ``.pyc`` files
hold), which keeps file name, names and line table. Its format belongs to one Python
version, as cloudpickle's pickled code does (the arguments of a code object change from
version to version); Ray refuses a worker whose Python differs from the driver's anyway.
"""
from __future__ import annotations

import inspect
import io
import linecache
import marshal
import os
import sys
from types import CodeType, ModuleType

import cloudpickle


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


class _WholeCode(cloudpickle.CloudPickler):
    """cloudpickle, with code objects written by ``marshal`` (file names kept)."""

    def reducer_override(self, obj):
        if type(obj) is CodeType:
            try:
                return marshal.loads, (marshal.dumps(obj),)
            except ValueError:  # a constant marshal cannot write (made by hand): as before
                pass
        return super().reducer_override(obj)


def dumps(obj) -> bytes:
    """``obj`` pickled as ``cloudpickle.dumps`` does (protocol 5), its code objects
    with their file names, so ``install``'s lines are what tracebacks show for them."""
    out = io.BytesIO()
    _WholeCode(out, protocol=5).dump(obj)
    return out.getvalue()


def ship(cls: type) -> list:
    """Ship the user's classes by value when workers could not import their modules
    (scripts, notebooks, test files); returns those modules.

    A program file loaded by reference (``path/to/solver.py:Solver``) had its folder
    put on the driver's ``sys.path`` only, so the modules it imported from there
    (``from helper import step``) are shipped by value too: the top-level modules of
    the folder of a top-level module shipped (modules of a package are imported by
    their package's name, which a worker resolves as the driver did)."""
    shipped = []
    for klass in cls.__mro__:
        mod = sys.modules.get(klass.__module__)
        name = klass.__module__
        if mod is None or name == "builtins" or name.split(".")[0] in ("ftactors", "ray"):
            continue
        if name == "__main__" or not _importable_everywhere(mod):
            cloudpickle.register_pickle_by_value(mod)
            shipped.append(mod)
    folders = {os.path.dirname(mod.__file__) for mod in shipped
               if "." not in mod.__name__ and getattr(mod, "__file__", None)}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if ("." not in name and path and os.path.dirname(path) in folders
                and mod not in shipped and not _importable_everywhere(mod)):
            cloudpickle.register_pickle_by_value(mod)
            shipped.append(mod)
    return shipped


def _importable_everywhere(mod) -> bool:
    path = getattr(mod, "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path
