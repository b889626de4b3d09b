"""Derived datatypes (issue 40, item 7: mpi4py's demo/mpi-ref-v1/ex-3.*), against the
MPI standard's type maps as mpi4py reports them: sizes, bounds and extents of each
constructor, and messages that gather and scatter the bytes they cover."""
import pickle

import numpy as np
import pytest

import ftactors as ft

D = ft.DOUBLE


@pytest.mark.parametrize("make, size, lb, extent", [
    (lambda: D.Create_contiguous(3), 24, 0, 24),
    (lambda: D.Create_vector(2, 3, 4), 48, 0, (4 + 3) * 8),        # MPI 4.1, 5.1.2
    (lambda: D.Create_vector(3, 1, -2), 24, -32, 40),              # a negative stride
    (lambda: D.Create_hvector(2, 3, 100), 48, 0, 100 + 24),
    (lambda: D.Create_indexed([3, 1], [4, 0]), 32, 0, 56),         # MPI 4.1, example 5.5
    (lambda: D.Create_hindexed([3, 1], [32, 0]), 32, 0, 56),
    (lambda: ft.INT.Create_indexed_block(2, [0, 5]), 16, 0, 28),
    (lambda: ft.Datatype.Create_struct([2, 1], [0, 16], [ft.FLOAT, D]), 16, 0, 24),
    (lambda: D.Create_resized(-8, 32), 8, -8, 32),
])
def test_sizes_and_bounds(make, size, lb, extent):
    t = make().Commit()
    assert (t.size, t.lb, t.extent, t.ub) == (size, lb, extent, lb + extent)
    assert t.Get_size() == size and t.Get_extent() == (lb, extent)
    assert pickle.loads(pickle.dumps(t)).byte_index(2).tolist() == t.byte_index(2).tolist()
    assert pickle.loads(pickle.dumps(D)) is D
    t.Free()


class Columns(ft.Rank):
    """Rank 0 sends column 1 of a C-order 4x3 matrix as a vector type; rank 1 takes it
    as plain doubles, then sends it back into column 2 as the same vector type, with a
    shorter second message filling only the front of its type map."""

    async def main(self):
        comm = self.comm
        column = D.Create_vector(4, 1, 3).Commit()
        st = ft.Status()
        if self.rank == 0:
            m = np.arange(12.0).reshape(4, 3)
            await comm.Send([m.reshape(-1)[1:], 1, column], 1, 1)  # from m[0, 1] on
            await comm.Recv([m.reshape(-1)[2:], 1, column], 1, 2, st)
            got = m.copy()
            await comm.Recv([m, 1, column], 1, 3, st)  # two doubles: the front of column 0
            return got.tolist(), m[:, 0].tolist(), st.Get_count(D), st.Get_count(column)
        flat = np.zeros(4)
        await comm.Recv([flat, D], 0, 1, st)
        await comm.Send(flat * 10, 0, 2)
        await comm.Send(np.array([-1.0, -2.0]), 0, 3)
        return flat.tolist(), st.Get_count(column)


def test_a_vector_type_sends_and_receives_a_column():
    (got, first, doubles, columns), (flat, count) = ft.run(Columns, 2, transport="local").results
    assert flat == [1.0, 4.0, 7.0, 10.0] and count == 1
    assert [row[2] for row in got] == [10.0, 40.0, 70.0, 100.0]
    assert [row[:2] for row in got] == [[0, 1], [3, 4], [6, 7], [9, 10]]
    assert first == [-1.0, -2.0, 6.0, 9.0] and (doubles, columns) == (2, 0)


class Refused(ft.Rank):
    async def main(self):
        with pytest.raises(TypeError, match="derived datatype is taken by the point-to-point"):
            await self.comm.Allreduce([np.zeros(4), 1, D.Create_vector(2, 1, 2)], np.zeros(2))
        with pytest.raises(ValueError, match="reach bytes"):
            await self.comm.Send([np.zeros(4), 2, D.Create_vector(2, 1, 2)], 0)
        return True


def test_collectives_other_than_bcast_and_buffers_too_small_are_refused():
    assert ft.run(Refused, 1, transport="local").results == [True]
