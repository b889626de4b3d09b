"""When a silent rank is hung: a timeout that follows the measured round trips.

A heartbeat is a call the rank's event loop answers. A rank whose loop is busy (a long
numpy call, a checkpoint being pickled) or whose process is paging or starved of CPU
answers late, not never; calling it hung kills a healthy rank and forces a rollback that
costs far more than the wait. So the coordinator keeps at most one ping outstanding per
rank and calls a rank hung only when its ping has waited longer than the *bound*:

    bound = max(heartbeat_timeout_s, RTT_FACTOR x the slowest round trip measured recently)

where "recently" is the last ``WINDOW`` answers of every rank: when the machine slows
down (paging, an overloaded node), every round trip grows and the bound with them; when
it recovers, the slow answers leave the window and the bound falls back to the floor. A
stopped or deadlocked process never answers, so it is still found, one bound after its
last answer.

Where the coordinator can see the rank's process (a rank on the driver's node on Ray,
``Fabric.process_state``), a silent rank whose process is running or runnable (``R``:
computing, or starved of CPU on an overloaded machine) or waiting on the disk (``D``:
paging) is busy, not hung, until ``BUSY_FACTOR`` bounds; a stopped one (``T``) or one
sleeping without answering is hung at the bound.
"""
from __future__ import annotations

from collections import deque

RTT_FACTOR = 4.0
"""How many times the slowest recent round trip a ping may wait before its rank is hung."""
BUSY_FACTOR = 6.0
"""How many bounds a silent rank whose process is visibly busy may take to answer."""
BUSY_STATES = ("R", "D")
"""Process states that mean busy (running or runnable, waiting on the disk)."""
WINDOW = 64
"""How many recent answers (of all ranks) the slowest round trip is taken from."""


class Liveness:
    """Outstanding pings and recent round trips; says which ranks are hung."""

    def __init__(self, floor_s: float):
        self.floor_s = floor_s
        self.sent: dict[int, float] = {}     # rank -> when its outstanding ping went
        self.rtts: deque = deque(maxlen=WINDOW)

    def bound(self) -> float:
        """How long a ping may wait now before its rank is called hung."""
        return max([self.floor_s] + [RTT_FACTOR * t for t in self.rtts])

    def ping(self, rank: int, now: float) -> bool:
        """A beat: whether to send ``rank`` a ping (not if one is still outstanding)."""
        if rank in self.sent:
            return False
        self.sent[rank] = now
        return True

    def answered(self, rank: int, now: float) -> None:
        """``rank`` answered its outstanding ping."""
        sent = self.sent.pop(rank, None)
        if sent is not None:
            self.rtts.append(now - sent)

    def forget(self, rank: int) -> None:
        """``rank``'s ping is moot (it died, or is being replaced)."""
        self.sent.pop(rank, None)

    def hung(self, now: float) -> list[tuple[int, float]]:
        """The ranks whose ping has waited longer than the bound, with how long."""
        bound = self.bound()
        return [(r, now - t) for r, t in sorted(self.sent.items()) if now - t > bound]
