"""ftactors: fault-tolerant asyncio actors on Ray with an mpi4py-style facade.

Public names live here; the modules behind them are private (``_x.py``).
"""
from .runtime import Chaos, Kill, Partition, Progress, Protocol, Rank, RunResult
from .facade import (Attach_buffer, BAND, BOR, BSEND_OVERHEAD, BYTE, CART, CHAR, C_BOOL,
                     C_DOUBLE_COMPLEX, C_FLOAT_COMPLEX, C_LONG_DOUBLE_COMPLEX, Cartcomm,
                     Communicator, DOUBLE, Datatype, Detach_buffer, FLOAT, Get_processor_name,
                     INT, INT16_T, INT32_T, INT64_T, INT8_T, IN_PLACE, LAND, LONG, LONG_DOUBLE,
                     LONG_LONG, LOR, MAX, MAXLOC, MIN, MINLOC, Message, NO_OP, Op, PROD,
                     Pcontrol, Prequest, REPLACE, REQUEST_NULL, Request, SHORT, SIGNED_CHAR,
                     SUM, Status, UINT16_T, UINT32_T, UINT64_T, UINT8_T, UNSIGNED,
                     UNSIGNED_CHAR, UNSIGNED_LONG, UNSIGNED_LONG_LONG, UNSIGNED_SHORT, Wtick,
                     Wtime, compute_dims, testall, testany, testsome, waitall, waitany,
                     waitsome)
from .engine import ANY_SOURCE, ANY_TAG, PROC_NULL, SUCCESS, TAG_UB, UNDEFINED
from .base import (CheckpointCorrupted, ConfigError, Deadlock, Event, FTError,
                   FaultToleranceWarning, JobLost, KillNotFiredWarning, NoCheckpointWarning,
                   NoSparesWarning, NothingRegisteredWarning, ProtocolError, RankError,
                   RankFailed, RankNicenessWarning, StaleLocalWarning, UnsavedStateWarning)
from ._run import Run, launch, run, run_async

Intracomm = Communicator
"""mpi4py's ``MPI.Intracomm``: every communicator here is an intracommunicator."""

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "BAND", "BOR", "BYTE", "CART", "CHAR", "C_BOOL",
    "C_DOUBLE_COMPLEX", "C_FLOAT_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "Cartcomm", "Chaos",
    "CheckpointCorrupted", "Communicator", "ConfigError", "DOUBLE", "Deadlock", "Datatype",
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
