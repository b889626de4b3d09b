"""Tests for the virtual-time event loop behind the ``sim`` transport.

Plain synchronous tests: each one drives ``run_virtual`` itself.  Every run
goes through ``_within_watchdog``, which executes it in a daemon thread with a
wall-clock limit, so a loop that sleeps for real or spins forever fails the
test instead of hanging the suite.
"""

import asyncio
import random
import socket
import threading
import time

import pytest

from ftactors.transports._simloop import SimDeadlock, VirtualClockLoop, run_virtual

WATCHDOG_SECONDS = 10.0


def _within_watchdog(func, timeout=WATCHDOG_SECONDS):
    """Return ``func()`` run in a fresh daemon thread; fail if it overruns."""
    outcome = {}

    def target():
        try:
            outcome["result"] = func()
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"did not finish within {timeout} wall seconds")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _run(main, *, timeout=WATCHDOG_SECONDS, debug=False):
    """``run_virtual(main)`` under the watchdog."""
    return _within_watchdog(lambda: run_virtual(main, debug=debug), timeout)


def test_sleeping_an_hour_takes_no_wall_time():
    async def main():
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualClockLoop)
        start = loop.time()
        await asyncio.sleep(3600)
        return start, loop.time()

    t0 = time.perf_counter()
    start, end = _run(main)
    assert time.perf_counter() - t0 < 1.0
    assert (start, end) == (0.0, 3600.0)


def _random_sleepers_trace(seed):
    """Trace (virtual time, task id, expected time) of seeded random sleepers."""

    async def sleeper(task_id, delays, trace):
        loop = asyncio.get_running_loop()
        expected = 0.0
        for delay in delays:
            await asyncio.sleep(delay)
            expected += delay  # same float arithmetic as call_later
            trace.append((loop.time(), task_id, expected))

    async def main():
        rng = random.Random(seed)
        trace = []
        await asyncio.gather(*(
            sleeper(i, [rng.uniform(0.0, 50.0) for _ in range(3)], trace)
            for i in range(300)
        ))
        return trace

    return _run(main)


def test_random_sleepers_wake_in_deadline_order_reproducibly():
    trace = _random_sleepers_trace(seed=1234)
    assert len(trace) == 900
    # Each wake-up happens exactly at its deadline: no real time leaked in.
    assert all(now == expected for now, _, expected in trace)
    # And the wake-ups come in deadline order.
    times = [now for now, _, _ in trace]
    assert times == sorted(times)
    assert _random_sleepers_trace(seed=1234) == trace


def test_equal_deadlines_run_in_scheduling_order():
    async def main():
        loop = asyncio.get_running_loop()
        order = []

        async def sleeper(tag):
            await asyncio.sleep(2.0)
            order.append(tag)

        # Interleave timers at three deadlines, scheduled through call_later,
        # call_at and sleeping tasks, so ties must be broken by scheduling
        # order rather than by whatever the heap happens to yield.
        tasks = []
        for i in range(60):
            if i % 3 == 0:
                loop.call_later(1.0, order.append, ("later", i))
            elif i % 3 == 1:
                loop.call_at(3.0, order.append, ("at", i))
            else:
                tasks.append(asyncio.create_task(sleeper(("task", i))))
        await asyncio.gather(*tasks)
        await asyncio.sleep(5.0)
        return order

    order = _run(main)
    assert order == (
        [("later", i) for i in range(0, 60, 3)]
        + [("task", i) for i in range(2, 60, 3)]
        + [("at", i) for i in range(1, 60, 3)]
    )


def test_wait_for_times_out_at_virtual_deadline():
    async def main():
        loop = asyncio.get_running_loop()
        never = loop.create_future()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(never, timeout=5.0)
        timed_out_at = loop.time()
        # A wait_for whose awaitable finishes first returns at that moment,
        # not at its timeout, and later sleeps count from there.
        assert await asyncio.wait_for(asyncio.sleep(1.0, "done"), 100.0) == "done"
        finished_at = loop.time()
        await asyncio.sleep(1.0)
        return timed_out_at, finished_at, loop.time()

    assert _run(main) == (5.0, 6.0, 7.0)


def test_deadlock_raises_quickly_and_names_pending_tasks():
    stuck = []

    async def main():
        loop = asyncio.get_running_loop()
        nobody_sets_this = loop.create_future()
        nor_this = loop.create_future()
        await asyncio.sleep(2.5)
        stuck.extend([
            asyncio.current_task(),
            asyncio.create_task(_await(nobody_sets_this), name="rank-0"),
            asyncio.create_task(_await(nor_this), name="rank-1"),
        ])
        await asyncio.gather(*stuck[1:])

    t0 = time.perf_counter()
    with pytest.raises(SimDeadlock) as info:
        _run(main, timeout=5.0)
    assert time.perf_counter() - t0 < 1.0
    message = str(info.value)
    assert "virtual time 2.5" in message
    assert "3 task(s)" in message  # main plus the two ranks
    assert "rank-0" in message and "rank-1" in message
    assert isinstance(info.value, RuntimeError)
    # run_virtual cancelled and reaped the stuck tasks before closing the
    # loop, so none is left to be "destroyed but pending".
    assert len(stuck) == 3 and all(task.cancelled() for task in stuck)


async def _await(future):
    return await future


def test_deadlock_message_is_truncated_for_many_tasks():
    async def main():
        never = asyncio.get_running_loop().create_future()
        await asyncio.gather(*(
            asyncio.create_task(_await(never), name=f"rank-{i:03d}")
            for i in range(50)
        ))

    with pytest.raises(SimDeadlock) as info:
        _run(main)
    message = str(info.value)
    assert "51 task(s)" in message
    assert "rank-000" in message and "rank-049" not in message
    assert "... and 41 more" in message


def test_run_virtual_from_a_thread_while_a_real_loop_runs():
    async def simulated(n):
        await asyncio.sleep(3600)
        loop = asyncio.get_running_loop()
        return n, type(loop).__name__, loop.time()

    async def outer():
        real_loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        from_factory = await asyncio.to_thread(run_virtual, lambda: simulated(1))
        from_coro = await asyncio.to_thread(run_virtual, simulated(2))
        elapsed = time.perf_counter() - t0
        assert asyncio.get_running_loop() is real_loop
        assert not isinstance(real_loop, VirtualClockLoop)
        return from_factory, from_coro, elapsed

    from_factory, from_coro, elapsed = _within_watchdog(
        lambda: asyncio.run(outer()))
    assert from_factory == (1, "VirtualClockLoop", 3600.0)
    assert from_coro == (2, "VirtualClockLoop", 3600.0)
    assert elapsed < 1.0


def test_run_virtual_refuses_to_nest_in_a_running_loop():
    async def inner():
        return 1

    async def outer():
        with pytest.raises(RuntimeError, match="running event loop"):
            run_virtual(inner)

    asyncio.run(outer())


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_asyncio_primitives_follow_virtual_time(debug):
    async def main():
        loop = asyncio.get_running_loop()
        log = []

        def note(what):
            log.append((loop.time(), what))

        queue = asyncio.Queue()
        ready = asyncio.Event()

        async def producer():
            await ready.wait()
            for i in range(3):
                await asyncio.sleep(1.0)
                await queue.put(i)
            await queue.put(None)

        async def consumer():
            while (item := await queue.get()) is not None:
                note(f"got {item}")

        async def ticks():
            try:
                for i in range(3):
                    await asyncio.sleep(10.0)
                    yield i
            finally:
                note("agen closed")

        async def doomed():
            try:
                await asyncio.sleep(1000.0)
            except asyncio.CancelledError:
                note("cancelled")
                raise

        loop.call_at(0.5, ready.set)
        future = loop.create_future()
        loop.call_later(2.0, future.set_result, "future")
        victim = asyncio.create_task(doomed())
        await asyncio.gather(producer(), consumer())
        note(await future)
        victim.cancel()
        with pytest.raises(asyncio.CancelledError):
            await victim
        done, pending = await asyncio.wait(
            [asyncio.create_task(asyncio.sleep(1.0)),
             asyncio.create_task(asyncio.sleep(9.0))],
            return_when=asyncio.FIRST_COMPLETED)
        note(f"wait {len(done)}/{len(pending)}")
        async for i in ticks():
            note(f"tick {i}")
            break
        await asyncio.sleep(0)  # let aclose() scheduled by the break run
        leftover = ticks()
        await leftover.__anext__()  # finalized by run_virtual's shutdown
        return log

    assert _run(main, debug=debug) == [
        (1.5, "got 0"),
        (2.5, "got 1"),
        (3.5, "got 2"),
        (3.5, "future"),
        (3.5, "cancelled"),
        (4.5, "wait 1/1"),
        (14.5, "tick 0"),
        (14.5, "agen closed"),
        # The still-pending sleep(9) task finished at 12.5 in the meantime;
        # the leftover generator is closed at shutdown, after its first tick.
        (24.5, "agen closed"),
    ]


def test_executor_work_takes_no_virtual_time():
    async def main():
        loop = asyncio.get_running_loop()
        background = asyncio.create_task(asyncio.sleep(10.0))
        # The loop must wait for the thread rather than jump to t=10 or call
        # it a deadlock (nothing virtual is pending once the timer fired).
        result = await asyncio.to_thread(lambda: time.sleep(0.05) or "slept")
        during = loop.time()
        await background
        return result, during, loop.time()

    assert _run(main) == ("slept", 0.0, 10.0)


def test_an_idle_loop_polls_the_selector_only_for_registered_io():
    """A poll per simulated event was a system call each (~5% of ``bench sim``): with
    nothing but the self-pipe registered, timers fire without any; a registered socket
    is still read while the clock jumps."""
    polls = []

    async def timers():
        loop = asyncio.get_running_loop()
        select = loop._selector.select
        loop._selector.select = lambda timeout=None: polls.append(timeout) or select(timeout)
        for _ in range(100):
            await asyncio.sleep(1)
        return len(polls)

    assert _run(timers) == 0

    async def socket_read():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        got = loop.create_future()
        loop.add_reader(a.fileno(), lambda: got.done() or got.set_result(a.recv(16)))
        b.send(b"ping")
        try:
            while not got.done():
                await asyncio.sleep(1)
            return got.result(), loop.time() < 1000
        finally:
            loop.remove_reader(a.fileno())
            a.close()
            b.close()

    assert _run(socket_read) == (b"ping", True)


def test_timers_fire_at_large_virtual_times():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(1e9)
        # At 1e9 s adding a nanosecond of clock resolution is lost to
        # rounding; a timer due exactly now must still fire.
        future = loop.create_future()
        loop.call_later(0.0, future.set_result, "fired")
        return await future, loop.time()

    assert _run(main) == ("fired", 1e9)


def test_pollers_alone_move_the_clock_to_the_next_timer():
    """A task that polls until a timer's event (``polled_in_vain`` then ``sleep(0)``, as
    ``iprobe`` and ``test`` do) would keep the loop busy at one instant for ever; the
    clock moves to the timer once only pollers are ready, and not before other ready
    work (which takes no time) has run."""
    async def main():
        loop = asyncio.get_running_loop()
        arrived, busy_at = loop.create_future(), []
        loop.call_later(2.5, arrived.set_result, "message")

        async def other_work():
            for _ in range(50):  # ready at every iteration while the poller polls
                busy_at.append(loop.time())
                await asyncio.sleep(0)

        worker = asyncio.ensure_future(other_work())
        polls = 0
        while not arrived.done():
            polls += 1
            loop.polled_in_vain()
            await asyncio.sleep(0)
        await worker
        return arrived.result(), loop.time(), polls > 50, set(busy_at)

    assert _run(main) == ("message", 2.5, True, {0.0})


def test_a_wait_that_only_pollers_could_end_times_out_instead_of_spinning():
    async def main():
        loop = asyncio.get_running_loop()
        never = loop.create_future()

        async def poll():
            while not never.done():
                loop.polled_in_vain()
                await asyncio.sleep(0)

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(poll(), timeout=30.0)
        return loop.time()

    assert _run(main) == 30.0


def test_pollers_do_not_move_the_clock_while_a_thread_works():
    """Executor work takes no virtual time: pollers waiting for it spin in real time
    rather than race the clock to the next timer (a run's timeout, here; RS decoding
    in a thread stalled a recovery so under rs+hc3i)."""
    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(600.0, lambda: None)
        work = loop.run_in_executor(None, time.sleep, 0.05)
        while not work.done():
            loop.polled_in_vain()
            await asyncio.sleep(0)
        return loop.time()

    assert _run(main) == 0.0


def test_background_timers_are_apart_and_quiet_is_told_when_only_they_pend():
    """Timers made where the ``background`` variable is true (a run's watching) fire in
    virtual time like any, but whenever nothing else is pending the loop calls
    ``on_quiet`` first: here at 2.0, once the last real sleeper woke, not at 100."""
    import contextvars
    watching = contextvars.ContextVar("watching", default=False)
    told, fired = [], []

    async def main():
        loop = asyncio.get_running_loop()
        loop.background = watching

        async def watch():
            watching.set(True)
            await asyncio.sleep(100)
            fired.append(loop.time())

        async def quiet_when(t):
            await asyncio.sleep(t)

        quiet = asyncio.Event()
        loop.on_quiet = lambda: (told.append(loop.time()), quiet.set())
        task = asyncio.ensure_future(watch())
        await asyncio.gather(quiet_when(1.0), quiet_when(2.0))
        assert loop._background and not loop._scheduled  # the watch's timer, apart
        await quiet.wait()  # nothing but the watch pends: the loop says so at once
        loop.on_quiet = None
        await task
        return loop.time()

    assert _within_watchdog(lambda: run_virtual(main)) == 100.0
    assert told == [2.0]
    assert fired == [100.0]
