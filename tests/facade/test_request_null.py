"""``ft.REQUEST_NULL`` and the other names ports of mpi4py's demos need (issue 40,
item 7), against mpi4py's documented behaviour: the null request is false, completes
at once with an empty status, is taken as complete by Waitall/Testall and skipped by
Waitany/Testany/Waitsome/Testsome (all null: UNDEFINED, None); a request compares equal
to it once completed (a persistent one once freed), as mpi4py's handle becomes
MPI_REQUEST_NULL; ``Intracomm(comm)`` is another handle to ``comm``;
``Get_attr(TAG_UB)``; ``Attach_buffer``/``Detach_buffer``."""
import asyncio

import numpy as np
import pytest

import ftactors as ft


def test_the_null_request_is_false_and_complete_with_an_empty_status():
    async def body():
        null, st = ft.REQUEST_NULL, ft.Status()
        st.source, st.tag = 3, 4
        assert not null and null == ft.Request() and null == null
        assert await null.Wait(st) is True and (st.source, st.tag) == (ft.ANY_SOURCE, ft.ANY_TAG)
        assert await null.wait() is None and null.test() == (True, None)
        assert null.Test() is True and null.Get_status() is True
        nulls = [ft.REQUEST_NULL] * 3
        assert await ft.Request.Waitall(nulls) is True and ft.Request.Testall(nulls) is True
        assert await ft.Request.Waitany(nulls) == ft.UNDEFINED
        assert ft.Request.Testany(nulls) == (ft.UNDEFINED, True)
        assert await ft.Request.Waitsome(nulls) is None and ft.Request.Testsome(nulls) is None
        assert not ft.REQUEST_NULL  # nothing above changed the shared null request
    asyncio.run(body())


class Window(ft.Rank):
    """osu_bw's window: a list of REQUEST_NULL filled with requests one by one, some
    left null; then the requests compare equal to REQUEST_NULL once complete."""

    async def main(self):
        comm, peer = self.comm, 1 - self.rank
        reqs = [ft.REQUEST_NULL] * 4
        buf = np.zeros(3)
        if self.rank == 0:
            reqs[1] = comm.Isend(np.arange(3.0), peer, 1)
            reqs[3] = comm.Isend(np.arange(3.0) + 1, peer, 2)
        else:
            reqs[0] = comm.Irecv(buf, peer, 2)
        active = [r != ft.REQUEST_NULL for r in reqs]
        index = await ft.Request.Waitany(reqs)
        await ft.Request.Waitall(reqs)
        if self.rank == 1:
            await comm.Recv(np.zeros(3), peer, 1)
        persistent = comm.Send_init(np.zeros(1), peer, 9)
        persistent.Start()
        await persistent.Wait()
        kept = persistent != ft.REQUEST_NULL  # inactive, not null: it can start again
        persistent.Free()
        await comm.Recv(np.zeros(1), peer, 9)
        return (active, index, [r == ft.REQUEST_NULL for r in reqs], kept,
                persistent == ft.REQUEST_NULL, buf.tolist())


def test_requests_become_equal_to_request_null_as_they_complete():
    first, second = ft.run(Window, 2, transport="local").results
    assert first == ([False, True, False, True], 1, [True] * 4, True, True, [0.0] * 3)
    assert second == ([True, False, False, False], 0, [True] * 4, True, True, [1, 2, 3])


class Handles(ft.Rank):
    async def main(self):
        comm = ft.Intracomm(self.comm)
        ft.Attach_buffer(bytearray(10 + ft.BSEND_OVERHEAD))
        with pytest.raises(RuntimeError, match="attached already"):
            ft.Attach_buffer(bytearray(1))
        await asyncio.sleep(0)  # the other rank attaches its own meanwhile
        detached = ft.Detach_buffer()
        ft.Pcontrol(0)
        return (type(comm) is ft.Communicator, comm.Get_rank(), comm.Get_size(),
                await comm.allreduce(self.rank + 1), comm.Get_attr(ft.TAG_UB) == ft.TAG_UB,
                comm.Get_attr(12345), len(detached), ft.Detach_buffer())


def test_intracomm_get_attr_and_the_attached_buffer_of_each_rank():
    assert ft.run(Handles, 2, transport="local").results == [
        (True, r, 2, 3, True, None, 10, None) for r in range(2)]
