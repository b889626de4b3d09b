"""Rank processes kept between the runs of one driver (``reuse_processes``, on by default).

Starting a rank's process costs about a second of CPU: a Python process importing Ray,
numpy and ftactors (measured here: a 4-rank run that does nothing took 2.0 s of wall time
and 3.8-4.3 s of CPU on 2 cores, nearly all of it the five process starts). A chaos
matrix, a parameter sweep or a test suite runs many short jobs in one driver, so the
next run takes the processes the last one left instead of starting new ones.

What is kept, and why it is safe:

- rank processes and the run's mailbox (``Inbox``), each in a pool of its own;
- only from runs that reserve no CPUs per rank (``rank_num_cpus`` 0, the default): an
  idle kept process would hold its CPUs from other work;
- only processes of a run that *completed* (every rank returned and its results were
  collected: no user code is running in them), and spares never used; never the
  processes of a run that failed, nor one chaos touched (killed, stopped, stalled, cut);
- each is reset first (``RankActor.close``): its direct channels and listener closed,
  the run's socket directory removed, its rank dropped. What arrives for the old run
  after that is dropped: the direct plane authenticates every connection with the run's
  own secret, and actor calls carry the run's token (``RankActor.call``, ``deliver``);
- a kept process is asked to start again (``RankActor.start``, which also sets the
  run's niceness) before it is used; one that died meanwhile is passed over;
- at most ``WARM_MAX`` are kept; they belong to the driver (they end with it) and to
  one Ray job (a new ``ray.init`` starts from none).

What a kept process still holds is what any long-lived worker holds: the user's modules
as imported, with their module-level state, as Ray's own task workers keep theirs.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

WARM_MAX = 16
"""How many idle rank processes a driver keeps (about 150 MB of memory each)."""


class Warm(NamedTuple):
    """An idle rank process: its actor, Ray worker id and node."""

    actor: Any
    worker: str | None
    node: str


class WarmProcesses:
    """The idle rank processes of this driver, by Ray job."""

    def __init__(self, limit: int = WARM_MAX):
        self.limit = limit
        self._lock = threading.Lock()  # runs may be made from several threads
        self._idle: list[tuple[str, Warm]] = []

    def take(self, job: str, node: str | None) -> Warm | None:
        """An idle process of Ray job ``job`` on ``node`` (None: any node), or None."""
        with self._lock:
            for i, (owner, warm) in enumerate(self._idle):
                if owner == job and node in (None, warm.node):
                    del self._idle[i]
                    return warm
        return None

    def give(self, job: str, warm: Warm) -> bool:
        """Keep ``warm`` for the next run; False when the pool is full (kill it)."""
        with self._lock:
            self._idle = [(owner, w) for owner, w in self._idle if owner == job]
            if len(self._idle) >= self.limit:
                return False
            self._idle.append((job, warm))
            return True

    def __len__(self) -> int:
        return len(self._idle)


WARM = WarmProcesses()
"""Idle rank processes (``RankActor``)."""
INBOXES = WarmProcesses(limit=2)
"""Idle coordinator mailboxes (``Inbox``, one per run, on the driver's node)."""
