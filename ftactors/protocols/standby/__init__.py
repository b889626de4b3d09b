"""NR-MPI (Suo et al., 2016), ``--protocol standby``: standby ranks replace failed ones
from partner copies, and the survivors go on. ``rank.py``: the mixin
(``StandbyReplacement``) and its state machine; ``coordinator.py``: the recovery round
(``StandbyRecovery``) and the partner copies of another protocol's parts
(``PartnerCopies``)."""

from .coordinator import PartnerCopies, StandbyRecovery
from .rank import StandbyReplacement

StandbyReplacement.recovery_policy = StandbyRecovery
StandbyReplacement.part_level = PartnerCopies

__all__ = ["StandbyReplacement"]
