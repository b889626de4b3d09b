"""FIFO, exactly-once channels between rank incarnations.

Theory of operation: the sender stamps each envelope with the next sequence number of
its channel, keyed by the destination and the destination's incarnation (epoch) it
knows. The receiver keeps, per source, the source's newest known epoch, the next
expected number and a reorder buffer. An envelope is

* dropped as *stale* when it comes from an older incarnation of the source, or was sent
  to an older incarnation of this rank (a killed actor can keep talking for seconds; a
  rolled-back rank must not see its previous life's traffic);
* dropped as a *duplicate* when its number was already delivered;
* held when it is early, and released as soon as the gap before it fills;
* held when it is addressed to a *newer* incarnation of this rank than the one running
  (a peer learned the new epoch first); it is released when this rank moves to that epoch.

A newer source epoch opens a fresh channel: its numbering restarts at 0 and whatever was
buffered from the older incarnation is discarded. Everything here is plain Python so the
rules are unit-tested without any transport.
"""
from __future__ import annotations

from ._envelope import Envelope


class OutChannels:
    """Sender side: one counter per (destination, destination epoch)."""

    __slots__ = ("_next",)

    def __init__(self):
        self._next: dict[tuple[int, int], int] = {}

    def stamp(self, env: Envelope, src_epoch: int, dst_epoch: int) -> Envelope:
        key = (env.dst, dst_epoch)
        seq = self._next.get(key, 0)
        self._next[key] = seq + 1
        env.src_epoch = src_epoch
        env.dst_epoch = dst_epoch
        env.seq = seq
        return env

    def reset(self) -> None:
        """Forget all channels (this rank became a new incarnation)."""
        self._next.clear()


class _InChannel:
    __slots__ = ("epoch", "next_seq", "early")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.next_seq = 0
        self.early: dict[int, Envelope] = {}


class InChannels:
    """Receiver side: reorders, deduplicates and filters stale incarnations."""

    def __init__(self, my_epoch: int = 0):
        self.my_epoch = my_epoch
        self._chan: dict[int, _InChannel] = {}
        self._future: list[Envelope] = []
        self.stale = 0
        self.duplicates = 0
        # every source's newest known epoch (the endpoint's table), read as traffic
        # arrives: a restore that renumbers every rank then costs no pass over them
        self.epochs = None

    def accept(self, env: Envelope) -> list[Envelope]:
        """Take one arriving envelope; return those now deliverable, in channel order."""
        if env.dst_epoch != self.my_epoch:
            if env.dst_epoch > self.my_epoch:
                self._future.append(env)
            else:
                self.stale += 1
            return []
        ch = self._chan.get(env.src)
        if self.epochs is not None:
            known = self.epochs.get(env.src)
            if ch is None or known > ch.epoch:  # a newer life of it is known
                ch = self._chan[env.src] = _InChannel(known)
        if ch is None or env.src_epoch > ch.epoch:
            ch = self._chan[env.src] = _InChannel(env.src_epoch)
        elif env.src_epoch < ch.epoch:
            self.stale += 1
            return []
        seq = env.seq
        if seq != ch.next_seq:
            if seq < ch.next_seq or seq in ch.early:
                self.duplicates += 1
            else:
                ch.early[seq] = env
            return []
        ch.next_seq = seq + 1
        if not ch.early:
            return [env]
        out = [env]
        early = ch.early
        while ch.next_seq in early:
            out.append(early.pop(ch.next_seq))
            ch.next_seq += 1
        return out

    def peer_epoch(self, src: int, epoch: int) -> None:
        """Learn that ``src`` now runs as ``epoch``: older traffic from it becomes stale."""
        ch = self._chan.get(src)
        if ch is None or epoch > ch.epoch:
            self._chan[src] = _InChannel(epoch)

    def new_epoch(self, epoch: int) -> list[Envelope]:
        """This rank became incarnation ``epoch``: every channel into it starts afresh.

        Returns the envelopes that had arrived early for this epoch, now deliverable.
        """
        self.my_epoch = epoch
        known = {src: ch.epoch for src, ch in self._chan.items()}
        self._chan = {src: _InChannel(e) for src, e in known.items()}
        waiting, self._future = self._future, []
        out: list[Envelope] = []
        for env in waiting:
            out.extend(self.accept(env))
        return out
