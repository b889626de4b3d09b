"""mpi4py's test/test_request.py, translated (see the package docstring for the rules).
``ft.Request()`` is mpi4py's ``MPI.Request()``: a null request, false and complete. The
``Get_status_any/all/some`` calls (MPI 4.1) are not in the facade."""
import ftactors as ft

from . import Case

ERR_OTHER = 15  # MPI.ERR_OTHER: any int stands in


class RequestTests(Case):

    def __init__(self, comm=None):
        super().__init__(comm)
        self.REQUEST = ft.Request()
        self.STATUS = ft.Status()

    async def testWait(self):
        await self.REQUEST.Wait()
        await self.REQUEST.Wait(None)
        await self.REQUEST.Wait(self.STATUS)
        self.assertIs(await self.REQUEST.Wait(), True)
        await self.REQUEST.wait()
        await self.REQUEST.wait(None)
        await self.REQUEST.wait(self.STATUS)
        self.assertIsNone(await self.REQUEST.wait())

    async def testTest(self):
        self.REQUEST.Test()
        self.REQUEST.Test(None)
        self.REQUEST.Test(self.STATUS)
        self.assertIs(self.REQUEST.Test(), True)
        self.REQUEST.test()
        self.REQUEST.test(None)
        self.REQUEST.test(self.STATUS)
        self.assertEqual(self.REQUEST.test(), (True, None))

    async def testGetStatus(self):
        flag = self.REQUEST.Get_status()
        self.assertTrue(flag)
        flag = self.REQUEST.Get_status(self.STATUS)
        self.assertTrue(flag)
        self.assertEqual(self.STATUS.Get_source(), ft.ANY_SOURCE)
        self.assertEqual(self.STATUS.Get_tag(), ft.ANY_TAG)
        self.assertEqual(self.STATUS.Get_error(), ft.SUCCESS)
        self.assertEqual(self.STATUS.Get_count(), 0)
        self.assertFalse(self.STATUS.Is_cancelled())
        flag = self.REQUEST.get_status()
        self.assertTrue(flag)
        flag = self.REQUEST.get_status(self.STATUS)
        self.assertTrue(flag)
        self.assertEqual(self.STATUS.source, ft.ANY_SOURCE)
        self.assertEqual(self.STATUS.tag, ft.ANY_TAG)
        self.assertEqual(self.STATUS.error, ft.SUCCESS)


class RequestArrayTests(Case):

    def __init__(self, comm=None):
        super().__init__(comm)
        self.REQUESTS = [ft.Request() for i in range(5)]
        self.STATUSES = [ft.Status() for i in range(5)]
        self.STATUS = self.STATUSES[0]
        for status in self.STATUSES:
            status.source = 0
            status.tag = 0
            status.error = ERR_OTHER

    async def testWaitany(self):
        R = ft.Request
        await R.Waitany(self.REQUESTS)
        await R.Waitany(self.REQUESTS, None)
        await R.Waitany(self.REQUESTS, self.STATUSES[0])
        await R.waitany(self.REQUESTS)
        await R.waitany(self.REQUESTS, None)
        await R.waitany(self.REQUESTS, self.STATUSES[0])

    async def testTestany(self):
        R = ft.Request
        R.Testany(self.REQUESTS)
        R.Testany(self.REQUESTS, None)
        R.Testany(self.REQUESTS, self.STATUSES[0])
        R.testany(self.REQUESTS)
        R.testany(self.REQUESTS, None)
        R.testany(self.REQUESTS, self.STATUSES[0])

    async def testGetStatusAny(self):
        self.skipTest("Request.Get_status_any (MPI 4.1) is not in the facade")

    async def testWaitall(self):
        R = ft.Request
        await R.Waitall(self.REQUESTS)
        await R.Waitall(self.REQUESTS, None)
        self.assertIs(await R.Waitall(self.REQUESTS), True)
        for statuses in (tuple(self.STATUSES), (self.STATUSES[0],), ()):
            await R.Waitall(self.REQUESTS, statuses)
        for statuses in (self.STATUSES, []):
            await R.Waitall(self.REQUESTS, statuses)
            self.assertEqual(len(statuses), len(self.REQUESTS))
        await R.waitall(self.REQUESTS)
        await R.waitall(self.REQUESTS, None)
        for statuses in (self.STATUSES, []):
            await R.waitall(self.REQUESTS, statuses)
            self.assertEqual(len(statuses), len(self.REQUESTS))

    async def testTestall(self):
        R = ft.Request
        R.Testall(self.REQUESTS)
        R.Testall(self.REQUESTS, None)
        self.assertIs(R.Testall(self.REQUESTS), True)
        for statuses in (self.STATUSES, []):
            R.Testall(self.REQUESTS, statuses)
            self.assertEqual(len(statuses), len(self.REQUESTS))
        R.testall(self.REQUESTS)
        R.testall(self.REQUESTS, None)
        for statuses in (self.STATUSES, []):
            R.testall(self.REQUESTS, statuses)
            self.assertEqual(len(statuses), len(self.REQUESTS))

    async def testGetStatusAll(self):
        self.skipTest("Request.Get_status_all (MPI 4.1) is not in the facade")

    async def testWaitsome(self):
        R = ft.Request
        ret = await R.Waitsome(self.REQUESTS)
        self.assertIsNone(ret)
        ret = await R.Waitsome(self.REQUESTS, None)
        self.assertIsNone(ret)
        for statuses in (self.STATUSES, []):
            slen = len(statuses)
            ret = await R.Waitsome(self.REQUESTS, statuses)
            self.assertIsNone(ret)
            self.assertEqual(len(statuses), slen)

    async def testTestsome(self):
        R = ft.Request
        ret = R.Testsome(self.REQUESTS)
        self.assertIsNone(ret)
        ret = R.Testsome(self.REQUESTS, None)
        self.assertIsNone(ret)
        for statuses in (self.STATUSES, []):
            slen = len(statuses)
            ret = R.Testsome(self.REQUESTS, statuses)
            self.assertIsNone(ret)
            self.assertEqual(len(statuses), slen)

    async def testGetStatusSome(self):
        self.skipTest("Request.Get_status_some (MPI 4.1) is not in the facade")
