"""ReadyMessageFlush's options, declared once (``runtime/_options``: validation, help,
command-line flags and the site's options table come from here), checked and read the same way
by its ranks and its coordinator side (``ready_settings``)."""
from __future__ import annotations

import math
import os

from ftactors.base import ConfigError
from ftactors.runtime import INTERVAL, Option, declared_values

from ..shared.level_plan import OPTIONS as PLAN_OPTIONS

STORAGES = ("object", "stable", "both")
AUTO = "auto"
"""``checkpoint_interval=AUTO``: Daly's interval from the measured cost and ``mtbf_s``."""

OPTIONS = (
    Option("checkpoint_interval", (int, str), None, "take a checkpoint every k "
           "iterations of every loop, or \"auto\": Daly's interval from the measured "
           "checkpoint cost and mtbf_s", "iterations", roles=(INTERVAL,)),
    Option("checkpoint_interval_s", float, None, "the coordinator requests a checkpoint "
           "this often", "s", roles=(INTERVAL,)),
    Option("mtbf_s", float, None, "the job's mean time between failures, for "
           "checkpoint_interval=\"auto\"", "s", roles=(INTERVAL,)),
    Option("checkpoint_storage", str, "object", "object (object store, owned by the "
           "coordinator), stable (checkpoint_dir) or both", choices=STORAGES),
    Option("checkpoint_dir", (str, os.PathLike), None, "directory or pyarrow URI of stable checkpoints "
           "(default ./ftactors-checkpoints)"),
    *PLAN_OPTIONS,
)


def ready_settings(opts: dict) -> dict:
    """The protocol's settings (declared defaults for options not given), checked."""
    v = declared_values(OPTIONS, opts)
    storage = v["checkpoint_storage"]
    if storage not in STORAGES:
        raise ConfigError(f"checkpoint_storage must be one of {', '.join(STORAGES)}, "
                          f"got {storage!r}")
    interval = v["checkpoint_interval"]
    auto = isinstance(interval, str) and interval == AUTO
    if interval is not None and not auto and (
            not isinstance(interval, int) or isinstance(interval, bool) or interval < 1):
        raise ConfigError(f"checkpoint_interval must be an int >= 1 or {AUTO!r}, "
                          f"got {interval!r}")
    seconds = v["checkpoint_interval_s"]
    if seconds is not None and not (isinstance(seconds, (int, float)) and seconds > 0):
        raise ConfigError(f"checkpoint_interval_s must be > 0, got {seconds!r}")
    mtbf = v["mtbf_s"]
    if mtbf is not None and not (isinstance(mtbf, (int, float)) and not isinstance(mtbf, bool)
                                 and math.isfinite(mtbf) and mtbf > 0):
        raise ConfigError(f"mtbf_s must be a number of seconds > 0, got {mtbf!r}")
    if auto and mtbf is None:
        raise ConfigError(f"checkpoint_interval={AUTO!r} needs mtbf_s: the job's mean time "
                          f"between failures (s), from which Daly's interval is chosen")
    if auto and seconds is not None:
        raise ConfigError(f"checkpoint_interval={AUTO!r} and checkpoint_interval_s both "
                          f"set the checkpoint timer: give one of them")
    if mtbf is not None and not auto:
        raise ConfigError(f"mtbf_s is only used with checkpoint_interval={AUTO!r}")
    directory = v["checkpoint_dir"]
    if storage != "object" and directory is None:
        directory = os.path.join(os.getcwd(), "ftactors-checkpoints")
    return {"storage": storage, "interval": None if auto else interval, "interval_s": seconds,
            "auto": auto, "mtbf_s": mtbf, "dir": directory,
            "level_intervals": v["level_intervals"]}
