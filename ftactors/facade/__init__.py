"""The mpi4py-like facade programs call: Communicator (``_comm``), collectives built on
point-to-point messages, Request/Status and reduction ops. Imports ``ftactors.engine`` and
``ftactors.base``."""
from ._buffers import IN_PLACE
from ._datatypes import (BYTE, CHAR, C_BOOL, C_DOUBLE_COMPLEX, C_FLOAT_COMPLEX,
                         C_LONG_DOUBLE_COMPLEX, DOUBLE, Datatype, FLOAT, INT, INT16_T, INT32_T,
                         INT64_T, INT8_T, LONG, LONG_DOUBLE, LONG_LONG, SHORT, SIGNED_CHAR,
                         UINT16_T, UINT32_T, UINT64_T, UINT8_T, UNSIGNED, UNSIGNED_CHAR,
                         UNSIGNED_LONG, UNSIGNED_LONG_LONG, UNSIGNED_SHORT)
from ._collectives import LARGE_COLLECTIVES_BYTES
from ._comm import Cartcomm, Communicator
from ._environment import (Attach_buffer, BSEND_OVERHEAD, Detach_buffer, Get_processor_name,
                           Pcontrol, Wtick, Wtime)
from ._message import Message
from ._ops import BAND, BOR, LAND, LOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, Op, PROD, REPLACE, SUM
from ._request import (Prequest, REQUEST_NULL, Request, Status, testall, testany, testsome,
                       waitall, waitany, waitsome)
from ._topology import CART, compute_dims

__all__ = [
    "Attach_buffer", "BAND", "BOR", "BSEND_OVERHEAD", "BYTE", "CART", "CHAR", "C_BOOL",
    "C_DOUBLE_COMPLEX", "C_FLOAT_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "Cartcomm",
    "Communicator", "DOUBLE", "Datatype", "Detach_buffer", "FLOAT",
    "Get_processor_name", "INT", "INT16_T", "INT32_T", "INT64_T", "INT8_T", "IN_PLACE",
    "LAND", "LARGE_COLLECTIVES_BYTES", "LONG", "LONG_DOUBLE", "LONG_LONG", "LOR", "MAX",
    "MAXLOC", "MIN", "MINLOC", "Message", "NO_OP", "Op", "PROD", "Pcontrol", "Prequest",
    "REPLACE", "REQUEST_NULL", "Request", "SHORT", "SIGNED_CHAR", "SUM", "Status",
    "UINT16_T", "UINT32_T", "UINT64_T", "UINT8_T", "UNSIGNED", "UNSIGNED_CHAR",
    "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "UNSIGNED_SHORT", "Wtick", "Wtime",
    "compute_dims", "testall", "testany", "testsome", "waitall", "waitany", "waitsome",
]
