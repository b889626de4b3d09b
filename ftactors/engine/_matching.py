"""MPI message matching: posted receives against arrived (unexpected) messages.

Theory of operation: messages are matched by (communicator context, source, tag) with
ANY_SOURCE / ANY_TAG wildcards. Both queues are scanned in order (arrivals in arrival
order, receives in posting order), and channels deliver each sender's messages in send
order, so MPI's non-overtaking rule holds: of two messages from one sender that both match
a receive, the first sent is received first. Contexts never match each other, so a
communicator's collectives (their own context) never steal its point-to-point messages.

Probes are waiters that look without consuming. Everything here is synchronous: a
posted receive is completed through its ``deliver`` callback.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from ._constants import ANY_SOURCE, ANY_TAG
from ._envelope import Envelope


class Posted:
    """A pending receive or probe: ``source`` is a world rank or ANY_SOURCE. A blocking
    one names the future its task awaits (``fut``) and what the program called
    (``what``, a collective's name): read back as the task's wait (``_waits``)."""

    __slots__ = ("ctx", "source", "tag", "deliver", "consume", "fut", "what")

    def __init__(self, ctx: str, source: int, tag: int,
                 deliver: Callable[[Envelope], None], consume: bool = True,
                 fut=None, what: str = ""):
        self.ctx = ctx
        self.source = source
        self.tag = tag
        self.deliver = deliver
        self.consume = consume
        self.fut = fut
        self.what = what


class Matcher:
    """Matching state of one rank, all communicators."""

    def __init__(self):
        self._unexpected: dict[str, deque[Envelope]] = {}
        self._posted: dict[str, list[Posted]] = {}
        self._order: dict[int, int] = {}  # id(env) -> arrival number, for snapshots
        self._arrivals = 0

    # -- arrivals -------------------------------------------------------------------
    def arrive(self, env: Envelope) -> None:
        """A message is ready for the application: complete a receive or queue it."""
        posted = self._posted.get(env.comm)
        if posted:
            src, tag = env.src, env.tag
            for i, p in enumerate(posted):
                if ((p.source == ANY_SOURCE or p.source == src)
                        and (p.tag == ANY_TAG or p.tag == tag)):
                    if not p.consume:
                        del posted[i]
                        p.deliver(env)
                        return self.arrive(env)  # probes never consume; look again
                    del posted[i]
                    p.deliver(env)
                    return
        q = self._unexpected.get(env.comm)
        if q is None:
            q = self._unexpected[env.comm] = deque()
        q.append(env)
        self._order[id(env)] = self._arrivals
        self._arrivals += 1

    # -- receives and probes ----------------------------------------------------------
    def find(self, ctx: str, source: int, tag: int, consume: bool) -> Envelope | None:
        """The first queued message matching, removed from the queue if ``consume``."""
        q = self._unexpected.get(ctx)
        if not q:
            return None
        for i, env in enumerate(q):
            if (source == ANY_SOURCE or source == env.src) and (tag == ANY_TAG or tag == env.tag):
                if consume:
                    del q[i]
                    self._order.pop(id(env), None)
                return env
        return None

    def post(self, p: Posted) -> Envelope | None:
        """Match ``p`` against queued messages now, or queue it; returns the match."""
        env = self.find(p.ctx, p.source, p.tag, p.consume)
        if env is None:
            self._posted.setdefault(p.ctx, []).append(p)
        return env

    def add(self, p: Posted) -> None:
        """Queue ``p`` without looking for a match (its caller just found none)."""
        posted = self._posted.get(p.ctx)
        if posted is None:
            self._posted[p.ctx] = [p]
        else:
            posted.append(p)

    def awaited(self, fut) -> Posted | None:
        """The pending receive or probe whose task awaits ``fut``, if any."""
        for ps in self._posted.values():
            for p in ps:
                if p.fut is fut:
                    return p
        return None

    def blocking_sources(self) -> list[int]:
        """The sources of the pending receives and probes a task awaits (``fut``) whose
        message has not come (a cancelled one not withdrawn yet waits no more)."""
        return [p.source for ps in self._posted.values() for p in ps
                if p.fut is not None and not p.fut.done()]

    def posted_receives(self) -> list[Posted]:
        """The receives posted and not completed yet (probes not listed)."""
        return [p for ps in self._posted.values() for p in ps if p.consume]

    def withdraw(self, p: Posted) -> None:
        """Forget a pending receive or probe (its waiter was cancelled)."""
        posted = self._posted.get(p.ctx)
        if posted and p in posted:
            posted.remove(p)

    # -- snapshots ----------------------------------------------------------------------
    def pending(self) -> int:
        """How many receives are posted and not completed yet (probes not counted)."""
        return sum(p.consume for ps in self._posted.values() for p in ps)

    def queued(self) -> list[Envelope]:
        """Every arrived-but-unreceived message, in arrival order."""
        envs = [env for q in self._unexpected.values() for env in q]
        envs.sort(key=lambda e: self._order.get(id(e), 0))
        return envs

    def reset(self, queued: list[Envelope]) -> None:
        """Drop all state and queue ``queued`` (in that order) as if they had just arrived.

        Pending receives are dropped too: after a rollback nobody awaits them.
        """
        self._unexpected.clear()
        self._posted.clear()
        self._order.clear()
        for env in queued:
            self.arrive(env)
