"""GroupCoordination's options, declared once (``runtime/_options``: validation, help,
command-line flags and the site's options table come from here), checked and read here."""
from __future__ import annotations

import os

from ftactors.base import ConfigError
from ftactors.runtime import INTERVAL, Option, STATE, declared_values

from ..shared.units import Groups

OPTIONS = (
    # the logs kept and the cuts taken follow the groups: they shape the state
    Option("groups", (str, os.PathLike, list, Groups), None, "group definition: a "
           "JSON/YAML file, or one / single / fixed:K / trace:PATH, or a list of groups "
           "(default: groups of ceil(sqrt(n)) consecutive ranks)", roles=(STATE,)),
    Option("group_checkpoint_interval", (int, dict), None, "iterations between a "
           "group's checkpoints: an int, or {group index: int} (default: never)",
           "iterations", roles=(INTERVAL,)),
)


def group_settings(options: dict) -> dict:
    """The options' values (declared defaults for those not given), checked.

    Raises:
        ConfigError: an interval that is not an int >= 1.
    """
    v = declared_values(OPTIONS, options)
    interval = v["group_checkpoint_interval"]
    for k in interval.values() if isinstance(interval, dict) else [interval]:
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise ConfigError(f"group_checkpoint_interval must be an int >= 1 (or a dict "
                              f"group -> int), got {interval!r}")
    return v
