"""Receive determinants on a partial restart: gathered from every rank, handed to the
restarted ranks before their ``main()`` runs again (GroupCoordination, DDVPiggyback).

Why: those protocols restart only the failed ranks' unit (a group, a cluster) and
replay logged messages, which is right only if the restarted ranks send again what they
sent in their first life. A rank that received with ``ANY_SOURCE``/``ANY_TAG`` (a task
farm's master), probed with wildcards or waited for any of several requests would take
the messages in another order and send other messages: the survivors' "what the
restarted rank already sent" counts then drop the wrong ones (a silently wrong answer).
The engine records each such receive's outcome and piggybacks it to the peers outside
the unit before any message whose content may depend on it (``engine/_determinants``);
here the recovery gathers them back.

The order (``hand_determinants``, called by the policy between ``start_rank`` and its
``ready``): every rank is asked which determinants it holds of the restarted ranks: a
survivor answers at once; a restarted rank once its snapshot is installed (its restored
state may depend on another restarted rank's receives since that rank's checkpoint,
when two units restart together), while its ``on_restored`` waits for the union, which
each restarted rank is then handed. So no restarted rank's ``main()`` runs before it
knows what to replay, and none of its polls or ``irecv`` can take a message first.
"""
from __future__ import annotations

import asyncio

NOTE = "determinants"
"""The restore note that makes a restarted rank wait for its determinants."""


class _Handover:
    """A restarted rank's side of the hand-over: its snapshot is installed; its
    determinants have come."""

    __slots__ = ("installed", "replay")

    def __init__(self):
        self.installed = asyncio.Event()
        self.replay: asyncio.Future = asyncio.get_running_loop().create_future()


class ReplaysDeterminants:
    """Rank side, mixed into the protocols that restart part of the ranks: record
    determinants from the start (``_record_determinants``), answer what this rank holds
    of others, and, restarted, wait in ``on_restored`` for its own
    (``_replay_determinants``)."""

    def _record_determinants(self, unit) -> None:
        """Record from now on; ``unit``: the ranks that always restart with this one."""
        self.ft.determinants.enable(causal=True, unit=unit)

    def _handover(self) -> _Handover:
        handover = getattr(self, "_ft_handover", None)
        if handover is None:
            handover = self._ft_handover = _Handover()
        return handover

    async def _replay_determinants(self) -> None:
        """In ``on_restored``: a restart that gathers determinants (its notes say so)
        hands this rank its own; wait for them before ``main()`` runs again."""
        if not self.ft.restore_notes.get(NOTE):
            return
        handover = self._handover()
        handover.installed.set()
        dets = await handover.replay
        self.ft.determinants.replay_from(dets)
        self.ft.events.record("determinants_replayed", count=len(dets))

    async def ft_rpc_determinants_held(self, ranks: list, restarted: bool) -> dict:
        """The determinants this rank holds of ``ranks``; ``restarted``: this rank is
        being restored, so its snapshot's (answered once it is installed)."""
        if restarted:
            await self._handover().installed.wait()
        return self.ft.determinants.held_of(int(r) for r in ranks)

    def ft_rpc_determinants_replay(self, dets: dict) -> None:
        """This restarted rank's determinants, {k: (kind, outcome)}: ``on_restored``
        goes on with them."""
        self._handover().replay.set_result({int(k): tuple(rec) for k, rec in dets.items()})


async def hand_determinants(ctx, restarted: list[int]) -> int:
    """Coordinator side: gather from every rank what it holds of the ``restarted`` ranks
    (started with ``NOTE`` in their restore notes, not yet ``ready``) and hand each its
    own; returns how many were handed."""
    again = set(restarted)
    held = await asyncio.gather(*(
        ctx.call(x, ReplaysDeterminants.ft_rpc_determinants_held, list(restarted),
                 x in again)
        for x in range(ctx.n)))
    union: dict[int, dict] = {r: {} for r in restarted}
    for dets in held:
        for r, recs in dets.items():
            union[int(r)].update({int(k): tuple(rec) for k, rec in recs.items()})
    await asyncio.gather(*(
        ctx.call(r, ReplaysDeterminants.ft_rpc_determinants_replay, union[r])
        for r in restarted))
    return sum(len(d) for d in union.values())
