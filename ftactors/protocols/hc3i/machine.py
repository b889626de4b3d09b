"""HC3I's dependency rules as plain functions: no asyncio, no transport (the *machine* of
``DDVPiggyback``; paper: hc3i-hierarchical-ddv.txt, sections 3.2-3.5, Algorithms 4, 6, 8).

Theory of operation
-------------------
Every cluster numbers its cluster-level checkpoints (CLCs): SN is the number of the last
one committed (CLC 1 is the start of the run, so SN starts at 1). A cluster's Direct
Dependency Vector holds its own SN and, for every other cluster, the largest SN that
cluster piggybacked on a message delivered here (0: none). A CLC is stored with the DDV
of its commit (the element-wise max of its members' DDVs, Algorithm 4).

*Forcing* (Algorithm 6): a message from cluster j with SN s > DDV[j] means j stored a CLC
since it last talked to this cluster; delivering it first would make every CLC taken
here later depend on j's state after CLC s, so a CLC is taken before delivery.

*Why the first CLC with DDV[j] >= s is the one to roll back to* (section 3.4). A message
from j with SN >= s is delivered only once DDV[j] >= s: either a forced CLC was taken
first (its DDV has the new entry, its state does not have the message) or the last CLC
already had DDV[j] >= s. So the state of CLC k depends on j only up to the DDV of CLC
k-1: the first CLC with DDV[j] >= s holds nothing j sent after its CLC s, and the next one
may. When j rolls back to CLC s, every cluster whose DDV (or a member's, when a
dependency could not be turned into a CLC: ``current``) has DDV[j] >= s rolls back to that
CLC - or to its last one, when only ``current`` has the entry - and alerts the others in
turn: the recovery line is the fixpoint of these alerts (:func:`cascade`).

*A CLC's two-phase commit* (Algorithms 3-4), as one member sees it: :class:`ClcRound`
(the smallest initiator wins; the initiator tallies the members' cuts into what each
must receive before its part, then their acknowledgements into the commit's DDV).

*Garbage collection* (Algorithm 8): simulate the failure of each cluster (it rolls back to
its last CLC) and keep, per cluster, the smallest SN it could be sent back to
(:func:`collectable`); CLCs older than that and log entries acknowledged below it can
never be needed again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

UNACKED = None
"""A logged message's acknowledgement before it arrives: infinity (Algorithm 5)."""


@dataclass(frozen=True)
class Clc:
    """A committed cluster-level checkpoint: its number and the DDV of its commit."""

    sn: int
    ddv: tuple[int, ...]
    forced: bool = False


def initial_ddv(nclusters: int, me: int) -> list[int]:
    """The DDV of CLC 1, the start of the run (Algorithm 1, with SN 1 as in Figure 5)."""
    ddv = [0] * nclusters
    ddv[me] = 1
    return ddv


def must_force(sn: int, ddv: Sequence[int], sender_cluster: int) -> bool:
    """Algorithm 6: a message carrying ``sn`` from ``sender_cluster`` forces a CLC."""
    return sn > ddv[sender_cluster]


def merge(ddvs) -> list[int]:
    """The commit's DDV: the element-wise max (Algorithm 4, computeNewDDV)."""
    ddvs = list(ddvs)
    return [max(col) for col in zip(*ddvs)]


def must_resend(ack: int | None, target: int) -> bool:
    """Whether a logged message to a cluster rolled back to CLC ``target`` goes again: it
    was delivered after that CLC (acknowledged with an SN >= target) or never acked."""
    return ack is UNACKED or ack >= target


@dataclass
class Alert:
    """One step of the cascade, for the timeline: ``cluster`` checked the alert of
    ``sender`` (rolled back to CLC ``sn``) and rolled back to ``to`` (None: it did not)."""

    sender: int
    sn: int
    cluster: int
    to: int | None


@dataclass
class RecoveryLine:
    """The result of :func:`cascade`: the CLC every rolled-back cluster restarts from, the
    alerts in the order they were handled."""

    targets: dict[int, int] = field(default_factory=dict)
    alerts: list[Alert] = field(default_factory=list)


def _first_at_least(clcs: Sequence[Clc], j: int, s: int, upto: int | None) -> int | None:
    for clc in clcs:
        if upto is not None and clc.sn > upto:
            break
        if clc.ddv[j] >= s:
            return clc.sn
    return None


def cascade(clcs: dict[int, Sequence[Clc]], current: dict[int, Sequence[int]],
            failed: dict[int, int], record: bool = True) -> RecoveryLine:
    """The recovery line after ``failed`` (cluster -> the CLC it rolls back to), by the
    rollback alerts of section 3.4, handled first come first served.

    Args:
        clcs: every cluster's committed CLCs, oldest first.
        current: every cluster's DDV now (for clusters that do not roll back; it may
            exceed the last CLC's where a dependency could not be made a CLC).
        record: keep every alert in the line (for the timeline); False for
            :func:`collectable`, which runs a cascade per cluster at every collection
            and needs the targets only (an alert per pair of clusters was most of its cost).
    """
    line = RecoveryLine(dict(failed))
    queue = sorted(failed.items())
    order = sorted(clcs)
    while queue:
        j, s = queue.pop(0)
        for k in order:
            if k == j:
                continue
            rolled = line.targets.get(k)
            view = current[k] if rolled is None else _clc(clcs[k], rolled).ddv
            to = None
            if view[j] >= s:
                to = _first_at_least(clcs[k], j, s, rolled)
                if to is None:  # only the current DDV has it: undo since the last CLC
                    to = clcs[k][-1].sn if rolled is None else rolled
                if rolled is not None and to >= rolled:
                    to = None  # already rolled back far enough
            if record:
                line.alerts.append(Alert(j, s, k, to))
            if to is not None:
                line.targets[k] = to
                queue.append((k, to))
    return line


def _clc(clcs: Sequence[Clc], sn: int) -> Clc:
    for clc in clcs:
        if clc.sn == sn:
            return clc
    raise KeyError(f"no stored CLC {sn}")


def collectable(clcs: dict[int, Sequence[Clc]]) -> dict[int, int]:
    """Algorithm 8's recovery line: per cluster, the smallest SN any single failure could
    send it back to. CLCs below it (and logs acked below it) can be dropped."""
    lowest = {k: v[-1].sn for k, v in clcs.items()}
    current = {k: v[-1].ddv for k, v in clcs.items()}
    for j, v in clcs.items():
        line = cascade(clcs, current, {j: v[-1].sn}, record=False)
        for k, sn in line.targets.items():
            lowest[k] = min(lowest[k], sn)
    return lowest


@dataclass
class ClcRound:
    """A two-phase commit for CLC ``sn`` as one member sees it (Algorithms 3-4): who leads
    it, what this member did, and on the initiator the members' cuts and acknowledgements.
    Each method takes one event and says what the member must do; the mixin does it."""

    sn: int
    initiator: int                 # the smallest initiator seen (Algorithm 4)
    forced_by: int | None = None   # this rank started it for a message from this cluster
    part: bool = False             # this rank's tentative checkpoint is taken (or refused)
    ddv: list | None = None        # the DDV of this rank's acknowledgement
    told: bool = False             # this rank's cut went to the initiator
    acked: bool = False            # the acknowledgement went out
    cuts: dict = field(default_factory=dict)  # as initiator: rank -> its cut
    acks: dict = field(default_factory=dict)  # as initiator: rank -> (ddv, forced_by)
    committing: bool = False

    def requested_by(self, initiator: int) -> tuple[bool, bool]:
        """Another member asks for this CLC: the smallest initiator wins (unless the
        commit is under way), and what the old one was told is forgotten. Returns
        ``(cut, ack)``: whether this member must send its cut, and its acknowledgement,
        again, to the new initiator."""
        if initiator >= self.initiator or self.committing:
            return False, False
        self.initiator = initiator
        self.cuts.clear()
        self.acks.clear()
        return self.told, self.acked

    def led_by(self, me: int, sn: int) -> bool:
        """Whether ``me`` leads this round for CLC ``sn`` and still tallies it (an answer
        for a round it no longer leads is dropped)."""
        return self.sn == sn and self.initiator == me and not self.committing

    def cut_in(self, member: int, sent: dict[int, int], members: Iterable[int]
               ) -> dict[int, dict[int, int]] | None:
        """Initiator: ``member`` cut, having sent ``sent[q]`` messages to each member
        ``q``. With every member's cut: what each member must have received from each
        other before it takes its part, ``{q: {p: n}}`` (sparse: senders only)."""
        self.cuts[member] = sent
        members = list(members)
        if len(self.cuts) < len(members):
            return None
        expect: dict[int, dict[int, int]] = {q: {} for q in members}
        for p, sent_by_p in self.cuts.items():
            for q, n in sent_by_p.items():
                expect[q][p] = n
        return expect

    def ack_in(self, member: int, ddv: Sequence[int], forced_by: int | None,
               size: int) -> bool:
        """Initiator: ``member`` holds its part (with its DDV, and the cluster whose
        message made it start the round, if any). True once all ``size`` members did:
        the round commits (``commit_ddv``) and takes no more answers."""
        self.acks[member] = (ddv, forced_by)
        if len(self.acks) < size:
            return False
        self.committing = True
        return True

    def commit_ddv(self, me: int) -> tuple[list[int], list[int]]:
        """The commit: the element-wise max of the members' DDVs with this cluster's
        (``me``) entry the new SN, and the clusters whose messages forced it."""
        ddv = merge(d for d, _ in self.acks.values())
        ddv[me] = self.sn
        return ddv, sorted({b for _, b in self.acks.values() if b is not None})
