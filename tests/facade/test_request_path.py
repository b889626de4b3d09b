"""Requests as light as blocking calls: an operation done as it starts (a send the
transport took) gets a request with no future, and ``waitall`` waits for a window of
pending operations at once, completing them in order as one ``wait`` after another
would (issue #42: OSU's window of 64 ``Isend``/``Irecv`` then ``Waitall``)."""
import asyncio

import pytest

from ftactors.facade import _request
from ftactors.facade._request import Prequest, Request, Status, waitall, waitsome


def test_a_request_done_as_it_starts_has_no_future_and_behaves_as_any_other():
    async def body():
        status = Status.of(3, 7, 12)
        req = Request.done_now("v", status)
        assert req._future is None and req and req.done
        seen = Status()
        assert req.get_status(seen) and seen.Get_source() == 3 and req  # still active
        assert req.test() == (True, "v") and not req  # completed
        assert await Request.done_now(5).wait() == 5
        assert await waitsome([Request.done_now(1), Request.done_now(2)]) == ([0, 1], [1, 2])
        req = Request.done_now()
        req.cancel()  # nothing to cancel: completes as usual
        assert req.test() == (True, None)
        persistent = Prequest(lambda: Request.done_now("again"))
        persistent.Start()
        assert await persistent.wait() == "again" and persistent and not persistent._active
    asyncio.run(body())


def test_waitall_waits_once_for_a_window_then_completes_in_order(monkeypatch):
    waits = []
    real = _request._done_or_failed

    async def counted(fs):
        waits.append(len(fs))
        return await real(fs)
    monkeypatch.setattr(_request, "_done_or_failed", counted)

    async def body():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(64)]
        requests = [Request.done_now("sent")] + [
            Request(f, lambda v: (v * 2, Status.of(0, v))) for f in futures]
        for i, f in enumerate(reversed(futures)):  # done in the other order
            loop.call_later(0.001 * (i % 3), f.set_result, 63 - i)
        statuses = []
        values = await waitall(requests, statuses)
        assert values == ["sent"] + [2 * i for i in range(64)]
        assert [s.Get_tag() for s in statuses[1:]] == list(range(64))
        assert not any(requests)
    asyncio.run(body())
    assert waits == [64]  # one wait for the window, not one per pending request


def test_a_cancelled_waitall_leaves_its_operations_pending():
    async def body():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(3)]
        requests = [Request(f) for f in futures]
        task = asyncio.ensure_future(waitall(requests))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not any(f.done() for f in futures) and all(requests)
        for i, f in enumerate(futures):
            f.set_result(i)
        assert await waitall(requests) == [0, 1, 2]
    asyncio.run(body())


def test_waitall_raises_the_first_failure_in_order_without_waiting_for_the_rest():
    async def body():
        loop = asyncio.get_running_loop()
        done, failed, never = (loop.create_future() for _ in range(3))
        requests = [Request(f) for f in (done, failed, never)]
        loop.call_soon(done.set_result, 1)
        loop.call_later(0.01, failed.set_exception, ValueError("truncated"))
        with pytest.raises(ValueError, match="truncated"):
            await asyncio.wait_for(waitall(requests), 5)
        assert not requests[0] and requests[2]  # the one before completed, the rest not
    asyncio.run(body())


def watchers(future) -> int:
    """How many done callbacks wait on ``future``."""
    return len(future._callbacks or ())


def test_waitall_on_receives_watches_one_future_at_a_time():
    """Receives' futures never fail, so ``waitall`` watches only the first one not done:
    a batch that completes many (the whole window in one delivery) costs one loop
    callback, not one per receive; any order, a cancelled receive and a cancelled wait
    come out as with one wait per request."""
    async def body():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(64)]
        requests = [Request(f, lambda v: (v, Status.of(0, v)), cancellable=True)
                    for f in futures]
        task = asyncio.ensure_future(waitall(requests))
        await asyncio.sleep(0)
        assert [watchers(f) for f in futures[:2]] == [1, 0]  # the first one only
        for i in range(63, 0, -1):  # all but the first, in the other order
            futures[i].set_result(i)
        await asyncio.sleep(0)
        assert not task.done() and watchers(futures[0]) == 1
        requests[0].cancel()  # a cancelled receive completes the window
        assert await task == [None] + list(range(1, 64))
        assert not any(map(watchers, futures)) and not any(requests)

        fresh = [loop.create_future() for _ in range(3)]
        requests = [Request(f, cancellable=True) for f in fresh]
        task = asyncio.ensure_future(waitall(requests))
        await asyncio.sleep(0)
        fresh[0].set_result(0)
        task.cancel()  # the callback for the next one is left behind, not run
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not any(map(watchers, fresh)) and all(requests[1:])
    asyncio.run(body())
