"""The lowercase parts of mpi4py's test/test_comm.py, translated (see the package
docstring for the rules): size, rank, split and the ``size``/``rank`` properties. The
rest of that file tests what the facade does not have (groups, names, info, Clone,
Compare, Split_type, Create, intercommunicators, pickling a communicator)."""
from . import Case


class CommTests(Case):

    async def testSize(self):
        size = self.COMM.Get_size()
        self.assertGreaterEqual(size, 1)

    async def testRank(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        self.assertGreaterEqual(rank, 0)
        self.assertLess(rank, size)

    async def testSplit(self):
        base = self.COMM
        comm = await base.split(42, 42)
        self.assertEqual(comm.Get_rank(), base.Get_rank())
        self.assertEqual(comm.Get_size(), base.Get_size())
        color = base.Get_rank()
        comm = await base.split(color, 42)
        self.assertEqual(comm.Get_rank(), 0)
        self.assertEqual(comm.Get_size(), 1)

    async def testPyProps(self):
        comm = self.COMM
        self.assertEqual(comm.Get_size(), comm.size)
        self.assertEqual(comm.Get_rank(), comm.rank)
