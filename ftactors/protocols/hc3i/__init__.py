"""HC3I (Monnet, Morin & Badrinath, 2004), ``--protocol hc3i``: coordinated checkpoints
inside clusters, DDV piggybacking and forced checkpoints between them
(``DDVPiggyback``); the dependency rules are plain functions in ``machine.py``."""

from .rank import DDVPiggyback
from .storm import ForcedCheckpointStorm

__all__ = ["DDVPiggyback", "ForcedCheckpointStorm"]
