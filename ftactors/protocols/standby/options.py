"""StandbyReplacement's options, declared once (``runtime/_options``: validation, help,
command-line flags and the site's options table come from here), checked and read here."""
from __future__ import annotations

import os

from ftactors.base import ConfigError
from ftactors.runtime import INTERVAL, OWN_ROUNDS, Option, declared_values

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


def standby_settings(options: dict) -> dict:
    """The options' values (declared defaults for those not given), checked.

    Raises:
        ConfigError: an interval below one iteration, or of no time.
    """
    v = declared_values(OPTIONS, options)
    every, seconds = v["backup_interval"], v["backup_interval_s"]
    if every is not None and (isinstance(every, bool) or every < 1):
        raise ConfigError(f"backup_interval must be an int >= 1, got {every!r}")
    if seconds is not None and not seconds > 0:
        raise ConfigError(f"backup_interval_s must be > 0 seconds, got {seconds!r}")
    return v
