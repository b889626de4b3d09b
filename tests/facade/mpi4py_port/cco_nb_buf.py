"""mpi4py's test/test_cco_nb_buf.py for numpy arrays, translated (see the package docstring for
the rules)."""
from functools import reduce
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


class NBCCOBuf(Case):
    async def testBarrier(self):
        await self.COMM.Ibarrier().Wait()

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
                await self.COMM.Ibcast(buf.as_mpi(), root=root).Wait()
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
                await self.COMM.Igather(
                    sbuf.as_mpi(), rbuf.as_mpi(), root=root
                ).Wait()
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
                await self.COMM.Iscatter(
                    sbuf.as_mpi(), rbuf.as_mpi(), root=root
                ).Wait()
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
                await self.COMM.Iallgather(sbuf.as_mpi(), rbuf.as_mpi()).Wait()
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
                await self.COMM.Ialltoall(
                    sbuf.as_mpi(), rbuf.as_mpi_c(root + 1)
                ).Wait()
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
                    await self.COMM.Ireduce(
                        sbuf.as_mpi(), rbuf.as_mpi(), op, root
                    ).Wait()
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
                await self.COMM.Iallreduce(sbuf.as_mpi(), rbuf.as_mpi(), op).Wait()
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
                await self.COMM.Ireduce_scatter(
                    sbuf.as_mpi(), rbuf.as_mpi(), None, op
                ).Wait()
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
                await self.COMM.Ireduce_scatter(
                    sbuf.as_mpi(), rbuf.as_mpi(), rcnt, op
                ).Wait()
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
                    sbuf = array([rank] * rcnt * size, typecode)
                    rbuf = array(-1, typecode, rcnt)
                    if op == ft.PROD:
                        sbuf = array([rank + 1] * rcnt * size, typecode)
                    await self.COMM.Ireduce_scatter_block(
                        sbuf.as_mpi(), rbuf.as_mpi(), op
                    ).Wait()
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
                await self.COMM.Iscan(sbuf.as_mpi(), rbuf.as_mpi(), op).Wait()
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
                await self.COMM.Iexscan(sbuf.as_mpi(), rbuf.as_mpi(), op).Wait()
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
                await self.COMM.Ibcast(newbuf, root=root).Wait()
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
                await self.COMM.Ibcast(newbuf, root).Wait()
                newtype.Free()
                if rank != root:
                    for i, value in enumerate(buf):
                        check = arrayimpl.scalar(-1 if not (i % 2) else i)
                        self.assertEqual(value, check)


class NBCCOBufInplace(Case):
    async def testGather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                count = root + 3
                if rank == root:
                    sbuf = ft.IN_PLACE
                    buf = array(-1, typecode, (size, count))
                    # buf.flat[(rank*count):((rank+1)*count)] = \
                    #    array(root, typecode, count)
                    s, e = rank * count, (rank + 1) * count
                    for i in range(s, e):
                        buf.flat[i] = check
                    rbuf = buf.as_mpi()
                else:
                    buf = array(root, typecode, count)
                    sbuf = buf.as_mpi()
                    rbuf = None
                await self.COMM.Igather(sbuf, rbuf, root=root).Wait()
                for value in buf.flat:
                    self.assertEqual(value, check)
                if rank == root:
                    sbuf = None
                await self.COMM.Igather(sbuf, rbuf, root=root).Wait()
                for value in buf.flat:
                    self.assertEqual(value, check)

    async def testScatter(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for root in range(size):
                check = arrayimpl.scalar(root)
                for count in range(1, 10):
                    if rank == root:
                        buf = array(root, typecode, (size, count))
                        sbuf = buf.as_mpi()
                        rbuf = ft.IN_PLACE
                    else:
                        buf = array(-1, typecode, count)
                        sbuf = None
                        rbuf = buf.as_mpi()
                    await self.COMM.Iscatter(sbuf, rbuf, root=root).Wait()
                    for value in buf.flat:
                        self.assertEqual(value, check)
                    if rank == root:
                        rbuf = None
                    await self.COMM.Iscatter(sbuf, rbuf, root=root).Wait()
                    for value in buf.flat:
                        self.assertEqual(value, check)

    async def testAllgather(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for count in range(1, 10):
                check = arrayimpl.scalar(count)
                buf = array(-1, typecode, (size, count))
                s, e = rank * count, (rank + 1) * count
                for i in range(s, e):
                    buf.flat[i] = check
                await self.COMM.Iallgather(ft.IN_PLACE, buf.as_mpi()).Wait()
                for value in buf.flat:
                    self.assertEqual(value, check)
                await self.COMM.Iallgather(None, buf.as_mpi()).Wait()
                for value in buf.flat:
                    self.assertEqual(value, check)

    async def testReduce(self):
        size = self.COMM.Get_size()
        rank = self.COMM.Get_rank()
        for array, typecode in arrayimpl.loop():
            for op in (ft.SUM, ft.PROD, ft.MAX, ft.MIN):
                if skip_op(typecode, op):
                    continue
                for root in range(size):
                    if rank == root:
                        buf = array(range(size), typecode)
                        sbuf = ft.IN_PLACE
                        rbuf = buf.as_mpi()
                    else:
                        buf = array(range(size), typecode)
                        buf2 = array(range(size), typecode)
                        sbuf = buf.as_mpi()
                        rbuf = buf2.as_mpi()
                    await self.COMM.Ireduce(sbuf, rbuf, op, root).Wait()
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
                buf = array(range(size), typecode)
                sbuf = ft.IN_PLACE
                rbuf = buf.as_mpi()
                await self.COMM.Iallreduce(sbuf, rbuf, op).Wait()
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
                for rcnt in range(size):
                    if op == ft.PROD:
                        rbuf = array([rank + 1] * rcnt * size, typecode)
                    else:
                        rbuf = array([rank] * rcnt * size, typecode)
                    await self.COMM.Ireduce_scatter_block(
                        ft.IN_PLACE, rbuf.as_mpi(), op
                    ).Wait()
                    max_val = maxvalue(rbuf)
                    for i, value in enumerate(rbuf):
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
                rcnt = list(range(1, size + 1))
                if op == ft.PROD:
                    rbuf = array([rank + 1] * sum(rcnt), typecode)
                else:
                    rbuf = array([rank] * sum(rcnt), typecode)
                await self.COMM.Ireduce_scatter(
                    ft.IN_PLACE, rbuf.as_mpi(), rcnt, op
                ).Wait()
                max_val = maxvalue(rbuf)
                for i, value in enumerate(rbuf):
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
                buf = array(range(size), typecode)
                await self.COMM.Iscan(ft.IN_PLACE, buf.as_mpi(), op).Wait()
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
                buf = array(range(size), typecode)
                try:
                    await self.COMM.Iexscan(ft.IN_PLACE, buf.as_mpi(), op).Wait()
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


