"""Fault-tolerance protocols, one mixin per paper (see docs/ARCHITECTURE.md).

``PROTOCOLS`` maps the command-line name of each protocol to its mixin class.
"""

from .group_coordination import GroupCoordination
from .ready_flush import ReadyMessageFlush
from .standby import StandbyReplacement

PROTOCOLS: dict[str, type] = {
    "standby": StandbyReplacement,
    "ready-flush": ReadyMessageFlush,
    "groups": GroupCoordination,
}

__all__ = ["PROTOCOLS", "GroupCoordination", "ReadyMessageFlush", "StandbyReplacement"]
