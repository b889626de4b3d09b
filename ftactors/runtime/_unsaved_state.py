"""State that a program's loop changes but no checkpoint holds, seen as the run starts.

A restore sets back what is registered; everything else is what the code before the loop
(or a new process) sets up, not what it was at the checkpoint. For most of it that is
harmless (a receive buffer is written before it is read), but these carry the
loop's history, and a run with a failure then gives another answer than one without,
without an error:

* a random generator the loop draws from: one bound to a local of the loop's frame or to
  an unregistered attribute (seeded before the loop), or numpy's or ``random``'s global
  one;
* a list, dict, set or deque bound to such a local or attribute that grows from one
  iteration to the next (a residual history: ``history.append(r)``, or
  ``self.history = self.history + [r]``);
* a variable of the program's module that the program's code names (a history list, a
  counter, a cache dict), changed in place or rebound;
* a class attribute of the program changed in place (``self.cache[k] = ...`` on a dict
  declared in the class body: one object, shared, never saved);
* a local that ``register`` bound to a registered attribute and that the loop rebinds
  while the attribute keeps its first value (``x = self.register("x", ...)``, then
  ``x = x + dx``: every checkpoint saves the first ``x``).

Between the second and third safe points of its first life, a rank compares each
(``UnsavedStateWatch.look``); it reports those that changed (``unsaved_state``) and the
driver warns once per run for the same names (``_notices``, ``UnsavedStateWarning``).
Other locals and attributes are not watched here: an array changed in place or a number
rebound is as often scratch space as state, and a warning for a receive buffer would
teach users to ignore the warning (sim-check names them after a failed run:
``tools/_simcheck_programs``).
Module variables and class attributes survive from one run to the next in a process that
runs several (``local``, ``sim``, a kept Ray worker), so their state is not even the same
at the start of each run. Big arrays and containers are not compared
(``DIGEST_MAX_BYTES``, ``DIGEST_MAX_ITEMS``: a read-only table loaded at import would
cost every rank two passes over it).
"""
from __future__ import annotations

import collections
import hashlib
import pickle
import random
import types

import numpy as np

from ._program_code import code_objects, program_functions

GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
"""The generator types watched wherever the loop may hold one."""

COLLECTIONS = (list, dict, set, collections.deque)
"""Containers that, bound to a loop's local or an unregistered attribute, carry the
loop's history when they grow (a residual log); a receive buffer never grows."""

REGISTERED = "registered self."  # ``_observe``'s key of a registered attribute

NUMPY_GLOBAL = "numpy's global random generator (np.random.rand, np.random.normal, ...)"
RANDOM_GLOBAL = "the random module's global generator (random.random, random.choice, ...)"


class UnsavedStateWatch:
    """One rank's first life: what it watches at its second safe point, compared at its
    third."""

    def __init__(self, rank_cls: type):
        self._names = frozenset(n for c in code_objects(rank_cls) for n in c.co_names)
        # where the program's module variables live: its functions' globals (a module's
        # dict, or what cloudpickle made of it in a Ray worker that got the class by value)
        spaces = {id(fn.__globals__): fn for fn in program_functions(rank_cls)}
        self._spaces = [(fn.__module__, fn.__globals__) for fn in spaces.values()]
        self._classes = [k for k in rank_cls.__mro__
                         if k.__module__.split(".")[0] not in ("ftactors", "builtins")]
        self._seen = 0  # safe points looked at
        self._aliases: dict[str, tuple[str, int]] = {}  # at the first
        self._first: dict[str, tuple[int, bytes | int]] | None = None  # at the second

    def look(self, rank, frame) -> list[str] | None:
        """At a safe point of ``rank`` whose loop runs in ``frame``: None at the first
        two; at the third, what changed since the second (as the warning names it), and
        the watch is over. (Not since the first: the first iteration fills what the code
        before the loop left empty, a scratch list included.)"""
        self._seen += 1
        if self._seen == 1:
            self._aliases = _aliases(rank, frame)
            return None
        now = self._observe(rank, frame)
        if self._first is None:
            self._first = now
            return None
        changed = [*self._rebound(rank, frame, now)]
        for name, (ident, mark) in now.items():
            was_ident, was_mark = self._first.get(name, (None, None))
            if name.startswith(REGISTERED):  # only for ``_rebound``: registered is saved
                continue
            if was_mark is None or type(mark) is not type(was_mark):
                continue
            if isinstance(mark, int):  # a collection of a local or an attribute: grew
                if mark > was_mark:
                    changed.append(name)
            elif mark != was_mark and (was_ident == ident
                                       or not name.startswith(("local", "self."))):
                changed.append(name)
        return sorted(changed)

    def _rebound(self, rank, frame, now: dict) -> list[str]:
        """The locals that ``register`` bound to a registered attribute at the first safe
        point and that the loop rebinds since, while the attribute keeps its first object
        and value (``x = self.register("x", ...)``, then ``x = x + dx``): every checkpoint
        saves that first value."""
        out = []
        for name, (attr, ident) in self._aliases.items():
            kept = f"{REGISTERED}{attr}"
            if (id(frame.f_locals.get(name)) != ident and id(getattr(rank, attr, None)) == ident
                    and kept in now and now[kept] == self._first.get(kept)):
                out.append(f"the local {name!r} that register returned (the loop "
                           f"rebinds it, so self.{attr} keeps its first value and so does "
                           f"every checkpoint: assign self.{attr} instead)")
        return out

    def _observe(self, rank, frame) -> dict[str, tuple[int, bytes | int]]:
        """name -> (object id, digest) of everything watched, or (object id, length) of a
        collection bound to a local or an unregistered attribute; and of each registered
        attribute that a local was bound to at the first safe point."""
        registered = set(rank.ft.registered)
        kept = {id(getattr(rank, name, None)) for name in registered}
        mine = {f"local {name!r}": v for name, v in frame.f_locals.items()
                if id(v) not in kept and v is not rank}
        mine.update({f"self.{name}": v for name, v in vars(rank).items()  # the program's
                     if name in self._names and name not in registered})  # (not protocols')
        out = {name: (id(v), len(v)) for name, v in mine.items() if type(v) in COLLECTIONS}
        found = {name: v for name, v in mine.items() if isinstance(v, GENERATORS)}
        found.update({f"{REGISTERED}{attr}": getattr(rank, attr, None)
                      for attr, _ in self._aliases.values()})
        found[NUMPY_GLOBAL] = np.random.get_state()
        found[RANDOM_GLOBAL] = random.getstate()
        for module, space in self._spaces:
            found.update({f"{module}.{name}": v for name, v in space.items()
                          if name in self._names and _data(v)})
        for klass in self._classes:
            found.update({f"{klass.__qualname__}.{name}": v for name, v in vars(klass).items()
                          if not name.startswith("__") and _data(v)})
        for name, value in found.items():
            d = _digest(value.bit_generator.state if isinstance(value, np.random.Generator)
                        else value)
            if d is not None:
                out[name] = (id(value), d)
        return out


def _aliases(rank, frame) -> dict[str, tuple[str, int]]:
    """local name -> (registered attribute, object id) of the loop's locals bound to a
    registered attribute's object (what ``register`` returned). A number, string or None
    only under the attribute's own name (``total = self.register("total", 0.0)``): such
    objects are shared (small ints, a function's equal constants), so another local may
    hold the same one by chance."""
    by_id = {id(getattr(rank, attr, None)): attr for attr in rank.ft.registered}
    return {name: (by_id[id(value)], id(value)) for name, value in frame.f_locals.items()
            if id(value) in by_id and (name == by_id[id(value)] or not isinstance(
                value, (int, float, complex, str, bytes, bool, type(None))))}


def _data(value) -> bool:
    """Whether a module or class variable is data the loop could carry state in."""
    return not (isinstance(value, (type, types.ModuleType, types.FunctionType,
                                   types.BuiltinFunctionType, property, staticmethod,
                                   classmethod))
                or callable(value) and not isinstance(value, GENERATORS)
                or type(value).__module__.split(".")[0] == "ftactors")


DIGEST_MAX_BYTES = 64 << 20
DIGEST_MAX_ITEMS = 1 << 20
"""Arrays of more bytes and containers of more items are not compared: a program's big
read-only data (a matrix or a table loaded at import) would cost every rank a pass over
it at two safe points."""


def digest(value) -> bytes | None:
    """A short digest of ``value``: of a plain array's memory, shape and dtype (no copy),
    else of its pickle; None for what cannot be pickled. (sim-check's watch digests the
    program's locals with it too: ``tools/_simcheck_programs``.)"""
    if (type(value) is np.ndarray and value.flags.c_contiguous
            and not value.dtype.hasobject):
        return (hashlib.blake2b(value.data, digest_size=8).digest()
                + f"{value.dtype.str}{value.shape}".encode())
    try:
        return hashlib.blake2b(pickle.dumps(value, protocol=5), digest_size=8).digest()
    except Exception:  # noqa: BLE001 - unpicklable: not compared
        return None


def _digest(value) -> bytes | None:
    """``digest``, but None for what is too large to read at a rank's start."""
    if (isinstance(value, np.ndarray) and value.nbytes > DIGEST_MAX_BYTES
            or isinstance(value, (list, tuple, dict, set)) and len(value) > DIGEST_MAX_ITEMS):
        return None
    return digest(value)
