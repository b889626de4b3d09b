"""No run waits forever (``runtime/_deadlock``, ``engine/_waits``): when every live rank
waits and nothing in flight can wake one, ``ft.run`` ends at once with ``ft.Deadlock``
naming each rank's wait (source, tag, communicator, loop and iteration, or a protocol's
round); a slow rank, a rank that computes and traffic always in flight are never one."""
import asyncio
import time

import pytest

import ftactors as ft
from ftactors.engine._waits import Wait
from ftactors.protocols import StandbyReplacement


class BothReceiveFirst(ft.Rank):
    """The program's own deadlock: at iteration ``at`` both ranks receive first."""

    async def main(self, at=1, iterations=4):
        other = 1 - self.rank
        self.register("x", 0)
        async for i in self.iterations(iterations):
            if i == at:
                await self.comm.recv(source=other, tag=7)
            await self.comm.send(i, dest=other, tag=7)
            self.x += await self.comm.recv(source=other, tag=7)
        return self.x


def _deadlock(cls, ranks=2, transport="local", **kw) -> ft.Deadlock:
    t0 = time.perf_counter()
    with pytest.raises(ft.Deadlock) as info:
        ft.run(cls, ranks, transport=transport, timeout_s=120, **kw)
    assert time.perf_counter() - t0 < 60  # ended by the watch, not the time limit
    return info.value


def test_two_ranks_that_both_receive_first_end_at_once_naming_both_waits(transport):
    err = _deadlock(BothReceiveFirst, transport=transport)
    wired = next(e.time for e in err.events if e.kind == "wired")
    found = next(e.time for e in err.events if e.kind == "deadlock")
    assert found - wired < 5  # seconds from the ranks' start (not Ray's own start-up)
    for rank, other in ((0, 1), (1, 0)):
        assert err.waits[rank] == (f"rank {rank} (loop 0, iteration 1): receive from rank "
                                   f"{other}, tag 7, communicator w")
        assert err.details[rank]["kind"] == "recv"
        assert err.details[rank]["source"] == other and err.details[rank]["tag"] == 7
    assert "the program's own" in str(err)
    assert any(e.kind == "deadlock" for e in err.events)


def test_a_simulated_deadlock_is_found_at_its_virtual_moment_whatever_the_watches_pend():
    """Progress reports and the time limit keep timers pending; they wake no rank."""
    reports = []
    with pytest.raises(ft.Deadlock) as info:
        ft.run(BothReceiveFirst, 2, transport="sim", timeout_s=600, progress=reports.append,
               progress_interval_s=0.5)
    assert "(at 0.000 s)" in str(info.value)


class NobodyServes(ft.Rank):
    """Rank 0 receives from any source; the others return without sending."""

    async def main(self):
        if self.rank == 0:
            return await self.comm.recv(source=ft.ANY_SOURCE, tag=ft.ANY_TAG)
        return self.rank


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_wildcard_receive_that_nobody_serves_names_it_and_the_finished_ranks(transport):
    err = _deadlock(NobodyServes, 3, transport)
    assert err.waits == {0: "rank 0: receive from any source, any tag, communicator w",
                         1: "rank 1: finished", 2: "rank 2: finished"}


class SlowSender(ft.Rank):
    """Rank 1 works ``seconds`` (awaiting a sleep, or computing without yielding)
    before it answers; rank 0 waits in its receive meanwhile."""

    async def main(self, seconds, compute=False):
        if self.rank == 1:
            if compute:
                time.sleep(seconds)  # the event loop is held: nobody can be asked
            else:
                await asyncio.sleep(seconds)
            await self.comm.send("late", dest=0, tag=1)
            return None
        return await self.comm.recv(source=1, tag=1)


@pytest.mark.parametrize("transport,compute", [("local", False), ("local", True),
                                               ("sim", False), ("ray", False), ("ray", True)])
def test_a_slow_rank_is_not_a_deadlock(transport, compute, request):
    if transport == "ray":
        request.getfixturevalue("ray_session")
    result = ft.run(SlowSender, 2, transport=transport, args=(2.0, compute))
    assert result.results == ["late", None]
    assert not result.events_of("deadlock")


class PingPong(ft.Rank):
    """Messages always in flight for ``seconds`` of wall time."""

    async def main(self, seconds):
        other, t_end, n = 1 - self.rank, time.perf_counter() + seconds, 0
        while True:
            if self.rank == 0:
                done = time.perf_counter() > t_end
                await self.comm.send(done, dest=other, tag=2)
                await self.comm.recv(source=other, tag=2)
            else:
                done = await self.comm.recv(source=other, tag=2)
                await self.comm.send(None, dest=other, tag=2)
            n += 1
            if done:
                return n


def test_a_long_run_with_messages_always_in_flight_is_not_a_deadlock():
    result = ft.run(PingPong, 2, transport="local", args=(1.5,))
    assert result.results[0] == result.results[1] > 10


class StuckCollective(ft.Rank):
    """Rank 0 enters an allreduce; rank 1 waits for a point-to-point message instead."""

    async def main(self):
        if self.rank == 0:
            return await self.comm.allreduce(1)
        return await self.comm.recv(source=0, tag=3)


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_deadlock_inside_a_collective_names_the_collectives_receive(transport):
    err = _deadlock(StuckCollective, 2, transport)
    assert err.waits[0].startswith("rank 0: receive from rank 1, tag ")
    assert err.waits[0].endswith(", collective of communicator w (allreduce)")
    assert err.waits[1] == "rank 1: receive from rank 0, tag 3, communicator w"


class StuckNonblocking(ft.Rank):
    """Rank 0 waits for a nonblocking allreduce that rank 1 never joins."""

    async def main(self):
        if self.rank == 0:
            req = self.comm.iallreduce(1)
            return await req.wait()
        return None


def test_a_nonblocking_collective_waited_for_names_its_receive_inside():
    err = _deadlock(StuckNonblocking, 2, "sim")
    assert err.waits[0].startswith("rank 0: request, collective of communicator w "
                                   "(nonblocking allreduce); inside it: receive from rank 1")
    assert err.waits[1] == "rank 1: finished"


class SynchronousFirst(ft.Rank):
    """Both ranks ``ssend`` before they receive: neither receive ever starts."""

    async def main(self):
        other = 1 - self.rank
        await self.comm.ssend(self.rank, dest=other, tag=4)
        return await self.comm.recv(source=other, tag=4)


def test_synchronous_sends_that_wait_for_each_other_are_named():
    err = _deadlock(SynchronousFirst, 2, "local")
    assert err.waits[0] == "rank 0: synchronous send to rank 1, tag 4, communicator w"
    assert err.waits[1] == "rank 1: synchronous send to rank 0, tag 4, communicator w"


class WaitsForAny(ft.Rank):
    """Rank 0 waits for the first of two receives; rank 1 sends neither."""

    async def main(self):
        if self.rank == 0:
            reqs = [self.comm.irecv(source=1, tag=5), self.comm.irecv(source=1, tag=6)]
            return await ft.waitany(reqs)
        return None


def test_waitany_names_every_request_it_waits_for():
    err = _deadlock(WaitsForAny, 2, "local")
    assert err.waits[0] == ("rank 0: first of (receive from rank 1, tag 5, communicator w; "
                            "receive from rank 1, tag 6, communicator w)")


class Standby(StandbyReplacement, BothReceiveFirst):
    backup_interval = 2


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_deadlock_after_a_recovery_is_found_among_the_new_incarnations(transport):
    """A kill before the deadlock renumbers every rank's incarnation: the wire counts of
    the abandoned lives are left out, so the new ones' deadlock is still seen."""
    err = _deadlock(Standby, 2, transport, args=(5, 8), spares=1,
                    chaos=ft.Chaos(kill=[(1, 3)]))
    assert any(e.kind == "recovery_end" for e in err.events)
    assert "iteration 5): receive from rank 1, tag 7" in err.waits[0]


class LateSender(ft.Rank):
    """Rank 1 answers after 1.5 virtual seconds: meanwhile rank 0 is blocked."""

    async def main(self):
        if self.rank == 1:
            await asyncio.sleep(1.5)
            await self.comm.send(1, dest=0, tag=8)
            return 0
        return await self.comm.recv(source=1, tag=8)


def test_progress_reports_name_what_each_blocked_rank_waits_for():
    reports = []
    ft.run(LateSender, 2, transport="sim", progress=reports.append, progress_interval_s=1.0)
    during = next(p for p in reports if p.time_s >= 1.0 and not p.done)
    assert during.waits == ("receive from rank 1, tag 8, communicator w", None)
    assert "1 blocked: rank 0 receive from rank 1, tag 8, communicator w" in during.status()


class RollCall(ft.Protocol):
    """Test protocol: at the safe point of iteration 2 every rank tells every other and
    waits until it heard from all (named with ``waiting_on``, as a protocol's round)."""

    protocol_name = "rollcall"

    async def on_start(self):
        self._heard, self._news = set(), asyncio.Event()
        await super().on_start()

    def on_control(self, env):
        if env.comm != "rollcall":
            return super().on_control(env)
        self._heard.add(env.src)
        self._news.set()

    async def on_safe_point(self, iteration):
        await super().on_safe_point(iteration)
        if iteration != 2:
            return
        others = [r for r in range(self.size) if r != self.rank]
        self.ft.send_control_all(others, "rollcall", "here")
        while not self._heard >= set(others):
            self._news.clear()
            missing = lambda: sorted(set(others) - self._heard)
            with self.ft.waiting_on(Wait("round", what="rollcall at iteration 2",
                                         lazy=missing)):
                await self._news.wait()


class UnevenLoops(ft.Rank):
    """Rank ``short`` runs 2 iterations, the others 4 (an uneven split of work)."""

    async def main(self, short=2):
        self.register("x", 0)
        async for _ in self.iterations(2 if self.rank == short else 4):
            self.x += 1
        return self.x


class Called(RollCall, UnevenLoops):
    pass


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_a_protocols_round_that_a_finished_rank_never_joins_is_named(transport):
    err = _deadlock(Called, 3, transport)
    for rank in (0, 1):
        assert err.waits[rank] == (f"rank {rank} (loop 0, iteration 2): round (rollcall at "
                                   f"iteration 2), not heard from rank(s) 2")
        assert err.details[rank]["ranks"] == [2]
    assert err.waits[2] == "rank 2: finished"
    assert "a protocol's round waits for ranks that will not join it" in str(err)


def test_ftactors_run_names_the_waits_on_its_progress_line_and_in_its_error(capsys):
    from ftactors.tools import cli
    assert cli.main(["run", "tests/runtime/test_deadlock.py:BothReceiveFirst", "--ranks", "2",
                     "--transport", "sim", "--progress"]) == 1
    err = capsys.readouterr().err
    assert ("done: iteration 1 (loop 0); 0 checkpoint(s); 0 failure(s), 0 recover(ies); "
            "2 blocked: rank 0 receive from rank 1, tag 7, communicator w; rank 1 receive "
            "from rank 0, tag 7, communicator w") in err
    assert "run failed: the run can never progress" in err


def test_a_run_given_up_at_its_time_limit_says_what_each_rank_was_doing():
    with pytest.raises(TimeoutError) as info:
        ft.run(SlowSender, 2, transport="local", args=(30.0,), timeout_s=0.5)
    assert info.value.waits == {0: "rank 0: receive from rank 1, tag 1, communicator w",
                                1: "rank 1: busy"}
    assert "\n  rank 0: receive from rank 1, tag 1, communicator w" in str(info.value)
