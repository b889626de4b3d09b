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

*Levels that keep another protocol's parts.* GroupCoordination and DDVPiggyback
checkpoint a group or a cluster at a time, never the whole job at once, so a level
cannot take global cuts beside them: a restarted group would have to rejoin a global
round the others passed long ago. Instead they hand every part they make to the levels
(``Protocol.hands_parts``, ``on_part``), and their own recovery chooses the recovery line
and asks ``PartLevels`` for each part it restores: the cheapest level that holds a copy
serves it (partner copies, then RS blocks), and the protocol's own copy in the driver's
object store is the last resort (it was made on the failed rank's node, so it is gone
with a lost node). The timeline names where every part came from (``part_sources``) and
the costliest level used (``recovery_level``); a part no level holds ends the run with
``ft.RankFailed`` saying what each level lacked.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ..base import RankFailed


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

    def __init__(self, ctx, levels: list[tuple[str, type]], helpers=()):
        self.c = ctx  # the run's RecoveryContext, which each level is handed too
        self.levels = [(name, policy_cls(ctx)) for name, policy_cls in levels]
        self.helpers = list(helpers)
        for _, policy in self.levels[:-1]:
            policy.escalates = True

    def _everyone(self) -> list:
        return [policy for _, policy in self.levels] + self.helpers

    async def recover(self, failed: set[int]) -> None:
        c, lacks = self.c, []
        t0 = c.clock()
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
                await _maybe(helper, "level_recovered", name, c.clock() - t0)
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


class PartLevels:
    """Coordinator side of a stack whose consistency protocol hands its parts to the
    levels: where each part a recovery restores is found."""

    def __init__(self, ctx, own: str, levels: list[tuple[str, type]]):
        self.c = ctx  # the run's RecoveryContext, which each level is handed too
        self.own = own  # the consistency protocol: its copies in the driver's object store
        self.levels = [(name, level_cls(ctx)) for name, level_cls in levels]
        self._used = own
        self._keys: dict[int, Any] = {}  # rank -> the key of the part it restores

    async def find(self, wanted: dict[int, Any], kept: dict[int, Any], units,
                   gone: set[int]) -> dict[int, Any]:
        """A handle to every rank's part ``wanted[rank]`` (a key of ``on_part``), from the
        cheapest level that holds it; ``kept[rank]`` is the protocol's own copy. ``gone``:
        the failed ranks (a level asks no rank that failed or was respawned since, and
        uses no copy ``rescue``d from one that failed since: its node may be gone).
        Copies are pulled into the driver's object store, so they outlive a respawn.

        Raises:
            RankFailed: a part is held by no level (named with what each one lacked).
        """
        c, found, lacks = self.c, {}, []
        source: dict[int, str] = {}
        self._keys = dict(wanted)
        for name, level in self.levels:
            missing = {r: key for r, key in wanted.items() if r not in found}
            if not missing:
                break
            got = await level.find(missing, units, gone)
            found.update(got)
            source.update({r: name for r in got})
            if len(got) < len(missing):
                lacks.append(f"{name}: no copy of the parts of ranks "
                             f"{sorted(set(missing) - set(got))}")
        rest = [r for r in wanted if r not in found and kept.get(r) is not None]
        usable = await asyncio.gather(*(c.available([kept[r]]) for r in rest))
        for r, ok in zip(rest, usable):
            if ok:
                found[r], source[r] = kept[r], self.own
        lost = sorted(r for r in wanted if r not in found)
        if lost:
            lacks.append(f"{self.own}: the parts of ranks {lost} are not in the object "
                         f"store any more (their node is gone)")
            raise RankFailed(lost, "no level of the stack holds the checkpoint parts the "
                             "recovery needs; " + "; ".join(lacks))
        order = [name for name, _ in self.levels] + [self.own]
        self._used = order[max((order.index(s) for s in source.values()),
                               default=len(order) - 1)]
        c.events.record("part_sources", sources={r: source[r] for r in sorted(source)})
        return found

    def restore_notes(self) -> dict:
        """What the levels add to a restore (``Coordinator.restore_spec``) after the
        last ``find``: e.g. each rank's part key, for a level that keeps the part again."""
        notes: dict = {}
        for _, level in self.levels:
            take = getattr(level, "restore_notes", None)
            if take is not None:
                notes.update(take(self._keys))
        return notes

    def recovered(self, failed: set[int]) -> None:
        """The round that restored the parts found last is over: name its level (the
        costliest one a part came from; the protocol's own for a restart from the start)."""
        self.c.events.record("recovery_level", level=self._used, failed=sorted(failed))

    async def rescue(self, ranks: list[int], gone: set[int]) -> None:
        """``ranks`` are about to be restarted before the recovery line is known (a
        cascade): every level pulls the copies the live ones hold into the driver's
        object store, for ``find`` (``gone``: as for ``find``)."""
        live = [r for r in ranks if r not in set(gone) | self.c.unstarted()]
        for _, level in self.levels:
            await level.rescue(live)

    async def reprotect(self, restarted: set[int], parts: dict[int, dict], units) -> None:
        """After a recovery restarted ``restarted`` (running again): the levels whose
        copies lived in those processes keep again the parts ``parts`` {rank: {key:
        handle}} (the protocol's own copies) of the ranks that went on. A level that
        cannot (RS blocks are re-made at the unit's next part) has no ``reprotect``."""
        for _, level in self.levels:
            again = getattr(level, "reprotect", None)
            if again is not None:
                await again(restarted, parts, units)

    async def forget(self, after: dict[int, Any], units) -> None:
        """Ranks ``after`` rolled back to their part ``after[rank]`` (None: the start):
        every level drops its copies of their newer parts, which belong to the execution
        abandoned. Call it once the survivors are fenced against the old lives."""
        for _, level in self.levels:
            await level.forget(after, units)
