"""HC3I (Monnet, Morin & Badrinath, 2004), ``--protocol hc3i``: coordinated checkpoints
inside clusters, DDV piggybacking and forced checkpoints between them. ``rank.py``: the
mixin (``DDVPiggyback``) and the theory of operation; ``machine.py``: the dependency rules
as plain functions; ``member.py``: one member's cut, holding and log (``ClcMember``, ``Log``);
``coordinator.py``: commits, garbage collection and the recovery line
(``Hc3iRecovery``); ``options.py``: its options; ``storm.py``: the forced
checkpoint storm warning."""

from .coordinator import Hc3iRecovery
from .rank import DDVPiggyback
from .storm import ForcedCheckpointStorm

DDVPiggyback.recovery_policy = Hc3iRecovery

__all__ = ["DDVPiggyback", "ForcedCheckpointStorm"]
