"""mpi4py's ``demo/`` programs that pass messages, ported as a user ports them: the
module-level script becomes ``async def main``, every call that waits is awaited, the
timed or converging loops run through ``self.iterations()`` with their state
registered, and what the demo prints (or asserts) is returned for the tests to check.
Names are the demos' own (``demo/<path>`` in github.com/mpi4py/mpi4py); what each port
needed from ftactors is in its docstring."""
import array
import asyncio
import mmap
from math import pi as PI

import numpy as np

import ftactors as ft


class HelloWorld(ft.Rank):
    """demo/helloworld.py: ``Get_processor_name``."""

    async def main(self):
        size, rank = self.comm.Get_size(), self.comm.Get_rank()
        return f"Hello, World! I am process {rank} of {size} on {ft.Get_processor_name()}."


class Ex201(ft.Rank):
    """demo/mpi-ref-v1/ex-2.01.py: a CHAR message into a larger ``array.array``; the
    status's source, tag, error and ``Get_count(CHAR)``."""

    async def main(self):
        s = b"Hello there"
        msg = array.array("B", b"\0" * 20)
        tag = 99
        status = ft.Status()
        comm = self.comm
        if self.rank == 0:
            msg[:len(s)] = array.array("B", s)
            await comm.Send([msg, len(s) + 1, ft.CHAR], 1, tag)
        elif self.rank == 1:
            await comm.Recv([msg, 20, ft.CHAR], 0, tag, status)
            return (bytes(msg[:len(s) + 1]), status.source, status.tag, status.error,
                    status.Get_count(ft.CHAR))


class Ex208(ft.Rank):
    """demo/mpi-ref-v1/ex-2.08.py: a DOUBLE ``array.array`` there and back."""

    async def main(self):
        comm = self.comm
        sendbuf = array.array("d", [0] * 10)
        recvbuf = array.array("d", [0] * 10)
        status = ft.Status()
        if self.rank == 0:
            sendbuf[:] = array.array("d", range(len(sendbuf)))
            await comm.Send([sendbuf, ft.DOUBLE], 1, 0)
            await comm.Recv([recvbuf, ft.DOUBLE], 1, 0, status)
        elif self.rank == 1:
            await comm.Recv([recvbuf, ft.DOUBLE], 0, 0, status)
            sendbuf[:] = recvbuf
            await comm.Send([sendbuf, ft.DOUBLE], 0, 0)
        if self.rank < 2:
            return (list(recvbuf), sendbuf == recvbuf, status.source, status.tag,
                    status.Get_count(ft.DOUBLE))


class Ex229(ft.Rank):
    """demo/mpi-ref-v1/ex-2.29.py: ranks 0 and 1 send once, rank 2 takes both with
    ``Probe(ANY_SOURCE)`` and a receive of the type the source sends."""

    async def main(self):
        comm, rank = self.comm, self.rank
        if rank == 0:
            await comm.Send([array.array("i", [7] * 5), ft.INT], 2, 0)
        elif rank == 1:
            await comm.Send([array.array("f", [7] * 5), ft.FLOAT], 2, 0)
        elif rank == 2:
            i = array.array("i", [0] * 5)
            x = array.array("f", [0] * 5)
            status = ft.Status()
            for _ in range(2):
                await comm.Probe(ft.ANY_SOURCE, 0, status)
                if status.Get_source() == 0:
                    await comm.Recv([i, ft.INT], 0, 0, status)
                else:
                    await comm.Recv([x, ft.FLOAT], 1, 0, status)
            return list(i), list(x), status.tag, status.error


class Ex234(ft.Rank):
    """demo/mpi-ref-v1/ex-2.34.py: ``Irecv`` into the columns of a Fortran-order array,
    ``Ssend`` and ``Rsend``, ``Request.Waitall`` with statuses."""

    async def main(self):
        comm, rank = self.comm, self.rank
        buff = np.empty((1000, 2), dtype="f", order="F")
        if rank == 0:
            req1 = comm.Irecv([buff[:, 0], ft.FLOAT], 1, 1)
            req2 = comm.Irecv([buff[:, 1], ft.FLOAT], 1, 2)
            status = [ft.Status(), ft.Status()]
            await ft.Request.Waitall([req1, req2], status)
            return (bool(np.all(buff[:, 0] == 5)), bool(np.all(buff[:, 1] == 7)),
                    [(s.source, s.tag) for s in status], req1 == ft.REQUEST_NULL)
        if rank == 1:
            buff[:, 0] = 5
            buff[:, 1] = 7
            await comm.Ssend([buff[:, 1], ft.FLOAT], 0, 2)
            await comm.Rsend([buff[:, 0], ft.FLOAT], 0, 1)


class Ex235(ft.Rank):
    """demo/mpi-ref-v1/ex-2.35.py: ``Attach_buffer``/``Detach_buffer``,
    ``BSEND_OVERHEAD``."""

    async def main(self):
        size = 10000 + ft.BSEND_OVERHEAD
        buff = np.empty(size, dtype="b")
        ft.Attach_buffer(buff)
        buff2 = ft.Detach_buffer()
        ft.Attach_buffer(buff2)
        ft.Detach_buffer()
        return len(buff2) == size and buff2 is buff


class Ring(ft.Rank):
    """demo/profiling/ring.py: ``Sendrecv`` around the ring with keyword buffers, then
    ``Isend``/``Irecv`` and ``Request.Waitall``."""

    async def main(self, n=1000):
        comm, size, rank = self.comm, self.size, self.rank
        src, dest = (rank - 1) % size, (rank + 1) % size
        a1, a2 = np.full(n, float(rank)), np.zeros(n)
        await comm.Sendrecv(sendbuf=a1, recvbuf=a2, source=src, dest=dest)
        first = a2.copy()
        a1 += 100
        await ft.Request.Waitall([comm.Isend(a1, dest=dest), comm.Irecv(a2, source=src)])
        return float(first[0]), float(a2[-1])


class Seq:
    """demo/sequential/seq.py: run a section on one rank after another, passing a
    zero-length message (``[None, "B"]``) down the ranks (``ng`` at a time)."""

    def __init__(self, comm, ng=1, tag=0):
        assert 1 <= int(ng) <= comm.Get_size()
        self.comm, self.ng, self.tag = comm, int(ng), int(tag)

    async def __aenter__(self):
        comm, size, rank = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        if size > 1:
            if rank != 0:
                await comm.Recv([None, "B"], rank - 1, self.tag)
            if rank != size - 1 and rank % self.ng < self.ng - 1:
                await comm.Send([None, "B"], rank + 1, self.tag)
        return self

    async def __aexit__(self, *exc):
        comm, size, rank = self.comm, self.comm.Get_size(), self.comm.Get_rank()
        if size > 1:
            if rank == size - 1 or rank % self.ng == self.ng - 1:
                await comm.Send([None, "B"], (rank + 1) % size, self.tag)
            if rank == 0:
                await comm.Recv([None, "B"], size - 1, self.tag)


ORDER: list[int] = []  # the ranks in the order they ran their section (local transport)


class Sequential(ft.Rank):
    """demo/sequential/test_seq.py's use of ``Seq``: each rank appends its number in
    its turn."""

    async def main(self, ng=1):
        async with Seq(self.comm, ng):
            ORDER.append(self.rank)


class Intracomm(ft.Intracomm):
    """demo/reductions/reductions.py: reductions made of point-to-point messages in a
    subclass of ``Intracomm`` (``Intracomm(comm)``, ``Get_attr(TAG_UB)``)."""

    async def reduce(self, sendobj=None, op=ft.SUM, root=0):
        size, rank = self.size, self.rank
        tag = self.Get_attr(ft.TAG_UB) - 1
        recvobj = sendobj
        mask = 1
        while mask < size:
            if mask & rank:
                await self.send(recvobj, dest=(rank & ~mask) % size, tag=tag)
            elif (rank | mask) < size:
                recvobj = op(recvobj, await self.recv(source=rank | mask, tag=tag))
            mask <<= 1
        if root != 0:
            if rank == 0:
                await self.send(recvobj, dest=root, tag=tag)
            elif rank == root:
                recvobj = await self.recv(source=0, tag=tag)
        return recvobj if rank == root else None

    async def allreduce(self, sendobj=None, op=ft.SUM):
        return await self.bcast(await self.reduce(sendobj, op, 0), 0)

    async def scan(self, sendobj=None, op=ft.SUM):
        size, rank = self.size, self.rank
        tag = self.Get_attr(ft.TAG_UB) - 1
        recvobj = partial = sendobj
        mask = 1
        while mask < size:
            target = rank ^ mask
            if target < size:
                tmp = await self.sendrecv(partial, dest=target, source=target, sendtag=tag,
                                          recvtag=tag)
                if rank > target:
                    partial = op(tmp, partial)
                    recvobj = op(tmp, recvobj)
                else:
                    partial = op(partial, tmp)
            mask <<= 1
        return recvobj


class Reductions(ft.Rank):
    """demo/reductions/test_reductions.py's checks: the subclass's reductions against
    the communicator's own."""

    async def main(self):
        comm = Intracomm(self.comm)
        value = self.rank + 1
        return (await comm.reduce(value, ft.SUM, root=self.size - 1),
                await comm.allreduce(value, ft.PROD), await comm.scan(value),
                await self.comm.allreduce(value, ft.PROD), await self.comm.scan(value))


def allocate(n):
    """The OSU demos' buffers: an anonymous ``mmap``."""
    return mmap.mmap(-1, n)


class OsuBenchmark(ft.Rank):
    """The OSU demos' shape (demo/osu_*.py): for each message size, ``skip`` untimed
    and ``loop`` timed turns of one exchange; the clock starts at ``i == skip``. Each
    benchmark defines ``turn`` (one exchange of ``size`` bytes) and ``sizes``. Returns
    {size: microseconds per turn}; the buffers are checked by the tests."""

    MAX_MSG_SIZE = 1 << 10

    def sizes(self):
        return [0] + [1 << i for i in range(30) if (1 << i) <= self.MAX_MSG_SIZE]

    async def main(self, skip=2, loop=5):
        self.s_buf, self.r_buf = allocate(self.MAX_MSG_SIZE * self.size), allocate(
            self.MAX_MSG_SIZE * self.size)
        self.s_buf[:] = bytes((self.rank + k) % 251 for k in range(len(self.s_buf)))
        rows = {}
        for size in self.sizes():
            await self.comm.Barrier()
            async for i in self.iterations(loop + skip):
                if i == skip:
                    t_start = ft.Wtime()
                await self.turn(size)
            t_end = ft.Wtime()
            rows[size] = (t_end - t_start) * 1e6 / loop
        return rows, bytes(self.r_buf)


class OsuLatency(OsuBenchmark):
    """demo/osu_latency.py (2 ranks): ping-pong of ``[buf, size, BYTE]`` on mmap
    buffers."""

    async def turn(self, size):
        comm, peer = self.comm, 1 - self.rank
        s_msg, r_msg = [self.s_buf, size, ft.BYTE], [self.r_buf, size, ft.BYTE]
        if self.rank == 0:
            await comm.Send(s_msg, peer, 1)
            await comm.Recv(r_msg, peer, 1)
        else:
            await comm.Recv(r_msg, peer, 1)
            await comm.Send(s_msg, peer, 1)


class OsuBandwidth(OsuBenchmark):
    """demo/osu_bw.py (2 ranks): a window of ``Isend``/``Irecv`` in a list that starts
    as ``[REQUEST_NULL] * window``, ``Request.Waitall``, a 4-byte reply."""

    window = 4

    def sizes(self):
        return [1 << i for i in range(30) if (1 << i) <= self.MAX_MSG_SIZE]

    async def turn(self, size):
        comm = self.comm
        requests = [ft.REQUEST_NULL] * self.window
        if self.rank == 0:
            for j in range(self.window):
                requests[j] = comm.Isend([self.s_buf, size, ft.BYTE], 1, 100)
            await ft.Request.Waitall(requests)
            await comm.Recv([self.r_buf, 4, ft.BYTE], 1, 101)
        else:
            for j in range(self.window):
                requests[j] = comm.Irecv([self.r_buf, size, ft.BYTE], 0, 100)
            await ft.Request.Waitall(requests)
            await comm.Send([self.s_buf, 4, ft.BYTE], 0, 101)


class OsuBiBandwidth(OsuBandwidth):
    """demo/osu_bibw.py (2 ranks): both ranks post a window of receives and sends."""

    async def turn(self, size):
        comm, peer = self.comm, 1 - self.rank
        recv_request = [ft.REQUEST_NULL] * self.window
        send_request = [ft.REQUEST_NULL] * self.window
        for j in range(self.window):
            recv_request[j] = comm.Irecv([self.r_buf, size, ft.BYTE], peer, 10 + 90 * self.rank)
        for j in range(self.window):
            send_request[j] = comm.Isend([self.s_buf, size, ft.BYTE], peer, 100 - 90 * self.rank)
        await ft.Request.Waitall(send_request)
        await ft.Request.Waitall(recv_request)


class OsuMultiLatency(OsuBenchmark):
    """demo/osu_multi_lat.py (even ranks): pairs ``r`` and ``r + size/2`` ping-pong."""

    async def turn(self, size):
        comm, pairs = self.comm, self.size // 2
        s_msg, r_msg = [self.s_buf, size, ft.BYTE], [self.r_buf, size, ft.BYTE]
        if self.rank < pairs:
            await comm.Send(s_msg, self.rank + pairs, 1)
            await comm.Recv(r_msg, self.rank + pairs, 1)
        else:
            await comm.Recv(r_msg, self.rank - pairs, 1)
            await comm.Send(s_msg, self.rank - pairs, 1)


class OsuBarrier(OsuBenchmark):
    """demo/osu_barrier.py."""

    def sizes(self):
        return [0]

    async def turn(self, size):
        await self.comm.Barrier()


class OsuBcast(OsuBenchmark):
    """demo/osu_bcast.py: ``Bcast([buf, size, BYTE], 0)``, root's bytes everywhere."""

    async def turn(self, size):
        buf = self.s_buf if self.rank == 0 else self.r_buf
        await self.comm.Bcast([buf, size, ft.BYTE], 0)


class OsuAllgather(OsuBenchmark):
    """demo/osu_allgather.py: ``Allgather(IN_PLACE, [r_buf, size, BYTE])``."""

    async def turn(self, size):
        await self.comm.Allgather(ft.IN_PLACE, [self.r_buf, size, ft.BYTE])


class OsuGather(OsuBenchmark):
    """demo/osu_gather.py: ``IN_PLACE`` at the root, ``None`` as the others' receive."""

    async def turn(self, size):
        if self.rank == 0:
            await self.comm.Gather(ft.IN_PLACE, [self.r_buf, size, ft.BYTE], 0)
        else:
            await self.comm.Gather([self.s_buf, size, ft.BYTE], None, 0)


class OsuScatter(OsuBenchmark):
    """demo/osu_scatter.py: ``IN_PLACE`` at the root, ``None`` as the others' send."""

    async def turn(self, size):
        if self.rank == 0:
            await self.comm.Scatter([self.s_buf, size, ft.BYTE], ft.IN_PLACE, 0)
        else:
            await self.comm.Scatter(None, [self.r_buf, size, ft.BYTE], 0)


class OsuAlltoall(OsuBenchmark):
    """demo/osu_alltoall.py."""

    async def turn(self, size):
        await self.comm.Alltoall([self.s_buf, size, ft.BYTE], [self.r_buf, size, ft.BYTE])


class OsuAlltoallv(OsuBenchmark):
    """demo/osu_alltoallv.py: counts and displacements in ``array.array("i")``."""

    async def turn(self, size):
        n = self.size
        counts = array.array("i", [size] * n)
        displs = array.array("i", [size * i for i in range(n)])
        await self.comm.Alltoallv([self.s_buf, (counts, displs), ft.BYTE],
                                  [self.r_buf, (counts, displs), ft.BYTE])


def comp_pi(n, myrank=0, nprocs=1):
    """demo/compute-pi's midpoint sum."""
    h = 1.0 / n
    s = 0.0
    for i in range(myrank + 1, n + 1, nprocs):
        x = h * (i - 0.5)
        s += 4.0 / (1.0 + x**2)
    return s * h


class ComputePi(ft.Rank):
    """demo/compute-pi/cpi-cco.py: rank 0 reads interval counts (here a list given to
    ``main``, until 0), ``Bcast`` of a 0-d int array, each rank's share, ``Reduce`` of
    0-d double arrays. The loop over the counts is the safe-point loop; the results so
    far are registered."""

    async def main(self, counts=(10, 100, 1000, 10000, 0)):
        comm, nprocs, myrank = self.comm, self.size, self.rank
        n = np.array(0, dtype=int)
        pi = np.array(0, dtype=float)
        mypi = np.array(0, dtype=float)
        printed = []
        self.register("printed", printed)
        async for k in self.iterations(len(counts)):
            if myrank == 0:
                n.fill(counts[k])
            await comm.Bcast([n, ft.INT], root=0)
            if n == 0:
                break
            mypi.fill(comp_pi(int(n), myrank, nprocs))
            await comm.Reduce([mypi, ft.DOUBLE], [pi, ft.DOUBLE], op=ft.SUM, root=0)
            if myrank == 0:
                printed.append("pi is approximately %.16f, error is %.16f"
                               % (pi, abs(pi - PI)))
        return printed


class Ex301(ft.Rank):
    """demo/mpi-ref-v1/ex-3.01.py: the upper triangle of a matrix as an indexed type,
    sent to itself into a zero matrix."""

    async def main(self, N=10):
        a = np.empty((N, N), dtype=float, order="c")
        b = np.zeros((N, N), dtype=float, order="c")
        a.flat = np.arange(a.size, dtype=float)
        i = np.arange(N)
        upper = ft.DOUBLE.Create_indexed(N - i, N * i + i)
        upper.Commit()
        me = self.comm.Get_rank()
        await self.comm.Sendrecv((a, 1, upper), me, 0, [b, 1, upper], me, 0)
        upper.Free()
        return (bool(np.allclose(np.triu(b), np.triu(a)))
                and bool(np.allclose(np.tril(b, -1), np.zeros((N, N)))))


def struct_of_double_and_char():
    """demo/mpi-ref-v1/ex-3.02.py's type, which ex-3.03 to 3.12 build on."""
    return ft.Datatype.Create_struct((1, 1), (0, ft.DOUBLE.size), (ft.DOUBLE, ft.CHAR))


def ex_3_02_to_3_13() -> list[bool]:
    """demo/mpi-ref-v1/ex-3.03 to ex-3.13's asserts on sizes and extents (they build
    types and check them; no message)."""
    dtype = struct_of_double_and_char()
    checks = [dtype.size == ft.DOUBLE.size + ft.CHAR.size, dtype.extent >= dtype.size]
    checks.append(dtype.Create_contiguous(3).extent == dtype.extent * 3)            # 3.04
    checks.append(dtype.Create_vector(2, 3, 4).size == dtype.size * 2 * 3)           # 3.05
    checks.append(dtype.Create_vector(3, 1, -2).size == dtype.size * 3 * 1)          # 3.06
    checks.append(dtype.Create_hvector(2, 3, 4 * dtype.extent).size == dtype.size * 6)  # 3.07
    dtype.Create_indexed((3, 1), (4, 0)).Free()                                       # 3.11
    dtype.Create_hindexed((3, 1), (4 * dtype.extent, 0)).Free()                       # 3.12
    both = ft.Datatype.Create_struct((2, 1, 3), (0, 16, 26),                          # 3.13
                                     (ft.FLOAT, dtype, ft.CHAR))
    checks.append(both.size == 2 * ft.FLOAT.size + dtype.size + 3 * ft.CHAR.size)
    dtype.Free()
    both.Free()
    return checks


class Ex308(ft.Rank):
    """demo/mpi-ref-v1/ex-3.08.py: every other entry of every other column of a
    Fortran-order array (a vector of a vector, by bytes), received as plain DOUBLEs."""

    async def main(self):
        a = np.empty((6, 5), dtype=float, order="f")
        e = np.empty((3, 3), dtype=float, order="f")
        a.flat = np.arange(a.size, dtype=float)
        lb, sizeofdouble = ft.DOUBLE.Get_extent()
        oneslice = ft.DOUBLE.Create_vector(3, 1, 2)
        twoslice = oneslice.Create_hvector(3, 1, 12 * sizeofdouble)
        twoslice.Commit()
        me = self.comm.Get_rank()
        status = ft.Status()
        await self.comm.Sendrecv([a, 1, twoslice], me, 0, (e, ft.DOUBLE), me, 0, status)
        return (bool(np.allclose(a[::2, ::2], e)), status.Get_count(twoslice),
                status.Get_count(ft.DOUBLE) == e.size)


class Ex309(ft.Rank):
    """demo/mpi-ref-v1/ex-3.09.py: a transpose sent to itself (a row type, repeated one
    double further each time); the count is inferred from the buffer."""

    async def main(self):
        a = np.empty((100, 100), dtype=float, order="f")
        b = np.empty((100, 100), dtype=float, order="f")
        a.flat = np.arange(a.size, dtype=float)
        lb, sizeofdouble = ft.DOUBLE.Get_extent()
        row = ft.DOUBLE.Create_vector(100, 1, 100)
        xpose = row.Create_hvector(100, 1, sizeofdouble)
        xpose.Commit()
        me = self.comm.Get_rank()
        status = ft.Status()
        await self.comm.Sendrecv((a, xpose), me, 0, (b, ft.DOUBLE), me, 0, status)
        return (bool(np.allclose(a, b.transpose())), status.Get_count(xpose),
                status.Get_count(ft.DOUBLE) == b.size)


class Counter:
    """demo/nxtval/nxtval-threads.py's shared counter: rank 0 serves ``next`` requests
    from any rank on a duplicate of the communicator, in a thread there and in a task
    here (``await Counter.create(comm)``, as ``Dup`` is a collective that waits)."""

    @classmethod
    async def create(cls, comm):
        self = cls()
        self.comm = await comm.Dup()
        self.task = None
        if self.comm.Get_rank() == 0:
            self.task = asyncio.ensure_future(self._counter_task())
        return self

    async def _counter_task(self):
        incr = array.array("i", [0])
        ival = array.array("i", [0])
        status = ft.Status()
        while True:  # server loop
            await self.comm.Recv([incr, ft.INT], ft.ANY_SOURCE, ft.ANY_TAG, status)
            if status.Get_tag() == 1:
                return
            await self.comm.Ssend([ival, ft.INT], status.Get_source(), 0)
            ival[0] += incr[0]

    async def free(self):
        await self.comm.Barrier()
        if self.task:
            await self.comm.Ssend([None, ft.INT], 0, 1)
            await self.task
            self.task = None
        self.comm.Free()

    async def next(self):
        incr = array.array("i", [1])
        ival = array.array("i", [0])
        await self.comm.Ssend([incr, ft.INT], 0, 0)
        await self.comm.Recv([ival, ft.INT], 0, 0)
        return ival[0]


class Nxtval(ft.Rank):
    """demo/nxtval/nxtval-threads.py's test: five values per rank from the counter;
    together they are 0, 1, 2, ..."""

    async def main(self):
        vals = []
        counter = await Counter.create(self.comm)
        for _ in range(5):
            vals.append(await counter.next())
        await counter.free()
        return await self.comm.allreduce(vals)
