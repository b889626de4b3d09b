"""mpi4py's test/arrayimpl.py for numpy arrays only (its ``ArrayNumPy`` backend, with the
facade's datatypes): ``loop()`` gives every typecode mpi4py tests numpy with, ``scalar``
and ``test`` as there. The other backends (``array.array``, DLPack, CuPy, Numba, fake GPU
arrays) are left out."""
import contextvars

import numpy

import ftactors as ft

TypeMap = {
    "?": ft.C_BOOL,
    "b": ft.SIGNED_CHAR, "h": ft.SHORT, "i": ft.INT, "l": ft.LONG, "q": ft.LONG_LONG,
    "B": ft.UNSIGNED_CHAR, "H": ft.UNSIGNED_SHORT, "I": ft.UNSIGNED, "L": ft.UNSIGNED_LONG,
    "Q": ft.UNSIGNED_LONG_LONG,
    "f": ft.FLOAT, "d": ft.DOUBLE, "g": ft.LONG_DOUBLE,
    "F": ft.C_FLOAT_COMPLEX, "D": ft.C_DOUBLE_COMPLEX, "G": ft.C_LONG_DOUBLE_COMPLEX,
}
"""mpi4py's ArrayNumPy.TypeMap (bool, integer, unsigned, float and complex types)."""


class ArrayNumPy:
    backend = "numpy"
    TypeMap = TypeMap

    def __init__(self, arg, typecode, shape=None):
        if isinstance(arg, (int, float, complex)):
            if shape is None:
                shape = ()
        elif shape is None:
            shape = len(arg)
        self.array = numpy.zeros(shape, typecode)
        if isinstance(arg, (int, float, complex)):
            self.array.fill(numpy.asarray(arg).astype(typecode))
        else:
            self.array[...] = numpy.asarray(arg).astype(typecode)

    def __len__(self):
        return len(self.array)

    def __getitem__(self, i):
        return self.array[i]

    def __setitem__(self, i, v):
        self.array[i] = v

    @property
    def typecode(self):
        return self.array.dtype.char

    @property
    def itemsize(self):
        return self.array.itemsize

    @property
    def flat(self):
        return self.array.flat

    @property
    def size(self):
        return self.array.size

    @property
    def mpidtype(self):
        return self.TypeMap[self.typecode]

    def as_raw(self):
        return self.array

    def as_mpi(self):
        return (self.as_raw(), self.mpidtype)

    def as_mpi_c(self, count):
        return (self.as_raw(), count, self.mpidtype)

    def as_mpi_v(self, cnt, dsp):
        return (self.as_raw(), (cnt, dsp), self.mpidtype)


_loop = contextvars.ContextVar("arrayimpl_loop")
"""``(array class, typecode)`` of the running ``loop()``: mpi4py keeps it on the function,
one rank per process; here ranks share a process (local, sim), each in its own task."""


def loop():
    for typecode in ArrayNumPy.TypeMap:
        _loop.set((ArrayNumPy, typecode))
        yield ArrayNumPy, typecode


def test(case, **kargs):
    array, typecode = _loop.get()
    return case.subTest(typecode=typecode, backend=array.backend, **kargs)


def scalar(arg):
    array, typecode = _loop.get()
    return array(arg, typecode, 1)[0]
