"""Group-based checkpoint/restart (Ho, Wang & Lau, 2008), ``--protocol groups``: each group
checkpoints alone and logs the messages that cross groups. ``rank.py``: the mixin
(``GroupCoordination``) and the theory of operation; ``machine.py``: one member's
decisions (``GroupMember``); ``coordinator.py``: the group sets and restarts
(``GroupRecovery``). The groups themselves are formed in
``protocols/shared/units.py`` (HC3I's clusters too)."""

from .coordinator import GroupRecovery
from .rank import GroupCoordination

GroupCoordination.recovery_policy = GroupRecovery

__all__ = ["GroupCoordination"]
