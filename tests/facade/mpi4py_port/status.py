"""mpi4py's test/test_status.py, translated (see the package docstring for the rules).
``Get_count``/``Get_elements``/``Set_elements`` take an MPI datatype in mpi4py; here a
status counts payload bytes and has no datatypes or elements (the buffer API's)."""
import ftactors as ft

from . import Case

ERR_ARG = 12  # MPI.ERR_ARG: the facade has no error classes; any int stands in


class StatusTests(Case):

    def setUp(self):
        self.STATUS = ft.Status()

    def __init__(self, comm=None):
        super().__init__(comm)
        self.setUp()

    async def testDefaultFieldValues(self):
        self.assertEqual(self.STATUS.Get_source(), ft.ANY_SOURCE)
        self.assertEqual(self.STATUS.Get_tag(), ft.ANY_TAG)
        self.assertEqual(self.STATUS.Get_error(), ft.SUCCESS)

    async def testGetCount(self):
        count = self.STATUS.Get_count()
        self.assertEqual(count, 0)

    async def testGetElements(self):
        self.skipTest("Get_elements(datatype): no datatypes in the object API")

    async def testSetElements(self):
        self.skipTest("Set_elements(datatype, n): no datatypes in the object API")

    async def testIsCancelled(self):
        flag = self.STATUS.Is_cancelled()
        self.assertIs(type(flag), bool)
        self.assertFalse(flag)

    async def testSetCancelled(self):
        self.STATUS.Set_cancelled(True)
        flag = self.STATUS.Is_cancelled()
        self.assertTrue(flag)

    async def testPyProps(self):
        self.assertEqual(self.STATUS.Get_source(), self.STATUS.source)
        self.assertEqual(self.STATUS.Get_tag(), self.STATUS.tag)
        self.assertEqual(self.STATUS.Get_error(), self.STATUS.error)
        self.STATUS.source = 1
        self.STATUS.tag = 2
        self.STATUS.error = ERR_ARG
        self.assertEqual(self.STATUS.source, 1)
        self.assertEqual(self.STATUS.tag, 2)
        self.assertEqual(self.STATUS.error, ERR_ARG)
        self.assertIs(type(self.STATUS.count), int)
        self.assertEqual(self.STATUS.count, 0)
        self.STATUS.count = 7
        self.assertEqual(self.STATUS.count, 7)
        self.STATUS.count = 0
        self.assertIs(type(self.STATUS.cancelled), bool)
        self.assertFalse(self.STATUS.cancelled)
        self.STATUS.cancelled = True
        self.assertTrue(self.STATUS.cancelled)
        self.STATUS.cancelled = False

    async def testConstructor(self):
        self.assertRaises(TypeError, ft.Status, 123)
        self.assertRaises(TypeError, ft.Status, "abc")

    async def testCopyConstructor(self):
        self.STATUS.source = 1
        self.STATUS.tag = 2
        self.STATUS.error = ERR_ARG
        status = ft.Status(self.STATUS)
        self.assertEqual(status.source, 1)
        self.assertEqual(status.tag, 2)
        self.assertEqual(status.error, ERR_ARG)
        self.STATUS.count = 7  # mpi4py: Set_elements(MPI.BYTE, 7)
        self.STATUS.Set_cancelled(True)
        status = ft.Status(self.STATUS)
        count = status.Get_count()
        self.assertEqual(count, 7)
        flag = status.Is_cancelled()
        self.assertTrue(flag)

    async def testPickle(self):
        from pickle import dumps, loads

        self.STATUS.source = 1
        self.STATUS.tag = 2
        self.STATUS.error = ERR_ARG
        status = loads(dumps(self.STATUS))
        self.assertEqual(status.source, 1)
        self.assertEqual(status.tag, 2)
        self.assertEqual(status.error, ERR_ARG)

    async def testToMemory(self):
        self.skipTest("Status.tomemory() exposes MPI_Status's C memory; a status here is "
                      "a Python object")
