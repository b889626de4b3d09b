"""Matched probes (mpi4py's ``mprobe``/``improbe`` and ``Message``).

A matched probe takes the first matching message off the queue, as a receive does, and
hands it to the program as a ``Message`` that only that program's next ``recv``/``Recv``
(or ``irecv``/``Irecv``) on it can receive: no other receive, of another task, can take
it in between, which a ``probe`` followed by a ``recv`` does not promise. For the
protocols the message is consumed at the probe (logged, counted, replayed to a restored
rank at that point) and a synchronous send is acknowledged then, since MPI matches it
there. A probe of ``PROC_NULL`` gives ``MESSAGE_NO_PROC``'s equivalent: its receive
returns None with a ``PROC_NULL`` status.
"""
from __future__ import annotations

from typing import Any

from ..engine import ANY_TAG, PROC_NULL
from ._buffers import deliver, message
from ._request import Request, Status

_RECEIVED = object()  # a Message whose object was received already


class Message:
    """A message matched by ``mprobe``/``improbe``: receive it once with ``recv``,
    ``Recv``, ``irecv`` or ``Irecv`` (none of them waits: the message is here)."""

    __slots__ = ("_comm", "_obj", "_status")

    def __init__(self, comm, obj: Any, status: Status):
        self._comm = comm
        self._obj = obj
        self._status = status

    @classmethod
    def no_proc(cls, comm) -> "Message":
        """The message of a probe of ``PROC_NULL``: it receives None."""
        return cls(comm, None, Status.of(PROC_NULL, ANY_TAG))

    def _take(self, status: Status | None) -> Any:
        obj, self._obj = self._obj, _RECEIVED
        if obj is _RECEIVED:
            raise RuntimeError("this Message was received already (a matched message is "
                               "received once)")
        if status is not None:
            status._fill(self._status)
        return obj

    def recv(self, status: Status | None = None) -> Any:
        """The message's object."""
        return self._take(status)

    def Recv(self, buf, status: Status | None = None) -> None:
        """The message's entries, copied into ``buf`` (as ``Communicator.Recv``)."""
        got = Status()
        obj = self._take(got)
        if got.source != PROC_NULL:
            got.count = deliver(obj, message(buf, writable=True, derived=True), "Recv")
        if status is not None:
            status._fill(got)

    def irecv(self) -> Request:
        """A request complete at once with the message's object."""
        status = Status()
        return self._comm._done(self._take(status), status)

    def Irecv(self, buf) -> Request:
        """A request complete at once, the entries in ``buf``."""
        status = Status()
        self.Recv(buf, status)
        return self._comm._done(None, status)
