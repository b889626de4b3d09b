"""CoCheck (Stellner, 1996), ``--protocol ready-flush``: coordinated checkpoints after the
ready messages are flushed, global restart and migration. ``rank.py``: the mixin
(``ReadyMessageFlush``) and the theory of operation; the decisions, in plain Python:
``machine.py`` where a checkpoint is taken and which one a recovery completes,
``handoff.py`` the hand-off of parts to holder ranks, ``migration.py`` a move's phases;
``coordinator.py``: the rounds, restarts and migrations (``ReadyFlushCoordinator``)."""

from .coordinator import ReadyFlushCoordinator
from .rank import ReadyMessageFlush

ReadyMessageFlush.recovery_policy = ReadyFlushCoordinator

__all__ = ["ReadyMessageFlush"]
