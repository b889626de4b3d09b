"""What a program's own code names, read from its code objects (not run).

Used by ``sim-check --app`` to name the likely cause of a failed run
(``tools/_simcheck_programs``).
"""
from __future__ import annotations

import sys
import types

WILDCARDS = frozenset({"ANY_SOURCE", "ANY_TAG"})


def code_objects(cls: type) -> list[types.CodeType]:
    """The code of the program: every function of ``cls`` and its bases outside
    ftactors, and of their modules, nested functions included."""
    found, todo = [], []
    for fn in program_functions(cls):
        todo.append(fn.__code__)
    while todo:
        code = todo.pop()
        if code not in found:
            found.append(code)
            todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def program_functions(cls: type) -> list[types.FunctionType]:
    """The functions of ``cls`` and its bases outside ftactors, and of their modules
    (a class that Ray's worker got by value has no module to import: its own only)."""
    out = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("ftactors", "builtins"):
            continue
        module = sys.modules.get(klass.__module__)
        for value in [*vars(klass).values(), *(vars(module).values() if module else ())]:
            fn = getattr(value, "__func__", value)
            if (isinstance(fn, types.FunctionType) and fn.__module__ == klass.__module__
                    and fn not in out):
                out.append(fn)
    return out


def wildcard_receives(cls: type) -> list[str]:
    """The wildcard names (``ANY_SOURCE``, ``ANY_TAG``) the program's code uses."""
    names = {n for c in code_objects(cls) for n in c.co_names}
    return sorted(names & WILDCARDS)
