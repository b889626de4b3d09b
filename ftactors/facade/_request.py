"""Status records and nonblocking requests, as in mpi4py.

A ``Request`` is *active* (true) from the moment the operation starts until a ``wait``,
a ``test`` that finds it done, or one of the array calls (``waitany``, ``testsome``, ...)
completes it; then it is false and equal to ``REQUEST_NULL``, as mpi4py's request
becomes ``REQUEST_NULL``. ``Request()`` (and ``REQUEST_NULL``) is a null request: false,
and complete with an empty status, which the array calls take as MPI does. Unlike mpi4py, waiting on or
testing a request again after it completed gives its value again (not None).

Nothing here yields to the event loop except the ``wait*`` coroutines: ``test*`` look and
never wait, so a polling loop must ``await asyncio.sleep(0)`` between tests to let
messages in (mpi4py's ``while not req.test()[0]: pass`` spins forever here). A test or
probe that finds nothing tells the loop (``polled_in_vain``), so that on the ``sim``
transport's virtual clock time passes while a program polls.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Sequence

from ._buffers import dtype_of
from ..engine import ANY, ANY_SOURCE, ANY_TAG, SOME, SUCCESS, UNDEFINED, Wait


def polled_in_vain(requests: Sequence["Request"] = ()) -> None:
    """A nonblocking check of the program's found nothing: the receives among
    ``requests`` not done yet are a short block of their rank for its protocols
    (``Endpoint.polled``), and a loop that keeps virtual time is told
    (``VirtualClockLoop.polled_in_vain``; other loops have no such method), so that a
    program polling for a message lets the clock reach its arrival."""
    receives = [req._waits_on for req in requests if req._waits_on is not None
                and req._waits_on[1].kind == "recv" and not req._ready()]
    if receives:
        receives[0][0].polled([wait.source for _, wait in receives])
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a test outside the rank's loop: nothing to tell
        return
    if hasattr(loop, "polled_in_vain"):
        loop.polled_in_vain()


class Status:
    """What a receive or probe found: ``source`` (communicator rank), ``tag``, ``error``
    (``ft.SUCCESS``), ``count`` (payload bytes) and ``cancelled``. ``Status()`` is empty
    (``ANY_SOURCE``, ``ANY_TAG``); ``Status(other)`` copies ``other``. Pass one as
    ``status=`` to have it filled in."""

    __slots__ = ("source", "tag", "error", "count", "cancelled")

    def __init__(self, status: "Status | None" = None):
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"Status() takes another Status to copy, got "
                            f"{type(status).__name__} {status!r}")
        self.source, self.tag, self.error, self.count, self.cancelled = (
            (ANY_SOURCE, ANY_TAG, SUCCESS, 0, False) if status is None else status._fields())

    @classmethod
    def of(cls, source: int, tag: int, count: int = 0, cancelled: bool = False) -> "Status":
        """A status with these fields (what a completed operation reports)."""
        st = cls()
        st.source, st.tag, st.count, st.cancelled = source, tag, count, cancelled
        return st

    def _fields(self) -> tuple:
        return self.source, self.tag, self.error, self.count, self.cancelled

    def _fill(self, other: "Status") -> None:
        """Copy ``other``'s fields into this status."""
        self.source, self.tag, self.error, self.count, self.cancelled = other._fields()

    def Get_source(self) -> int:
        return self.source

    def Set_source(self, source: int) -> None:
        self.source = source

    def Get_tag(self) -> int:
        return self.tag

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Get_error(self) -> int:
        return self.error

    def Set_error(self, error: int) -> None:
        self.error = error

    def Get_count(self, datatype=None) -> int:
        """Bytes received (a buffer receive: of its entries; an object receive or probe:
        of the pickled payload); with a datatype, whole entries of it."""
        return self.count if datatype is None else self.count // dtype_of(datatype).itemsize

    Get_elements = Get_count

    def Is_cancelled(self) -> bool:
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        self.cancelled = bool(flag)

    def __repr__(self):
        return (f"Status(source={self.source}, tag={self.tag}, error={self.error}, "
                f"count={self.count}, cancelled={self.cancelled})")


_EMPTY = Status()
"""The status of a request not completed yet, or of one whose operation has none: read,
never written (``_fill`` copies from it)."""


class Request:
    """A nonblocking operation: ``await req.wait()`` gives its value (None for a send),
    ``req.test()`` returns ``(done, value)`` without waiting; true while active.

    ``finish`` turns the future's result into ``(value, Status)`` once, when the request
    completes. ``cancellable``: ``cancel()`` may withdraw it (a receive not matched yet).
    An operation done as it starts (a send the transport took) has no future at all
    (``done_now``): most ``isend``s are, and a future, a done callback and a wait for
    each cost a window of them more than the sends.
    """

    __slots__ = ("_future", "_finish", "_active", "_value", "_status", "_cancellable",
                 "_dets", "_waits_on")

    def __init__(self, future: asyncio.Future | None = None,
                 finish: Callable[[Any], tuple[Any, Status]] | None = None,
                 cancellable: bool = False, dets=None, waits_on: tuple | None = None):
        self._dets = dets  # its rank's ``Determinants``: the array calls record there
        self._future = future
        self._finish = finish
        self._active = future is not None
        self._value: Any = None
        self._status = _EMPTY  # read only: replaced when the request completes
        self._cancellable = cancellable
        # (endpoint, Wait): what a wait for it blocks on, for the rank's wait record
        # (``engine/_waits``); None: a wait that nothing but the transport ends
        self._waits_on = waits_on

    @classmethod
    def done_now(cls, value: Any = None, status: "Status | None" = None,
                 dets=None) -> "Request":
        """An active request whose operation is done already, with ``value``."""
        req = cls(dets=dets)
        req._active, req._value = True, value
        if status is not None:
            req._status = status
        return req

    def __bool__(self) -> bool:
        return self._active

    def __eq__(self, other) -> bool:
        """As mpi4py compares handles: a request equals itself, and every null request
        (false: completed, freed, or ``REQUEST_NULL``) equals every other one."""
        if self is other:
            return True
        if not isinstance(other, Request):
            return NotImplemented
        return not self and not other

    __hash__ = object.__hash__  # identity: a request may key a dict while it is active

    def _ready(self) -> bool:
        return not self._active or self._future is None or self._future.done()

    def _outcome(self) -> tuple[Any, Status]:
        """The value and status of the done operation (the request stays as it is)."""
        fut = self._future
        if fut is None:  # done_now
            return self._value, self._status
        if fut.cancelled():
            return None, Status.of(ANY_SOURCE, ANY_TAG, cancelled=True)
        if self._finish is not None:
            return self._finish(fut.result())
        return fut.result(), Status()

    def _complete(self, status: Status | None) -> Any:
        """Complete a ready request (once) and fill ``status``; returns its value."""
        if self._active:
            self._active = False
            self._value, self._status = self._outcome()
        if status is not None:
            status._fill(self._status)
        return self._value

    async def wait(self, status: Status | None = None) -> Any:
        """Wait until the operation is done; its value (a receive's object)."""
        if not self._ready():
            await _blocked((self._future,), (self,))  # a cancelled receive completes, no raise
        return self._complete(status)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        """``(True, value)`` and the request completes if it is done, else ``(False, None)``."""
        if not self._ready():
            polled_in_vain((self,))
            return False, None
        return True, self._complete(status)

    def get_status(self, status: Status | None = None) -> bool:
        """Whether the operation is done, without completing the request (it stays true)."""
        if not self._ready():
            return False
        if status is not None:
            status._fill(self._outcome()[1] if self._active else self._status)
        return True

    def cancel(self) -> None:
        """Cancel a receive not matched yet: the request completes with no value and
        ``status.cancelled``; a message that comes later goes to a later receive. A
        matched receive, a send or a collective is not cancelled (MPI allows a cancel to
        fail): it completes as usual and its status says ``cancelled=False``."""
        if self._active and self._cancellable and not self._ready():
            self._future.cancel()

    def Free(self) -> None:
        """Forget the request (it becomes false); the operation itself goes on."""
        self._active = False

    Cancel = cancel

    # mpi4py's uppercase request calls (no values: flags and indices)
    async def Wait(self, status: Status | None = None) -> bool:
        await self.wait(status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        return self.test(status)[0]

    def Get_status(self, status: Status | None = None) -> bool:
        return self.get_status(status)

    @property
    def done(self) -> bool:
        """Whether the operation is done (whether or not the request was completed)."""
        return self._ready()

    # the array calls, as mpi4py's static methods
    @staticmethod
    async def waitall(requests: Sequence["Request"], statuses: list | None = None) -> list:
        return await waitall(requests, statuses)

    @staticmethod
    def testall(requests: Sequence["Request"], statuses: list | None = None):
        return testall(requests, statuses)

    @staticmethod
    async def waitany(requests: Sequence["Request"], status: Status | None = None):
        return await waitany(requests, status)

    @staticmethod
    def testany(requests: Sequence["Request"], status: Status | None = None):
        return testany(requests, status)

    @staticmethod
    async def waitsome(requests: Sequence["Request"], statuses: list | None = None):
        return await waitsome(requests, statuses)

    @staticmethod
    def testsome(requests: Sequence["Request"], statuses: list | None = None):
        return testsome(requests, statuses)

    @staticmethod
    async def Waitall(requests: Sequence["Request"], statuses: list | None = None) -> bool:
        await waitall(requests, statuses)
        return True

    @staticmethod
    def Testall(requests: Sequence["Request"], statuses: list | None = None) -> bool:
        return testall(requests, statuses)[0]

    @staticmethod
    async def Waitany(requests: Sequence["Request"], status: Status | None = None) -> int:
        return (await waitany(requests, status))[0]

    @staticmethod
    def Testany(requests: Sequence["Request"], status: Status | None = None):
        index, flag, _ = testany(requests, status)
        return index, flag

    @staticmethod
    async def Waitsome(requests: Sequence["Request"], statuses: list | None = None):
        return (await waitsome(requests, statuses))[0]

    @staticmethod
    def Testsome(requests: Sequence["Request"], statuses: list | None = None):
        return testsome(requests, statuses)[0]


class Prequest(Request):
    """A persistent request (``Send_init``, ``Recv_init``, ...): each ``Start()`` runs the
    operation once more with the arguments given at init (a send reads its buffer at each
    start). Inactive until started and again once completed, it stays a request (true)
    until ``Free()``, as in MPI."""

    __slots__ = ("_start", "_freed")

    def __init__(self, start: Callable[[], Request]):
        super().__init__()
        self._start = start
        self._freed = False

    def __bool__(self) -> bool:
        return not self._freed

    def Start(self) -> None:
        """Begin the operation again.

        Raises:
            ValueError: the request is active (started and not completed) or freed.
        """
        if self._active or self._freed:
            raise ValueError(f"Start on a persistent request that is "
                             f"{'freed' if self._freed else 'still active'}")
        run = self._start()
        self._future, self._finish, self._cancellable = run._future, run._finish, run._cancellable
        self._dets = run._dets
        self._waits_on = run._waits_on
        self._active, self._value, self._status = run._active, run._value, run._status

    @staticmethod
    def Startall(requests: Iterable["Prequest"]) -> None:
        for req in requests:
            req.Start()

    def Free(self) -> None:
        """Release the request (it becomes false); an operation under way goes on."""
        self._active = False
        self._freed = True


def _statuses_for(statuses, n: int) -> list | None:
    """Statuses to fill for ``n`` requests (mpi4py's rule): a list is grown with empty
    statuses to ``n`` entries; another sequence is filled as far as it goes; None stays
    None."""
    if statuses is None:
        return None
    if isinstance(statuses, list):
        statuses.extend(Status() for _ in range(n - len(statuses)))
        return statuses
    return [*statuses, *(Status() for _ in range(n - len(statuses)))]


async def waitall(requests: Iterable[Request], statuses: list | None = None) -> list:
    """Wait for every request; their values in order. ``statuses`` (a list) is grown to
    ``len(requests)`` and filled.

    The operations not done yet are waited for together (one wait, not one per
    request: a window of receives cost a wait each), until all are done or one fails;
    then each request completes in order, as one ``wait`` after another would."""
    requests = list(requests)
    statuses = _statuses_for(statuses, len(requests))
    pending = [req for req in requests if not req._ready()]
    if len(pending) > 1:
        futures = [req._future for req in pending]
        # a receive's future completes or is cancelled, never fails: receives alone are
        # waited for in order, with one done callback at a time (``_all_done``)
        await _named(pending, _all_done(futures) if all(req._cancellable for req in pending)
                     else _done_or_failed(futures), every=True)
    return [req._complete(None if statuses is None else statuses[i]) if req._ready()
            else await req.wait(None if statuses is None else statuses[i])
            for i, req in enumerate(requests)]


async def _done_or_failed(futures: list) -> None:
    """Return once every future is done or one has failed; none is cancelled, not even
    when the waiting task is: ``asyncio.wait(..., FIRST_EXCEPTION)`` in fewer steps (its
    checks and bookkeeping cost a window of small receives a fifth of their time)."""
    waiter = asyncio.get_running_loop().create_future()
    left = len(futures)

    def done(f: asyncio.Future) -> None:
        nonlocal left
        left -= 1
        if not waiter.done() and (left == 0 or (not f.cancelled() and f.exception() is not None)):
            waiter.set_result(None)

    for f in futures:
        f.add_done_callback(done)
    try:
        await waiter
    finally:
        for f in futures:
            f.remove_done_callback(done)


async def _all_done(futures: list) -> None:
    """Return once every future is done, for futures that never fail: a done callback
    on the first one not done only, which looks past those done since before it moves
    on, so a batch of messages that completes many costs one loop callback, not one
    each (a window of small receives: 97 -> 86 Python calls a message)."""
    waiter = asyncio.get_running_loop().create_future()
    left = iter(futures)
    waiting = None

    def advance(_=None) -> None:
        nonlocal waiting
        if waiter.done():  # the waiting task was cancelled
            return
        for f in left:
            if not f.done():
                waiting = f
                f.add_done_callback(advance)
                return
        waiting = None
        waiter.set_result(None)

    advance()
    try:
        await waiter
    finally:
        if waiting is not None:
            waiting.remove_done_callback(advance)


def testall(requests: Sequence[Request], statuses: list | None = None):
    """``(True, values)`` completing every request if all are done, else ``(False, None)``
    and none is completed."""
    if not all(req._ready() for req in requests):
        polled_in_vain(requests)
        return False, None
    statuses = _statuses_for(statuses, len(requests))
    return True, [req._complete(None if statuses is None else statuses[i])
                  for i, req in enumerate(requests)]


def _determinants(requests: Sequence[Request], active: list[int]):
    """The ``Determinants`` that record which of several active ``requests`` completed
    (None: one active at most, whose completion nothing can reorder, or no protocol
    records them)."""
    if len(active) < 2:
        return None
    dets = requests[active[0]]._dets
    return dets if dets is not None and dets.active() else None


def testany(requests: Sequence[Request], status: Status | None = None):
    """``(index, True, value)`` completing the first done active request;
    ``(UNDEFINED, True, None)`` when none is active; ``(UNDEFINED, False, None)`` when none
    is done yet. Replayed (``engine/_determinants``), it completes only the request its
    first life's call did."""
    active = [i for i, req in enumerate(requests) if req._active]
    if not active:
        if status is not None:
            status._fill(Status())
        return UNDEFINED, True, None
    dets = _determinants(requests, active)
    forced = None if dets is None else dets.poll(ANY)
    for i in active if forced is None else (forced,):
        if requests[i]._ready():
            if dets is not None:
                dets.found(ANY, i)
            return i, True, requests[i]._complete(status)
    polled_in_vain(requests)
    return UNDEFINED, False, None


async def waitany(requests: Sequence[Request], status: Status | None = None):
    """``(index, value)`` of the first active request done (waiting for one);
    ``(UNDEFINED, None)`` when none is active. Replayed, the request its first life's
    call completed."""
    active = [i for i, req in enumerate(requests) if req._active]
    dets = _determinants(requests, active)
    if dets is None:
        index, flag, value = testany(requests, status)
        if not flag:
            waiting = [req for req in requests if req._active]
            await _blocked([req._future for req in waiting], waiting,
                           asyncio.FIRST_COMPLETED)
            index, flag, value = testany(requests, status)
        return index, value
    k, index = dets.next(ANY)
    if index is None:
        if not any(requests[i]._ready() for i in active):
            waiting = [requests[i] for i in active]
            await _blocked([req._future for req in waiting], waiting,
                           asyncio.FIRST_COMPLETED)
        index = next(i for i in active if requests[i]._ready())
    elif not requests[index]._ready():
        await _blocked((requests[index]._future,), (requests[index],))
    dets.found(ANY, index, k)
    return index, requests[index]._complete(status)


def testsome(requests: Sequence[Request], statuses: list | None = None):
    """``(indices, values)`` of the active requests done now, completed (both empty when
    none is); ``(None, None)`` when none is active. A status per index is appended to
    ``statuses``. Replayed, it completes only the requests its first life's call did,
    once they are all done."""
    active = [i for i, req in enumerate(requests) if req._active]
    if not active:
        return None, None
    indices = [i for i in active if requests[i]._ready()]
    dets = _determinants(requests, active)
    if dets is not None:
        forced = dets.poll(SOME)
        if forced is not None:
            indices = list(forced) if all(requests[i]._ready() for i in forced) else []
        if indices:
            dets.found(SOME, tuple(indices))
    return _complete_some(requests, indices, statuses)


def _complete_some(requests: Sequence[Request], indices: list[int], statuses):
    """Complete ``requests[i]`` for the ``indices`` (none: the poll found nothing)."""
    if not indices:
        polled_in_vain(requests)
    values = []
    for i in indices:
        st = Status()
        values.append(requests[i]._complete(st))
        if statuses is not None:
            statuses.append(st)
    return indices, values


async def waitsome(requests: Sequence[Request], statuses: list | None = None):
    """``testsome`` after waiting until at least one active request is done; replayed,
    until the requests its first life's call completed are done."""
    active = [i for i, req in enumerate(requests) if req._active]
    dets = _determinants(requests, active)
    waiting = [requests[i] for i in active]
    if dets is None:
        if waiting and not any(req._ready() for req in waiting):
            await _blocked([req._future for req in waiting], waiting,
                           asyncio.FIRST_COMPLETED)
        return testsome(requests, statuses)
    k, indices = dets.next(SOME)
    if indices is None:
        if not any(req._ready() for req in waiting):
            await _blocked([req._future for req in waiting], waiting,
                           asyncio.FIRST_COMPLETED)
        indices = [i for i in active if requests[i]._ready()]
    else:
        indices = list(indices)
        pending = [requests[i] for i in indices if not requests[i]._ready()]
        if pending:
            await _blocked([req._future for req in pending], pending)
    dets.found(SOME, tuple(indices), k)
    return _complete_some(requests, indices, statuses)


async def _blocked(futures, requests, return_when=asyncio.ALL_COMPLETED) -> None:
    """``asyncio.wait(futures)``, named in the rank's wait record (``_named``)."""
    await _named(requests, asyncio.wait(futures, return_when=return_when))


async def _named(requests, waiting, every: bool = False) -> None:
    """Await ``waiting``, named in the rank's wait record (``engine/_waits``) when every
    request knows what it waits on: one request's own record, or, for several, the first
    of them (``"any"``, listing theirs) or all of them (``every``: the ranks they wait
    on, read only when the record is). A request that does not know (a send waiting for
    room on the wire) leaves the rank looking busy, never wrongly blocked."""
    known = [req._waits_on for req in requests]
    if not known or any(k is None for k in known):
        await waiting
        return
    ep = known[0][0]
    if len(known) == 1:
        wait = known[0][1]
    elif every:
        wait = Wait("request", what=f"all of {len(known)} requests",
                    lazy=lambda: sorted({k[1].source for k in known if k[1].source is not None}))
    else:
        wait = Wait("any", what="; ".join(k[1].describe() for k in known))
    # receives waited for block the rank as a blocking receive does: a checkpoint round
    # may take its state now rather than wait for a safe point it cannot reach first
    receives = tuple((k[1].source, req._future) for k, req in zip(known, requests)
                     if k[1].kind == "recv" and req._future is not None)
    token = ep.wait_begin(wait._replace(receives=receives) if receives else wait)
    try:
        if receives:
            ep.blocked_now()
        await waiting
    finally:
        ep.wait_end(token)


REQUEST_NULL = Request()
"""mpi4py's ``MPI.REQUEST_NULL``: the null request. Waiting on it or testing it completes
at once with an empty status; ``waitall``/``testall`` take it as complete, ``waitany``/
``testany``/``waitsome``/``testsome`` skip it (all null: ``UNDEFINED``/None). A request
that completes compares equal to it."""
