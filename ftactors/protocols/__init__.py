"""Fault-tolerance protocols, one mixin per paper (see docs/ARCHITECTURE.md), with their
coordinator-side recovery policies. They import the runtime, the engine and
``ftactors.base``; never a transport or a tool.

``PROTOCOLS`` maps the command-line name of each protocol to its mixin class. The
warnings a run may give about its protocols are here too, so they can be filtered.
"""

from ._hc3i_storm import ForcedCheckpointStorm
from ._level_plan import LevelPlanWarning
from .ddv_piggyback import DDVPiggyback
from .group_coordination import GroupCoordination
from .ready_flush import ReadyMessageFlush
from .rs_backup import RSBackup
from .standby import StandbyReplacement

PROTOCOLS: dict[str, type] = {
    "standby": StandbyReplacement,
    "ready-flush": ReadyMessageFlush,
    "groups": GroupCoordination,
    "hc3i": DDVPiggyback,
    "rs": RSBackup,
}

__all__ = ["PROTOCOLS", "DDVPiggyback", "ForcedCheckpointStorm", "LevelPlanWarning", "GroupCoordination", "RSBackup", "ReadyMessageFlush", "StandbyReplacement"]
