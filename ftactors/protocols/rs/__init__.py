"""Distributed diskless checkpoint (Bautista Gomez et al., 2010), ``--protocol rs``:
Reed-Solomon encoded checkpoints in memory across nodes. ``rank.py``: the mixin
(``RSBackup``) and the theory of operation; ``machine.py``: which round a recovery
restores, and how (``choose_recovery``); ``coordinator.py``: the recovery
(``RSRecovery``); ``parts.py``: another protocol's parts encoded across its unit
(``EncodedParts``); ``placement.py``: groups across nodes; ``erasure.py``: the code over
GF(2^8); ``options.py``: its name and options; ``stable.py``: its parity on stable storage."""

from .coordinator import RSRecovery
from .parts import EncodedParts
from .rank import RSBackup

RSBackup.recovery_policy = RSRecovery
RSBackup.part_level = EncodedParts

__all__ = ["RSBackup"]
