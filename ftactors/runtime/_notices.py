"""What a run must tell its user about fault tolerance it did not exercise or cannot give.

A run that verifies is only evidence when the failures it planned happened and the state
it claims to protect was protected. Ways a run can look tested while it is not, each
told as a ``FaultToleranceWarning`` (``base/_warnings``) and kept in the result:

* a planned kill that never fired (its iteration was past the end of the loop or after
  a ``break``, it named an incarnation that never lived or was already gone, the program
  has no ``iterations()`` loop, its time came after the end of the run, its recovery
  round or phase never came, its moment of a rank's or a spare's life never came):
  ``kill_tally`` finds each kill's firing by its identity (the event of a firing names
  its kill, ``runtime/_chaos_fabric``) and says why each unfired one did not fire;
  ``RunResult.metrics`` has ``kills_planned``, ``kills_fired`` and ``kills_unfired``;
* a rank restored past the top of its first loop with nothing registered: the rank
  reports it at the restore (``restored_unregistered``) and the metrics list the ranks;
  the driver warns then (``on_report``) if a loop of the program carries state from one
  iteration to the next (``_carried_state``): a task-farm worker that only receives
  tasks and sends results has nothing to register, and is not told to;
* a protocol that will never checkpoint: known before the start from the options
  (``Protocol.start_notices``, e.g. ReadyMessageFlush with no interval), or only at the
  end when no rank ever offered a safe point to protocols that checkpoint only there
  (``Protocol.needs_safe_points``): no earlier moment knows that ``main()`` has no loop;
* a spares role with ``spares=0`` (``StandbyReplacement.start_notices``): what a
  failure will do instead;
* a loop that changes state no checkpoint holds (a random generator, a module variable,
  a class attribute): a rank reports it between its second and third safe points
  (``_unsaved_state``), the driver warns then;
* a restore that could not write a registered value into the program's own object
  while a local still holds it (``self.register("n", n)`` with a number, then the loop
  goes on with ``n``): the rank reports it at its resumed loop (``_stale_locals``), the
  driver warns then (``StaleLocalWarning``).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..base import (Event, KillNotFiredWarning, NoCheckpointWarning, NothingRegisteredWarning,
                    StaleLocalWarning, UnsavedStateWarning, warn)
from ._carried_state import loops_carry_state
from ._chaos import Kill
from ._protocol import protocol_classes
from ._stale_locals import stale_key, stale_text


def at_start(rank_cls: type, options: dict, spares: int) -> list[str]:
    """Warn of what the stack's protocols say about this run's settings before it
    starts (``Protocol.start_notices``); returns the messages."""
    told = []
    for proto in protocol_classes(rank_cls):
        for category, message in proto.start_notices(rank_cls, options, spares):
            warn(category, message)
            told.append(message)
    return told


def on_report(event: Event, earlier: list[Event], rank_cls: type) -> None:
    """A rank's report reached the driver (after the ``earlier`` ones): warn now of one
    that says a rank of ``rank_cls`` was restored with nothing registered while its
    loops carry state, or that its loop changes state no checkpoint holds (once per run
    for the same state)."""
    if event.kind == "unsaved_state":
        names = event.detail["names"]
        if any(e.kind == event.kind and e.detail["names"] == names for e in earlier):
            return
        warn(UnsavedStateWarning,
             f"the loop of rank {event.rank} changes state that no checkpoint holds: "
             f"{'; '.join(names)}. After a restore it is what the code before the loop (or "
             f"a new process) sets up, not what it was at the checkpoint, so a run with a "
             f"failure gives another answer than one without. Register it "
             f"(self.register('name', value), then use self.name; for random numbers one "
             f"generator, rng = self.register('rng', np.random.default_rng(seed)), drawn "
             f"from as self.rng)")
    if event.kind == "restored_not_in_place":  # once per run for the same local
        told = {stale_key(item) for e in earlier if e.kind == event.kind
                for item in e.detail["stale"]}
        for item in event.detail["stale"]:
            if stale_key(item) not in told:
                warn(StaleLocalWarning, stale_text([event.rank], event.detail["position"],
                                                   item))
    if event.kind == "restored_unregistered" and loops_carry_state(rank_cls):
        loop, iteration = event.detail["position"]
        warn(NothingRegisteredWarning,
             f"rank {event.rank} was restored to iteration {iteration} of loop {loop} "
             f"with nothing registered (self.register): its loop resumes there with every "
             f"variable as main() first set it, not as it was before the failure; "
             f"register the state the loop changes")


def after_run(rank_cls: type, kills: list[Kill], metrics: dict, events: list[Event]) -> None:
    """Add to ``metrics`` what the run did not exercise or protect, and warn of it."""
    tally = kill_tally(kills, events)
    metrics.update(tally)
    if tally["kills_unfired"]:
        lines = "; ".join(f"{kill_text(k['kill'])}: {k['why']}" for k in tally["kills_unfired"])
        warn(KillNotFiredWarning,
             f"{len(tally['kills_unfired'])} of {len(kills)} planned kill(s) never fired, so "
             f"this run did not survive them: {lines}")
    metrics["restored_unregistered"] = sorted(
        {ev.rank for ev in events if ev.kind == "restored_unregistered"})
    finishes = [ev for ev in events if ev.kind == "finish"]
    metrics["safe_points"] = any(ev.detail.get("position") is not None for ev in finishes)
    needing = [p.__name__ for p in protocol_classes(rank_cls) if p.needs_safe_points]
    if needing and finishes and not metrics["safe_points"]:
        warn(NoCheckpointWarning,
             f"no rank offered a safe point (main() has no `async for i in "
             f"self.iterations(n)` loop): {', '.join(needing)} checkpoint(s) only there, so "
             f"nothing was checkpointed and a failure restarts the run from the start")


def kill_tally(kills: list[Kill], events: list[Event]) -> dict[str, list[dict]]:
    """``kills_planned``, ``kills_fired`` (each a kill's settings) and ``kills_unfired``
    (``{"kill": settings, "why": reason}``): a kill fired when an event of the timeline
    names it (``kill``: its index in the plan, as every firing's event does)."""
    hits = {ev.detail.get("kill") for ev in events}
    planned, fired, unfired = [], [], []
    for i, kill in enumerate(kills):
        settings = describe(kill)
        planned.append(settings)
        if i in hits:
            fired.append(settings)
        else:
            unfired.append({"kill": settings, "why": _why_unfired(kill, events)})
    return {"kills_planned": planned, "kills_fired": fired, "kills_unfired": unfired}


def describe(kill: Kill) -> dict[str, Any]:
    """A kill's settings that say when it strikes (none left at their defaults)."""
    out = {k: v for k, v in asdict(kill).items() if v is not None}
    if kill.recovery_round is None:
        out.pop("recovery_phase")
    if not kill.incarnation:
        out.pop("incarnation")
    return out


def kill_text(settings: dict) -> str:
    """A kill's settings (``describe``) as the user would write the kill."""
    return "Kill(" + ", ".join(f"{k}={v!r}" for k, v in settings.items()) + ")"


def _why_unfired(kill: Kill, events: list[Event]) -> str:
    """Why ``kill`` never fired, from the timeline."""
    r = kill.rank
    if kill.spare is not None:
        started = sum(1 for ev in events if ev.kind == "spare_ready")
        return (f"spare {kill.spare} never reached moment {kill.moment!r} (the run made "
                f"{started} spare(s) ready)")
    if kill.moment is not None:
        return (f"rank {r} (incarnation {kill.incarnation}) never reached moment "
                f"{kill.moment!r} (that life never lived, or ended before it)")
    if kill.recovery_round is not None:
        rounds = {ev.detail["round"] for ev in events if ev.kind == "recovery_start"}
        if kill.recovery_round not in rounds:
            return f"the run had no recovery round {kill.recovery_round} ({len(rounds)} round(s))"
        return f"recovery round {kill.recovery_round} never reached phase {kill.recovery_phase!r}"
    if kill.time_s is not None:
        if kill.incarnation:
            return "a kill at a time strikes a rank's first life only"
        ran = [ev.time for ev in events if ev.kind in ("run_start", "run_end")]
        took = f"its ranks ran {ran[-1] - ran[0]:.3g} s; " if len(ran) == 2 else ""
        return f"the run ended first ({took}the kill was due {kill.time_s:.3g} s in)"
    last = max((ev.detail["incarnation"] for ev in events
                if ev.kind == "respawned" and ev.rank == r), default=0)
    if kill.incarnation > last:
        return (f"rank {r} never had incarnation {kill.incarnation} "
                f"(its last was {last})")
    if any(ev.kind == "failure_detected" and ev.rank == r
           and ev.detail.get("incarnation") == kill.incarnation for ev in events):
        return (f"incarnation {kill.incarnation} of rank {r} died before it reached "
                f"iteration {kill.iteration}")
    respawns = [ev for ev in events if ev.kind == "respawned" and ev.rank == r]
    replaced = next((ev for ev in respawns
                     if ev.detail["incarnation"] == kill.incarnation + 1), None)
    if replaced is not None:
        later = [ev.time for ev in respawns if ev.time > replaced.time]
        moved = any(ev.kind == "migrated" and ev.rank == r
                    and replaced.time <= ev.time <= min(later, default=ev.time)
                    for ev in events)
        how = "moved to a new process (run.migrate)" if moved else "replaced by a recovery"
        return (f"incarnation {kill.incarnation} of rank {r} was {how} (as incarnation "
                f"{kill.incarnation + 1}) before it reached iteration {kill.iteration}")
    return (f"rank {r} (incarnation {kill.incarnation}) never reached iteration "
            f"{kill.iteration} of an iterations() loop (its loops ended or were left "
            f"first, or main() has none)")
