"""Fault-tolerance protocols, one mixin per paper (see docs/ARCHITECTURE.md).

``PROTOCOLS`` maps the command-line name of each protocol to its mixin class.
"""

from .standby import StandbyReplacement

PROTOCOLS: dict[str, type] = {
    "standby": StandbyReplacement,
}

__all__ = ["PROTOCOLS", "StandbyReplacement"]
