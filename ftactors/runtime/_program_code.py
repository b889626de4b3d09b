"""What a program's own code names, read from its code objects (not run).

Used by ``sim-check --app`` to name the likely cause of a failed run
(``tools/_simcheck_programs``).
"""
from __future__ import annotations

import sys
import types

WILDCARDS = frozenset({"ANY_SOURCE", "ANY_TAG"})


def code_objects(cls: type) -> list[types.CodeType]:
    """The code of the program: every function of ``program_functions``, nested
    functions included."""
    found = []
    for fn in program_functions(cls):
        found.extend(c for c in _codes(fn.__code__) if c not in found)
    return found


def program_functions(cls: type) -> list[types.FunctionType]:
    """The functions of ``cls`` and its bases outside ftactors, and the functions of
    their modules that those call, directly or through each other (named in their code:
    a module's other functions, its tests for one, are not the program's). A class that
    Ray's worker got by value has no module to import: its own functions only."""
    out: list[types.FunctionType] = []
    modules = {}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("ftactors", "builtins"):
            continue
        module = sys.modules.get(klass.__module__)
        if module is not None:
            modules[klass.__module__] = vars(module)
        for value in vars(klass).values():
            fn = getattr(value, "__func__", value)
            if (isinstance(fn, types.FunctionType) and fn.__module__ == klass.__module__
                    and fn not in out):
                out.append(fn)
    todo = list(out)
    while todo:
        for code in _codes(todo.pop().__code__):
            for name in code.co_names:
                for space in modules.values():
                    fn = space.get(name)
                    if (isinstance(fn, types.FunctionType) and fn.__module__ in modules
                            and fn not in out):
                        out.append(fn)
                        todo.append(fn)
    return out


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and the code of the functions nested in it."""
    found, todo = [], [code]
    while todo:
        c = todo.pop()
        found.append(c)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return found


def wildcard_receives(cls: type) -> list[str]:
    """The wildcard names (``ANY_SOURCE``, ``ANY_TAG``) the program's code uses."""
    names = {n for c in code_objects(cls) for n in c.co_names}
    return sorted(names & WILDCARDS)
