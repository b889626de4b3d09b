"""ftactors: fault-tolerant asyncio actors on Ray with an mpi4py-style facade.

Public names live here; the modules behind them are private (``_x.py``).
"""
from ._chaos import Chaos, Kill
from ._comm import Communicator
from ._constants import ANY_SOURCE, ANY_TAG, TAG_UB, UNDEFINED
from ._coordinator import RunResult
from ._envelope import APP, CTRL, Envelope
from ._errors import CheckpointCorrupted, ConfigError, FTError, ProtocolError, RankError, RankFailed
from ._events import Event
from ._ops import BAND, BOR, LAND, LOR, MAX, MIN, PROD, SUM, Op
from ._protocol import Protocol
from ._rank import Rank
from ._request import Request, Status, waitall
from ._run import Run, launch, run, run_async

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "APP", "BAND", "BOR", "CTRL", "Chaos", "CheckpointCorrupted",
    "Communicator", "ConfigError", "Envelope", "Event", "FTError", "Kill", "LAND", "LOR",
    "MAX", "MIN", "Op", "PROD", "Protocol", "ProtocolError", "Rank", "RankError",
    "RankFailed", "Request", "Run", "RunResult", "SUM", "Status", "TAG_UB", "UNDEFINED", "launch", "run",
    "run_async", "waitall",
]
