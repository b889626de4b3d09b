"""DDVPiggyback: HC3I hierarchical checkpointing for cluster federations.

Paper: hc3i-hierarchical-ddv.txt (Monnet, Morin & Badrinath, 2004), sections 2-5,
Algorithms 1-8. The dependency rules are plain functions in ``protocols/hc3i/machine.py``;
each member's cut, holding and log are decided by ``protocols/hc3i/member.ClcMember``, which
this mixin drives and whose effects it performs.

Theory of operation
-------------------
*Clusters* (``clusters`` option): a partition of the ranks. ``"node"`` (the default)
groups the ranks by the Ray node they run on; the coordinator finds the nodes once the
ranks exist and tells every rank before ``main()`` starts. Where every rank is on one
node (the ``local`` and ``sim`` transports, a one-machine Ray) that is one cluster: the
protocol is then coordinated checkpointing of the whole run, with no forced CLC. (No
arbitrary split stands in for nodes: clusters of consecutive ranks that the program's
collectives cross at every step, as CG's cross two halves of 4 ranks, make every
crossing message force a CLC in the other half, a forced-checkpoint storm.) Any group
definition or policy is accepted instead (``"fixed:K"``, ``"trace:PATH"``: Algorithm 2
on a message trace, as ``ftactors groups suggest`` forms them, a JSON/YAML file, a list
of lists). A cluster's smallest rank is its primary leader: it runs the unforced
checkpoint timer. A run whose clusters force CLCs much faster than they take unforced ones says so
(``protocols/hc3i/storm.py``: a ``hc3i_storm`` event and a warning naming the cluster
pairs and the remedy).

*Sequence numbers and DDVs.* CLC 1 is the start of the run: every cluster has SN 1 and a
DDV with its own entry 1 and 0 elsewhere. Every message to another cluster carries the
sender's SN (with ``ddv_transitive``, its whole DDV); the sender keeps it in an in-memory
log with the receiver's acknowledgement, infinity until the receiver answers (Algorithms
5 and 7).

*Cluster-level checkpoints by two-phase commit* (Algorithms 3-4). An initiator (the
leader when its ``clc_interval_s`` timer fires; any rank for a forced CLC) sends a request
for CLC SN+1 to its cluster; concurrent initiators resolve by the smallest rank: a member
always answers the smallest initiator it has seen, and answers again when a smaller one
shows up. A member *cuts* when it joins (or when a message from a member that cut
already arrives first): it answers with how many messages it sent to each member so far,
and tags every message it sends to a member from then on with the CLC's number. Once it
has every member's cut the initiator tells each member how many messages each other
member sent it before its cut; a member takes its tentative checkpoint (its *part*) once
all of those have arrived, and holds back every tagged message until then (the one that
made it cut included: its part counts none of them as received, else a rollback to the
CLC would drop the sender's new copy as a duplicate). So everything
a member sent before its cut is in the receivers' parts and nothing sent after is: the
parts of one CLC form a consistent cut of the cluster (CoCheck's flush restricted to the
cluster, as in GroupCoordination, with counts instead of n(n-1) markers: five control
messages per member and CLC, which is what lets 100-rank clusters checkpoint often). It
replaces the paper's freeze of intra-cluster traffic between request and commit, which
could deadlock a program that needs a message from a frozen member before it can take
its own part. The part goes to the coordinator (``_parts``: it outlives the rank), then
the member acknowledges with its DDV; with every acknowledgement the initiator reports
the commit to the coordinator (the CLC exists from then on) and sends the commit with the
element-wise max DDV; every member's SN becomes the new SN. Between its part and the
commit a member holds its messages to other clusters (they go at the commit with the new
SN, so a receiver sees that they come after the CLC) and holds every message from other
clusters (handled at the commit, where they may force the next CLC).

*Forced CLCs* (Algorithm 6). A message from cluster j with SN s > DDV[j] is held, acked
with SN+1, DDV[j] becomes s and the receiver initiates a CLC; the message is delivered
after the commit. The CLC is taken "now", not at a safe point: holding the message until
the next safe point deadlocks any program that needs it to get there (the coupled app
receives its interface columns inside an iteration). So every member's part is its state
at the moment of its cut, ``Endpoint.state_now``: the last safe point's state plus every
message consumed since, replayed in order on restore (before the first loop: the start of
the run plus what was received so far), with the held messages not counted as received;
the messages from members that were in transit at the cut are added when they arrive
(``seal_state``). Why the recovery line stays consistent: (1) a restored member
re-executes from the safe point with exactly the messages it had consumed at its cut, so
under piecewise determinism (assumed by all of ftactors, docs/architecture/recovery.md) it reaches
the state it had there and sends again, with the same numbers, what it had sent since the
safe point; receivers that have those drop them; (2) held messages (the forcing one,
messages from other clusters from the cut to the commit, intra-cluster messages sent after
their sender's cut) are not in the part, and their senders send them again after a
rollback (logs, or re-execution inside the cluster); (3) nothing this cluster sends to
another after its cut leaves before the commit, and it leaves with the new SN, so a
receiver's DDV records the dependency exactly as if the CLC had been taken at once (the
paper's freeze of inter-cluster traffic during the 2PC). A member that has left its
``iterations()`` loop takes part too: its part is its state at the loop's end plus what
the code after the loop consumed since (a restore skips the finished loop and runs that
code again with those messages), and once ``main()`` has returned, its state at return
(``can_snapshot_now(after_loop=True)``), so a cluster with a member that finished early
stays protected. Only a member that cannot be captured at all (a restored rank still
re-running the code before its resume point) answers with a refusal: the CLC is aborted
and its cluster takes no CLC any more (a forced one becomes a dependency in the current
DDV, which a rollback undoes by going back to the last CLC, ``_ddv.cascade``).

*Rollback* (section 3.4). The coordinator is the single arbiter of failures; it keeps
every committed CLC's DDV (as the paper's GC initiator collects them) and runs the alert
cascade itself: the failed cluster goes back to its last CLC and alerts with that SN; a
cluster whose DDV has an entry >= the SN goes back to its first CLC with such an entry
and alerts in turn; others only check. Before each check the coordinator fences the
surviving ranks (they drop anything from the rolled-back incarnations) and reads their
current DDV, so no message of a rolled-back execution slips in after the check. Each
rolled-back rank restarts in a new actor from its part of the target CLC (CLC 1: from the
start), every rank learns the new incarnations, and logged messages to a rolled-back
cluster are sent again when acked with an SN >= its new SN or never acked; a rolled-back
rank also sends again what its restored log never saw acked. The log is saved with each
part (the paper keeps it in volatile memory only), so two clusters that both roll back
still exchange what crossed their recovery line. Clusters that do not depend on a
rolled-back one never roll back.

*Garbage collection* (Algorithm 8, centralized): whenever a commit leaves a cluster with
more than ``gc_clcs_max`` CLCs (2 by default; on unless set to None), on the
``gc_interval_s`` timer, and when a rank's log passes ``log_bytes_max`` (memory
pressure), the coordinator simulates the failure of every cluster, keeps per cluster the
smallest SN it could be sent back to, drops older CLCs (their parts' object references
with them, so Ray frees them) and tells every rank to drop log entries acked below the
receiver's smallest SN. Collections started by commits run one at a time; commits during
one ask for one more.

*Footprint*: per cluster, the CLCs some single failure could still send it back to (with
their parts in the object store) plus a CLC being taken; after each collection that is 1
CLC with one cluster and, in the runs measured (the tests, ``bench footprint``, 1,000
sim-check runs), at most 2 per cluster (the paper's Tables 2-3), 3 (the number of
clusters) in 4 sim-check runs with rollbacks. It is a bound on what a recovery line can
use, not a constant: a cluster that received from another one that has taken no CLC
since must keep the CLC that dependency leads back to. Each rank's log holds its
messages to other clusters not acknowledged below the receiver's smallest kept SN; the
events per CLC stay in the timeline (a few hundred bytes each).

*Beyond the paper* (its section 8): ``ddv_transitive`` piggybacks the whole DDV; a forced
CLC then also records the sender's entries for third clusters, so a later message from
one of those with no newer SN does not force another CLC. Only forced CLCs take such
entries (a CLC's DDV must never record a dependency its state already holds, or the
"first CLC with entry >= SN" rule would keep an orphan).

Deviations: no 2PC timers (failures are detected by the coordinator, which aborts a
failed cluster's 2PC by restarting it); the unforced timer runs on the leader only (the
paper starts one on every node and lets the smallest rank win); alerts are computed by
the coordinator, not sent between leaders (same cascade, same result).

*In a stack* (``class S(StandbyReplacement, DDVPiggyback, App)``) every part is also
handed to the levels (``on_part``; ``hands_parts``); the restart takes each part from the
cheapest level that keeps a copy, this protocol's own copy last, and the copies held by
ranks of a cluster the cascade restarts are rescued before they stop
(``runtime/_escalation.PartLevels``). The levels keep copies from the oldest CLC of the
cluster the last collection kept on (``parts_floor``).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ftactors.engine import APP, Envelope
from ftactors.base import ProtocolError
from ftactors.runtime import CONSISTENCY, LEVEL, Protocol

from . import machine as _ddv
from .member import AT_COMMIT, CUT, DELIVER, DEPEND, FORCE, LATE, ClcMember, Logged
from .options import NODE, OPTIONS, hc3i_settings
from ..shared.parts import HeldParts
from ..shared.units import Groups, load_groups, of_unit

NAME = "hc3i"
CONTROL = {"req": "_on_req", "cut": "_on_cut", "expect": "_on_expect", "ack": "_on_ack",
           "nack": "_on_nack", "commit": "_on_commit", "abort": "_on_abort", "got": "_on_got"}
"""This protocol's control messages and their handlers (one per message)."""


@dataclass(slots=True)
class _State:
    """One rank's HC3I state (under ``self._hc3i``): its member machine and what the
    machine leaves to the rank (the state captured at the cut, the parts, the timer)."""

    m: ClcMember
    clusters: Groups
    interval_s: float | None
    captured: tuple | None = None                    # (state, protocol state) at the cut
    late: list = field(default_factory=list)         # in transit at the cut, arrived since
    parts: HeldParts = field(default_factory=lambda: HeldParts(confirmed=True))
    timer: asyncio.Task | None = None
    timer_reset: asyncio.Event = field(default_factory=asyncio.Event)
    floor: int | None = None                         # this cluster's oldest CLC kept (GC)


class DDVPiggyback(Protocol):
    """Mixin: HC3I - 2PC checkpoints inside clusters, SN piggybacking, forced CLCs,
    sender logs, rollback alerts, centralized garbage collection."""

    protocol_name = NAME
    roles = {CONSISTENCY: "cluster cuts with forced checkpoints and logs (DDV)",
             LEVEL: "the object store"}
    stacks_with = ("standby",)
    stack_order = 2
    level_cost = 3
    uses_spares = True
    hands_parts = True
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, options: dict) -> None:
        hc3i_settings(options)
        super().check_options(options)

    # ------------------------------------------------------------------ start
    async def on_start(self) -> None:
        settings = hc3i_settings(getattr(self, "options", {}))
        spec = settings["clusters"]
        if spec == NODE:
            groups = await self._given_clusters()
        else:
            groups = load_groups(spec, self.size)
        m = ClcMember(self.rank, groups, settings["ddv_transitive"], settings["log_bytes_max"])
        self._hc3i = _State(m, groups, of_unit(settings["clc_interval_s"], m.me))
        self.ft.keep_base = True
        # a part is the state at the cut, re-executed from the last safe point: its
        # waitany and polls must take again what they took (``engine/_determinants``)
        self.ft.determinants.enable()
        self._start_timer()
        await super().on_start()

    def ft_rpc_hc3i_clusters(self, groups: list) -> None:
        """The coordinator resolved ``clusters="node"``: here are the clusters."""
        self._hc3i_given = groups
        self._clusters_event().set()

    def _clusters_event(self) -> asyncio.Event:
        if getattr(self, "_hc3i_known", None) is None:
            self._hc3i_known = asyncio.Event()
        return self._hc3i_known

    async def _given_clusters(self) -> Groups:
        await self._clusters_event().wait()
        return load_groups(self._hc3i_given, self.size)

    def part_units(self) -> Groups:
        return self._hc3i.clusters

    # ----------------------------------------------------------- message path
    def on_send(self, env: Envelope) -> Envelope | None:
        env = super().on_send(env)
        if env is None:
            return None
        carried, logged, ask_gc = self._hc3i.m.outgoing(env)
        if logged:
            self.ft.logged_bytes += logged
            if ask_gc:
                self.ft.report("hc3i_gc_request", bytes=self._hc3i.m.log.bytes)
        if carried is None:
            return env
        if carried is AT_COMMIT:
            return None
        env.piggyback = {**(env.piggyback or {}), NAME: carried}
        return env

    def on_receive(self, env: Envelope) -> Envelope | None:
        st = self._hc3i
        m = st.m
        if m.cluster_of[env.src] == m.me:
            tag = env.piggyback.get(NAME) if env.piggyback else None
            what = m.from_member(env, tag, self.ft.sent)
            if what is DELIVER:
                return super().on_receive(env)
            if what is CUT:
                self._capture(m.cut_sn)
            elif what is LATE:
                st.late.append(env)
                self._deliver(env)
                self._maybe_take_part()  # this may be the last message from before a cut
            return None
        return env if self._from_outside(env) else None

    def _from_outside(self, env: Envelope) -> bool:
        """A message from another cluster: perform what the member decides (Algorithm 6);
        True if it is to be handed on now."""
        what, ack, j, sn = self._hc3i.m.from_outside(env, env.piggyback[NAME],
                                                     self._capturable)
        if ack is None:
            return False  # held during a CLC
        if what is DEPEND:  # no CLC possible any more: a dependency of the current state
            self.ft.events.record("hc3i_dependency", cluster=j, sn=sn, src=env.src)
        self.ft.send_control(env.src, NAME, "got", (env.app_seq, ack))
        if what is FORCE:
            self._initiate(forced_by=j, cause=(env.src, env.app_seq, sn))
            return False
        return True

    def _deliver(self, env: Envelope) -> None:
        env = super().on_receive(env)
        if env is not None:
            self.ft.deliver_now(env)

    # ------------------------------------------------------- two-phase commit
    def request_clc(self) -> None:
        """Start an unforced CLC of this rank's cluster now (what the leader's timer
        does); ignored during a 2PC or once the cluster can no longer checkpoint."""
        if not self._hc3i.m.closed and self._capturable():
            self._initiate(forced_by=None)

    def _initiate(self, forced_by: int | None, cause=None) -> None:
        """Algorithm 3: ask the cluster for CLC SN+1 (forced by a message from cluster
        ``forced_by``, or unforced: None)."""
        m = self._hc3i.m
        r = m.initiate(forced_by)
        if r is None:
            return
        self.ft.events.record("hc3i_initiate", sn=r.sn, forced=forced_by is not None,
                              cause=cause)
        self._cut(r.sn)
        self.ft.send_control_all(m.others, NAME, "req", r.sn)
        self._tell_cut(r)

    def _cut(self, sn: int) -> None:
        if self._hc3i.m.cut(sn, self.ft.sent):
            self._capture(sn)

    def _capture(self, sn: int) -> None:
        """This rank just cut for CLC ``sn``: its state now is its part (sealed once the
        messages in transit to it have arrived, ``late``), without the messages it holds."""
        st, ft = self._hc3i, self.ft
        st.late = []
        st.captured = None
        if self._capturable():
            st.captured = (ft.state_now(unreceived=st.m.unreceived()), self._part_state(sn))

    def _capturable(self) -> bool:
        """Whether this rank's state now can be its part: inside a loop, before the
        first, or after one (its state at the loop's end plus what the code after it
        consumed since; once ``main()`` has returned, its state at return)."""
        return self.ft.can_snapshot_now(after_loop=True)

    def _tell_cut(self, r: _ddv.ClcRound) -> None:
        r.told = True
        data = (r.sn, self._hc3i.m.cuts.get(r.sn, {}))
        if r.initiator == self.rank:
            self._on_cut(self.rank, data)
        else:
            self.ft.send_control(r.initiator, NAME, "cut", data)

    def _on_req(self, src: int, sn: int) -> None:
        joined, cut, ack = self._hc3i.m.requested(src, sn)
        if joined is not None:
            self._join(joined)
        if cut:
            self._tell_cut(self._hc3i.m.round)
        if ack:
            self._send_ack(self._hc3i.m.round)

    def _join(self, r: _ddv.ClcRound) -> None:
        if r.part:  # this cluster can no longer checkpoint
            self._refuse(r)
            return
        self._cut(r.sn)
        self._tell_cut(r)

    def _on_cut(self, src: int, data) -> None:
        """Initiator: a member's cut; with all of them, tell each member how many
        messages every other member sent it before its cut."""
        sn, sent = data
        m = self._hc3i.m
        r = m.round
        if r is None or not r.led_by(self.rank, sn):
            return
        expect_all = r.cut_in(src, sent, m.others + [self.rank])
        if expect_all is None:
            return
        for q, expect in expect_all.items():
            if q == self.rank:
                self._on_expect(self.rank, (sn, expect))
            else:
                self.ft.send_control(q, NAME, "expect", (sn, expect))

    def _on_expect(self, src: int, data) -> None:
        if self._hc3i.m.expected(*data):
            self._maybe_take_part()

    def _maybe_take_part(self) -> None:
        """Take this rank's tentative checkpoint once every member's messages from
        before its cut are here."""
        st, ft = self._hc3i, self.ft
        r = st.m.part_due(ft.received)
        if r is None:
            return
        if st.captured is None or st.m.cut_sn != r.sn:
            self._refuse(r)  # this rank had left its loop at the cut
            return
        state, protocols = st.captured
        blob = ft.seal_state(state, protocols, st.late)
        st.captured, st.late = None, []
        self._deliver_all(st.m.part_taken(r))
        self.ft_spawn(self._keep_part(r, blob))

    def _deliver_all(self, envs: list[Envelope]) -> None:
        for env in envs:
            self._deliver(env)

    def _part_state(self, sn: int) -> dict:
        """The protocol state saved in a part of CLC ``sn``: as after its commit (the
        coordinator hands the committed DDV over after a rollback)."""
        state = self.protocol_state()
        state[NAME] = self._hc3i.m.state(sn)
        return state

    async def _keep_part(self, r: _ddv.ClcRound, blob: bytes) -> None:
        st, ft = self._hc3i, self.ft
        taken = st.parts.hold(r.sn, blob)
        self.on_part(r.sn, blob)  # the stack's levels keep copies
        await ft.link.report_now(ft.events.make("hc3i_part", cluster=st.m.me, sn=r.sn,
                                                bytes=len(blob), incarnation=self.incarnation))
        await taken  # the coordinator holds it: the acknowledgement may go
        if st.m.round is r:
            self._send_ack(r)

    def ft_rpc_hc3i_part(self, sn: int) -> bytes:
        return self._hc3i.parts.give(sn)

    def ft_rpc_hc3i_part_kept(self, sn: int) -> None:
        self._hc3i.parts.kept(sn)

    def _send_ack(self, r: _ddv.ClcRound) -> None:
        r.acked = True
        data = (r.sn, r.ddv, r.forced_by)
        if r.initiator == self.rank:
            self._on_ack(self.rank, data)
        else:
            self.ft.send_control(r.initiator, NAME, "ack", data)

    def _refuse(self, r: _ddv.ClcRound) -> None:
        if r.initiator == self.rank:
            self._abort(r.sn, self.rank)
        else:
            self.ft.send_control(r.initiator, NAME, "nack", r.sn)

    def _on_ack(self, src: int, data) -> None:
        sn, ddv, forced_by = data
        m = self._hc3i.m
        r = m.round
        if r is None or not r.led_by(self.rank, sn):
            return  # for a round this rank no longer leads
        if r.ack_in(src, ddv, forced_by, len(m.others) + 1):
            self.ft_spawn(self._commit(r))

    async def _commit(self, r: _ddv.ClcRound) -> None:
        """Algorithm 4, all acknowledgements in: the CLC exists once the coordinator
        has the commit; then every member learns it."""
        m, ft = self._hc3i.m, self.ft
        ddv, by = r.commit_ddv(m.me)
        await ft.link.report_now(ft.events.make("hc3i_commit", cluster=m.me, sn=r.sn,
                                                ddv=list(ddv), forced=bool(by), by=by,
                                                incarnation=self.incarnation))
        ft.send_control_all(m.others, NAME, "commit", (r.sn, ddv))
        self._on_commit(self.rank, (r.sn, ddv))

    def _on_commit(self, src: int, data) -> None:
        st = self._hc3i
        released = st.m.committed(*data)
        if released is None:
            return
        self._end_round(*released)
        st.timer_reset.set()
        r = st.m.early_round()
        if r is not None:
            self._join(r)

    def _on_nack(self, src: int, sn: int) -> None:
        r = self._hc3i.m.round
        if r is not None and r.sn == sn and r.initiator == self.rank:
            self._abort(sn, src)

    def _abort(self, sn: int, by: int) -> None:
        """A member cannot checkpoint any more: no CLC in this cluster from now on."""
        st, ft = self._hc3i, self.ft
        ft.report("hc3i_abort", cluster=st.m.me, sn=sn, by=by)
        ft.send_control_all(st.m.others, NAME, "abort", sn)
        self._on_abort(self.rank, sn)

    def _on_abort(self, src: int, sn: int) -> None:
        st = self._hc3i
        st.captured, st.late = None, []
        self._end_round(*st.m.aborted())
        if st.timer is not None:
            st.timer.cancel()

    def _end_round(self, intra: list[Envelope], out: list[Logged]) -> None:
        """The 2PC is over: deliver what the member held from members, send what it held
        for other clusters, then handle what came from them."""
        self._deliver_all(intra)
        for entry in out:
            self._transmit(entry)
        m = self._hc3i.m
        while (env := m.next_outside()) is not None:
            if self._from_outside(env):
                self._deliver(env)

    def _transmit(self, entry: Logged) -> None:
        """Send a logged message with what it carries now."""
        e = entry.env
        self.ft.transmit(Envelope(APP, e.src, e.dst, e.comm, e.tag, e.app_seq, e.payload,
                                  piggyback={NAME: entry.sn}))

    # ------------------------------------------------------------ control path
    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        op, data = self.ft.control_data(env)
        handler = CONTROL.get(op)
        if handler is None:
            raise ProtocolError(f"{NAME}: unknown control message {op!r} from rank {env.src}")
        getattr(self, handler)(env.src, data)

    def _on_got(self, src: int, data) -> None:
        """Algorithm 7: the receiver's SN replaces infinity in the log."""
        self._hc3i.m.log.acked(src, *data)

    # ------------------------------------------------------------------ timer
    def _start_timer(self) -> None:
        st = self._hc3i
        leader = min(st.clusters.members(self.rank)) == self.rank
        if leader and st.interval_s is not None and not st.m.closed:
            st.timer = self.ft_spawn(self._unforced_timer())

    async def _unforced_timer(self) -> None:
        """The leader's ckPtTimer: a CLC when no CLC committed for ``interval_s``."""
        st = self._hc3i
        while not st.m.closed:
            st.timer_reset.clear()
            try:
                await asyncio.wait_for(st.timer_reset.wait(), st.interval_s)
            except asyncio.TimeoutError:
                self.request_clc()

    async def on_finish(self) -> None:
        st = self._hc3i
        if st.timer is not None:
            st.timer.cancel()
        await super().on_finish()

    # ------------------------------------------------- coordinator requests
    def ft_rpc_hc3i_fence(self, epochs: dict) -> list[int]:
        """Ranks are rolling back as ``epochs`` {rank: new incarnation}: drop anything
        from their old incarnations from now on; returns this rank's DDV."""
        for rank, epoch in epochs.items():
            if int(rank) != self.rank:
                self.ft.set_peer_epoch(int(rank), epoch)
        return list(self._hc3i.m.ddv)

    def ft_rpc_hc3i_recovered(self, targets: dict, ddvs: dict, epochs: dict) -> int:
        """The recovery line: ``targets`` {cluster: SN it rolled back to}, ``ddvs`` their
        committed DDVs, ``epochs`` the new incarnations. Send again from the log what the
        rolled-back clusters may lack; returns how many."""
        m, ft = self._hc3i.m, self.ft
        targets = {int(k): v for k, v in targets.items()}
        for rank, epoch in epochs.items():
            if int(rank) != self.rank:
                ft.set_peer_epoch(int(rank), epoch)
        ddv = ddvs.get(m.me, ddvs.get(str(m.me)))
        again = m.recovered(targets, ddv)
        for entry in again:
            self._transmit(entry)
        ft.events.record("hc3i_resent", messages=len(again), rolled_back=m.me in targets)
        return len(again)

    def ft_rpc_hc3i_collect(self, lowest: list[int]) -> tuple[int, int]:
        """Algorithm 8, COLLECT: drop log entries acked below their receiver's smallest
        SN (``lowest[cluster]``: read only for the clusters this rank logged messages to,
        since every rank is asked at every collection); returns (entries before, after)."""
        st = self._hc3i
        st.floor = lowest[st.m.me]  # the levels may drop copies of older parts
        return st.m.log.collect(lowest)

    def parts_floor(self) -> int | None:
        """The oldest CLC of this rank's cluster the coordinator still keeps (a cascade
        may go back to it), as the last collection said."""
        return self._hc3i.floor

    # ------------------------------------------------------------------ state
    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        state[NAME] = self._hc3i.m.state()
        return state

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        self._hc3i.m.restore(state[NAME])

    async def on_restored(self) -> None:
        self.ft.restored_from = None  # parts stay with the coordinator
        await super().on_restored()
