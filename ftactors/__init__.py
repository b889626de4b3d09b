"""ftactors: fault-tolerant asyncio actors on Ray with an mpi4py-style facade.

Public names live here; the modules behind them are private (``_x.py``).
"""
from .runtime._chaos import Chaos, Kill, Partition
from .facade._comm import Cartcomm, Communicator
from .engine._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, SUCCESS, TAG_UB, UNDEFINED
from .runtime._coordinator import RunResult
from .engine._envelope import APP, CTRL, Envelope
from .base._errors import (CheckpointCorrupted, ConfigError, FTError, JobLost, ProtocolError,
                           RankError, RankFailed)
from .base._events import Event
from .base._warnings import (FaultToleranceWarning, KillNotFiredWarning, NoCheckpointWarning,
                             NoSparesWarning, NothingRegisteredWarning)
from .facade._ops import (BAND, BOR, LAND, LOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, PROD, REPLACE,
                          SUM, Op)
from .runtime._protocol import Protocol
from .runtime._rank import Rank
from .facade._request import (Request, Status, testall, testany, testsome, waitall, waitany,
                              waitsome)
from .facade._topology import CART, compute_dims
from ._run import Run, launch, run, run_async

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "APP", "BAND", "BOR", "CART", "CTRL", "Cartcomm", "Chaos",
    "CheckpointCorrupted", "Communicator", "ConfigError", "Envelope", "Event", "FTError",
    "FaultToleranceWarning", "JobLost", "Kill", "KillNotFiredWarning", "LAND", "LOR", "MAX",
    "MAXLOC", "MIN", "MINLOC", "NO_OP", "NoCheckpointWarning", "NoSparesWarning",
    "NothingRegisteredWarning", "Op", "PROC_NULL", "PROD", "Partition", "Protocol", "ProtocolError",
    "REPLACE", "Rank", "RankError", "RankFailed", "Request", "Run", "RunResult", "SUCCESS",
    "SUM", "Status", "TAG_UB", "UNDEFINED", "compute_dims", "launch", "run", "run_async",
    "testall", "testany", "testsome", "waitall", "waitany", "waitsome",
]
