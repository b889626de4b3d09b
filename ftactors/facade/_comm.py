"""The mpi4py-style communicator: point-to-point, probes, collectives, split and dup, and
Cartesian communicators (``Cartcomm``).

Method names, argument names and defaults follow mpi4py's lowercase (pickle-based) API,
and its uppercase buffer API through the ``BufferAPI`` mixin (``_buffer_api``); every
method that can wait is ``async``. Ranks given to and returned by a communicator
are communicator ranks; the envelopes underneath carry world ranks.

Each communicator has two matching contexts: one for point-to-point messages and one for
its collectives, so a collective never takes a user's message. Collectives are built on
point-to-point inside this facade (``_collectives``), so every protocol sees each of
their messages. Derived communicators get ids from their parent's id and a per-parent
counter, so every member computes the same id without talking, and re-running ``main()``
after a restore recreates the same ids.

``PROC_NULL`` as a peer: sends complete at once and send nothing, receives complete at
once with None (status source PROC_NULL), as in MPI. Synchronous sends (``ssend``,
``issend``) complete once the receive has started (``engine._synchronous``); buffered
ones (``bsend``, ``ibsend``) are ``send``/``isend``, which copy the object at once.

Nonblocking collectives (``ibcast``, ...) run as tasks. On each rank the collectives of a
communicator run one after another in call order (a collective called while nonblocking
ones are under way waits for them first): their messages share the collective context
and its tags, which is safe only if no rank runs two of them at once. Like a pending
``irecv``, a nonblocking collective must be complete at the next safe point.
"""
from __future__ import annotations

import asyncio
import numbers
from typing import Any

import numpy as np

from . import _collectives as coll
from ..engine import (ANY_SOURCE, ANY_TAG, COLLECTIVE_SUFFIX, Envelope, PROC_NULL, Payload,
                      Synchronous, TAG_UB, UNDEFINED, Wait, unpack)
from ._buffer_api import BufferAPI
from ._buffers import array_bytes
from ._message import Message
from ._ops import SUM
from ._request import Request, Status, polled_in_vain
from ._topology import CART, CartTopology

_UNREAD = object()  # ``_status_of`` of a message only probed: its object is not rebuilt


class Communicator(BufferAPI):
    """A group of ranks that exchange messages; see mpi4py's ``Comm`` (and
    ``Intracomm``: ``ft.Intracomm`` is this class, and ``Intracomm(comm)`` another
    handle to ``comm``). The lowercase methods move Python objects, the uppercase ones
    (``BufferAPI``) numpy buffers."""

    def __init__(self, endpoint, comm_id: str | None = None,
                 group: tuple[int, ...] | range | None = None):
        if isinstance(endpoint, Communicator) and comm_id is None and group is None:
            # mpi4py's ``Intracomm(comm)``: another handle to the same communicator (a
            # subclass's, e.g. one that overrides some collectives)
            endpoint, comm_id, group = endpoint._ep, endpoint.id, endpoint.group
        self._ep = endpoint
        self.id = comm_id
        # the world's group is a range: no table of every rank in every rank's world
        self.group = group if isinstance(group, range) else tuple(group)
        self.size = len(self.group)
        self._local = None if isinstance(group, range) else {
            w: i for i, w in enumerate(self.group)}
        self.rank = self._local_rank(endpoint.rank)
        self._ctx = comm_id
        self._cctx = comm_id + COLLECTIVE_SUFFIX
        self._last_icoll: asyncio.Future | None = None  # the newest nonblocking collective
        self._running = ""  # the collective running now (one at a time): names its waits

    def _local_rank(self, world: int) -> int:
        """This communicator's rank of world rank ``world`` (a member)."""
        return self.group.index(world) if self._local is None else self._local[world]

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def Get_attr(self, keyval: int) -> Any:
        """mpi4py's ``Get_attr`` of a predefined attribute: ``ft.TAG_UB`` gives the
        largest tag; any other keyval None (no such attribute is set)."""
        return TAG_UB if keyval == TAG_UB else None

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

    def _dest(self, dest) -> int:
        """The world rank of ``dest``, or PROC_NULL."""
        if type(dest) is int and 0 <= dest < self.size:  # the usual case, on every send
            return self.group[dest]
        return PROC_NULL if _is(dest, PROC_NULL) else self._peer(dest, "dest")

    def _source(self, source) -> int:
        if type(source) is int and 0 <= source < self.size:  # the usual case
            return self.group[source]
        if _is(source, ANY_SOURCE) or _is(source, PROC_NULL):
            return source
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

    def _received(self, env: Envelope) -> tuple[Any, Status]:
        """A matched message's object and status."""
        obj = self._object_of(env)
        return obj, self._status_of(env, obj)

    def _object_of(self, env: Envelope) -> Any:
        """A matched message's object; a synchronous send's message is acknowledged here
        (its receive has started)."""
        obj = unpack(env.payload)
        if type(obj) is Synchronous:
            self._ep.sync.matched(env.src, env.app_seq)
            obj = obj.obj
        return obj

    def _status_of(self, env: Envelope, obj: Any = _UNREAD) -> Status:
        """The status of a message, received as ``obj`` or only probed: its count is a
        numpy array's data bytes (as mpi4py counts a buffer message, so that
        ``Get_count(datatype)`` gives its entries), else the pickled payload's size."""
        if obj is _UNREAD:
            count = array_bytes(env.payload)
        else:
            count = obj.nbytes if type(obj) is np.ndarray and not obj.dtype.hasobject else None
        return Status.of(self._local_rank(env.src), env.tag,
                         env.payload.nbytes if count is None else count)

    def _done(self, value: Any = None, status: Status | None = None) -> Request:
        """An active request that is complete already (an operation on PROC_NULL, a
        send the transport took at once)."""
        return Request.done_now(value, status, dets=self._ep.determinants)

    # ---------------------------------------------------------- point to point
    def _post(self, obj: Any, world: int, tag) -> int | None:
        """Pack and send to world rank ``world``; its application number (None when a
        restored rank does not send it again)."""
        ep = self._ep
        return ep.send_app(self._ctx, world, self._send_tag(tag), ep.pack(obj, world))

    async def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` (a copy is taken now; the call returns without waiting for the
        receiver, unless the transport holds too much for ``dest`` already: then it waits
        until that drains, so a fast sender cannot fill memory)."""
        world = self._dest(dest)
        if world == PROC_NULL:
            self._send_tag(tag)
            return
        self._post(obj, world, tag)
        waiting = self._ep.congested(world)
        if waiting is not None:
            await waiting

    bsend = send
    """Buffered send: ``send`` already completes once the object is copied."""

    async def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send: returns once the receive of ``obj`` has started."""
        await self.issend(obj, dest, tag).wait()

    async def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                   status: Status | None = None) -> Any:
        """Receive the first matching message and return its object."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            if status is not None:
                status._fill(Status.of(PROC_NULL, ANY_TAG))
            return None
        env = await self._ep.receive(self._ctx, src, tag)
        value = self._object_of(env)
        if status is not None:  # (built only when asked for: recv is the hot path)
            status._fill(self._status_of(env, value))
        return value

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Nonblocking send; the request is complete at once (sends are buffered), or
        once the transport toward ``dest`` has drained when it holds too much (as
        ``send`` waits)."""
        world = self._dest(dest)
        if world == PROC_NULL:
            self._send_tag(tag)
            return self._done()
        self._post(obj, world, tag)
        waiting = self._ep.congested(world)
        if waiting is None:
            return self._done()
        return Request(self._background(waiting), _sent, dets=self._ep.determinants)

    ibsend = isend
    """Buffered nonblocking send: ``isend`` already copies the object at once."""

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Nonblocking synchronous send: the request completes once the matching receive
        has started on ``dest`` (an acknowledgement comes back)."""
        world = self._dest(dest)
        if world == PROC_NULL:
            self._send_tag(tag)
            return self._done()
        app_seq = self._post(Synchronous(obj), world, tag)
        if app_seq is None:  # sent before the snapshot this rank restarted from
            return self._done()
        return Request(self._ep.sync.expect(world, app_seq), _sent,
                       dets=self._ep.determinants,
                       waits_on=(self._ep, Wait("ssend", world, tag, self._ctx)))

    def irecv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive; ``await req.wait()`` gives the object. ``req.cancel()``
        withdraws it while no message has matched it."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            return self._done(None, Status.of(PROC_NULL, ANY_TAG))
        return self._receive_request(src, tag, self._received)

    def _receive_request(self, src: int, tag: int, finish) -> Request:
        """The request of a receive posted now (world ``src``): ``finish(envelope)``
        runs as soon as a message matches (a synchronous send is acknowledged then, not
        when the program looks; a buffer receive fills its buffer then); an error it
        raises comes out of the request's wait or test. A wait for it is named in the
        rank's wait record (``engine/_waits``)."""
        received = _Once(finish)
        return Request(self._ep.receive_later(self._ctx, src, tag, received.prime), received,
                       cancellable=True, dets=self._ep.determinants,
                       waits_on=(self._ep, Wait("recv", src, tag, self._ctx)))

    async def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0,
                       source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                       status: Status | None = None) -> Any:
        """Send and receive at once (no deadlock when every rank does it)."""
        self.isend(sendobj, dest, sendtag)
        return await self.recv(source, recvtag, status)

    async def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                    status: Status | None = None) -> bool:
        """Wait until a matching message can be received, without receiving it."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            st = Status.of(PROC_NULL, ANY_TAG)
        else:
            st = self._status_of(await self._ep.probe(self._ctx, src, tag))
        if status is not None:
            status._fill(st)
        return True

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Status | None = None) -> bool:
        """Whether a matching message can be received now (never waits)."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            st = Status.of(PROC_NULL, ANY_TAG)
        else:
            env = self._ep.iprobe(self._ctx, src, tag)
            if env is None:
                polled_in_vain()
                return False
            st = self._status_of(env)
        if status is not None:
            status._fill(st)
        return True

    Probe, Iprobe = probe, iprobe

    async def mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                     status: Status | None = None) -> Message:
        """Wait for a matching message and take it: only the ``Message`` returned can
        receive it (``facade/_message``)."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            msg = Message.no_proc(self)
        else:
            msg = Message(self, *self._received(await self._ep.receive(self._ctx, src, tag)))
        if status is not None:
            status._fill(msg._status)
        return msg

    def improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                status: Status | None = None) -> Message | None:
        """Take a matching message now if one is here (its ``Message``), else None."""
        src, tag = self._source(source), self._recv_tag(tag)
        if src == PROC_NULL:
            msg = Message.no_proc(self)
        elif (found := self._ep.iprobe(self._ctx, src, tag)) is None:
            polled_in_vain()
            return None
        else:  # the receive takes the message found (the first match from its source
            # with its tag), without waiting; named, so it is no second nondeterministic
            # event after the probe's
            msg = Message(self, *self._received(
                self._ep.receive_later(self._ctx, found.src, found.tag).result()))
        if status is not None:
            status._fill(msg._status)
        return msg

    Mprobe, Improbe = mprobe, improbe

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
        return await self._ep.receive(self._cctx, self.group[source], tag, self._running)

    # ------------------------------------------------------------- collectives
    async def _collective(self, run, *args):
        """Run collective ``run(self, *args)`` once this rank's nonblocking collectives
        on this communicator are done (see the module docstring)."""
        last = self._last_icoll
        if last is not None and not last.done():
            await asyncio.wait((last,))
        self._running = run.__name__  # one at a time per communicator: a receive's label
        return await run(self, *args)

    def _icollective(self, run, *args) -> Request:
        """Start collective ``run(self, *args)`` as a task after the ones before it."""
        task = self._background(self._after(self._last_icoll, run, args))
        self._last_icoll = task
        return Request(task, _collective_done, dets=self._ep.determinants,
                       waits_on=(self._ep, Wait("request", comm=self._cctx,
                                                what=f"nonblocking {run.__name__}")))

    def _background(self, awaitable) -> asyncio.Task:
        """A task of the program's nonblocking operation, which a pause for a restore
        cancels with ``main()`` (``Endpoint.program_tasks``)."""
        task = asyncio.ensure_future(awaitable)
        tasks = self._ep.program_tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def _after(self, last, run, args):
        if last is not None and not last.done():
            await asyncio.wait((last,))
        self._running = run.__name__
        return await run(self, *args)

    async def barrier(self) -> None:
        """Wait until every rank of the communicator has called barrier."""
        await self._collective(coll.barrier)

    Barrier = barrier

    async def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Root's ``obj`` on every rank (packed once, forwarded along a binomial tree)."""
        return await self._collective(coll.bcast, obj, self._root(root))

    async def reduce(self, sendobj: Any, op=SUM, root: int = 0) -> Any:
        """``op`` folded over all ranks' objects in rank order; None except on root."""
        return await self._collective(coll.reduce, sendobj, op, self._root(root))

    async def allreduce(self, sendobj: Any, op=SUM) -> Any:
        """``op`` folded over all ranks' objects in rank order, on every rank."""
        return await self._collective(coll.allreduce, sendobj, op)

    async def scan(self, sendobj: Any, op=SUM) -> Any:
        """``op`` folded over the objects of ranks 0 .. this one, in rank order."""
        return await self._collective(coll.scan, sendobj, op, False)

    async def exscan(self, sendobj: Any, op=SUM) -> Any:
        """``op`` folded over the objects of ranks 0 .. this one - 1; None on rank 0."""
        return await self._collective(coll.scan, sendobj, op, True)

    async def gather(self, sendobj: Any, root: int = 0) -> list | None:
        """The list of every rank's object (in rank order) on root; None elsewhere."""
        return await self._collective(coll.gather, sendobj, self._root(root))

    async def scatter(self, sendobj=None, root: int = 0) -> Any:
        """Root's ``sendobj[i]`` on rank i (any iterable of ``size`` items; None gives
        None to every rank)."""
        return await self._collective(coll.scatter, sendobj, self._root(root))

    async def allgather(self, sendobj: Any) -> list:
        """The list of every rank's object, in rank order, on every rank."""
        return await self._collective(coll.allgather, sendobj)

    async def alltoall(self, sendobj=None) -> list:
        """Rank i gets ``[rank0's sendobj[i], rank1's sendobj[i], ...]`` (any iterable
        of ``size`` items; None sends None to every rank)."""
        return await self._collective(coll.alltoall, sendobj)

    def ibarrier(self) -> Request:
        """Nonblocking ``barrier``: the request completes once every rank has called it."""
        return self._icollective(coll.barrier)

    Ibarrier = ibarrier

    def ibcast(self, obj: Any = None, root: int = 0) -> Request:
        return self._icollective(coll.bcast, obj, self._root(root))

    def ireduce(self, sendobj: Any, op=SUM, root: int = 0) -> Request:
        return self._icollective(coll.reduce, sendobj, op, self._root(root))

    def iallreduce(self, sendobj: Any, op=SUM) -> Request:
        return self._icollective(coll.allreduce, sendobj, op)

    def igather(self, sendobj: Any, root: int = 0) -> Request:
        return self._icollective(coll.gather, sendobj, self._root(root))

    def iscatter(self, sendobj=None, root: int = 0) -> Request:
        return self._icollective(coll.scatter, sendobj, self._root(root))

    def iallgather(self, sendobj: Any) -> Request:
        return self._icollective(coll.allgather, sendobj)

    def ialltoall(self, sendobj=None) -> Request:
        return self._icollective(coll.alltoall, sendobj)

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
        everyone = await self._collective(coll.allgather, (int(color), int(key)))
        if color == UNDEFINED:
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        group = tuple(self.group[r] for _, r in members)
        return Communicator(self._ep, f"{self.id}.{index}:{color}", group)

    async def Create_cart(self, dims, periods=None, reorder: bool = False) -> "Cartcomm | None":
        """A Cartesian grid of ``dims`` on the first ``prod(dims)`` ranks (collective;
        the other ranks get None). ``periods``: None, one bool, or one per dimension.
        ``reorder`` is accepted and ignored: grid ranks are the ranks of this
        communicator, in order."""
        topo = CartTopology.checked(dims, periods, self.size)
        member = self.rank < topo.nnodes
        sub = await self.split(0 if member else UNDEFINED, self.rank)
        return Cartcomm(self._ep, sub.id, sub.group, topo) if member else None

    async def dup(self) -> "Communicator":
        """A communicator with the same ranks and its own matching contexts (collective;
        no message is needed since every member derives the same id)."""
        return Communicator(self._ep, f"{self.id}.{self._next_child()}d", self.group)

    Split, Dup, Clone = split, dup, dup

    def Free(self) -> None:
        """mpi4py's ``Free``: nothing to release (a communicator is an id its members
        derive alike, and no rank keeps anything for it)."""

    def _next_child(self) -> int:
        """The number of the next communicator derived from this one: counted per id by
        the endpoint, whose snapshots keep the counts (``engine/_positions``)."""
        derived = self._ep.derived
        derived[self.id] = n = derived.get(self.id, 0) + 1
        return n


class Cartcomm(Communicator):
    """A communicator with a Cartesian grid (``Create_cart``): coordinates, neighbour
    shifts (PROC_NULL past non-periodic edges) and sub-grids, as mpi4py's
    ``Cartcomm``."""

    is_topo = True
    topology = CART

    def __init__(self, endpoint, comm_id: str, group: tuple[int, ...], topo: CartTopology):
        super().__init__(endpoint, comm_id, group)
        self._topo = topo

    def __repr__(self):
        return f"Cartcomm({self.id!r}, rank {self.rank} of {self.dims})"

    @property
    def dims(self) -> list[int]:
        return list(self._topo.dims)

    @property
    def periods(self) -> list[bool]:
        return list(self._topo.periods)

    @property
    def coords(self) -> list[int]:
        return self._topo.coords(self.rank)

    @property
    def ndim(self) -> int:
        return len(self._topo.dims)

    dim = ndim

    def Get_dim(self) -> int:
        return self.ndim

    @property
    def topo(self) -> tuple[list[int], list[bool], list[int]]:
        return self.dims, self.periods, self.coords

    def Get_topo(self) -> tuple[list[int], list[bool], list[int]]:
        return self.topo

    def Get_coords(self, rank: int) -> list[int]:
        """The coordinates of grid rank ``rank``."""
        self._peer(rank, "rank")
        return self._topo.coords(int(rank))

    def Get_cart_rank(self, coords) -> int:
        """The grid rank at ``coords`` (periodic dimensions wrap)."""
        return self._topo.rank(coords)

    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """``(source, dest)``: the ranks ``disp`` steps back and forward along
        ``direction`` (PROC_NULL past a non-periodic edge), for ``sendrecv``."""
        return self._topo.shift(self.rank, direction, disp)

    @property
    def inedges(self) -> list[int]:
        """The neighbours (per dimension, one step back then forward), as MPI lists them."""
        return self._topo.neighbors(self.rank)

    outedges = inedges

    @property
    def inoutedges(self) -> tuple[list[int], list[int]]:
        return self.inedges, self.outedges

    @property
    def indegree(self) -> int:
        return 2 * self.ndim

    outdegree = indegree

    async def Sub(self, remain_dims) -> "Cartcomm":
        """The sub-grid through this rank that keeps the dimensions flagged in
        ``remain_dims`` (collective)."""
        topo, remain = self._topo.sub(remain_dims)
        sub = await self.split(self._topo.sub_color(self.rank, remain), self.rank)
        return Cartcomm(self._ep, sub.id, sub.group, topo)


def _is(value, sentinel: int) -> bool:
    """``value == sentinel`` for an int (not a bool, nor a float that equals it)."""
    if type(value) is int:  # the usual case, without the ABC check
        return value == sentinel
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == sentinel


class _Once:
    """``fn(arg)`` computed on the first call and returned (or raised) again on every
    later one."""

    __slots__ = ("_fn", "_result")

    def __init__(self, fn):
        self._fn = fn
        self._result: tuple | None = None  # (True, value) or (False, exception)

    def prime(self, arg) -> None:
        """Compute now, keeping an error for the call that asks for the result."""
        if self._result is None:
            try:
                self._result = (True, self._fn(arg))
            except Exception as exc:  # whatever the finish raises goes to the program
                self._result = (False, exc)

    def __call__(self, arg):
        self.prime(arg)
        ok, value = self._result
        if not ok:
            raise value
        return value


def _sent(_) -> tuple[None, Status]:
    """A send request's value and status once its transport has drained or its receive
    has started."""
    return None, Status()


def _collective_done(value) -> tuple[Any, Status]:
    return value, Status()
