"""ftactors: fault-tolerant asyncio actors on Ray with an mpi4py-style facade.

Public names live here; the modules behind them are private (``_x.py``).
"""
from .runtime._chaos import Chaos, Kill, Partition
from .facade._buffers import (
    BYTE, CHAR, SIGNED_CHAR, SHORT, INT, LONG, LONG_LONG, UNSIGNED_CHAR, UNSIGNED_SHORT,
    UNSIGNED, UNSIGNED_LONG, UNSIGNED_LONG_LONG, FLOAT, DOUBLE, LONG_DOUBLE, C_BOOL,
    C_FLOAT_COMPLEX, C_DOUBLE_COMPLEX, C_LONG_DOUBLE_COMPLEX, INT8_T, INT16_T, INT32_T,
    INT64_T, UINT8_T, UINT16_T, UINT32_T, UINT64_T, IN_PLACE, Datatype)
from .facade._comm import Cartcomm, Communicator
from .engine._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, SUCCESS, TAG_UB, UNDEFINED
from .runtime._results import RunResult
from .engine._envelope import APP, CTRL, Envelope
from .base._errors import (CheckpointCorrupted, ConfigError, Deadlock, FTError, JobLost,
                           ProtocolError, RankError, RankFailed)
from .base._events import Event
from .base._warnings import (FaultToleranceWarning, KillNotFiredWarning, NoCheckpointWarning,
                             NoSparesWarning, NothingRegisteredWarning, RankNicenessWarning,
                             StaleLocalWarning, UnsavedStateWarning)
from .facade._ops import (BAND, BOR, LAND, LOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, PROD, REPLACE,
                          SUM, Op)
from .runtime._progress import Progress
from .runtime._protocol import Protocol
from .runtime._rank import Rank
from .facade._environment import (BSEND_OVERHEAD, Attach_buffer, Detach_buffer,
                                  Get_processor_name, Pcontrol, Wtick, Wtime)
from .facade._message import Message
from .facade._request import (REQUEST_NULL, Prequest, Request, Status, testall, testany, testsome, waitall,
                              waitany, waitsome)
from .facade._topology import CART, compute_dims
from ._run import Run, launch, run, run_async

Intracomm = Communicator
"""mpi4py's ``MPI.Intracomm``: every communicator here is an intracommunicator."""

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "APP", "BAND", "BOR", "BYTE", "CART", "CHAR", "CTRL", "C_BOOL",
    "C_DOUBLE_COMPLEX", "C_FLOAT_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "Cartcomm", "Chaos",
    "CheckpointCorrupted", "Communicator", "ConfigError", "DOUBLE", "Deadlock", "Datatype", "Envelope",
    "Event", "FLOAT", "FTError", "FaultToleranceWarning", "INT", "INT16_T", "INT32_T",
    "INT64_T", "INT8_T", "IN_PLACE", "JobLost", "Kill", "KillNotFiredWarning", "LAND",
    "LONG", "LONG_DOUBLE", "LONG_LONG", "LOR", "MAX", "MAXLOC", "MIN", "MINLOC", "Message", "NO_OP",
    "NoCheckpointWarning", "NoSparesWarning", "NothingRegisteredWarning", "Op", "PROC_NULL",
    "PROD", "Partition", "Prequest", "Progress", "Protocol", "ProtocolError", "REPLACE", "Rank", "RankError",
    "RankFailed", "RankNicenessWarning",
    "Request", "Run", "RunResult", "SHORT", "SIGNED_CHAR", "SUCCESS", "SUM",
    "Status", "TAG_UB", "UINT16_T", "UINT32_T", "UINT64_T", "UINT8_T", "UNDEFINED",
    "UNSIGNED", "UNSIGNED_CHAR", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "UNSIGNED_SHORT",
    "StaleLocalWarning", "UnsavedStateWarning", "Get_processor_name", "Wtick", "Wtime",
    "REQUEST_NULL", "Intracomm", "BSEND_OVERHEAD", "Attach_buffer", "Detach_buffer", "Pcontrol",
    "compute_dims", "launch", "run", "run_async", "testall", "testany", "testsome",
    "waitall", "waitany", "waitsome",
]
