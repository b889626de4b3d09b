"""Heartbeats: a busy or stalled rank is not called hung while its silence stays under the
adaptive bound (``ftactors/runtime/_liveness.py``); a rank silent past it is; a peer's hint
that a rank is gone only makes the coordinator check it. Deterministic: the bound is a
function of the pings' times, and the sim runs stall a rank in virtual time."""
import asyncio

import pytest

import ftactors as ft
from ftactors.runtime._liveness import BUSY_FACTOR, RTT_FACTOR, WINDOW, Liveness


def test_a_ping_waits_up_to_the_floor_while_round_trips_are_fast():
    live = Liveness(floor_s=3.0)
    assert live.ping(0, 0.0) and live.ping(1, 0.0)
    assert not live.ping(0, 1.0)  # still outstanding: not pinged again, not restarted
    live.answered(1, 0.01)
    assert live.bound() == 3.0
    assert live.hung(2.9) == []
    assert live.hung(3.5) == [(0, 3.5)]


def test_slow_round_trips_raise_the_bound_and_leave_it_when_they_age_out():
    live = Liveness(floor_s=3.0)
    live.ping(0, 10.0)
    live.answered(0, 12.5)  # a rank busy for 2.5 s answered late: the machine is slow
    assert live.bound() == pytest.approx(RTT_FACTOR * 2.5)
    live.ping(1, 20.0)
    assert live.hung(20.0 + 9.0) == []  # 9 s of silence is within 4 x 2.5 s
    assert live.hung(20.0 + 10.5) == [(1, 10.5)]
    live.forget(1)
    for k in range(WINDOW):  # fast answers push the slow one out of the window
        live.ping(2, 100.0 + k)
        live.answered(2, 100.0 + k + 0.001)
    assert live.bound() == 3.0


class Ticker(ft.Rank):
    """Iterations of 0.1 virtual seconds with a ring exchange; returns what it got."""

    async def main(self, iterations=100):
        self.register("got", [])
        async for i in self.iterations(iterations):
            await asyncio.sleep(0.1)
            n = self.size
            self.got.append(await self.comm.sendrecv((self.rank, i), dest=(self.rank + 1) % n,
                                                     source=(self.rank - 1) % n))
        return list(self.got)


BEATS = {"heartbeat_interval_s": 1.0, "heartbeat_timeout_s": 3.0}


def test_a_rank_stalled_longer_than_a_beat_but_under_the_bound_is_not_hung():
    reference = ft.run(Ticker, 3, transport="sim").results
    r = ft.run(Ticker, 3, transport="sim", chaos=ft.Chaos(kill_at=[(1, 2.0)], method="stall",
                                                           stall_s=2.5), **BEATS)
    (stall,) = r.events_of("stalled")
    assert stall.rank == 1 and stall.detail["for_s"] == 2.5
    assert not r.events_of("hang_detected") and r.metrics["failures"] == 0
    assert r.results == reference


def test_a_silent_rank_whose_process_is_busy_gets_more_time():
    """Past the bound (3 s) but its process is running (a stall is one: ``R``): busy, not
    hung, up to BUSY_FACTOR bounds; the timeline says so once."""
    reference = ft.run(Ticker, 3, transport="sim", kwargs={"iterations": 300}).results
    r = ft.run(Ticker, 3, transport="sim", kwargs={"iterations": 300},
               chaos=ft.Chaos(kill_at=[(1, 2.0)], method="stall", stall_s=6.0), **BEATS)
    (busy,) = r.events_of("rank_busy")
    assert busy.rank == 1 and busy.detail["process_state"] == "R"
    assert 3.0 < busy.detail["waited_s"] < 3.0 * BUSY_FACTOR
    assert not r.events_of("hang_detected") and r.results == reference


def test_a_rank_busy_past_the_busy_bound_is_hung():
    with pytest.raises(ft.RankFailed, match="no heartbeat"):
        ft.run(Ticker, 3, transport="sim", kwargs={"iterations": 300},
               chaos=ft.Chaos(kill_at=[(1, 2.0)], method="stall",
                              stall_s=3.0 * BUSY_FACTOR + 2.0), **BEATS)


def test_a_stopped_rank_is_hung_at_the_bound():
    """``sigstop``: the process is stopped (``T``), not busy: hung once the bound passes."""
    with pytest.raises(ft.RankFailed, match=r"no heartbeat for [34]\.\d s \(bound 3\.0 s; "
                                            r".*larger heartbeat_timeout_s\)"):
        ft.run(Ticker, 3, transport="sim", kwargs={"iterations": 300},
               chaos=ft.Chaos(kill_at=[(1, 2.0)], method="sigstop"), **BEATS)


def test_a_stall_is_timed_only():
    with pytest.raises(ValueError, match="kill_at"):
        ft.Chaos(kill=[(1, 3)], method="stall")


class Hinting(Ticker):
    """Rank 0 tells the coordinator, ``hint_at_s`` into the run, that its connection to
    rank 1 closed (what the Ray link reports when a direct connection ends unexpectedly)."""

    async def main(self, iterations=100, hint_at_s=0.55):
        if self.rank == 0:
            asyncio.ensure_future(self._hint(hint_at_s))
        return await super().main(iterations)

    async def _hint(self, at_s):
        await asyncio.sleep(at_s)
        self.ft.report("peer_lost", peer=1)


def test_a_false_hint_is_checked_and_fails_nothing():
    """The coordinator pings the rank a hint names at once; it answers, so nothing fails."""
    r = ft.run(Hinting, 3, transport="sim", kwargs={"iterations": 20})
    (hint,) = r.events_of("peer_lost")
    assert hint.rank == 0 and hint.detail == {"peer": 1}
    (check,) = r.events_of("hint_checked")
    assert check.rank == 1 and check.detail == {"alive": True} and check.time >= hint.time
    assert r.metrics["failures"] == 0
    assert r.results == ft.run(Ticker, 3, transport="sim", kwargs={"iterations": 20}).results


def test_a_hint_starts_the_hang_clock_of_a_stopped_rank_but_the_bound_decides():
    """Rank 1 is stopped at 2.05 s, just after answering the 2.0 s heartbeat, and rank 0
    hints at 2.1 s: the hint's ping, not the 3.0 s heartbeat's, is the one the bound
    (3 s) is counted from, and the rank is called hung only once that ping has waited
    past the bound."""
    def detected(cls, **kw):
        with pytest.raises(ft.RankFailed) as failed:
            ft.run(cls, 3, transport="sim", kwargs={"iterations": 300, **kw},
                   chaos=ft.Chaos(kill_at=[(1, 2.05)], method="sigstop"), **BEATS)
        (found,) = [e for e in failed.value.events if e.kind == "hang_detected"]
        return found

    plain, hinted = detected(Ticker), detected(Hinting, hint_at_s=2.1)
    assert hinted.detail["waited_s"] > BEATS["heartbeat_timeout_s"]
    assert (plain.time, hinted.time) == (7.0, 6.0)
