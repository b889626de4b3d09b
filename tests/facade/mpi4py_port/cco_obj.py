"""mpi4py's test/test_cco_obj.py, translated (see the package docstring for the rules);
``test_nonblocking*`` at the end run the same bodies through the facade's nonblocking
collectives (mpi4py has no object tests of those)."""
import operator
from functools import reduce

import ftactors as ft

from . import Case


def cumsum(seq):
    return reduce(operator.add, seq, 0)


def cumprod(seq):
    return reduce(operator.mul, seq, 1)


_basic = [
    None,
    True,
    False,
    -7,
    0,
    7,
    2**31,
    -(2**63) + 1,
    2**63 - 1,
    -2.17,
    0.0,
    +1.62,
    1 + 2j,
    2 - 3j,
    "mpi4py",
]
messages = [
    *_basic,
    list(_basic),
    tuple(_basic),
    {f"k{k}": v for k, v in enumerate(_basic)},
]

OPS = (ft.SUM, ft.PROD, ft.MAX, ft.MIN, ft.MAXLOC, ft.MINLOC, ft.REPLACE, ft.NO_OP)


class CCOObj(Case):

    async def testBarrier(self):
        await self.COMM.barrier()

    async def testBcast(self):
        for smess in messages:
            for root in range(self.COMM.Get_size()):
                rmess = await self.COMM.bcast(smess, root=root)
                self.assertEqual(smess, rmess)

    async def testGather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for smess in [*messages, messages]:
            for root in range(size):
                rmess = await self.COMM.gather(smess, root=root)
                if rank == root:
                    self.assertEqual(rmess, [smess] * size)
                else:
                    self.assertIsNone(rmess)

    async def testScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for smess in [*messages, messages]:
            for root in range(size):
                if rank == root:
                    rmess = await self.COMM.scatter([smess] * size, root=root)
                else:
                    rmess = await self.COMM.scatter(None, root=root)
                self.assertEqual(rmess, smess)

    async def testAllgather(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for smess in [*messages, messages]:
            rmess = await self.COMM.allgather(smess)
            self.assertEqual(rmess, [smess] * size)

    async def testAlltoall(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for smess in [*messages, messages]:
            rmess = await self.COMM.alltoall([smess] * size)
            self.assertEqual(rmess, [smess] * size)

    async def testReduce(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for root in range(size):
            for op in OPS:
                if op in (ft.MAXLOC, ft.MINLOC):
                    sendobj = (rank, rank)
                else:
                    sendobj = rank
                value = await self.COMM.reduce(sendobj, op=op, root=root)
                if rank != root:
                    self.assertIsNone(value)
                else:
                    assert value is not None
                    if op == ft.SUM:
                        self.assertEqual(value, cumsum(range(size)))
                    elif op == ft.PROD:
                        self.assertEqual(value, cumprod(range(size)))
                    elif op == ft.MAX:
                        self.assertEqual(value, size - 1)
                    elif op == ft.MIN:
                        self.assertEqual(value, 0)
                    elif op == ft.MAXLOC:
                        self.assertEqual(value[0], size - 1)
                        self.assertEqual(value[1], size - 1)
                    elif op == ft.MINLOC:
                        self.assertEqual(value[0], 0)
                        self.assertEqual(value[1], 0)
                    elif op == ft.REPLACE:
                        self.assertEqual(value, size - 1)
                    elif op == ft.NO_OP:
                        self.assertEqual(value, 0)
        badroots = {-size, size}
        for root in badroots:
            # mpi4py: MPI.Exception with error class MPI.ERR_ROOT; here a ValueError
            with self.assertRaises(ValueError) as cm:
                await self.COMM.reduce(None, op=ft.NO_OP, root=root)
            self.assertIn(f"root {root}", str(cm.exception))

    async def testAllreduce(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for op in OPS:
            if op in (ft.MAXLOC, ft.MINLOC):
                sendobj = (rank, rank)
            else:
                sendobj = rank
            value = await self.COMM.allreduce(sendobj, op)
            if op == ft.SUM:
                self.assertEqual(value, cumsum(range(size)))
            elif op == ft.PROD:
                self.assertEqual(value, cumprod(range(size)))
            elif op == ft.MAX:
                self.assertEqual(value, size - 1)
            elif op == ft.MIN:
                self.assertEqual(value, 0)
            elif op == ft.MAXLOC:
                self.assertEqual(value[1], size - 1)
            elif op == ft.MINLOC:
                self.assertEqual(value[1], 0)
            elif op == ft.REPLACE:
                self.assertEqual(value, size - 1)
            elif op == ft.NO_OP:
                self.assertEqual(value, 0)

    async def testScan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        # --
        sscan = await self.COMM.scan(size, op=ft.SUM)
        self.assertEqual(sscan, cumsum([size] * (rank + 1)))
        # --
        rscan = await self.COMM.scan(rank, op=ft.SUM)
        self.assertEqual(rscan, cumsum(range(rank + 1)))
        # --
        minloc = await self.COMM.scan((rank, rank), op=ft.MINLOC)
        maxloc = await self.COMM.scan((rank, rank), op=ft.MAXLOC)
        self.assertEqual(minloc, (0, 0))
        self.assertEqual(maxloc, (rank, rank))
        # --
        rscan = await self.COMM.scan(rank, op=ft.REPLACE)
        self.assertEqual(rscan, rank)
        # --
        rscan = await self.COMM.scan(rank, op=ft.NO_OP)
        self.assertEqual(rscan, 0)

    async def testExscan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        # --
        sscan = await self.COMM.exscan(size, op=ft.SUM)
        if rank == 0:
            self.assertIsNone(sscan)
        else:
            self.assertEqual(sscan, cumsum([size] * (rank)))
        # --
        rscan = await self.COMM.exscan(rank, op=ft.SUM)
        if rank == 0:
            self.assertIsNone(sscan)
        else:
            self.assertEqual(rscan, cumsum(range(rank)))
        # --
        minloc = await self.COMM.exscan((rank, rank), op=ft.MINLOC)
        maxloc = await self.COMM.exscan((rank, rank), op=ft.MAXLOC)
        if rank == 0:
            self.assertIsNone(minloc)
            self.assertIsNone(maxloc)
        else:
            self.assertEqual(minloc, (0, 0))
            self.assertEqual(maxloc, (rank - 1, rank - 1))
        # --
        rscan = await self.COMM.exscan(rank, op=ft.REPLACE)
        if rank == 0:
            self.assertIsNone(rscan)
        else:
            self.assertEqual(rscan, rank - 1)
        # --
        rscan = await self.COMM.exscan(rank, op=ft.NO_OP)
        if rank == 0:
            self.assertIsNone(rscan)
        else:
            self.assertEqual(rscan, 0)


class _Nonblocking:
    """A communicator whose collectives start the facade's nonblocking form and wait for
    its request, so CCOObj's bodies check ``ibcast``, ``igather``, ... as they stand."""

    def __init__(self, comm):
        self._comm = comm

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def _nb(self, name):
        async def call(*args, **kwargs):
            req = getattr(self._comm, "i" + name)(*args, **kwargs)
            assert req, f"i{name} gave a request that is not active"
            return await req.wait()
        return call

    def __getattribute__(self, name):
        if name in ("barrier", "bcast", "reduce", "allreduce", "gather", "scatter",
                    "allgather", "alltoall"):
            return object.__getattribute__(self, "_nb")(name)
        return object.__getattribute__(self, name)


class CCOObjNonblocking(CCOObj):
    """CCOObj's collective bodies through ibarrier, ibcast, ireduce, iallreduce, igather,
    iscatter, iallgather and ialltoall (scan and exscan have no lowercase nonblocking
    form in mpi4py)."""

    def __init__(self, comm=None):
        super().__init__(None if comm is None else _Nonblocking(comm))
