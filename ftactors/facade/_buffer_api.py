"""The buffer (uppercase) API of mpi4py: ``Send``/``Recv`` ... ``Reduce_scatter`` on numpy
buffers the program owns, mixed into ``Communicator``.

Theory of operation: every method reads its buffers with mpi4py's conventions
(``_buffers.message`` / ``vector``: 1-D views of the entries a message covers), then runs
the lowercase machinery with the numpy arrays of those entries as the objects: the same
envelopes, on the same contexts and tags, through the same protocol hooks, so logging,
flushes, replay and piggybacks treat them like any message. A send packs its entries at
once (the program may reuse the buffer as soon as the call returns); a receive copies
what arrived into the receive buffer (``_buffers.deliver``), where it is writable and the
program's own. Reductions fold numpy arrays elementwise with the op, with the lowercase
collectives' rank order and fixed bracketing, so every rank and every run gets the same
bits; the own operand is copied first, so an op that writes into its left operand never
touches the program's send buffer. Large arrays (``_large``: options
``large_collectives_bytes``, ``bcast_pipeline_bytes``) take ``_collectives``' large-array
schedules, which move and combine pieces of the arrays with the same bits: ``Allreduce``
reduces in the receive buffer (the operand copied there first), ``Allgather(v)`` and
``Bcast`` copy each piece into the receive buffer as it arrives.

Arguments are read when the method is called (a bad buffer raises there, even for a
nonblocking one); a nonblocking collective moves the data when it runs, after this
rank's earlier collectives on the communicator (``Communicator._icollective``).
"""
from __future__ import annotations

import numpy as np

from . import _collectives as coll
from ._buffers import (Scattered, blocks_of, deliver, even_blocks, in_place, message,
                       same_memory, vector)
from ._ops import MAXLOC, MINLOC, SUM, check_op
from ._request import Prequest, Request, Status
from ..engine import ANY_SOURCE, ANY_TAG, PROC_NULL, Wait


class BufferAPI:
    """The uppercase methods (a mixin of ``Communicator``; see the module docstring)."""

    # ---------------------------------------------------------- point to point
    def _outgoing(self, buf, dest):
        """The entries ``buf`` sends to ``dest`` (None to PROC_NULL: no buffer is read,
        as in mpi4py)."""
        return None if self._dest(dest) == PROC_NULL else message(buf, derived=True)

    async def Send(self, buf, dest: int, tag: int = 0) -> None:
        """Send the entries of ``buf`` (packed now: the buffer may be reused at once)."""
        await self.send(self._outgoing(buf, dest), dest, tag)

    Bsend = Rsend = Send

    async def Ssend(self, buf, dest: int, tag: int = 0) -> None:
        """Synchronous ``Send``: returns once the matching receive has started."""
        await self.ssend(self._outgoing(buf, dest), dest, tag)

    def Isend(self, buf, dest: int, tag: int = 0) -> Request:
        return self.isend(self._outgoing(buf, dest), dest, tag)

    Ibsend = Irsend = Isend

    def Issend(self, buf, dest: int, tag: int = 0) -> Request:
        return self.issend(self._outgoing(buf, dest), dest, tag)

    def _into(self, into: np.ndarray, what: str):
        """A matched envelope's entries copied into ``into``: ``(None, status)`` with the
        status counting bytes received."""
        def finish(env):
            value, status = self._received(env)
            status.count = deliver(value, into, what)
            return None, status
        return finish

    def _recv_args(self, buf, source, tag):
        """``(world source, tag, entries to fill)`` of a buffer receive (no buffer is read
        for PROC_NULL: None)."""
        src, tag = self._source(source), self._recv_tag(tag)
        return src, tag, None if src == PROC_NULL else message(buf, writable=True,
                                                                derived=True)

    async def _recv_now(self, src: int, tag: int, into, status: Status | None) -> None:
        """A blocking receive into ``into`` (the lowercase ``recv``'s path, which a
        forced snapshot taken while it waits accounts for)."""
        if into is None:
            if status is not None:
                status._fill(Status.of(PROC_NULL, ANY_TAG))
            return
        env = await self._ep.receive(self._ctx, src, tag)
        value = self._object_of(env)
        count = deliver(value, into, "Recv")
        if status is not None:  # (built only when asked for, as ``recv`` does)
            st = self._status_of(env, value)
            st.count = count
            status._fill(st)

    async def Recv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                   status: Status | None = None) -> None:
        """Receive a message into ``buf`` (it may be shorter than the buffer: the front
        is filled; a longer one is an error, as MPI's truncation)."""
        await self._recv_now(*self._recv_args(buf, source, tag), status)

    def Irecv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking ``Recv``: the entries land in ``buf`` as the message is matched."""
        src, tag, into = self._recv_args(buf, source, tag)
        if into is None:
            return self._done(None, Status.of(PROC_NULL, ANY_TAG))
        return self._receive_request(src, tag, self._into(into, "Recv"))

    async def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None,
                       source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                       status: Status | None = None) -> None:
        """Send ``sendbuf`` and receive into ``recvbuf`` at once (no deadlock when every
        rank does it)."""
        receive = self._recv_args(recvbuf, source, recvtag)
        self.isend(self._outgoing(sendbuf, dest), dest, sendtag)
        await self._recv_now(*receive, status)

    def Isendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None,
                  source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
        req = self.Irecv(recvbuf, source, recvtag)
        self.isend(self._outgoing(sendbuf, dest), dest, sendtag)
        return req

    async def Sendrecv_replace(self, buf, dest: int, sendtag: int = 0,
                               source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                               status: Status | None = None) -> None:
        """Send ``buf`` and receive into it: what it held is packed before anything
        arrives."""
        receive = self._recv_args(buf, source, recvtag)
        self.isend(self._outgoing(buf, dest), dest, sendtag)
        await self._recv_now(*receive, status)

    def Isendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG) -> Request:
        self.isend(self._outgoing(buf, dest), dest, sendtag)
        return self.Irecv(buf, source, recvtag)

    def Send_init(self, buf, dest: int, tag: int = 0) -> Prequest:
        """A persistent ``Isend``: each ``Start()`` sends what ``buf`` holds then."""
        return Prequest(lambda: self.Isend(buf, dest, tag))

    Bsend_init = Rsend_init = Send_init

    def Ssend_init(self, buf, dest: int, tag: int = 0) -> Prequest:
        return Prequest(lambda: self.Issend(buf, dest, tag))

    def Recv_init(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        """A persistent ``Irecv``: each ``Start()`` posts one receive into ``buf``."""
        return Prequest(lambda: self.Irecv(buf, source, tag))

    # ------------------------------------------------------------- collectives
    def _large(self, nbytes: int, option: str = "large_collectives_bytes",
               default: int | None = coll.LARGE_COLLECTIVES_BYTES) -> bool:
        """Whether a collective of ``nbytes`` (a size every rank has alike, as MPI's
        matching type signatures make it) takes a large-array schedule: from the option
        ``option`` (declared default ``default``; None: never) on, see ``_collectives``."""
        limit = self._ep.option(option, default)
        return limit is not None and self.size > 1 and nbytes >= limit

    def _bcast_buf(self, buf, root):
        root = self._root(root)
        entries = message(buf, writable=self.rank != root, derived=True)

        async def run(comm):
            if comm._large(entries.nbytes, "bcast_pipeline_bytes", None):
                # pieces cut in bytes, so any receiving datatype matches the root's
                raw = entries.view(np.uint8)
                await coll.bcast_pipeline(comm, raw, root,
                                          coll.pipeline_pieces(raw.size, comm.size),
                                          _filling("Bcast"))
                if isinstance(entries, Scattered):  # a derived type's bytes: home
                    entries.put(entries.nbytes)
                return
            value = await coll.bcast(comm, entries if comm.rank == root else None, root)
            if comm.rank != root:
                deliver(value, entries, "Bcast", exact=True)
        return run

    async def Bcast(self, buf, root: int = 0) -> None:
        """Root's entries of ``buf`` into every rank's ``buf``."""
        await self._collective(self._bcast_buf(buf, root))

    def Ibcast(self, buf, root: int = 0) -> Request:
        return self._icollective(self._bcast_buf(buf, root))

    def _recv_blocks(self, recvbuf, v: bool) -> list[np.ndarray]:
        """A receive buffer of one block per rank, as per-rank views."""
        if v:
            return blocks_of(*vector(recvbuf, self.size, writable=True))
        return even_blocks(message(recvbuf, True, self.size), self.size)

    def _send_blocks(self, sendbuf, v: bool) -> list[np.ndarray]:
        if v:
            return blocks_of(*vector(sendbuf, self.size))
        return even_blocks(message(sendbuf, False, self.size), self.size)

    def _gather_buf(self, sendbuf, recvbuf, root, v: bool, what: str):
        root = self._root(root)
        mine, blocks = None, None
        if self.rank == root:
            blocks = self._recv_blocks(recvbuf, v)
            if not in_place(sendbuf):
                mine = message(sendbuf)
        else:
            mine = message(sendbuf)

        async def run(comm):
            items = await coll.gather(comm, mine, root)
            for i, (item, into) in enumerate(zip(items or (), blocks or ())):
                if item is not None or i != root:
                    deliver(item, into, what, exact=True)
        return run

    async def Gather(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Every rank's entries, in rank order, into root's ``recvbuf`` (one equal block
        per rank); ``sendbuf=ft.IN_PLACE`` on root: its block is in place already."""
        await self._collective(self._gather_buf(sendbuf, recvbuf, root, False, "Gather"))

    async def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """``Gather`` with a count and displacement per rank: ``recvbuf`` as
        ``[buf, counts, displs]`` (or ``[buf, (counts, displs), type]``)."""
        await self._collective(self._gather_buf(sendbuf, recvbuf, root, True, "Gatherv"))

    def Igather(self, sendbuf, recvbuf, root: int = 0) -> Request:
        return self._icollective(self._gather_buf(sendbuf, recvbuf, root, False, "Gather"))

    def Igatherv(self, sendbuf, recvbuf, root: int = 0) -> Request:
        return self._icollective(self._gather_buf(sendbuf, recvbuf, root, True, "Gatherv"))

    def _scatter_buf(self, sendbuf, recvbuf, root, v: bool, what: str):
        root = self._root(root)
        pieces, into = None, None
        if self.rank == root:
            pieces = self._send_blocks(sendbuf, v)
            if not in_place(recvbuf):
                into = message(recvbuf, writable=True)
        else:
            into = message(recvbuf, writable=True)

        async def run(comm):
            value = await coll.scatter(comm, pieces, root)
            if into is not None:
                deliver(value, into, what, exact=True)
        return run

    async def Scatter(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Block i of root's ``sendbuf`` into rank i's ``recvbuf``; ``recvbuf=ft.IN_PLACE``
        on root leaves its block where it is."""
        await self._collective(self._scatter_buf(sendbuf, recvbuf, root, False, "Scatter"))

    async def Scatterv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """``Scatter`` with a count and displacement per rank in root's ``sendbuf``."""
        await self._collective(self._scatter_buf(sendbuf, recvbuf, root, True, "Scatterv"))

    def Iscatter(self, sendbuf, recvbuf, root: int = 0) -> Request:
        return self._icollective(self._scatter_buf(sendbuf, recvbuf, root, False, "Scatter"))

    def Iscatterv(self, sendbuf, recvbuf, root: int = 0) -> Request:
        return self._icollective(self._scatter_buf(sendbuf, recvbuf, root, True, "Scatterv"))

    def _allgather_buf(self, sendbuf, recvbuf, v: bool, what: str):
        blocks = self._recv_blocks(recvbuf, v)
        mine = blocks[self.rank] if in_place(sendbuf) else message(sendbuf)

        async def run(comm):
            if comm._large(sum(block.nbytes for block in blocks)):
                await coll.allgather_ring(comm, mine, blocks, _filling(what))
                if mine is not blocks[comm.rank]:
                    deliver(mine, blocks[comm.rank], what, exact=True)
                return
            for item, into in zip(await coll.allgather(comm, mine), blocks):
                deliver(item, into, what, exact=True)
        return run

    async def Allgather(self, sendbuf, recvbuf) -> None:
        """Every rank's entries, in rank order, into every rank's ``recvbuf``;
        ``ft.IN_PLACE``: each rank's block is in place already."""
        await self._collective(self._allgather_buf(sendbuf, recvbuf, False, "Allgather"))

    async def Allgatherv(self, sendbuf, recvbuf) -> None:
        """``Allgather`` with a count and displacement per rank in ``recvbuf``."""
        await self._collective(self._allgather_buf(sendbuf, recvbuf, True, "Allgatherv"))

    def Iallgather(self, sendbuf, recvbuf) -> Request:
        return self._icollective(self._allgather_buf(sendbuf, recvbuf, False, "Allgather"))

    def Iallgatherv(self, sendbuf, recvbuf) -> Request:
        return self._icollective(self._allgather_buf(sendbuf, recvbuf, True, "Allgatherv"))

    def _alltoall_buf(self, sendbuf, recvbuf, v: bool, what: str):
        blocks = self._recv_blocks(recvbuf, v)
        pieces = blocks if in_place(sendbuf) else self._send_blocks(sendbuf, v)

        async def run(comm):
            # every block is packed as it is sent, before any arrives: in place is safe
            for item, into in zip(await coll.alltoall(comm, pieces), blocks):
                deliver(item, into, what, exact=True)
        return run

    async def Alltoall(self, sendbuf, recvbuf) -> None:
        """Block j of rank i's ``sendbuf`` into block i of rank j's ``recvbuf``."""
        await self._collective(self._alltoall_buf(sendbuf, recvbuf, False, "Alltoall"))

    async def Alltoallv(self, sendbuf, recvbuf) -> None:
        """``Alltoall`` with counts and displacements per rank on both sides."""
        await self._collective(self._alltoall_buf(sendbuf, recvbuf, True, "Alltoallv"))

    def Ialltoall(self, sendbuf, recvbuf) -> Request:
        return self._icollective(self._alltoall_buf(sendbuf, recvbuf, False, "Alltoall"))

    def Ialltoallv(self, sendbuf, recvbuf) -> Request:
        return self._icollective(self._alltoall_buf(sendbuf, recvbuf, True, "Alltoallv"))

    # --------------------------------------------------------------- reductions
    @staticmethod
    def _array_op(op, what: str):
        """``op`` checked for elementwise use on arrays.

        Raises:
            ValueError: MAXLOC / MINLOC, which need MPI's pair datatypes (use the
                lowercase reductions on ``(value, index)`` pairs).
        """
        if op is MAXLOC or op is MINLOC:
            raise ValueError(f"{what}: {op!r} needs pair datatypes, which the buffer API "
                             f"does not have; reduce (value, index) pairs with the "
                             f"lowercase methods")
        return check_op(op)

    def _operands(self, sendbuf, recvbuf, what: str):
        """``(operand, into)`` of a reduction whose result lands in ``recvbuf``:
        ``ft.IN_PLACE`` (or the receive buffer itself) makes ``recvbuf`` the operand."""
        into = message(recvbuf, writable=True)
        if in_place(sendbuf):
            return into, into
        data = message(sendbuf)
        if data.size != into.size or data.dtype != into.dtype:
            raise ValueError(f"{what}: the send buffer ({data.size} x {data.dtype}) and the "
                             f"receive buffer ({into.size} x {into.dtype}) differ")
        return data, into

    def _reduce_buf(self, sendbuf, recvbuf, op, root):
        root, op = self._root(root), self._array_op(op, "Reduce")
        if self.rank == root:
            data, into = self._operands(sendbuf, recvbuf, "Reduce")
        else:
            data, into = message(sendbuf), None

        async def run(comm):
            result = await coll.reduce(comm, data.copy(), op, root)
            if into is not None:
                into[...] = result
        return run

    async def Reduce(self, sendbuf, recvbuf, op=SUM, root: int = 0) -> None:
        """``op`` folded elementwise over every rank's entries in rank order, into root's
        ``recvbuf`` (other ranks' ``recvbuf`` is not used)."""
        await self._collective(self._reduce_buf(sendbuf, recvbuf, op, root))

    def Ireduce(self, sendbuf, recvbuf, op=SUM, root: int = 0) -> Request:
        return self._icollective(self._reduce_buf(sendbuf, recvbuf, op, root))

    def _allreduce_buf(self, sendbuf, recvbuf, op, scan=None):
        op = self._array_op(op, "Allreduce" if scan is None else "Scan")
        data, into = self._operands(sendbuf, recvbuf, "Allreduce" if scan is None else "Scan")

        async def run(comm):
            if scan is None and comm._large(data.nbytes):
                if data is not into:  # the receive buffer is the work array
                    into[...] = data
                await coll.allreduce_pieces(comm, into, op)
                return
            if scan is None:
                result = await coll.allreduce(comm, data.copy(), op)
            else:
                result = await coll.scan(comm, data.copy(), op, scan)
            if result is not None:  # Exscan leaves rank 0's buffer as it is
                into[...] = result
        return run

    async def Allreduce(self, sendbuf, recvbuf, op=SUM) -> None:
        """``op`` folded elementwise over every rank's entries in rank order, into every
        rank's ``recvbuf`` (the same bits on every rank)."""
        await self._collective(self._allreduce_buf(sendbuf, recvbuf, op))

    async def Scan(self, sendbuf, recvbuf, op=SUM) -> None:
        """``op`` folded elementwise over ranks 0 .. this one."""
        await self._collective(self._allreduce_buf(sendbuf, recvbuf, op, False))

    async def Exscan(self, sendbuf, recvbuf, op=SUM) -> None:
        """``op`` folded elementwise over ranks 0 .. this one - 1 (rank 0's ``recvbuf``
        is left as it is)."""
        await self._collective(self._allreduce_buf(sendbuf, recvbuf, op, True))

    def Iallreduce(self, sendbuf, recvbuf, op=SUM) -> Request:
        return self._icollective(self._allreduce_buf(sendbuf, recvbuf, op))

    def Iscan(self, sendbuf, recvbuf, op=SUM) -> Request:
        return self._icollective(self._allreduce_buf(sendbuf, recvbuf, op, False))

    def Iexscan(self, sendbuf, recvbuf, op=SUM) -> Request:
        return self._icollective(self._allreduce_buf(sendbuf, recvbuf, op, True))

    def _reduce_scatter_buf(self, sendbuf, recvbuf, counts, op, block: bool):
        """Reduce to rank 0, then scatter block i of the result to rank i. ``counts``:
        each rank's entries (None: ``Reduce_scatter_block``'s equal blocks, or
        ``Reduce_scatter`` asking every rank for its receive count)."""
        what = "Reduce_scatter_block" if block else "Reduce_scatter"
        op, n = self._array_op(op, what), self.size
        inplace = in_place(sendbuf) or same_memory(message(sendbuf), message(recvbuf))
        if inplace:
            data = message(recvbuf, True, n) if block else message(recvbuf, writable=True)
            if block:
                counts = [data.size // n] * n
            elif counts is None:
                raise ValueError(f"{what}: in place needs recvcounts")
        else:
            data = message(sendbuf, False, n) if block else message(sendbuf)
        if counts is not None:
            counts = [int(c) for c in counts]
            if len(counts) != n:
                raise ValueError(f"{what}: {n} counts needed (one per rank), got "
                                 f"{len(counts)}")
        into = None if inplace else message(recvbuf, writable=True)
        if block and not inplace:
            counts = [into.size] * n

        def target_of(counts: list[int], rank: int) -> np.ndarray:
            """Where this rank's block of the result lands, once the counts are checked."""
            if sum(counts) != data.size:
                raise ValueError(f"{what}: the send buffer has {data.size} entries, the "
                                 f"counts {counts} add up to {sum(counts)}")
            target = data[:counts[rank]] if inplace else into
            if target.size != counts[rank]:
                raise ValueError(f"{what}: the receive buffer holds {target.size} entries, "
                                 f"this rank's count is {counts[rank]}")
            return target

        target = None if counts is None else target_of(counts, self.rank)

        async def run(comm):
            sizes, lands = counts, target
            if sizes is None:
                sizes = await coll.allgather(comm, into.size)
                lands = target_of(sizes, comm.rank)
            total = await coll.reduce(comm, data.copy(), op, 0)
            starts = np.cumsum([0, *sizes])
            pieces = None if total is None else [total[starts[i]:starts[i + 1]]
                                                 for i in range(n)]
            lands[...] = await coll.scatter(comm, pieces, 0)
        return run

    async def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM) -> None:
        """``op`` folded elementwise over every rank's ``sendbuf`` (one equal block per
        rank); block i of the result into rank i's ``recvbuf``. ``ft.IN_PLACE``: the
        operand is ``recvbuf``, and the result lands in its first block."""
        await self._collective(self._reduce_scatter_buf(sendbuf, recvbuf, None, op, True))

    async def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM) -> None:
        """``Reduce_scatter_block`` with ``recvcounts[i]`` entries for rank i (None: each
        rank's ``recvbuf`` size)."""
        await self._collective(self._reduce_scatter_buf(sendbuf, recvbuf, recvcounts, op,
                                                        False))

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM) -> Request:
        return self._icollective(self._reduce_scatter_buf(sendbuf, recvbuf, None, op, True))

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM) -> Request:
        return self._icollective(self._reduce_scatter_buf(sendbuf, recvbuf, recvcounts, op,
                                                          False))


def _filling(what: str):
    """``deliver`` for a collective's pieces: ``fill(value, into)``, exact sizes."""
    return lambda value, into: deliver(value, into, what, exact=True)
