"""``sim-check --app``: what a user's program does at its safe points, and the likely
cause of a failed run in the program's terms.

Every run of a program under sim-check has ``Watch`` mixed in front of its stack. At each
safe point it records a ``watch`` event (in the run's timeline, so it works on any
transport): the iteration, whether this is the first safe point since ``main()`` was
(re-)entered, whether the rank runs again after a restore, and digests of

* the rank's attributes that the program's own code names (``self.x``) and that are not
  registered (``attrs``);
* the locals of the program's frame that holds the loop (``locals``: name -> [object
  id, digest]); at the first safe point after entering ``main()``, what the code before
  the loop computed. Locals bound to a registered object are left out (``register``
  returns the objects the loop works on).

The diagnoses, each made only from facts of the runs:

* ``unregistered_changes``: an attribute outside ``register`` whose digest changes between
  two safe points of a failure-free run, or a local that keeps its object but whose
  contents change (an array or list updated in place): after a restore it holds what
  the code before the loop set, not the value at the checkpoint. (A local rebound to a
  new value every iteration is not reported: most are recomputed, not carried.);
* ``preloop_differences``: a local of the code before the loop whose digest after a
  restore differs from the failure-free run's at that loop's first safe point, and does
  not differ between two failure-free runs of different seeds (a timer, say);
* ``wildcard_receives``: the program's code names ``ANY_SOURCE`` or ``ANY_TAG``: which
  message arrives first may differ between runs (read from the code, not observed), so
  it is offered only where that can be the cause: two failure-free runs that disagree,
  or a wrong answer under a protocol that restarts part of the ranks; never for a stall,
  whose cause the ranks' waits give (``_simcheck_stalls``);
* state outside the rank that the loop changes (a variable of the program's module, a
  class attribute, a global random generator), as the ranks themselves report it in any
  run (``unsaved_state``, ``runtime/_unsaved_state``).
"""
from __future__ import annotations

import sys

from ..runtime import (Rank, code_objects, digest as state_digest, stale_key, stale_text,
                       wildcard_receives)

FRAMEWORK_ATTRS = frozenset(vars(Rank).get("__annotations__", {})) | {"comm", "ft",
                                                                      "run_identity"}
"""Attributes the framework sets on every rank: never the program's state."""


def digest(value) -> str | None:
    """A short digest of ``value`` (``_unsaved_state.digest``, as text for the timeline);
    None for what cannot be pickled or is the framework's."""
    if type(value).__module__.split(".")[0] == "ftactors" or callable(value):
        return None
    d = state_digest(value)
    return None if d is None else d.hex()


def watched(cls: type) -> type:
    """``cls`` (a stack on a program) with ``Watch`` in front, told the program's code."""
    codes = code_objects(cls)
    names = frozenset(n for c in codes for n in c.co_names) - FRAMEWORK_ATTRS
    return type(f"Watched{cls.__name__}", (Watch, cls),
                {"_watch_codes": frozenset(codes), "_watch_names": names,
                 "__module__": __name__})


class Watch:
    """The mixin behind ``watched``: records a ``watch`` event at every safe point."""

    _watch_codes: frozenset = frozenset()
    _watch_names: frozenset = frozenset()

    async def main(self, *args, **kwargs):
        self._watch_entered = True
        return await super().main(*args, **kwargs)

    async def on_safe_point(self, iteration: int) -> None:
        registered = set(self.ft.registered)
        attrs = {n: digest(v) for n, v in vars(self).items()
                 if n in self._watch_names and n not in registered}
        detail = {"iteration": iteration, "loop": self.ft.position[0] if self.ft.position
                  else 0, "restored": bool(self.restored), "entered": self._watch_entered,
                  "attrs": {n: d for n, d in attrs.items() if d is not None},
                  "locals": self._watch_locals(registered)}
        self._watch_entered = False
        self.event("watch", **detail)
        await super().on_safe_point(iteration)

    def _watch_locals(self, registered: set) -> dict:
        """[object id, digest] of the locals of the program's frame at this safe point."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code not in self._watch_codes:
            frame = frame.f_back
        if frame is None:
            return {}
        kept = {id(getattr(self, n, None)) for n in registered}
        out = {}
        for name, value in frame.f_locals.items():
            if value is self or id(value) in kept:
                continue
            d = digest(value)
            if d is not None:
                out[name] = [id(value), d]
        return out


def _watch_events(events) -> list:
    return [e for e in events if e.kind == "watch"]


def unregistered_changes(events) -> dict[str, list[int]]:
    """State outside ``register`` that changes between two safe points of one loop of
    one rank's life (a failure-free run's events): ``self.<name>`` for an attribute,
    ``<name>`` for a local changed in place; -> the iterations where."""
    found: dict[str, list[int]] = {}
    last: dict = {}
    for e in _watch_events(events):
        d = e.detail
        key = (e.rank, d["loop"])
        now = {**{f"self.{n}": v for n, v in d["attrs"].items()},
               **{n: tuple(v) for n, v in d["locals"].items()}}
        before = last.get(key)
        if before is not None and not d["entered"]:
            for name, value in now.items():
                was = before.get(name)
                if was is None or was == value:
                    continue
                if name.startswith("self.") or was[0] == value[0]:  # a local: same object
                    found.setdefault(name, []).append(d["iteration"])
        last[key] = now
    return found


def _first_locals(events) -> dict:
    """(rank, loop) -> the locals at that loop's first safe point in a failure-free run."""
    out = {}
    for e in _watch_events(events):
        if e.detail["entered"]:
            out.setdefault((e.rank, e.detail["loop"]),
                           {n: v[1] for n, v in e.detail["locals"].items()})
    return out


def preloop_differences(events, reference, other) -> list[tuple[int, int, list[str]]]:
    """(rank, iteration resumed, locals) of each restore whose code before the loop
    computed some local differently from the failure-free run ``reference``'s, leaving
    out locals that differ between the failure-free runs ``reference`` and ``other``."""
    ref, alt = _first_locals(reference), _first_locals(other)
    found = []
    for e in _watch_events(events):
        d = e.detail
        if not (d["entered"] and d["restored"]):
            continue
        want, noise = ref.get((e.rank, d["loop"]), {}), alt.get((e.rank, d["loop"]), {})
        names = sorted(n for n, (_, v) in d["locals"].items()
                       if n in want and want[n] != v and noise.get(n) == want[n])
        if names:
            found.append((e.rank, d["iteration"], names))
    return found


def program_causes(cls: type, reference, wildcards: bool = True) -> list[str]:
    """The likely causes of a wrong answer that the program and its failure-free run
    show, one line each; ``wildcards``: whether the code's wildcard receives may be one
    (``simcheck.likely_causes`` says when)."""
    lines = []
    for name, at in sorted(unregistered_changes(reference).items()):
        attr = name.removeprefix("self.")
        lines.append(f"{name} changes between iterations (first at iteration {at[0]}) "
                     f"but is not registered: after a restore it holds what the code "
                     f"before the loop set, not its value at the checkpoint (register it: "
                     + (f"self.register({attr!r}, ...))" if attr != name else
                        f"{name} = self.register({name!r}, ...), then use self.{name})"))
    outside = sorted({name for e in reference if e.kind == "unsaved_state"
                      for name in e.detail["names"] if not name.startswith(("self.", "local "))})
    for name in outside:  # (locals and attributes: named above, by the watch events)
        lines.append(f"{name}: a restore resumes the loop from that first value"
                     if name.startswith("the local ") else
                     f"{name} changes between iterations and no checkpoint holds it: after "
                     f"a restore it is what the code before the loop or a new process left, "
                     f"and in a process that runs the program again it carries over from "
                     f"the last run (keep the loop's state in registered attributes)")
    wild = wildcard_receives(cls) if wildcards else []
    if wild:
        lines.append(f"the program receives with {' and '.join(wild)}: which message "
                     f"comes first can differ between runs (a recovery replays its first "
                     f"life's order, but two runs differ from the start); receive "
                     f"from a named source and tag, or make the result independent of the "
                     f"order")
    return lines


def run_causes(events, reference, other) -> list[str]:
    """The likely causes one failed run's own timeline shows, one line each: locals a
    restore could not set (``restored_not_in_place``, as ``StaleLocalWarning`` says
    it), and values the code before the loop computed differently."""
    stale: dict[tuple, tuple] = {}  # one line per local, naming every rank
    for e in events:
        if e.kind == "restored_not_in_place":
            for item in e.detail["stale"]:
                ranks, _, _ = stale.setdefault(stale_key(item),
                                               ([], e.detail["position"], item))
                ranks.append(e.rank)
    return [stale_text(sorted(set(ranks)), position, item)
            for ranks, position, item in stale.values()] + [
        f"rank {rank}, restored at iteration {it}: the code before the loop computed "
        f"{', '.join(names)} differently than in the failure-free run (it depends on "
        f"state the restore changed; compute it from the arguments, or register it)"
        for rank, it, names in preloop_differences(events, reference, other)]
