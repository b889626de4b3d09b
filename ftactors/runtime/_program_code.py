"""What a program's own code names, read from its code objects (not run).

Used before a run, to warn about what the chosen protocols cannot protect
(``wildcard_notices``), and by ``sim-check --app`` to name the likely cause of a failed
run (``tools/_simcheck_programs``).
"""
from __future__ import annotations

import sys
import types

from ..base._warnings import WildcardReceiveWarning

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


def wildcard_notices(stack: type, protocol: str) -> list[tuple[type, str]]:
    """The start notice of a protocol that restarts part of the ranks and replays the
    messages the others logged (``protocol``: one that ``hands_parts``, given by
    ``_notices.at_start``), for a program that receives with wildcards: such a restart is right only if the restarted ranks receive in the order
    of their first life (piecewise determinism), which a wildcard receive does not
    promise. (A master/worker program taking results from ANY_SOURCE, restarted by
    GroupCoordination, stalled or returned a wrong sum in 20 of 40 sim-check runs.)"""
    wild = wildcard_receives(stack)
    if not wild:
        return []
    return [(WildcardReceiveWarning,
             f"the program receives with {' and '.join(wild)}, and {protocol} restarts "
             f"part of the ranks with the messages the others logged: a restarted rank "
             f"whose wildcard receive takes another message first than in its first life "
             f"goes another way, and the run may stall or give a wrong answer; receive "
             f"from a named source and tag, or use a protocol that takes every rank back "
             f"(ready-flush, standby, rs), and check it with ftactors sim-check --app")]
