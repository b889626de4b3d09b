"""The mpi4py-style communicator: point-to-point, probes, collectives, split and dup.

Method names, argument names and defaults follow mpi4py's lowercase (pickle-based) API;
every method that can wait is ``async``. Ranks given to and returned by a communicator
are communicator ranks; the envelopes underneath carry world ranks.

Each communicator has two matching contexts: one for point-to-point messages and one for
its collectives, so a collective never takes a user's message. Collectives are built on
point-to-point inside this facade (``_collectives``), so every protocol sees each of
their messages. Derived communicators get ids from their parent's id and a per-parent
counter, so every member computes the same id without talking, and re-running ``main()``
after a restore recreates the same ids.
"""
from __future__ import annotations

import asyncio
import numbers
from typing import Any

from . import _collectives as coll
from ..engine._constants import ANY_SOURCE, ANY_TAG, TAG_UB, UNDEFINED
from ..engine._envelope import COLLECTIVE_SUFFIX, Envelope
from ._ops import SUM
from ..engine._payload import Payload, unpack
from ._request import Request, Status


class Communicator:
    """A group of ranks that exchange messages; see mpi4py's ``Comm``."""

    def __init__(self, endpoint, comm_id: str, group: tuple[int, ...]):
        self._ep = endpoint
        self.id = comm_id
        self.group = tuple(group)
        self.size = len(self.group)
        self._local = {w: i for i, w in enumerate(self.group)}
        self.rank = self._local[endpoint.rank]
        self._ctx = comm_id
        self._cctx = comm_id + COLLECTIVE_SUFFIX
        self._derived = 0

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def __repr__(self):
        return f"Communicator({self.id!r}, rank {self.rank} of {self.size})"

    # ------------------------------------------------------------ validation
    def _peer(self, r, what: str) -> int:
        if type(r) is not int and (not isinstance(r, numbers.Integral) or isinstance(r, bool)):
            raise TypeError(f"{what} must be an int rank, got {type(r).__name__} {r!r}")
        if not 0 <= r < self.size:
            raise ValueError(
                f"{what} {r} is not a rank of this communicator (size {self.size}, "
                f"valid ranks 0..{self.size - 1})")
        return self.group[r]

    def _source(self, source) -> int:
        if source == ANY_SOURCE:
            return ANY_SOURCE
        return self._peer(source, "source")

    @staticmethod
    def _send_tag(tag) -> int:
        if type(tag) is not int and (not isinstance(tag, numbers.Integral) or isinstance(tag, bool)):
            raise TypeError(f"tag must be an int, got {type(tag).__name__} {tag!r}")
        if not 0 <= tag <= TAG_UB:
            raise ValueError(f"tag {tag} is invalid for a send: tags are 0..{TAG_UB}")
        return int(tag)

    @classmethod
    def _recv_tag(cls, tag) -> int:
        return ANY_TAG if tag == ANY_TAG else cls._send_tag(tag)

    def _finish(self, env: Envelope, status: Status | None) -> Any:
        if status is not None:
            status.source = self._local[env.src]
            status.tag = env.tag
            status.count = env.payload.nbytes
        return unpack(env.payload)

    def _status_of(self, env: Envelope) -> Status:
        return Status(self._local[env.src], env.tag, env.payload.nbytes)

    # ---------------------------------------------------------- point to point
    async def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` (a copy is taken now; the call returns without waiting for the
        receiver, unless the transport holds too much for ``dest`` already: then it waits
        until that drains, so a fast sender cannot fill memory)."""
        world = self._peer(dest, "dest")
        ep = self._ep
        ep.send_app(self._ctx, world, self._send_tag(tag), ep.pack(obj, world))
        waiting = ep.congested(world)
        if waiting is not None:
            await waiting

    async def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                   status: Status | None = None) -> Any:
        """Receive the first matching message and return its object."""
        env = await self._ep.receive(self._ctx, self._source(source), self._recv_tag(tag))
        return self._finish(env, status)

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Nonblocking send; the request is complete at once (sends are buffered), or
        once the transport toward ``dest`` has drained when it holds too much (as
        ``send`` waits)."""
        world = self._peer(dest, "dest")
        ep = self._ep
        ep.send_app(self._ctx, world, self._send_tag(tag), ep.pack(obj, world))
        waiting = ep.congested(world)
        if waiting is None:
            return Request()
        return Request(asyncio.ensure_future(waiting), _sent)

    def irecv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive; ``await req.wait()`` gives the object."""
        fut = self._ep.receive_later(self._ctx, self._source(source), self._recv_tag(tag))
        return Request(fut, lambda env: (unpack(env.payload), self._status_of(env)))

    async def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0,
                       source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                       status: Status | None = None) -> Any:
        """Send and receive at once (no deadlock when every rank does it)."""
        self.isend(sendobj, dest, sendtag)
        return await self.recv(source, recvtag, status)

    async def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                    status: Status | None = None) -> bool:
        """Wait until a matching message can be received, without receiving it."""
        env = await self._ep.probe(self._ctx, self._source(source), self._recv_tag(tag))
        if status is not None:
            self._finish_status(env, status)
        return True

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Status | None = None) -> bool:
        """Whether a matching message can be received now (never waits)."""
        env = self._ep.iprobe(self._ctx, self._source(source), self._recv_tag(tag))
        if env is None:
            return False
        if status is not None:
            self._finish_status(env, status)
        return True

    def _finish_status(self, env: Envelope, status: Status) -> None:
        status.source, status.tag, status.count = (
            self._local[env.src], env.tag, env.payload.nbytes)

    # ------------------------------------------- collective plumbing (internal)
    def _csend(self, obj_or_payload: Any, dest: int, tag: int) -> Payload:
        """Send on the collective context; returns the packed payload (to forward it)."""
        world = self.group[dest]
        ep = self._ep
        payload = (obj_or_payload if isinstance(obj_or_payload, Payload)
                   else ep.pack(obj_or_payload, world))
        ep.send_app(self._cctx, world, tag, payload)
        return payload

    async def _crecv(self, source: int, tag: int) -> Envelope:
        return await self._ep.receive(self._cctx, self.group[source], tag)

    # ------------------------------------------------------------- collectives
    async def barrier(self) -> None:
        """Wait until every rank of the communicator has called barrier."""
        await coll.barrier(self)

    async def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Root's ``obj`` on every rank (packed once, forwarded along a binomial tree)."""
        return await coll.bcast(self, obj, self._root(root))

    async def reduce(self, sendobj: Any, op=SUM, root: int = 0) -> Any:
        """``op`` folded over all ranks' objects in rank order; None except on root."""
        return await coll.reduce(self, sendobj, op, self._root(root))

    async def allreduce(self, sendobj: Any, op=SUM) -> Any:
        """``op`` folded over all ranks' objects in rank order, on every rank."""
        return await coll.allreduce(self, sendobj, op)

    async def gather(self, sendobj: Any, root: int = 0) -> list | None:
        """The list of every rank's object (in rank order) on root; None elsewhere."""
        return await coll.gather(self, sendobj, self._root(root))

    async def scatter(self, sendobj: list | None = None, root: int = 0) -> Any:
        """Root's ``sendobj[i]`` on rank i."""
        return await coll.scatter(self, sendobj, self._root(root))

    async def allgather(self, sendobj: Any) -> list:
        """The list of every rank's object, in rank order, on every rank."""
        return await coll.allgather(self, sendobj)

    async def alltoall(self, sendobj: list) -> list:
        """Rank i gets ``[rank0's sendobj[i], rank1's sendobj[i], ...]``."""
        return await coll.alltoall(self, sendobj)

    def _root(self, root) -> int:
        self._peer(root, "root")
        return int(root)

    # ---------------------------------------------------------- communicators
    async def split(self, color: int = 0, key: int = 0) -> "Communicator | None":
        """New communicators, one per color, ranked by (key, rank in this one).

        Collective: every rank must call it. ``color=ft.UNDEFINED`` gives None.
        """
        if not isinstance(color, numbers.Integral) or (color < 0 and color != UNDEFINED):
            raise ValueError(f"split color must be an int >= 0 or ft.UNDEFINED, got {color!r}")
        if not isinstance(key, numbers.Integral):
            raise TypeError(f"split key must be an int, got {key!r}")
        index = self._next_child()
        everyone = await coll.allgather(self, (int(color), int(key)))
        if color == UNDEFINED:
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        group = tuple(self.group[r] for _, r in members)
        return Communicator(self._ep, f"{self.id}.{index}:{color}", group)

    async def dup(self) -> "Communicator":
        """A communicator with the same ranks and its own matching contexts (collective;
        no message is needed since every member derives the same id)."""
        return Communicator(self._ep, f"{self.id}.{self._next_child()}d", self.group)

    def _next_child(self) -> int:
        self._derived += 1
        return self._derived


def _sent(_) -> tuple[None, None]:
    """A send request's value and status once its transport has drained."""
    return None, None
