"""Fault-tolerance protocols, one folder per paper, named once: the folder is the
protocol's ``--protocol`` name.

==============  =================================================  ====================
``--protocol``  paper (``../shared/papers/``)                      mixin
==============  =================================================  ====================
standby         NR-MPI standby replacement (Suo et al., 2016)      StandbyReplacement
ready-flush     CoCheck ready messages (Stellner, 1996)            ReadyMessageFlush
groups          group-based checkpoint (Ho, Wang & Lau, 2008)      GroupCoordination
hc3i            HC3I hierarchical DDV (Monnet et al., 2004)        DDVPiggyback
rs              diskless RS checkpoint (Bautista Gomez, 2010)      RSBackup
==============  =================================================  ====================

In each folder, ``rank.py`` is the rank side (the mixin), ``coordinator.py`` the
coordinator side (its recovery policy), bound to the mixin by the folder's
``__init__.py``, and ``machine.py`` the decisions in plain Python where they are apart
already. ``shared/`` holds what several
protocols use. Protocols import the runtime, the engine and ``ftactors.base``; never a
transport or a tool.

``PROTOCOLS`` maps the command-line name of each protocol to its mixin class. The
warnings a run may give about its protocols are here too, so they can be filtered.
"""

from .groups import GroupCoordination
from .hc3i import DDVPiggyback, ForcedCheckpointStorm
from .ready_flush import ReadyMessageFlush
from .rs import RSBackup
from .shared.level_plan import LevelPlanWarning
from .standby import StandbyReplacement

PROTOCOLS: dict[str, type] = {
    "standby": StandbyReplacement,
    "ready-flush": ReadyMessageFlush,
    "groups": GroupCoordination,
    "hc3i": DDVPiggyback,
    "rs": RSBackup,
}

__all__ = ["PROTOCOLS", "DDVPiggyback", "ForcedCheckpointStorm", "LevelPlanWarning",
           "GroupCoordination", "RSBackup", "ReadyMessageFlush", "StandbyReplacement"]
