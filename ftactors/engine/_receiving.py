"""The inbox and matching: how messages reach a rank's receives.

Theory of operation
-------------------
The transport hands over batches (``deliver``). The channel layer (``_channels``)
restores FIFO order and drops duplicates and stale incarnations. Control envelopes go to
the protocol stack (``on_control``) in channel order, so a marker really flushes a
channel; acknowledgements of synchronous sends are taken before it (``_synchronous``).
Application envelopes are checked against ``received[src]``: an ``app_seq`` already
received is a re-sent duplicate (after a rollback) and is dropped; a later one waits for
the gap to fill. Then ``on_receive`` runs (a protocol may buffer or hold it) and the
matcher (``_matching``) completes a posted receive or queues the message. Batches that
come before the rank has started, or for a restored incarnation before its protocols
have reset, wait until ``open``.

A receive takes the first queued message that matches, else posts itself and waits
(the rank is then *blocked*: its posted receive is its wait record, ``_waits``, which
``blocked`` reads; the protocol stack hears of each such wait at once, ``on_blocked``,
if some protocol of it overrides that hook; a poll that finds nothing, a failed
``iprobe`` or a receive request's ``test``, is such a block for an instant: ``polled``);
a blocking receive's message is *in flight* from the moment it matches until its task
resumes (neither queued nor consumed), so a snapshot taken in between (``state_now``)
finds it there.

A peer that comes back as a new incarnation (``set_peer_epoch``) makes its older traffic
stale, here and in the channels.

``Receiving`` is a mixin of ``Endpoint`` (``_endpoint``): ``deliver`` -> ``_dispatch``
-> ``_accept_app`` -> ``Matcher.arrive`` and ``receive`` are the hot path, so they are
the endpoint's own methods, with no delegating call. Its own state is set in
``_init_receiving``. From the rest of the endpoint it reads ``rank``, ``owner`` (whose
``on_receive`` and ``on_blocked`` it looks up once: ``_hooks``),
``link``, ``trace``, ``sync``, ``peer_epochs``, ``_loop``, ``keep_base`` (whether
``state_now`` needs what is in flight), the positions' ``_reentry``,
``_received_again`` and ``_consumed`` (a consumed message is logged for replay), the
outbox's ``_flush_before_wait``, and ``determinants`` (a wildcard receive or probe records
what it took, or takes what its first life took; a message's piggybacked determinants
are kept: ``_determinants``).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable

from ._channels import InChannels
from ._constants import ANY_SOURCE, ANY_TAG
from ._determinants import DETS, IPROBE, PROBE, RECV
from ._envelope import COLLECTIVE_SUFFIX, CTRL, KIND_NAMES, Envelope
from ._hooks import message_hook
from ._matching import Matcher, Posted
from ._payload import unpack
from ._synchronous import SYNC
from ._vector import RankVector


class Receiving:
    """Arrival, ordering by application number, dispatch, receives and probes (module
    docstring)."""

    def _init_receiving(self) -> None:
        self.received = RankVector(self.size)  # application messages taken from each rank
        self.duplicates_dropped = 0
        self.matcher = Matcher()
        self._in = InChannels(self.epoch)
        self._in.epochs = self.peer_epochs
        self._gaps: dict[int, dict[int, Envelope]] = {}
        self._waiting: list[list[Envelope]] | None = []
        self._early: list[Envelope] = []  # accepted for a restored incarnation, not open yet
        self._in_flight: list[Envelope] = []  # matched by a blocking receive, not resumed yet
        # None: no protocol of the owner's class does anything with them (``_hooks``)
        self._on_receive = message_hook(self.owner, "on_receive")
        self._on_blocked = message_hook(self.owner, "on_blocked")
        self._polled: tuple = ()  # the sources of a poll that found nothing (``polled``)
        # envelopes the link delivered, by batch: (src, its epoch, mine) -> how many
        # (``_waits``: what is in flight)
        self.wire_in: dict[tuple[int, int, int], int] = {}

    # ------------------------------------------------------------------ arrivals
    def deliver(self, envs: list[Envelope]) -> None:
        """Take a batch from the transport (payload references already resolved).

        Batches that come before the rank has started (its protocols' ``on_start`` has
        not run yet) wait in arrival order and are taken by ``open``.
        """
        env = envs[0]  # a batch is one incarnation pair's (``_waits``): counted once
        key = (env.src, env.src_epoch, env.dst_epoch)
        wire_in = self.wire_in
        wire_in[key] = wire_in.get(key, 0) + len(envs)
        if self._waiting is not None:
            self._waiting.append(envs)
            return
        accept = self._in.accept
        for env in envs:
            for e in accept(env):
                self._dispatch(e)

    def open(self) -> None:
        """The rank has started (or been restored): take what arrived before."""
        early, self._early = self._early, []
        waiting, self._waiting = self._waiting, None
        for env in early:
            self._dispatch(env)
        for envs in waiting or ():
            self.deliver(envs)

    def _dispatch(self, env: Envelope) -> None:
        if self.trace is not None:
            kind = "coll" if env.comm.endswith(COLLECTIVE_SUFFIX) else KIND_NAMES[env.kind]
            self.trace.record(env.t_send, self.link.clock(), env.src, env.dst, env.tag,
                              env.payload.nbytes, kind, env.comm)
        if env.kind == CTRL:
            if env.comm == SYNC:  # not a protocol's: see _synchronous
                self.sync.on_ack(env.src, unpack(env.payload)[1])
            else:
                self.owner.on_control(env)
            return
        src = env.src
        if env.piggyback is not None and DETS in env.piggyback:
            self.determinants.incoming(src, env.piggyback[DETS])
        expected = self.received.get(src)  # src: a rank the channels accepted
        if env.app_seq != expected:
            if env.app_seq < expected:
                self.duplicates_dropped += 1
                self.sync.duplicate(env)
            else:
                self._gaps.setdefault(src, {})[env.app_seq] = env
            return
        self.received.bump(src)
        if self._on_receive is None:  # (``_accept_app`` without a call: no protocol's hook)
            self.matcher.arrive(env)
        else:
            self._accept_app(env)
        gaps = self._gaps.get(src)
        while gaps and self.received[src] in gaps:
            nxt = gaps.pop(self.received.bump(src))
            self._accept_app(nxt)

    def _accept_app(self, env: Envelope) -> None:
        on_receive = self._on_receive
        if on_receive is not None:
            env = on_receive(env)
            if env is None:  # held by a protocol
                return
        self.matcher.arrive(env)

    def deliver_now(self, env: Envelope) -> None:
        """Hand an application envelope to matching (protocols release held ones here)."""
        self.matcher.arrive(env)

    def control_data(self, env: Envelope) -> tuple[str, Any]:
        """The ``(op, data)`` carried by a control envelope."""
        return unpack(env.payload)

    # ---------------------------------------------------------- receives, probes
    async def receive(self, ctx: str, source: int, tag: int, what: str = "") -> Envelope:
        """Wait for and consume the first message matching (world ``source``); ``what``
        names the operation in the rank's wait record while it blocks (``_waits``). With
        a wildcard, a determinant is recorded, or replayed (``_determinants``)."""
        k = None
        if (source == ANY_SOURCE or tag == ANY_TAG) and self.determinants.on:
            k, source, tag = self._determined(RECV, source, tag)
        env = self.matcher.find(ctx, source, tag, consume=True)
        if self._reentry is not None:
            self._received_again(env, source, tag)
        if env is not None:  # already here: no waiter to build
            # nor a wait to flush before: the program may compute for long before its
            # next one, and a peer may be waiting for what it just queued (the second
            # half of an exchange: without this, an allreduce between computations cost
            # the other rank the whole computation, 5x its time alone)
            self._flush_before_wait()
            return self._consumed(env) if k is None else self._took(k, self._consumed(env))
        fut = self._loop.create_future()
        track = self.keep_base  # only snapshot_now reads what is in flight
        p = Posted(ctx, source, tag,
                   _resolver(fut, self.matcher, self._matched if track else None),
                   True, fut, what)  # (the task's wait, read from here: ``_waits``)
        self.matcher.add(p)  # nothing queued matches it (looked above)
        self._flush_before_wait()
        try:
            if self._on_blocked is not None:
                self._on_blocked()  # (it may release a held message: then no wait)
            env = await fut
        except asyncio.CancelledError:
            self.matcher.withdraw(p)
            if fut.done() and not fut.cancelled():
                if track:
                    self._unmatched(fut.result())
                self.matcher.arrive(fut.result())  # matched just before the cancel: give back
            raise
        if track:
            self._unmatched(env)
        return self._consumed(env) if k is None else self._took(k, self._consumed(env))

    def _determined(self, kind: str, source: int, tag: int) -> tuple[int | None, int, int]:
        """A wildcard receive or probe starts: its determinant's number (None: not
        counted, before a restored rank's resume point) and the source and tag to match,
        the first life's when it is replayed."""
        dets = self.determinants
        if not dets.active():
            return None, source, tag
        k, forced = dets.next(kind)
        return (k, source, tag) if forced is None else (k, *forced)

    def _took(self, k: int | None, env: Envelope, kind: str = RECV) -> Envelope:
        """Nondeterministic event ``k`` (None: none) took ``env``."""
        if k is not None:
            self.determinants.found(kind, (env.src, env.tag), k)
        return env

    def blocked_now(self) -> None:
        """A wait of the rank's program on a message just began with nothing queued to
        end it (a blocking receive or probe posted, receive requests waited for): the
        protocols hear of it at once (``on_blocked``: a checkpoint round may take the
        rank's state now rather than wait for a safe point it cannot reach before that
        message comes)."""
        if self._on_blocked is not None:
            self._on_blocked()

    def polled(self, sources: Iterable[int]) -> None:
        """The program polled for a message from each of ``sources`` (world ranks,
        ANY_SOURCE: any) and found none (``iprobe``, a receive request's ``test``): for
        the protocols a short block on them (``on_blocked``; ``blocked`` lists them
        meanwhile). A rank that polls until its message comes waits for it as a blocked
        one does, so a checkpoint round that message may come only after takes the
        rank's state now; as a rank that never blocks, it polled for ever while the
        round waited for its next safe point."""
        if self._on_blocked is None:  # no protocol hears of blocks
            return
        self._polled = tuple(sources)
        try:
            self._on_blocked()
        finally:
            self._polled = ()

    def _matched(self, env: Envelope) -> Envelope:
        """A blocking receive got ``env``; until its task resumes, the message is neither
        queued nor consumed, so ``state_now`` takes it from here."""
        self._in_flight.append(env)
        return env

    def _unmatched(self, env: Envelope) -> None:
        for i, e in enumerate(self._in_flight):
            if e is env:
                del self._in_flight[i]
                return

    def receive_later(self, ctx: str, source: int, tag: int,
                      on_match: Callable[[Envelope], Any] | None = None) -> asyncio.Future:
        """Post a receive now; the future completes with the consumed envelope, or,
        with ``on_match``, with what ``on_match(envelope)`` returns as it matches (a
        request's finish: a buffer filled, a synchronous send acknowledged; the future
        does not keep the envelope, so a message copied into the program's buffer from
        lent memory leaves nothing that needs a copy of its own: ``_payload``). A match
        schedules nothing on the loop: no done callback is left on the future but the
        waiter's (a window of ``Irecv``s cost two loop callbacks each)."""
        k = None
        if (source == ANY_SOURCE or tag == ANY_TAG) and self.determinants.on:
            k, source, tag = self._determined(RECV, source, tag)
        fut = self._loop.create_future()

        def withdraw(f: asyncio.Future) -> None:
            if f.cancelled():
                self.matcher.withdraw(p)

        def matched(env: Envelope) -> Envelope:
            fut.remove_done_callback(withdraw)  # matched: nothing left to withdraw
            # the outcome is recorded as the message matches, before anything can depend on it
            env = self._consumed(env) if k is None else self._took(k, self._consumed(env))
            return env if on_match is None else on_match(env)

        p = Posted(ctx, source, tag, _resolver(fut, self.matcher, matched))
        env = self.matcher.post(p)
        if self._reentry is not None:
            if env is None:
                self.matcher.withdraw(p)
            self._received_again(env, source, tag)
        if env is not None:
            fut.set_result(matched(env))
        else:
            fut.add_done_callback(withdraw)
        return fut

    async def probe(self, ctx: str, source: int, tag: int) -> Envelope:
        """Wait until a matching message is queued; it stays queued."""
        k = None
        if (source == ANY_SOURCE or tag == ANY_TAG) and self.determinants.on:
            k, source, tag = self._determined(PROBE, source, tag)
        env = self.matcher.find(ctx, source, tag, consume=False)
        if env is not None:
            return self._took(k, env, PROBE)
        fut = self._loop.create_future()
        p = Posted(ctx, source, tag, _resolver(fut, self.matcher, requeue=False),
                   consume=False, fut=fut)
        self.matcher.add(p)  # nothing queued matches it (looked above)
        self._flush_before_wait()
        try:
            self.blocked_now()
            return self._took(k, await fut, PROBE)
        except asyncio.CancelledError:
            self.matcher.withdraw(p)
            raise

    def iprobe(self, ctx: str, source: int, tag: int) -> Envelope | None:
        """The first matching message queued, if any (it stays queued). With a wildcard
        it counts as a nondeterministic event only if it finds one; replayed, it finds
        only the message its first life found (``_determinants``)."""
        dets = self.determinants
        if (source != ANY_SOURCE and tag != ANY_TAG) or not dets.active():
            env = self.matcher.find(ctx, source, tag, consume=False)
        else:
            forced = dets.poll(IPROBE)
            if forced is not None:
                source, tag = forced
            env = self.matcher.find(ctx, source, tag, consume=False)
            if env is not None:
                dets.found(IPROBE, (env.src, env.tag))
        if env is None:
            self.polled((source,))
        return env

    # ------------------------------------------------------- peers' incarnations
    def set_peer_epoch(self, rank: int, epoch: int) -> None:
        """Peer ``rank`` now runs as ``epoch``; traffic from its older lives is stale,
        including what waits for an earlier message (it would fill in the new life's
        numbers with the old life's messages)."""
        restarted = epoch != self.peer_epochs[rank]
        self.peer_epochs[rank] = epoch
        self._in.peer_epoch(rank, epoch)
        gaps = self._gaps.get(rank)
        if gaps:
            for seq in [s for s, env in gaps.items() if env.src_epoch < epoch]:
                del gaps[seq]
                self._in.stale += 1
        if restarted:
            self.sync.peer_restarted(rank)

    def set_peer_epochs(self, epochs) -> None:
        """Every other rank's epoch at once (a restore's table; this rank's own entry is
        the restore's to set). The channels read the table as traffic arrives
        (``InChannels.epochs``), so only the peers with state waiting here are visited:
        a rollback renumbers every rank, and a pass over all of them in every rank cost
        O(ranks^2) per recovery (4,096 ranks: 16.8 million calls)."""
        table = RankVector.of(epochs)
        table[self.rank] = self.peer_epochs[self.rank]
        for rank in sorted((self._gaps.keys() | self.sync.peers()) - {self.rank}):
            if table[rank] != self.peer_epochs[rank]:
                self.set_peer_epoch(rank, table[rank])
        self.peer_epochs = self._in.epochs = table

    def _restart_receiving(self, epoch: int, received, replay: list[Envelope]) -> None:
        """A restore: become incarnation ``epoch`` with the snapshot's ``received``
        counts, and queue ``replay`` in front of the matcher.

        Closed until the host has run ``on_restored`` (``open``): envelopes that arrived
        early for the new incarnation (a fast peer's marker, say) would otherwise reach
        the protocols before they reset, and the matcher before its restored messages,
        and be lost."""
        self.received = RankVector.of(received)
        self._gaps.clear()
        self._early = self._in.new_epoch(epoch)
        if self._waiting is None:
            self._waiting = []
        self._in_flight.clear()
        self.matcher.reset(replay)


def _resolver(fut: asyncio.Future, matcher: Matcher,
              on_done: Callable[[Envelope], Envelope] | None = None, requeue: bool = True):
    """Completion callback for a posted receive: a cancelled waiter gives the message back."""

    def deliver(env: Envelope) -> None:
        if fut.done():
            if requeue:
                matcher.arrive(env)
            return
        fut.set_result(on_done(env) if on_done else env)

    return deliver
