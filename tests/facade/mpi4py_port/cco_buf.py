"""mpi4py's test/test_cco_buf.py for numpy arrays, translated (see the package docstring for
the rules)."""
from functools import reduce
from itertools import product as it_product
from operator import mul

import ftactors as ft

from . import Case, arrayimpl


def prod(sequence, start=1):
    return reduce(mul, sequence, start)


def skip_op(typecode, op):
    if typecode == "?":
        return True
    if typecode in "FDG":
        if op in (ft.MAX, ft.MIN):
            return True
    return False


def maxvalue(a):
    try:
        typecode = a.typecode
    except AttributeError:
        typecode = a.dtype.char
    if typecode == ("f"):
        return 1e30
    elif typecode == ("d"):
        return 1e300
    else:
        return 2 ** (a.itemsize * 7) - 1


class CCOBuf(Case):
    async def testBarrier(self):
        await self.COMM.Barrier()

    async def testBcast(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                if rank == root:
                    buf = array(root, typecode, root)
                else:
                    buf = array(-1, typecode, root)
                await self.COMM.Bcast(buf.as_mpi(), root=root)
                for value in buf:
                    self.assertEqual(value, check)

    async def testGather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                sbuf = array(root, typecode, root + 1)
                if rank == root:
                    rbuf = array(-1, typecode, (size, root + 1))
                else:
                    rbuf = array([], typecode)
                await self.COMM.Gather(sbuf.as_mpi(), rbuf.as_mpi(), root=root)
                if rank == root:
                    for value in rbuf.flat:
                        self.assertEqual(value, check)

    async def testScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                rbuf = array(-1, typecode, size)
                if rank == root:
                    sbuf = array(root, typecode, (size, size))
                else:
                    sbuf = array([], typecode)
                await self.COMM.Scatter(sbuf.as_mpi(), rbuf.as_mpi(), root=root)
                for value in rbuf:
                    self.assertEqual(value, check)

    async def testAllgather(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                sbuf = array(root, typecode, root + 1)
                rbuf = array(-1, typecode, (size, root + 1))
                await self.COMM.Allgather(sbuf.as_mpi(), rbuf.as_mpi())
                for value in rbuf.flat:
                    self.assertEqual(value, check)

    async def testAlltoall(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                sbuf = array(root, typecode, (size, root + 1))
                rbuf = array(-1, typecode, (size, root + 1))
                await self.COMM.Alltoall(sbuf.as_mpi(), rbuf.as_mpi_c(root + 1))
                for value in rbuf.flat:
                    self.assertEqual(value, check)

    async def testReduce(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                for root in range(size):
                    sbuf = array(range(size), typecode)
                    rbuf = array(-1, typecode, size)
                    await self.COMM.Reduce(sbuf.as_mpi(), rbuf.as_mpi(), op, root)
                    max_val = maxvalue(rbuf)
                    for i, value in enumerate(rbuf):
                        if rank != root:
                            check = arrayimpl.scalar(-1)
                            self.assertEqual(value, check)
                            continue
                        if op == ft.SUM:
                            if (i * size) < max_val:
                                self.assertAlmostEqual(value, i * size)
                        elif op == ft.PROD:
                            if (i**size) < max_val:
                                self.assertAlmostEqual(value, i**size)
                        elif op == ft.MAX:
                            self.assertEqual(value, i)
                        elif op == ft.MIN:
                            self.assertEqual(value, i)

    async def testAllreduce(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                sbuf = array(range(size), typecode)
                rbuf = array(0, typecode, size)
                await self.COMM.Allreduce(sbuf.as_mpi(), rbuf.as_mpi(), op)
                max_val = maxvalue(rbuf)
                for i, value in enumerate(rbuf):
                    if op == ft.SUM:
                        if (i * size) < max_val:
                            self.assertAlmostEqual(value, i * size)
                    elif op == ft.PROD:
                        if (i**size) < max_val:
                            self.assertAlmostEqual(value, i**size)
                    elif op == ft.MAX:
                        self.assertEqual(value, i)
                    elif op == ft.MIN:
                        self.assertEqual(value, i)

    async def testReduceScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                rcnt = list(range(1, size + 1))
                sbuf = array([rank + 1] * sum(rcnt), typecode)
                rbuf = array(-1, typecode, rank + 1)
                await self.COMM.Reduce_scatter(
                    sbuf.as_mpi(), rbuf.as_mpi(), None, op
                )
                max_val = maxvalue(rbuf)
                for value in rbuf:
                    if op == ft.SUM:
                        redval = sum(range(size)) + size
                        if redval < max_val:
                            self.assertAlmostEqual(value, redval)
                    elif op == ft.PROD:
                        redval = prod(range(1, size + 1))
                        if redval < max_val:
                            self.assertAlmostEqual(value, redval)
                    elif op == ft.MAX:
                        self.assertEqual(value, size)
                    elif op == ft.MIN:
                        self.assertEqual(value, 1)
                rbuf = array(-1, typecode, rank + 1)
                await self.COMM.Reduce_scatter(
                    sbuf.as_mpi(), rbuf.as_mpi(), rcnt, op
                )
                max_val = maxvalue(rbuf)
                for value in rbuf:
                    if op == ft.SUM:
                        redval = sum(range(size)) + size
                        if redval < max_val:
                            self.assertAlmostEqual(value, redval)
                    elif op == ft.PROD:
                        redval = prod(range(1, size + 1))
                        if redval < max_val:
                            self.assertAlmostEqual(value, redval)
                    elif op == ft.MAX:
                        self.assertEqual(value, size)
                    elif op == ft.MIN:
                        self.assertEqual(value, 1)

    async def testReduceScatterBlock(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                for rcnt in range(1, size + 1):
                    if op == ft.PROD:
                        sbuf = array([rank + 1] * rcnt * size, typecode)
                    else:
                        sbuf = array([rank] * rcnt * size, typecode)
                    rbuf = array(-1, typecode, rcnt)
                    await self.COMM.Reduce_scatter_block(
                        sbuf.as_mpi(), rbuf.as_mpi(), op
                    )
                    max_val = maxvalue(rbuf)
                    v_sum = (size * (size - 1)) / 2
                    v_prod = 1
                    for i in range(1, size + 1):
                        v_prod *= i
                    v_max = size - 1
                    v_min = 0
                    for value in rbuf:
                        if op == ft.SUM:
                            if v_sum <= max_val:
                                self.assertAlmostEqual(value, v_sum)
                        elif op == ft.PROD:
                            if v_prod <= max_val:
                                self.assertAlmostEqual(value, v_prod)
                        elif op == ft.MAX:
                            self.assertEqual(value, v_max)
                        elif op == ft.MIN:
                            self.assertEqual(value, v_min)

    async def testScan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        # --
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                sbuf = array(range(size), typecode)
                rbuf = array(0, typecode, size)
                await self.COMM.Scan(sbuf.as_mpi(), rbuf.as_mpi(), op)
                max_val = maxvalue(rbuf)
                for i, value in enumerate(rbuf):
                    if op == ft.SUM:
                        if (i * (rank + 1)) < max_val:
                            self.assertAlmostEqual(value, i * (rank + 1))
                    elif op == ft.PROD:
                        if (i ** (rank + 1)) < max_val:
                            self.assertAlmostEqual(value, i ** (rank + 1))
                    elif op == ft.MAX:
                        self.assertEqual(value, i)
                    elif op == ft.MIN:
                        self.assertEqual(value, i)

    async def testExscan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                sbuf = array(range(size), typecode)
                rbuf = array(0, typecode, size)
                try:
                    await self.COMM.Exscan(sbuf.as_mpi(), rbuf.as_mpi(), op)
                except NotImplementedError:
                    self.skipTest("mpi-exscan")
                if rank == 1:
                    for i, value in enumerate(rbuf):
                        self.assertEqual(value, i)
                elif rank > 1:
                    max_val = maxvalue(rbuf)
                    for i, value in enumerate(rbuf):
                        if op == ft.SUM:
                            if (i * rank) < max_val:
                                self.assertAlmostEqual(value, i * rank)
                        elif op == ft.PROD:
                            if (i**rank) < max_val:
                                self.assertAlmostEqual(value, i**rank)
                        elif op == ft.MAX:
                            self.assertEqual(value, i)
                        elif op == ft.MIN:
                            self.assertEqual(value, i)

    async def testBcastTypeIndexed(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            datatype = array.TypeMap[typecode]
            for root in range(size):
                #
                if rank == root:
                    buf = array(range(10), typecode).as_raw()
                else:
                    buf = array(-1, typecode, 10).as_raw()
                indices = list(range(0, len(buf), 2))
                newtype = datatype.Create_indexed_block(1, indices)
                newtype.Commit()
                newbuf = (buf, 1, newtype)
                await self.COMM.Bcast(newbuf, root=root)
                newtype.Free()
                if rank != root:
                    for i, value in enumerate(buf):
                        check = arrayimpl.scalar(-1 if (i % 2) else i)
                        self.assertEqual(value, check)
                #
                if rank == root:
                    buf = array(range(10), typecode).as_raw()
                else:
                    buf = array(-1, typecode, 10).as_raw()
                indices = list(range(1, len(buf), 2))
                newtype = datatype.Create_indexed_block(1, indices)
                newtype.Commit()
                newbuf = (buf, 1, newtype)
                await self.COMM.Bcast(newbuf, root)
                newtype.Free()
                if rank != root:
                    for i, value in enumerate(buf):
                        check = arrayimpl.scalar(-1 if not (i % 2) else i)
                        self.assertEqual(value, check)


class CCOBufInplace(Case):
    async def testGather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for mode, root, count in it_product(
                range(2), range(size), range(1, 10)
            ):
                check = arrayimpl.scalar(root)
                if rank == root:
                    buf = array(-1, typecode, (size, count))
                    s, e = rank * count, (rank + 1) * count
                    for i in range(s, e):
                        buf.flat[i] = check
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None][mode]
                else:
                    buf = array(root, typecode, count)
                    sbuf = buf.as_mpi()
                    rbuf = None
                await self.COMM.Gather(sbuf, rbuf, root=root)
                for value in buf.flat:
                    self.assertEqual(value, check)

    async def testScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for mode, root, count in it_product(
                range(2), range(size), range(1, 10)
            ):
                check = arrayimpl.scalar(root)
                if rank == root:
                    buf = array(root, typecode, (size, count))
                    sbuf = buf.as_mpi()
                    rbuf = [ft.IN_PLACE, None][mode]
                else:
                    buf = array(-1, typecode, count)
                    sbuf = None
                    rbuf = buf.as_mpi()
                await self.COMM.Scatter(sbuf, rbuf, root=root)
                for value in buf.flat:
                    self.assertEqual(value, check)

    async def testAllgather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for mode, count in it_product(range(2), range(1, 10)):
                check = arrayimpl.scalar(count)
                buf = array(-1, typecode, (size, count))
                s, e = rank * count, (rank + 1) * count
                for i in range(s, e):
                    buf.flat[i] = check
                sbuf = [ft.IN_PLACE, None][mode]
                await self.COMM.Allgather(sbuf, buf.as_mpi())
                for value in buf.flat:
                    self.assertEqual(value, check)

    async def testAlltoall(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for mode, count in it_product(range(2), range(1, 10)):
                buf = array(rank, typecode, (size, count))
                rbuf = buf.as_mpi()
                sbuf = [ft.IN_PLACE, None][mode]
                await self.COMM.Alltoall(sbuf, rbuf)
                for i, value in enumerate(buf.flat):
                    check = arrayimpl.scalar(i // count)
                    self.assertEqual(value, check)

    async def testReduce(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                for mode, root in it_product(range(3), range(size)):
                    if rank == root:
                        buf = array(range(size), typecode)
                        rbuf = buf.as_mpi()
                        sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    else:
                        buf = array(range(size), typecode)
                        buf2 = array(range(size), typecode)
                        sbuf = buf.as_mpi()
                        rbuf = buf2.as_mpi()
                    await self.COMM.Reduce(sbuf, rbuf, op, root)
                    if rank == root:
                        max_val = maxvalue(buf)
                        for i, value in enumerate(buf):
                            if op == ft.SUM:
                                if (i * size) < max_val:
                                    self.assertAlmostEqual(value, i * size)
                            elif op == ft.PROD:
                                if (i**size) < max_val:
                                    self.assertAlmostEqual(value, i**size)
                            elif op == ft.MAX:
                                self.assertEqual(value, i)
                            elif op == ft.MIN:
                                self.assertEqual(value, i)

    async def testAllreduce(self):
        size = self.COMM.Get_size()
        self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                for mode in range(3):
                    buf = array(range(size), typecode)
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    await self.COMM.Allreduce(sbuf, rbuf, op)
                    max_val = maxvalue(buf)
                    for i, value in enumerate(buf):
                        if op == ft.SUM:
                            if (i * size) < max_val:
                                self.assertAlmostEqual(value, i * size)
                        elif op == ft.PROD:
                            if (i**size) < max_val:
                                self.assertAlmostEqual(value, i**size)
                        elif op == ft.MAX:
                            self.assertEqual(value, i)
                        elif op == ft.MIN:
                            self.assertEqual(value, i)

    async def testReduceScatterBlock(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                for mode, rcnt in it_product(range(2), range(size)):
                    if op == ft.PROD:
                        buf = array([rank + 1] * rcnt * size, typecode)
                    else:
                        buf = array([rank] * rcnt * size, typecode)
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    await self.COMM.Reduce_scatter_block(sbuf, rbuf, op)
                    max_val = maxvalue(buf)
                    for i, value in enumerate(buf):
                        if i >= rcnt:
                            if op == ft.PROD:
                                self.assertEqual(value, rank + 1)
                            else:
                                self.assertEqual(value, rank)
                        else:
                            if op == ft.SUM:
                                redval = sum(range(size))
                                if redval < max_val:
                                    self.assertAlmostEqual(value, redval)
                            elif op == ft.PROD:
                                redval = prod(range(1, size + 1))
                                if redval < max_val:
                                    self.assertAlmostEqual(value, redval)
                            elif op == ft.MAX:
                                self.assertEqual(value, size - 1)
                            elif op == ft.MIN:
                                self.assertEqual(value, 0)

    async def testReduceScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.MAX, ft.MIN, ft.PROD):
                if skip_op(typecode, op):
                    continue
                for mode in range(3):
                    rcnt = list(range(1, size + 1))
                    if op == ft.PROD:
                        buf = array([rank + 1] * sum(rcnt), typecode)
                    else:
                        buf = array([rank] * sum(rcnt), typecode)
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    await self.COMM.Reduce_scatter(sbuf, rbuf, rcnt, op)
                    max_val = maxvalue(buf)
                    for i, value in enumerate(buf):
                        if i >= rcnt[rank]:
                            if op == ft.PROD:
                                self.assertEqual(value, rank + 1)
                            else:
                                self.assertEqual(value, rank)
                        else:
                            if op == ft.SUM:
                                redval = sum(range(size))
                                if redval < max_val:
                                    self.assertAlmostEqual(value, redval)
                            elif op == ft.PROD:
                                redval = prod(range(1, size + 1))
                                if redval < max_val:
                                    self.assertAlmostEqual(value, redval)
                            elif op == ft.MAX:
                                self.assertEqual(value, size - 1)
                            elif op == ft.MIN:
                                self.assertEqual(value, 0)

    async def testScan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        # --
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                for mode in range(3):
                    buf = array(range(size), typecode)
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    await self.COMM.Scan(sbuf, rbuf, op)
                    max_val = maxvalue(buf)
                    for i, value in enumerate(buf):
                        if op == ft.SUM:
                            if (i * (rank + 1)) < max_val:
                                self.assertAlmostEqual(value, i * (rank + 1))
                        elif op == ft.PROD:
                            if (i ** (rank + 1)) < max_val:
                                self.assertAlmostEqual(value, i ** (rank + 1))
                        elif op == ft.MAX:
                            self.assertEqual(value, i)
                        elif op == ft.MIN:
                            self.assertEqual(value, i)

    async def testExscan(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                for mode in range(3):
                    buf = array(range(size), typecode)
                    rbuf = buf.as_mpi()
                    sbuf = [ft.IN_PLACE, None, rbuf][mode]
                    try:
                        await self.COMM.Exscan(sbuf, rbuf, op)
                    except NotImplementedError:
                        self.skipTest("mpi-exscan")
                    if rank == 1:
                        for i, value in enumerate(buf):
                            self.assertEqual(value, i)
                    elif rank > 1:
                        max_val = maxvalue(buf)
                        for i, value in enumerate(buf):
                            if op == ft.SUM:
                                if (i * rank) < max_val:
                                    self.assertAlmostEqual(value, i * rank)
                            elif op == ft.PROD:
                                if (i**rank) < max_val:
                                    self.assertAlmostEqual(value, i**rank)
                            elif op == ft.MAX:
                                self.assertEqual(value, i)
                            elif op == ft.MIN:
                                self.assertEqual(value, i)


class ReduceLocal(Case):
    async def testReduceLocal(self):
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                size = 5
                sbuf = array(range(1, size + 1), typecode)
                rbuf = array(range(size + 0), typecode)
                try:
                    op.Reduce_local(sbuf.as_mpi(), rbuf.as_mpi())
                except NotImplementedError:
                    self.skipTest("mpi-op-reduce_local")
                for i, value in enumerate(rbuf):
                    self.assertEqual(sbuf[i], i + 1)
                    if op == ft.SUM:
                        self.assertAlmostEqual(value, i + (i + 1))
                    elif op == ft.PROD:
                        self.assertAlmostEqual(value, i * (i + 1))
                    elif op == ft.MAX:
                        self.assertEqual(value, i + 1)
                    elif op == ft.MIN:
                        self.assertEqual(value, i)

    async def testReduceLocalBadCount(self):
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                sbuf = array(range(3), typecode)
                rbuf = array(range(3), typecode)

                s = sbuf.as_mpi_c(2)
                r = rbuf.as_mpi_c(3)

                def f():
                    op.Reduce_local(s, r)  # noqa: B023

                self.assertRaises(ValueError, f)

                s = [sbuf.as_raw(), 1, ft.INT]
                r = [rbuf.as_raw(), 1, ft.SHORT]

                def f():
                    op.Reduce_local(s, r)  # noqa: B023

                self.assertRaises(ValueError, f)
