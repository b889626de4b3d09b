"""What every layer uses: the exception types (``_errors``), the run's event log
(``_events``) and sealed storage (``_storage``: SHA-256 sealed blobs, stores, checkpoint
manifests). Imports nothing else of ftactors."""
from ._errors import (CheckpointCorrupted, ConfigError, Deadlock, FTError, JobLost,
                      ProtocolError, RankError, RankFailed)
from ._events import CHECKPOINT_KINDS, Event, EventLog, merge
from . import _storage as storage  # (a namespace: storage.open_store, storage.dumps, ...)
from ._storage import open_filesystem, open_store
from ._warnings import (FaultToleranceWarning, KillNotFiredWarning, NoCheckpointWarning,
                        NoSparesWarning, NothingRegisteredWarning, RankNicenessWarning,
                        StaleLocalWarning, UnsavedStateWarning, warn)

__all__ = [
    "CHECKPOINT_KINDS", "CheckpointCorrupted", "ConfigError", "Deadlock", "Event",
    "EventLog", "FTError", "FaultToleranceWarning", "JobLost", "KillNotFiredWarning",
    "NoCheckpointWarning", "NoSparesWarning", "NothingRegisteredWarning",
    "ProtocolError", "RankError", "RankFailed", "RankNicenessWarning",
    "StaleLocalWarning", "UnsavedStateWarning", "merge", "open_filesystem",
    "open_store", "storage", "warn",
]
