"""Status records and nonblocking requests (``isend``/``irecv``), as in mpi4py."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable


class Status:
    """What a receive or probe found: ``source`` (communicator rank), ``tag`` and
    ``count`` (payload bytes). Pass one as ``status=`` to have it filled in."""

    __slots__ = ("source", "tag", "count")

    def __init__(self, source: int = -1, tag: int = -1, count: int = 0):
        self.source = source
        self.tag = tag
        self.count = count

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_count(self) -> int:
        return self.count

    def __repr__(self):
        return f"Status(source={self.source}, tag={self.tag}, count={self.count})"


class Request:
    """A nonblocking operation. ``await req.wait()`` gives its value (None for a send);
    ``req.test()`` returns ``(done, value)`` without blocking.

    ``finish`` turns the raw result of the future into ``(value, Status)`` once, the
    first time the request is completed, so waiting or testing twice is harmless.
    """

    __slots__ = ("_future", "_finish", "_done", "_value", "_status")

    def __init__(self, future: asyncio.Future | None = None,
                 finish: Callable[[Any], tuple[Any, Status]] | None = None, value: Any = None):
        self._future = future
        self._finish = finish
        self._done = future is None
        self._value = value
        self._status: Status | None = None

    def _complete(self, status: Status | None) -> Any:
        if not self._done:
            self._value, self._status = self._finish(self._future.result())
            self._done = True
        if status is not None and self._status is not None:
            status.source, status.tag, status.count = (
                self._status.source, self._status.tag, self._status.count)
        return self._value

    async def wait(self, status: Status | None = None) -> Any:
        if not self._done:
            await self._future
        return self._complete(status)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        if not self._done and not self._future.done():
            return False, None
        return True, self._complete(status)

    def cancel(self) -> None:
        """Cancel a pending receive (its message, if it comes, stays unreceived)."""
        if not self._done and self._future is not None:
            self._future.cancel()

    @property
    def done(self) -> bool:
        return self._done or self._future.done()


async def waitall(requests: Iterable[Request], statuses: list | None = None) -> list:
    """Wait for every request; returns their values in order."""
    requests = list(requests)
    out = []
    for i, req in enumerate(requests):
        st = statuses[i] if statuses is not None else None
        out.append(await req.wait(st))
    return out
