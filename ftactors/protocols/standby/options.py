"""StandbyReplacement's options, declared once (``runtime/_options``: validation, help,
command-line flags and the README's table come from here); read with
``declared_values``, so a default is written only here."""
from __future__ import annotations

import os

from ftactors.runtime._options import INTERVAL, OWN_ROUNDS, Option

from ..shared.level_plan import OPTIONS as PLAN_OPTIONS

OPTIONS = (
    Option("backup_interval", int, None, "iterations between partner backups (default: "
           "the class's backup_interval, 5)", "iterations", roles=(INTERVAL, OWN_ROUNDS)),
    Option("backup_interval_s", float, None, "seconds between partner backups, about "
           "(overrides backup_interval; rank 0 turns it into iterations; default: the "
           "class's backup_interval_s, None)", "s", roles=(INTERVAL, OWN_ROUNDS)),
    Option("stable_store", (str, os.PathLike), None, "also write every backup round to this "
           "directory or pyarrow URI as a checkpoint set (ft.run(restart_from=...) restarts "
           "from it); round k's set is sealed at backup k+1 (the last one at the end)",
           roles=(OWN_ROUNDS,)),
    *PLAN_OPTIONS,
)
