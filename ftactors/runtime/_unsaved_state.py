"""State that a program's loop changes but no checkpoint holds, seen as the run starts.

A restore sets back what is registered; everything else is what the code before the loop
(or a new process) sets up, not what it was at the checkpoint. For most of it that is
harmless (a receive buffer is written before it is read), but three kinds carry the
loop's history, and a run with a failure then gives another answer than one without,
without an error:

* a random generator the loop draws from: one bound to a local of the loop's frame or to
  an unregistered attribute (seeded before the loop), or numpy's or ``random``'s global
  one;
* a variable of the program's module that the program's code names (a history list, a
  counter, a cache dict), changed in place or rebound;
* a class attribute of the program changed in place (``self.cache[k] = ...`` on a dict
  declared in the class body: one object, shared, never saved).

Between the first two safe points of its first life, a rank compares the digests of each
(``UnsavedStateWatch.look``); it reports those that changed (``unsaved_state``) and the
driver warns once per run for the same names (``_notices``, ``UnsavedStateWarning``).
Locals and attributes that are not generators are not watched here: they are as often
scratch space as state, and a warning for a receive buffer would teach users to ignore
the warning (sim-check names them after a failed run: ``tools/_simcheck_programs``).
Module variables and class attributes survive from one run to the next in a process that
runs several (``local``, ``sim``, a kept Ray worker), so their state is not even the same
at the start of each run.
"""
from __future__ import annotations

import hashlib
import pickle
import random
import types

import numpy as np

from ._program_code import code_objects, program_functions

GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
"""The generator types watched wherever the loop may hold one."""

NUMPY_GLOBAL = "numpy's global random generator (np.random.rand, np.random.normal, ...)"
RANDOM_GLOBAL = "the random module's global generator (random.random, random.choice, ...)"


class UnsavedStateWatch:
    """One rank's first life: digests at its first safe point, compared at its second."""

    def __init__(self, rank_cls: type):
        self._names = frozenset(n for c in code_objects(rank_cls) for n in c.co_names)
        # where the program's module variables live: its functions' globals (a module's
        # dict, or what cloudpickle made of it in a Ray worker that got the class by value)
        spaces = {id(fn.__globals__): fn for fn in program_functions(rank_cls)}
        self._spaces = [(fn.__module__, fn.__globals__) for fn in spaces.values()]
        self._classes = [k for k in rank_cls.__mro__
                         if k.__module__.split(".")[0] not in ("ftactors", "builtins")]
        self._first: dict[str, tuple[int, bytes]] | None = None

    def look(self, rank, frame) -> list[str] | None:
        """At a safe point of ``rank`` whose loop runs in ``frame``: None at the first;
        at the second, what changed since (as the warning names it), and the watch is
        over."""
        now = self._digests(rank, frame)
        if self._first is None:
            self._first = now
            return None
        first = self._first
        return sorted(name for name, (ident, d) in now.items() if name in first
                      and first[name][1] != d
                      and (first[name][0] == ident or not name.startswith(("local", "self."))))

    def _digests(self, rank, frame) -> dict[str, tuple[int, bytes]]:
        """name -> (object id, digest) of everything watched."""
        registered = set(rank.ft.registered)
        kept = {id(getattr(rank, name, None)) for name in registered}
        found = {f"local {name!r}": v for name, v in frame.f_locals.items()
                 if isinstance(v, GENERATORS) and id(v) not in kept}
        found.update({f"self.{name}": v for name, v in vars(rank).items()
                      if isinstance(v, GENERATORS) and name not in registered})
        found[NUMPY_GLOBAL] = np.random.get_state()
        found[RANDOM_GLOBAL] = random.getstate()
        for module, space in self._spaces:
            found.update({f"{module}.{name}": v for name, v in space.items()
                          if name in self._names and _data(v)})
        for klass in self._classes:
            found.update({f"{klass.__qualname__}.{name}": v for name, v in vars(klass).items()
                          if not name.startswith("__") and _data(v)})
        out = {}
        for name, value in found.items():
            d = _digest(value.bit_generator.state if isinstance(value, np.random.Generator)
                        else value)
            if d is not None:
                out[name] = (id(value), d)
        return out


def _data(value) -> bool:
    """Whether a module or class variable is data the loop could carry state in."""
    return not (isinstance(value, (type, types.ModuleType, types.FunctionType,
                                   types.BuiltinFunctionType, property, staticmethod,
                                   classmethod))
                or callable(value) and not isinstance(value, GENERATORS)
                or type(value).__module__.split(".")[0] == "ftactors")


def _digest(value) -> bytes | None:
    """A short digest of ``value``'s pickle; None for what cannot be pickled."""
    try:
        return hashlib.blake2b(pickle.dumps(value, protocol=5), digest_size=8).digest()
    except Exception:  # noqa: BLE001 - unpicklable: not compared
        return None
