"""Fault-tolerance protocols, one mixin per paper (see docs/ARCHITECTURE.md), with their
coordinator-side recovery policies. They import the runtime, the engine and
``ftactors.base``; never a transport or a tool.

``PROTOCOLS`` maps the command-line name of each protocol to its mixin class.
"""

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

__all__ = ["PROTOCOLS", "DDVPiggyback", "GroupCoordination", "RSBackup", "ReadyMessageFlush", "StandbyReplacement"]
