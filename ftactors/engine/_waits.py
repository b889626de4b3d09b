"""What a rank waits for now, and what it put on and took off the wire: read only when asked.

Theory of operation
-------------------
A run can never progress when every live rank waits and nothing can wake any of them (a
program's own deadlock: two ranks that both receive first; or a protocol's: a round that
waits for a rank that will never join). Seeing that needs two facts per rank, which the
engine keeps where they happen, at no cost to a message:

* its *wait*: a ``Wait`` record of what a task of it is blocked on. The hottest wait, a
  blocking receive or probe that found nothing, sets nothing: its posted receive
  (``Posted``) already names the future its task awaits, and a reading finds it from the
  task (``Task._fut_waiter``; ``Matcher.awaited``). The other waits (a request's wait, a
  synchronous send's acknowledgement, a protocol's round: ``waiting_on``) keep a record
  per task while they last (``wait_begin``/``wait_end``). Per task, so that a
  nonblocking operation's task (an ``ibcast``) blocked in a receive does not make the
  rank look blocked while ``main()`` computes; ``waiting`` is the wait of the rank's own
  task (``main()``, or the host's run task around it: a protocol's ``on_finish``).
* its *wire counts*: envelopes handed to the transport per destination incarnation and
  envelopes the transport delivered per source incarnation (``wire_out``, ``wire_in``:
  one dict update per batch, not per message). On every channel between live
  incarnations, sent > arrived means something is in flight, which may wake anyone
  (more arrived than sent: a transport's resent duplicate, dropped by the channels). A
  batch's epochs are read from its first envelope (a batch is one flush of one outbox,
  stamped for one incarnation pair).

The same records tell the protocols whom the rank is blocked on (``blocked``: the
sources of its blocking receives and probes, and of the receive requests it waits for,
whose message has not come): a checkpoint round joins a rank blocked on a message that
may come only after it (``protocols/shared/joining``). So a receive that blocks writes
nothing but its posted receive, and the protocols hear of the wait at once
(``Receiving.blocked_now``) only if one of them overrides ``on_blocked``.

A rank's wait ends only when something reaches it: a message (counted on the wire, its
own to itself included) or a coordinator's request (which the coordinator counts). So
two readings with the same wire counts and the same ``wait_count`` (records begun) saw
a rank that did not move in between. The coordinator reads these (``wait_state``) to end
a run that can never progress (``runtime/_deadlock``); protocols may read ``waiting``
(``RankContext``) to let a blocked rank join a round.

``Waits`` is a mixin of ``Endpoint``: its state is set in ``_init_waits``; it reads the
endpoint's ``epoch``, ``position`` and ``program_tasks``, the outbox's ``wire_out``, the
receiving's ``wire_in`` (each counted where its envelopes pass), ``matcher`` (the posted
receives) and ``_polled``; a wait that begins calls the outbox's ``_flush_before_wait``,
as a blocking receive does (what the task queued leaves before it blocks, and its next
message to each destination goes at once: a receiver's answer to a window of requests
is not held while it posts the next window).
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Callable, Iterable, NamedTuple

from ._constants import ANY_SOURCE, ANY_TAG
from ._envelope import COLLECTIVE_SUFFIX

_current_task = asyncio.current_task
_NOTHING = object()  # no future: matches no posted receive
_RANKS_SHOWN = 8
"""How many ranks a record's description lists."""


class Wait(NamedTuple):
    """One blocked wait of a rank.

    Attributes:
        kind: ``"recv"``, ``"probe"``, ``"request"`` (a nonblocking operation waited
            for), ``"any"`` (``waitany``/``waitsome``: the first of several), ``"ssend"``
            (a synchronous send's acknowledgement), ``"round"`` (a protocol's round), or
            another name a protocol gives.
        source: the world rank a receive or probe takes from (``ANY_SOURCE``), or whom a
            synchronous send waits on; None when no single rank is meant.
        tag: its tag (``ANY_TAG``), or None.
        comm: the communicator's context id (a collective's ends in ``COLLECTIVE_SUFFIX``).
        what: words for what is waited on beyond those (a round's protocol and id, a
            collective's name, the waits of the requests of a ``waitany``).
        ranks: the ranks whose messages could end it (for a round: those it has not
            heard from), when known.
        lazy: a function that gives ``ranks`` when the record is read (``wait_state``),
            for a record that would cost a pass over many ranks to fill at every wait;
            never pickled.
        receives: the receive requests waited for, as ``(world source, future)`` pairs
            (``blocked``); never pickled.
    """

    kind: str
    source: int | None = None
    tag: int | None = None
    comm: str | None = None
    what: str = ""
    ranks: tuple = ()
    lazy: Callable[[], Iterable[int]] | None = None
    receives: tuple = ()

    def resolved(self) -> "Wait":
        """This record with ``ranks`` filled by ``lazy`` (picklable)."""
        if self.lazy is None and not self.receives:
            return self
        ranks = self.ranks if self.lazy is None else tuple(self.lazy())
        return self._replace(ranks=ranks, lazy=None, receives=())

    def describe(self) -> str:
        """One line: ``receive from rank 1, tag 7, communicator w``."""
        words = {"recv": "receive", "probe": "probe", "ssend": "synchronous send to",
                 "request": "request", "any": "first of", "round": "round"}
        text = words.get(self.kind, self.kind)
        if self.kind in ("recv", "probe"):
            text += " from " + ("any source" if self.source == ANY_SOURCE
                                else f"rank {self.source}")
        elif self.source is not None:
            text += f" rank {self.source}"
        if self.tag is not None:
            text += ", any tag" if self.tag == ANY_TAG else f", tag {self.tag}"
        if self.comm is not None:
            if self.comm.endswith(COLLECTIVE_SUFFIX):
                text += f", collective of communicator {self.comm[:-len(COLLECTIVE_SUFFIX)]}"
            else:
                text += f", communicator {self.comm}"
        if self.what:
            text += f" ({self.what})"
        if self.ranks:
            who = ", ".join(map(str, self.ranks[:_RANKS_SHOWN]))
            if len(self.ranks) > _RANKS_SHOWN:
                who += f", ... ({len(self.ranks)} ranks)"
            text += (", not heard from rank(s) " if self.kind == "round"
                     else ", waiting for rank(s) ") + who
        return text


class Waits:
    """The wait records and wire counts of one rank (module docstring)."""

    def _init_waits(self) -> None:
        self._waits: dict[asyncio.Task, Wait] = {}
        self.wait_count = 0  # waits begun: a reading that sees it unchanged saw no move
        self.rank_task: asyncio.Task | None = None  # set by the host: whose wait is the rank's

    def wait_begin(self, wait: Wait):
        """The current task blocks on ``wait`` now; returns what ``wait_end`` needs (a
        wait on receive requests, ``wait.receives``, then tells the protocols:
        ``blocked_now``)."""
        self._flush_before_wait()
        task = _current_task()
        waits = self._waits
        before = waits.get(task)
        waits[task] = wait
        self.wait_count += 1
        return task, before

    def wait_end(self, token) -> None:
        """The wait ``wait_begin`` started is over (the task resumes)."""
        task, before = token
        if before is None:
            self._waits.pop(task, None)
        else:
            self._waits[task] = before

    @contextmanager
    def waiting_on(self, wait: Wait):
        """``with ft.waiting_on(Wait("round", what=...)): await ...``: a protocol's own
        wait, named for deadlock reports and readable as ``waiting`` meanwhile."""
        token = self.wait_begin(wait)
        try:
            yield
        finally:
            self.wait_end(token)

    @property
    def blocked(self) -> list[int]:
        """The world sources (ANY_SOURCE: any) of the messages the rank's tasks wait for
        now with none come yet: blocking receives and probes (their posted receives),
        the receive requests of request waits (their records' ``receives``) and, while
        the protocols hear of it, a poll that found nothing (``Receiving.polled``). One
        matched already, whose task has not resumed, waits no more (a batch that brings
        a message and then a marker behind it)."""
        sources = self.matcher.blocking_sources() + list(self._polled)
        for wait in self._waits.values():
            if wait.receives:
                sources += [source for source, fut in wait.receives if not fut.done()]
        return sources

    @property
    def waiting(self) -> Wait | None:
        """What the rank's own task (``main()``; outside it, the host's task running the
        protocols' ``on_start``/``on_finish``) is blocked on now, or None: it is running,
        computing, or sleeping. Set only where the engine or a protocol blocks
        (``waiting_on``); a wait elsewhere (a plain ``asyncio`` future) reads None."""
        return self.task_wait(self.rank_task)

    def task_wait(self, task) -> Wait | None:
        """What a task of this rank is blocked on (None: not blocked in a named wait):
        its record, or the blocking receive or probe whose future it awaits."""
        wait = self._waits.get(task)
        if wait is not None or task is None:
            return wait
        p = self.matcher.awaited(getattr(task, "_fut_waiter", None) or _NOTHING)
        if p is None:
            return None
        return Wait("recv" if p.consume else "probe", p.source, p.tag, p.ctx, p.what)

    def wait_state(self) -> dict:
        """What the coordinator reads to tell a deadlock: the rank's wait (None: not
        blocked), where it is, how many waits it began, its wire counts."""
        wait = self.waiting
        inner = ()
        if wait is not None:
            wait = wait.resolved()
            if wait.kind in ("request", "any"):  # a nonblocking operation's own wait
                inner = tuple(w.resolved() for t in self.program_tasks
                              if (w := self.task_wait(t)) is not None)
        return {"wait": wait, "inner": inner, "position": self.position,
                "epoch": self.epoch, "count": self.wait_count, "out": dict(self.wire_out),
                "in": dict(self.wire_in)}
