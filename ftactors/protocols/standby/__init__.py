"""NR-MPI (Suo et al., 2016), ``--protocol standby``: standby ranks replace failed ones
from partner copies, and the survivors go on (``StandbyReplacement``)."""

from .rank import StandbyReplacement

__all__ = ["StandbyReplacement"]
