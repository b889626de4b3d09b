"""Heartbeats: how the coordinator finds a hung rank (docs/architecture/recovery.md, "The
coordinator"). Each beat pings every watched rank that has no ping outstanding; a rank
whose ping has waited longer than the adaptive bound (``_liveness``) is hung: it is
killed and failed, unless its process is busy (paging, starved: ``BUSY_STATES``) and
within ``BUSY_FACTOR`` times the bound. A ping belongs to one life of a rank: its answer
or its death counts only while that life lasts (``Arbiter.watched``). A peer's hint
(``peer_lost``: its direct connection to the rank closed) pings the rank at once; only
the ping's outcome or the bound decides."""
from __future__ import annotations

from ._arbiter import Phase
from ._deaths import RankDied
from ._liveness import BUSY_FACTOR, BUSY_STATES, Liveness


class Heartbeats:
    """The pings of a run; ``c`` is the ``Coordinator`` (its fabric, hosts, arbiter,
    events, and ``fail``)."""

    def __init__(self, c, interval_s: float | None, timeout_s: float):
        self.c = c
        self.interval_s = interval_s  # None: no heartbeats (only hints are checked)
        self.liveness = Liveness(timeout_s)
        self.pinged: dict[int, int] = {}  # rank -> the incarnation its outstanding ping went to

    def hinted(self, rank: int) -> None:
        """A rank's direct connection to ``rank`` closed unexpectedly: ``rank``'s process
        may be gone. Only a hint (the connection may have failed on its own): ``rank`` is
        pinged now, unless a ping is already under way, and the ping's outcome
        (``hint_checked``) or the heartbeats' bound decides, as for any ping."""
        arbiter = self.c.arbiter
        if arbiter.phase is Phase.SUPERVISING and arbiter.watched(rank):
            self._beat(rank, self.c.fabric.clock(), hint=True)

    def _beat(self, rank: int, now: float, hint: bool = False) -> None:
        """Ping ``rank`` unless a ping to it is outstanding."""
        if self.liveness.ping(rank, now):
            self.pinged[rank] = self.c.incarnations[rank]
            self.c.helper(self._ping(rank, self.pinged[rank], hint))

    async def service(self) -> None:
        """Every beat, ping each watched rank that has no ping outstanding, then judge
        the silent ones (``_judge``)."""
        c, live, pinged = self.c, self.liveness, self.pinged
        busy: set[int] = set()  # silent past the bound, but its process is busy
        while True:
            await c.fabric.sleep(self.interval_s)
            now = c.fabric.clock()
            for rank in range(c.n):
                if (not c.arbiter.watched(rank)
                        or pinged.get(rank, c.incarnations[rank]) != c.incarnations[rank]):
                    live.forget(rank)  # its ping went to a life that is over
                    pinged.pop(rank, None)
                    continue
                self._beat(rank, now)
            await self._judge(now, busy)

    async def _judge(self, now: float, busy: set[int]) -> None:
        """A rank whose ping has waited longer than the bound is hung: kill it and fail
        it, unless its process is busy (``busy``: those said so, once each)."""
        c, live = self.c, self.liveness
        bound = live.bound()
        silent = live.hung(now)
        busy &= {rank for rank, _ in silent}  # those that answered are busy no more
        for rank, waited in silent:
            state = c.fabric.process_state(c.handles[rank])
            if state in BUSY_STATES and waited <= BUSY_FACTOR * bound:
                if rank not in busy:
                    busy.add(rank)
                    c.events.record("rank_busy", rank=rank, waited_s=waited,
                                    process_state=state)
                continue
            busy.discard(rank)
            live.forget(rank)
            self.pinged.pop(rank, None)
            if not c.arbiter.watched(rank):
                continue
            c.events.record("hang_detected", rank=rank, waited_s=waited, timeout_s=bound)
            await c.fabric.kill(c.handles[rank], "ray.kill")
            c.fail(rank, f"no heartbeat for {waited:.1f} s (bound {bound:.1f} s; a rank "
                         f"that computes longer than that without awaiting needs a "
                         f"larger heartbeat_timeout_s)")

    async def _ping(self, rank: int, incarnation: int, hint: bool = False) -> None:
        """One heartbeat of ``rank``'s life ``incarnation``, recorded when it answers
        (``hint``: sent because a peer's connection to it closed; the outcome is an
        event)."""
        c = self.c
        try:
            await c.fabric.ping(c.handles[rank])
        except RankDied as died:
            if hint:
                c.events.record("hint_checked", rank=rank, alive=False)
            if c.incarnations[rank] == incarnation and c.arbiter.watched(rank):
                c.fail(rank, died.reason or "its process died")
            if c.incarnations[rank] == incarnation:
                self.liveness.forget(rank)
            return
        if hint:
            c.events.record("hint_checked", rank=rank, alive=True)
        if c.incarnations[rank] == incarnation:
            self.liveness.answered(rank, c.fabric.clock())
