"""mpi4py's test/test_p2p_buf.py for numpy arrays, translated (see the package docstring
for the rules). Buffered sends copy at once, so ``Attach_buffer``/``Detach_buffer`` (and
``Alloc_mem``/``Free_mem``, ``BSEND_OVERHEAD``) are dropped; a polling loop yields between
tests; ``Dup()`` is ``await comm.dup()`` and nothing is freed."""
import itertools

import ftactors as ft

from . import Case, arrayimpl
from .p2p_obj import _yield


class P2PBuf(Case):
    async def testSendrecv(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        dest = (rank + 1) % size
        source = (rank - 1) % size
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s in range(size + 1):
                    with self.subTest(s=s):
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + 1)
                        await self.COMM.Sendrecv(
                            sbuf.as_mpi(), dest, 0, rbuf.as_mpi(), source, 0
                        )
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:-1]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        self.assertEqual(rbuf[-1], check)

    async def testISendrecv(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        dest = (rank + 1) % size
        source = (rank - 1) % size
        await self.COMM.Isendrecv(
            bytearray(1),
            dest,
            0,
            bytearray(1),
            source,
            0,
        ).Wait()
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s in range(size + 1):
                    with self.subTest(s=s):
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + 1)
                        await self.COMM.Isendrecv(
                            sbuf.as_mpi(),
                            dest,
                            0,
                            rbuf.as_mpi(),
                            source,
                            0,
                        ).Wait()
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:-1]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        self.assertEqual(rbuf[-1], check)

    async def testSendrecvReplace(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        dest = (rank + 1) % size
        source = (rank - 1) % size
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s in range(size + 1):
                    with self.subTest(s=s):
                        buf = array(rank, typecode, s)
                        await self.COMM.Sendrecv_replace(
                            buf.as_mpi(), dest, 0, source, 0
                        )
                        check = arrayimpl.scalar(source)
                        for value in buf:
                            self.assertEqual(value, check)

    async def testISendrecvReplace(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        dest = (rank + 1) % size
        source = (rank - 1) % size
        await self.COMM.Isendrecv_replace(
            bytearray(1), dest, 0, source, 0
        ).Wait()
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s in range(size + 1):
                    with self.subTest(s=s):
                        buf = array(rank, typecode, s)
                        await self.COMM.Isendrecv_replace(
                            buf.as_mpi(), dest, 0, source, 0
                        ).Wait()
                        check = arrayimpl.scalar(source)
                        for value in buf:
                            self.assertEqual(value, check)

    async def testSendRecv(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s in range(size + 1):
                    with self.subTest(s=s):
                        #
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s)
                        if size == 1:
                            rbuf = sbuf
                        elif rank == 0:
                            await self.COMM.Ibsend(sbuf.as_mpi(), 1, 0).Wait()
                            await self.COMM.Bsend(sbuf.as_mpi(), 1, 0)
                            await self.COMM.Send(sbuf.as_mpi(), 1, 0)
                            await self.COMM.Ssend(sbuf.as_mpi(), 1, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 1, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 1, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 1, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 1, 0)
                        elif rank == 1:
                            await self.COMM.Recv(rbuf.as_mpi(), 0, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 0, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 0, 0)
                            await self.COMM.Recv(rbuf.as_mpi(), 0, 0)
                            await self.COMM.Ibsend(sbuf.as_mpi(), 0, 0).Wait()
                            await self.COMM.Bsend(sbuf.as_mpi(), 0, 0)
                            await self.COMM.Send(sbuf.as_mpi(), 0, 0)
                            await self.COMM.Ssend(sbuf.as_mpi(), 0, 0)
                        else:
                            rbuf = sbuf
                        check = arrayimpl.scalar(s)
                        for value in rbuf:
                            self.assertEqual(value, check)
                        #
                        rank = self.COMM.Get_rank()
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s)
                        rreq = self.COMM.Irecv(rbuf.as_mpi(), rank, 0)
                        await self.COMM.Rsend(sbuf.as_mpi(), rank, 0)
                        await rreq.Wait()
                        for value in rbuf:
                            self.assertEqual(value, check)
                        rbuf = array(-1, typecode, s)
                        rreq = self.COMM.Irecv(rbuf.as_mpi(), rank, 0)
                        await self.COMM.Irsend(sbuf.as_mpi(), rank, 0).Wait()
                        await rreq.Wait()
                        for value in rbuf:
                            self.assertEqual(value, check)

    async def testProcNull(self):
        comm = self.COMM
        #
        await comm.Sendrecv(None, ft.PROC_NULL, 0, None, ft.PROC_NULL, 0)
        await comm.Sendrecv_replace(None, ft.PROC_NULL, 0, ft.PROC_NULL, 0)
        #
        await comm.Send(None, ft.PROC_NULL)
        await comm.Isend(None, ft.PROC_NULL).Wait()
        #
        await comm.Ssend(None, ft.PROC_NULL)
        await comm.Issend(None, ft.PROC_NULL).Wait()
        #
        await comm.Bsend(None, ft.PROC_NULL)
        await comm.Ibsend(None, ft.PROC_NULL).Wait()
        #
        await comm.Rsend(None, ft.PROC_NULL)
        await comm.Irsend(None, ft.PROC_NULL).Wait()
        #
        await comm.Recv(None, ft.PROC_NULL)
        await comm.Irecv(None, ft.PROC_NULL).Wait()

    async def testProcNullISendrecv(self):
        await self.COMM.Isendrecv(
            None,
            ft.PROC_NULL,
            0,
            None,
            ft.PROC_NULL,
            0,
        ).Wait()
        await self.COMM.Isendrecv_replace(
            None,
            ft.PROC_NULL,
            0,
            ft.PROC_NULL,
            0,
        ).Wait()

    async def testProcNullPersistent(self):
        comm = self.COMM
        #
        req = comm.Send_init(None, ft.PROC_NULL)
        req.Start()
        await req.Wait()
        req.Free()
        #
        req = comm.Ssend_init(None, ft.PROC_NULL)
        req.Start()
        await req.Wait()
        req.Free()
        #
        req = comm.Bsend_init(None, ft.PROC_NULL)
        req.Start()
        await req.Wait()
        req.Free()
        #
        req = comm.Rsend_init(None, ft.PROC_NULL)
        req.Start()
        await req.Wait()
        req.Free()
        #
        req = comm.Recv_init(None, ft.PROC_NULL)
        req.Start()
        await req.Wait()
        req.Free()

    async def testConstructor(self):
        self.skipTest("requests have no handles (tohandle, toint, py2f), copy constructors "
                      "or generalized requests (Grequest)")

    async def testPersistent(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        dest = (rank + 1) % size
        source = (rank - 1) % size
        for array, typecode in arrayimpl.loop():
            with arrayimpl.test(self):
                for s, xs in itertools.product(range(size + 1), range(3)):
                    with self.subTest(s=s, xs=xs):
                        #
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + xs)
                        sendreq = self.COMM.Send_init(sbuf.as_mpi(), dest, 0)
                        recvreq = self.COMM.Recv_init(rbuf.as_mpi(), source, 0)
                        sendreq.Start()
                        recvreq.Start()
                        await sendreq.Wait()
                        await recvreq.Wait()
                        self.assertTrue(sendreq)
                        self.assertTrue(recvreq)
                        sendreq.Free()
                        recvreq.Free()
                        self.assertFalse(sendreq)
                        self.assertFalse(recvreq)
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:s]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        for value in rbuf[s:]:
                            self.assertEqual(value, check)
                        #
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + xs)
                        sendreq = self.COMM.Send_init(sbuf.as_mpi(), dest, 0)
                        recvreq = self.COMM.Recv_init(rbuf.as_mpi(), source, 0)
                        reqlist = [sendreq, recvreq]
                        ft.Prequest.Startall(reqlist)
                        index1 = await ft.Prequest.Waitany(reqlist)
                        self.assertIn(index1, [0, 1])
                        self.assertTrue(reqlist[index1])
                        index2 = await ft.Prequest.Waitany(reqlist)
                        self.assertIn(index2, [0, 1])
                        self.assertTrue(reqlist[index2])
                        self.assertNotEqual(index1, index2)
                        index3 = await ft.Prequest.Waitany(reqlist)
                        self.assertEqual(index3, ft.UNDEFINED)
                        for preq in reqlist:
                            self.assertTrue(preq)
                            preq.Free()
                            self.assertFalse(preq)
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:s]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        for value in rbuf[s:]:
                            self.assertEqual(value, check)
                        #
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + xs)
                        sendreq = self.COMM.Ssend_init(sbuf.as_mpi(), dest, 0)
                        recvreq = self.COMM.Recv_init(rbuf.as_mpi(), source, 0)
                        sendreq.Start()
                        recvreq.Start()
                        await sendreq.Wait()
                        await recvreq.Wait()
                        self.assertTrue(sendreq)
                        self.assertTrue(recvreq)
                        sendreq.Free()
                        recvreq.Free()
                        self.assertFalse(sendreq)
                        self.assertFalse(recvreq)
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:s]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        for value in rbuf[s:]:
                            self.assertEqual(value, check)
                        #
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + xs)
                        sendreq = self.COMM.Bsend_init(sbuf.as_mpi(), dest, 0)
                        recvreq = self.COMM.Recv_init(rbuf.as_mpi(), source, 0)
                        sendreq.Start()
                        recvreq.Start()
                        await sendreq.Wait()
                        await recvreq.Wait()
                        self.assertTrue(sendreq)
                        self.assertTrue(recvreq)
                        sendreq.Free()
                        recvreq.Free()
                        self.assertFalse(sendreq)
                        self.assertFalse(recvreq)
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:s]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        for value in rbuf[s:]:
                            self.assertEqual(value, check)
                        #
                        rank = self.COMM.Get_rank()
                        sbuf = array(s, typecode, s)
                        rbuf = array(-1, typecode, s + xs)
                        recvreq = self.COMM.Recv_init(rbuf.as_mpi(), rank, 0)
                        sendreq = self.COMM.Rsend_init(sbuf.as_mpi(), rank, 0)
                        recvreq.Start()
                        sendreq.Start()
                        await recvreq.Wait()
                        await sendreq.Wait()
                        self.assertTrue(sendreq)
                        self.assertTrue(recvreq)
                        sendreq.Free()
                        recvreq.Free()
                        self.assertFalse(sendreq)
                        self.assertFalse(recvreq)
                        check = arrayimpl.scalar(s)
                        for value in rbuf[:s]:
                            self.assertEqual(value, check)
                        check = arrayimpl.scalar(-1)
                        for value in rbuf[s:]:
                            self.assertEqual(value, check)

    async def testProbe(self):
        comm = await self.COMM.dup()
        request = comm.Issend([None, 0, ft.BYTE], comm.rank, 123)
        self.assertTrue(request)
        status = ft.Status()
        await comm.Probe(ft.ANY_SOURCE, ft.ANY_TAG, status)
        self.assertEqual(status.source, comm.rank)
        self.assertEqual(status.tag, 123)
        self.assertTrue(request)
        flag = request.Test()
        self.assertTrue(request)
        self.assertFalse(flag)
        await comm.Recv([None, 0, ft.BYTE], comm.rank, 123)
        self.assertTrue(request)
        flag = False
        while not flag:
            await _yield()
            flag = request.Test()
        self.assertFalse(request)
        self.assertTrue(flag)

    async def testProbeCancel(self):
        comm = await self.COMM.dup()
        request = comm.Issend([None, 0, ft.BYTE], comm.rank, 123)
        status = ft.Status()
        await comm.Probe(ft.ANY_SOURCE, ft.ANY_TAG, status)
        self.assertEqual(status.source, comm.rank)
        self.assertEqual(status.tag, 123)
        request.Cancel()
        self.assertTrue(request)
        status = ft.Status()
        request.Get_status(status)
        cancelled = status.Is_cancelled()
        if not cancelled:
            await comm.Recv([None, 0, ft.BYTE], comm.rank, 123)
            await request.Wait()
        else:
            request.Free()

    async def testIProbe(self):
        comm = await self.COMM.dup()
        f = comm.Iprobe()
        self.assertFalse(f)
        f = comm.Iprobe(ft.ANY_SOURCE)
        self.assertFalse(f)
        f = comm.Iprobe(ft.ANY_SOURCE, ft.ANY_TAG)
        self.assertFalse(f)
        status = ft.Status()
        f = comm.Iprobe(ft.ANY_SOURCE, ft.ANY_TAG, status)
        self.assertFalse(f)
        self.assertEqual(status.source, ft.ANY_SOURCE)
        self.assertEqual(status.tag, ft.ANY_TAG)
        self.assertEqual(status.error, ft.SUCCESS)


