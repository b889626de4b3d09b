"""What a restored program's locals hold that the restore could not set, named for the
user.

A restore re-enters ``main()`` from the top: its locals are what the code before the
resumed loop sets up, and only the registered state is the checkpoint's. Two ways a
port of an MPI program goes on from another state than the checkpoint's, each said in
words that name the local and what to write instead:

* ``A = ...; self.register("A", A)`` and the loop uses the local ``A``: the restore
  writes the checkpoint's value into that very object (``engine/_reentry``), unless it
  cannot (a number, a tuple, an array of another shape or dtype). Then the local still
  holds what the code before the loop gave it. ``Rank.register`` notes the local its
  call passed (``call_site``: the local is read from the caller's bytecode, since a
  number is shared by every local that holds it); at the resumed loop the rank reports
  the locals that still hold the program's object, or views of it (``unfilled_report``),
  and the driver warns at once (``_notices``, ``StaleLocalWarning``).
* A value the loop sets at one iteration and the code after the loop reads (OSU's
  ``t_start = Wtime()`` at ``i == skip``): a rank restored past that iteration never
  runs it again, and reading the local is an ``UnboundLocalError``. The rank's error
  then says why and how to register it (``unset_after_restore``).
"""
from __future__ import annotations

import dis
import re
from typing import Any

import numpy as np

SCALARS = (int, float, complex, str, bytes, bool, type(None))
"""Objects that many locals may share by chance (small ints, a code object's equal
constants): one is found by the name the register call passed, not by identity."""

_LOADS = {"LOAD_FAST", "LOAD_DEREF", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST_LOAD_FAST",
          "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}
_CALL_PARTS = {"PRECALL", "KW_NAMES", "CACHE", "PUSH_NULL"}


def call_site(frame) -> str | None:
    """At a call made in ``frame`` (``self.register("A", A)``): the local its last
    argument is (``"A"``), None for an expression."""
    # the call is the last instruction at or before ``f_lasti`` (which may point into
    # the call's inline caches)
    ins = [i for i in dis.get_instructions(frame.f_code) if i.offset <= frame.f_lasti]
    before = [i for i in ins[:-1] if i.opname not in _CALL_PARTS]
    if not before or before[-1].opname not in _LOADS:
        return None
    value = before[-1].argval
    return value[-1] if isinstance(value, tuple) else value


def holders(frame, held: Any, name: str | None) -> list[str]:
    """The locals of ``frame`` that hold ``held`` or a numpy view of it: by identity,
    or for a number or string only the local ``name`` (the one the register call
    passed), when it still holds it."""
    out = []
    for local, value in frame.f_locals.items():
        if isinstance(held, SCALARS):
            if local == name and value is held:
                out.append(local)
        elif value is held or _views(value, held):
            out.append(local)
    return out


def _views(value: Any, base: Any) -> bool:
    """Whether ``value`` is a numpy view whose base chain reaches ``base``."""
    if not isinstance(value, np.ndarray) or not isinstance(base, np.ndarray):
        return False
    up = value.base
    while up is not None:
        if up is base:
            return True
        up = getattr(up, "base", None)
    return False


def read_from_here(frame) -> set[str]:
    """The locals ``frame``'s code reads from where it is on (the loop and after it): a
    stale local the rest of the code never reads is harmless."""
    names = set()
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset >= frame.f_lasti and ins.opname in _LOADS:
            names.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return names


def unfilled_report(unfilled: dict[str, tuple[str, Any]], sites: dict[str, str | None],
                    frame) -> list[dict]:
    """At the resumed loop (``frame`` runs it): for each registered name whose program
    object could not take the checkpoint's value (``unfilled``: name -> (why, object)),
    the locals still holding that object (a local bound to what register returned holds
    the checkpoint's value instead); ``sites``: name -> the local its register call
    passed (``call_site``). Only names some local still holds, and the code from here on
    reads, are listed."""
    out = []
    read = read_from_here(frame)
    for name, (why, held) in unfilled.items():
        arg = sites.get(name)
        locals_ = [x for x in holders(frame, held, arg) if x in read]
        if locals_:
            out.append({"name": name, "why": why, "locals": locals_,
                        "local": arg if arg in locals_ else locals_[0]})
    return out


def stale_key(item: dict) -> tuple:
    """What makes two ranks' ``unfilled_report`` items one finding: the name, why, and
    the locals."""
    return item["name"], item["why"], tuple(item["locals"])


def stale_text(ranks, position, item: dict) -> str:
    """The warning for one ``unfilled_report`` item of ``ranks`` restored at
    ``position``."""
    name, local = item["name"], item["local"]
    held = ", ".join(repr(x) for x in item["locals"])
    many = len(item["locals"]) > 1
    who = (f"rank {ranks[0]} was" if len(ranks) == 1
           else f"ranks {', '.join(map(str, ranks))} were")
    return (f"{who} restored to {where(position)} and could not write the checkpoint's "
            f"value of self.{name} into the program's own object ({item['why']}): the "
            f"local{'s' if many else ''} {held} still hold{'' if many else 's'} what the "
            f"code before the loop gave {'them' if many else 'it'}, not the checkpoint's "
            f"value, so the loop goes on from another state and the answer will differ "
            f"from a run without a failure. Bind the local to what register returns "
            f"({local} = self.register({name!r}, {local})) before making views or requests "
            f"of it, and assign self.{name} = {local} whenever the loop rebinds it (or use "
            f"self.{name} itself)")


def where(position) -> str:
    """A safe-point position in words."""
    index, iteration = position
    loop = "the iterations() loop" if index == 0 else f"iterations() loop #{index + 1}"
    return f"iteration {iteration} of {loop}"


def unset_after_restore(exc: BaseException, position) -> str | None:
    """The error message for ``exc`` raised by ``main()`` after a restore to
    ``position``, when it is a local the skipped iterations would have set (an
    ``UnboundLocalError``); else None."""
    if not isinstance(exc, UnboundLocalError) or position is None:
        return None
    found = re.search(r"'([^']+)'", str(exc))
    if found is None:
        return None
    name = found.group(1)
    return (f"UnboundLocalError: {exc}. This rank was restored to {where(position)}: "
            f"the code of its loop does not run again for the iterations before it (nor "
            f"do loops that had finished), so a local they set (here {name!r}, set at one "
            f"iteration and read after the loop, like a timer started at `i == skip`) was "
            f"never set in this life. Register it: self.register({name!r}, None) before the "
            f"loop, assign self.{name} in the loop, and read self.{name} after it")
