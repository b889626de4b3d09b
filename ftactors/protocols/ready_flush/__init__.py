"""CoCheck (Stellner, 1996), ``--protocol ready-flush``: coordinated checkpoints after the
ready messages are flushed, global restart and migration. ``rank.py``: the mixin
(``ReadyMessageFlush``) and the theory of operation; ``machine.py``: where a checkpoint is
taken; ``coordinator.py``: the rounds, restarts and migrations
(``ReadyFlushCoordinator``)."""

from .coordinator import ReadyFlushCoordinator
from .rank import ReadyMessageFlush

ReadyMessageFlush.recovery_policy = ReadyFlushCoordinator

__all__ = ["ReadyMessageFlush"]
