"""One member's side of an HC3I cluster in plain Python (no asyncio, no transport): its cut
and holding of a CLC (Algorithms 2-4, with the cut that replaces the paper's freeze) and
its log of messages to other clusters (Algorithms 5-7, the resend of section 3.4, the
trim of Algorithm 8). Paper: hc3i-hierarchical-ddv.txt; the theory of operation is in
``rank.py``'s docstring, the dependency rules in ``machine.py``.

:class:`ClcMember` takes one event at a time (a message sent or received, a request, a
cut, the messages expected before the part, the part taken, the commit or abort, a
rollback, a collection) and returns what the rank must do: send as is, piggyback,
hold, deliver, acknowledge, cut, start a forced CLC, send again. The mixin performs
those effects; ``tests/protocols/test_hc3i_member.py`` drives members of two clusters
step by step with no transport.

Counts are the core's application sequence numbers (``sent[q]`` messages to member
``q`` so far, ``received[p]`` from ``p``): the member is handed them, it does not keep
them.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Sequence

from ftactors.engine import APP, Envelope

from . import machine as _ddv
from ..shared.units import Groups

DELIVER, LATE, HELD, CUT, FORCE, DEPEND = range(6)
"""What a received message does. DELIVER: handed on as usual. LATE: handed on, and sent
before its sender's cut, so part of the state being sealed. HELD: kept by the member
until a part or a commit releases it. CUT: held, and the first news here of a CLC: the
member has cut for it (capture the state now). FORCE: held, and a CLC must be taken
before it (Algorithm 6). DEPEND: it would force a CLC the cluster can no longer take,
handed on; the dependency stays in the current DDV."""

AT_COMMIT = "at commit"
""":meth:`ClcMember.outgoing`'s piggyback for a message that leaves at the commit."""

AS_IS = (None, 0, False)
""":meth:`ClcMember.outgoing` for a message that needs nothing (the per-message path)."""


class Logged:
    """A message sent to another cluster: a copy of the envelope, what it carried (its
    sender's SN or DDV; None: held for a commit, not sent yet) and the receiver's
    acknowledgement (its SN at delivery; :data:`machine.UNACKED` until then)."""

    __slots__ = ("env", "sn", "ack")

    def __init__(self, env: Envelope, sn: Any = None, ack: int | None = _ddv.UNACKED):
        self.env, self.sn, self.ack = env, sn, ack


class Log:
    """One rank's log of its messages to other clusters (Algorithms 5 and 7), what a
    rollback makes it send again (section 3.4) and what a collection trims (Algorithm 8)."""

    __slots__ = ("cluster_of", "entries", "bytes", "bytes_max", "gc_asked")

    def __init__(self, cluster_of: Sequence[int], bytes_max: float | None = None):
        self.cluster_of = cluster_of
        self.entries: dict[int, dict[int, Logged]] = {}  # dst -> {app_seq: Logged}
        self.bytes = 0
        self.bytes_max = bytes_max  # past it, a collection is asked for (once per collection)
        self.gc_asked = False

    def sent(self, env: Envelope) -> tuple[Logged, bool]:
        """Algorithm 5: ``env`` goes to another cluster; log a copy, unacknowledged.
        Returns the entry and whether the log just passed its maximum (ask for a
        collection)."""
        entry = Logged(Envelope(APP, env.src, env.dst, env.comm, env.tag, env.app_seq,
                                env.payload))
        self.entries.setdefault(env.dst, {})[env.app_seq] = entry
        self.bytes += env.payload.nbytes
        full = self.bytes_max is not None and self.bytes > self.bytes_max and not self.gc_asked
        self.gc_asked = self.gc_asked or full
        return entry, full

    def acked(self, dst: int, app_seq: int, sn: int) -> None:
        """Algorithm 7: ``dst`` delivered message ``app_seq`` with SN ``sn``, which replaces
        infinity (an acknowledgement for an entry already trimmed changes nothing)."""
        entry = self.entries.get(dst, {}).get(app_seq)
        if entry is not None:
            entry.ack = sn

    def resend(self, targets: dict[int, int], rolled_back: bool) -> list[Logged]:
        """Section 3.4: clusters rolled back to CLC ``targets[k]``; the messages to send
        again, in order per receiver: those to a rolled-back cluster that it delivered
        after its CLC or never acknowledged (``must_resend``) and, when this rank rolled
        back itself (its log restored from its part), every one it never saw acknowledged.
        Their acknowledgements become infinity again: the new receipt acknowledges them
        (an old SN would let a collection drop them too early)."""
        again = []
        for dst in sorted(self.entries):
            k = self.cluster_of[dst]
            for seq in sorted(self.entries[dst]):
                entry = self.entries[dst][seq]
                if entry.sn is None:
                    continue  # held for a commit: it has not left yet
                if k in targets:
                    go = _ddv.must_resend(entry.ack, targets[k])
                else:
                    go = rolled_back and entry.ack is _ddv.UNACKED
                if go:
                    entry.ack = _ddv.UNACKED
                    again.append(entry)
        return again

    def collect(self, lowest: Sequence[int]) -> tuple[int, int]:
        """Algorithm 8, COLLECT: drop the entries acknowledged below their receiver's
        smallest SN ``lowest[cluster]`` (no recovery line can undo their delivery).
        Returns (entries before, after)."""
        before = after = 0
        for dst, entries in self.entries.items():
            floor = lowest[self.cluster_of[dst]]
            before += len(entries)
            for seq in [s for s, e in entries.items()
                        if e.ack is not _ddv.UNACKED and e.ack < floor]:
                self.bytes -= entries.pop(seq).env.payload.nbytes
            after += len(entries)
        self.gc_asked = False
        return before, after

    def state(self) -> dict:
        return {d: {s: (e.env, e.sn, e.ack) for s, e in v.items()}
                for d, v in self.entries.items()}

    def restore(self, state: dict) -> None:
        self.entries = {d: {s: Logged(*e) for s, e in v.items()} for d, v in state.items()}
        self.bytes = sum(e.env.payload.nbytes for v in self.entries.values()
                         for e in v.values())


class ClcMember:
    """One rank's HC3I state and rules: SN and DDV, the CLC round it takes part in, its
    cut, what it holds until its part or the commit, and its log (module docstring)."""

    __slots__ = ("rank", "me", "cluster_of", "others", "transitive", "sn", "ddv", "round",
                 "early", "closed", "cut_sn", "cuts", "expect", "part_sn", "held_intra",
                 "held_inter", "held_out", "log")

    def __init__(self, rank: int, clusters: Groups, transitive: bool = False,
                 log_bytes_max: float | None = None):
        self.rank = rank
        self.cluster_of = tuple(clusters.group_of(r) for r in range(clusters.nranks))
        self.me = self.cluster_of[rank]
        self.others = [r for r in clusters.members(rank) if r != rank]
        self.transitive = transitive  # piggyback the whole DDV (section 8)
        self.sn = 1
        self.ddv = _ddv.initial_ddv(len(clusters.groups), self.me)
        self.round: _ddv.ClcRound | None = None
        self.early: dict[int, set] = {}   # sn -> initiators of rounds after the next commit
        self.closed = False               # a member can no longer checkpoint: no more CLCs
        self.cut_sn = 1                   # the last CLC this rank has cut for
        self.cuts: dict[int, dict] = {}   # sn -> {member: sent to it before the cut}
        self.expect: dict[int, dict] = {}  # sn -> {member: its sends before its cut}
        self.part_sn = 1                  # the last CLC this rank has a part of
        self.held_intra: dict[int, list] = {}  # src -> [(its cut's CLC, env)]
        self.held_inter: list[Envelope] = []   # from other clusters, until the commit
        self.held_out: list[Logged] = []       # to other clusters, until the commit
        self.log = Log(self.cluster_of, log_bytes_max)

    # ----------------------------------------------------------- message path
    def outgoing(self, env: Envelope) -> tuple[Any, int, bool]:
        """This rank sends ``env``. Returns ``(piggyback, logged, ask_gc)``: what it carries
        (None: nothing; :data:`AT_COMMIT`: held, it leaves at the commit), the bytes
        logged and whether the log asks for a collection. Inside the cluster it carries
        the CLC of this rank's cut when it is sent after one; to another cluster it is
        logged and carries the SN (or DDV), unless sent after the cut: it goes at the
        commit, with the new SN."""
        if self.cluster_of[env.dst] == self.me:
            return AS_IS if self.cut_sn <= self.sn or self.closed else (self.cut_sn, 0, False)
        entry, ask_gc = self.log.sent(env)
        nbytes = env.payload.nbytes
        if self.cut_sn > self.sn and not self.closed:
            self.held_out.append(entry)
            return AT_COMMIT, nbytes, ask_gc
        entry.sn = self.stamp()
        return entry.sn, nbytes, ask_gc

    def stamp(self) -> Any:
        """What a message to another cluster carries now: the SN, or the DDV (transitive)."""
        return tuple(self.ddv) if self.transitive else self.sn

    def from_member(self, env: Envelope, tag: int | None, sent: Sequence[int]) -> int:
        """A message from a member, carrying ``tag`` (the CLC its sender had cut for and
        not committed, or None). Returns DELIVER, LATE, HELD or CUT. A message sent after
        its sender's cut for a CLC this rank has no part of yet is held (and cuts this rank
        if it is the first news of the CLC): counted as received in the part, it would be
        dropped as a duplicate when its sender sends it again after a rollback to the CLC.
        Messages from a sender with some held stay behind them."""
        held = self.held_intra.get(env.src)
        if held:
            tag = max(tag or 0, held[-1][0])
        if tag is not None and tag > self.part_sn:
            self.held_intra.setdefault(env.src, []).append((tag, env))
            return CUT if self.cut(tag, sent) else HELD
        if self.cut_sn <= self.part_sn:
            return DELIVER
        return LATE  # sent before its sender's cut, arrived after this one's

    def in_clc(self) -> bool:
        """Between this rank's cut (or a request) and the commit or abort of the CLC."""
        return self.round is not None or (self.cut_sn > self.part_sn and not self.closed)

    def from_outside(self, env: Envelope, carried: Any, can_snapshot: Callable[[], bool]
                     ) -> tuple[int, int | None, int, int]:
        """A message from another cluster carrying ``carried`` (its sender's SN or DDV).
        During a CLC it is held (Algorithm 2, storeMessFromOut). Otherwise Algorithm 6:
        if it carries a newer SN than the DDV has, the DDV takes it and the message is held
        for a forced CLC, acknowledged with the SN that CLC will have (``can_snapshot``:
        whether this rank can take a part now; if not, or once the cluster is closed, the
        dependency stays in the current DDV and the message is handed on).

        Returns ``(what, ack, cluster, sn)``: HELD, FORCE, DEPEND or DELIVER; the SN to
        acknowledge it with (None: not yet); the sender's cluster and the SN it carried."""
        j = self.cluster_of[env.src]
        sn = carried[j] if isinstance(carried, tuple) else carried
        if self.in_clc():
            self.held_inter.append(env)
            return HELD, None, j, sn
        if not _ddv.must_force(sn, self.ddv, j):
            return DELIVER, self.sn, j, sn
        if self.closed or not can_snapshot():
            self.ddv[j] = sn
            return DEPEND, self.sn, j, sn
        self.ddv[j] = sn
        if isinstance(carried, tuple):  # transitive: the sender's other entries
            for i, x in enumerate(carried):
                if i != self.me:
                    self.ddv[i] = max(self.ddv[i], x)
        self.held_inter.insert(0, env)  # before any held after it
        return FORCE, self.sn + 1, j, sn

    def next_outside(self) -> Envelope | None:
        """The next held message from another cluster to handle, once no CLC is under way:
        one at a time, since each may start a forced CLC whose part must not count the
        ones after it."""
        if self.held_inter and not self.in_clc():
            return self.held_inter.pop(0)
        return None

    def unreceived(self) -> dict[int, int]:
        """Per sender, the messages held here: a part counts none of them as received."""
        counts = Counter(e.src for held in self.held_intra.values() for _, e in held)
        counts.update(env.src for env in self.held_inter)
        return dict(counts)

    # ------------------------------------------------------- two-phase commit
    def initiate(self, forced_by: int | None) -> _ddv.ClcRound | None:
        """Algorithm 3: this rank asks its cluster for CLC SN+1 (None: a round is under
        way or the cluster is closed)."""
        if self.round is not None or self.closed:
            return None
        self.round = _ddv.ClcRound(self.sn + 1, self.rank, forced_by)
        return self.round

    def requested(self, initiator: int, sn: int) -> tuple[_ddv.ClcRound | None, bool, bool]:
        """Algorithm 4, REQ: ``initiator`` asks for CLC ``sn``. Returns ``(joined, cut,
        ack)``: the round this rank joins now (cut, or refuse if its ``part`` is already
        set: closed), else whether to send its cut and its acknowledgement again to a
        smaller initiator. A request for a CLC committed already is moot; one past the
        next is kept until the commit of the next arrives."""
        if sn <= self.sn:
            return None, False, False
        if sn > self.sn + 1:
            self.early.setdefault(sn, set()).add(initiator)
            return None, False, False
        if self.round is None:
            return self.join(sn, initiator), False, False
        return (None, *self.round.requested_by(initiator))

    def join(self, sn: int, initiator: int) -> _ddv.ClcRound:
        r = self.round = _ddv.ClcRound(sn, initiator)
        r.part = self.closed  # a closed member refuses at once
        return r

    def cut(self, sn: int, sent: Sequence[int]) -> bool:
        """This rank's cut for CLC ``sn``: what it sent to each member until now is before
        the CLC, what it sends from now on carries ``sn``. False if it had cut for it
        already (or the cluster is closed)."""
        if self.cut_sn >= sn or self.closed:
            return False
        self.cut_sn = sn
        self.cuts[sn] = {q: sent[q] for q in self.others if sent[q]}  # sparse: few peers
        return True

    def expected(self, sn: int, expect: dict[int, int]) -> bool:
        """The initiator says how many messages each member sent this rank before its cut
        for CLC ``sn`` (False: that CLC is committed already)."""
        if sn <= self.sn:
            return False
        self.expect[sn] = expect
        return True

    def part_due(self, received: Sequence[int]) -> _ddv.ClcRound | None:
        """The round whose part this rank takes now: every member's messages from before
        its cut are here (``received[p]`` from member ``p``). Marks the part taken."""
        r = self.round
        if r is None or r.part or r.sn not in self.expect:
            return None
        if any(received[p] < n for p, n in self.expect[r.sn].items()):
            return None
        r.part = True
        return r

    def part_taken(self, r: _ddv.ClcRound) -> list[Envelope]:
        """This rank's part of ``r`` holds its state at the cut; the acknowledgement will
        carry the DDV now. Returns the held intra-cluster messages now deliverable."""
        self.part_sn = r.sn
        r.ddv = list(self.ddv)
        return self.release_intra(r.sn)

    def release_intra(self, sn: int) -> list[Envelope]:
        """The held intra-cluster messages their senders sent after a cut for a CLC up to
        ``sn``, in order per sender (later ones stay held for the next part)."""
        out = []
        for src in list(self.held_intra):
            held = self.held_intra[src]
            while held and held[0][0] <= sn:
                out.append(held.pop(0)[1])
            if not held:
                del self.held_intra[src]
        return out

    def committed(self, sn: int, ddv: Sequence[int]
                  ) -> tuple[list[Envelope], list[Logged]] | None:
        """Algorithm 4, COMMIT of CLC ``sn`` with ``ddv`` (None: not the next CLC, moot).
        Returns what :meth:`end_round` releases."""
        if sn != self.sn + 1:
            return None
        self.sn, self.ddv, self.round = sn, list(ddv), None
        return self.end_round(sn)

    def aborted(self) -> tuple[list[Envelope], list[Logged]]:
        """A member cannot checkpoint any more: no CLC in this cluster from now on, and
        nothing is held for a CLC that will not come. Returns what is released."""
        self.closed = True
        self.round = None
        self.early.clear()
        self.part_sn = self.cut_sn
        intra = self.release_intra(self.cut_sn)
        more, out = self.end_round(self.sn)
        return intra + more, out

    def end_round(self, sn: int) -> tuple[list[Envelope], list[Logged]]:
        """The 2PC is over (committed with SN ``sn``, or aborted). Returns the held
        intra-cluster messages to deliver and the held messages to other clusters to
        send now, stamped with the SN (or DDV) after the commit (the messages from other
        clusters follow, :meth:`next_outside`)."""
        for table in (self.cuts, self.expect):
            for old in [k for k in table if k <= sn]:
                del table[old]
        self.part_sn = max(self.part_sn, sn)
        out, self.held_out = self.held_out, []
        for entry in out:
            entry.sn = self.stamp()
        return self.release_intra(sn), out

    def early_round(self) -> _ddv.ClcRound | None:
        """After a commit: the round a member asked for before it arrived, joined now."""
        initiators = self.early.pop(self.sn + 1, None)
        if initiators and self.round is None:
            return self.join(self.sn + 1, min(initiators))
        return None

    # ---------------------------------------------------------------- rollback
    def recovered(self, targets: dict[int, int], ddv: Sequence[int] | None) -> list[Logged]:
        """Section 3.4: clusters rolled back to CLC ``targets[k]``; ``ddv`` the committed DDV
        of this cluster's target if it is one of them (its state already took the CLC's,
        the coordinator's copy may record more). Returns the log entries to send again."""
        rolled_back = self.me in targets
        if rolled_back:
            self.ddv = _ddv.merge([self.ddv, ddv])
        return self.log.resend(targets, rolled_back)

    def state(self, sn: int | None = None) -> dict:
        """What a part saves (``sn``: as after the commit of CLC ``sn``)."""
        ddv = list(self.ddv)
        if sn is not None:
            ddv[self.me] = sn
        return {"sn": self.sn if sn is None else sn, "ddv": ddv, "log": self.log.state()}

    def restore(self, state: dict) -> None:
        self.sn, self.ddv = state["sn"], list(state["ddv"])
        self.log.restore(state["log"])
        self.part_sn = self.cut_sn = self.sn
