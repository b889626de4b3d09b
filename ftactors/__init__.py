"""ftactors: fault-tolerant asyncio actors on Ray with an mpi4py-style facade.

Public names live here; the modules behind them are private (``_x.py``).
"""
from .runtime._chaos import Chaos, Kill
from .facade._comm import Communicator
from .engine._constants import ANY_SOURCE, ANY_TAG, TAG_UB, UNDEFINED
from .runtime._coordinator import RunResult
from .engine._envelope import APP, CTRL, Envelope
from .base._errors import (CheckpointCorrupted, ConfigError, FTError, JobLost, ProtocolError,
                           RankError, RankFailed)
from .base._events import Event
from .base._warnings import (FaultToleranceWarning, KillNotFiredWarning, NoCheckpointWarning,
                             NoSparesWarning, NothingRegisteredWarning)
from .facade._ops import BAND, BOR, LAND, LOR, MAX, MIN, PROD, SUM, Op
from .runtime._protocol import Protocol
from .runtime._rank import Rank
from .facade._request import Request, Status, waitall
from ._run import Run, launch, run, run_async

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "APP", "BAND", "BOR", "CTRL", "Chaos", "CheckpointCorrupted",
    "Communicator", "ConfigError", "Envelope", "Event", "FTError", "FaultToleranceWarning",
    "JobLost", "Kill", "KillNotFiredWarning", "LAND", "LOR", "MAX", "MIN", "NoCheckpointWarning",
    "NoSparesWarning", "NothingRegisteredWarning", "Op", "PROD", "Protocol", "ProtocolError",
    "Rank", "RankError",
    "RankFailed", "Request", "Run", "RunResult", "SUM", "Status", "TAG_UB", "UNDEFINED", "launch", "run",
    "run_async", "waitall",
]
