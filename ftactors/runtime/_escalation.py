"""Multi-level recovery: a stack's recovery policies, tried from the cheapest level up.

A stack with several levels (``Protocol.roles``), such as partner copies in memory
(StandbyReplacement), Reed-Solomon blocks (RSBackup) and global sets on stable storage
(ReadyMessageFlush), keeps states at each level on that level's own schedule. When ranks
fail, ``Escalation`` hands the recovery round to the cheapest level first; a level that
does not hold what the round needs (a rank and its partner both lost, too few blocks of
a group, or nothing newer than the start of the run) says so by raising
``LevelExhausted`` and the next level is asked. Whatever a lower level did before it gave
up (pausing survivors, promoting spares) is what a recovery round may do anyway; the
level that recovers restores every rank, so nothing of the abandoned attempt survives.
The timeline names the level of every recovery (``recovery_level``) and of every level
that gave up (``level_exhausted``); a loss beyond every level ends the run with
``ft.RankFailed`` naming what each level lacked.

Every level keeps running its own services (timers, placement, sealing of stable sets)
and hears every report. Every level hears ``abandon`` as a round begins: whichever level
recovers, the ranks roll back, so work under way for the execution being abandoned (a
checkpoint being gathered) is dropped before any restored rank can report new work; and
``recovered`` once the round is over. Each level adds its ``restore_notes`` to every restore (``Coordinator.restore_spec``),
so a rank restored by one level still gets what another level's protocol needs (RSBackup's
placement on a promoted spare).
"""
from __future__ import annotations

import asyncio
from typing import Any

from ..base._errors import RankFailed


class LevelExhausted(RankFailed):
    """A level has nothing newer than the start of the run for this failure: a level
    below the top of a stack raises it (``LowerLevel.escalates``) rather than restart the
    job from the start while a costlier level may hold a newer state. Any ``RankFailed``
    from a level (a lost partner pair, no spare left) also passes the round up."""


class LowerLevel:
    """Base of a recovery policy that can sit below a costlier level in a stack."""

    escalates = False
    """Set by ``Escalation`` when a costlier level exists: a round this level could only
    restart from the start of the run is then left to it (``LevelExhausted``)."""


class Escalation:
    """Coordinator side of a stack with several recovery policies (cheapest first), and
    of the stack's helpers (``Protocol.stack_helper``), which hear what every level hears
    and ``level_recovered(level, seconds)`` after each round."""

    def __init__(self, coordinator, levels: list[tuple[str, type]], helpers=()):
        self.c = coordinator
        self.levels = [(name, policy_cls(coordinator)) for name, policy_cls in levels]
        self.helpers = list(helpers)
        for _, policy in self.levels[:-1]:
            policy.escalates = True

    def _everyone(self) -> list:
        return [policy for _, policy in self.levels] + self.helpers

    async def recover(self, failed: set[int]) -> None:
        c, lacks = self.c, []
        t0 = c.fabric.clock()
        for policy in self._everyone():
            await _maybe(policy, "abandon", failed)
        for name, policy in self.levels:
            try:
                await policy.recover(failed)
            except RankFailed as exc:  # LevelExhausted included
                lacks.append(f"{name}: {exc.reason}")
                c.events.record("level_exhausted", level=name, failed=sorted(failed),
                                reason=exc.reason)
                if policy is self.levels[-1][1]:
                    raise RankFailed(sorted(failed), "no level of the stack holds what the "
                                     "recovery needs; " + "; ".join(lacks)) from exc
                continue
            c.events.record("recovery_level", level=name, failed=sorted(failed))
            for helper in self.helpers:
                await _maybe(helper, "level_recovered", name, c.fabric.clock() - t0)
            for other in self._everyone():
                await _maybe(other, "recovered")
            return

    async def service(self) -> None:
        await asyncio.gather(*(_maybe(p, "service") for p in self._everyone()))

    def on_report(self, event) -> None:
        for policy in self._everyone():
            take = getattr(policy, "on_report", None)
            if take is not None:
                take(event)

    async def finish(self) -> None:
        for policy in self._everyone():
            await _maybe(policy, "finish")

    def restore_notes(self) -> dict:
        notes: dict = {}
        for _, policy in self.levels:
            take = getattr(policy, "restore_notes", None)
            if take is not None:
                notes.update(take())
        return notes

    def __getattr__(self, name: str) -> Any:
        """Driver requests (``run.checkpoint()``, ``run.migrate``) go to the level that
        offers them."""
        for _, policy in self.__dict__.get("levels", ()):
            method = getattr(policy, name, None)
            if method is not None:
                return method
        raise AttributeError(name)


async def _maybe(policy, name: str, *args) -> None:
    method = getattr(policy, name, None)
    if method is not None:
        await method(*args)
