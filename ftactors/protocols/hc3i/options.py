"""DDVPiggyback's (HC3I) options, declared once (``runtime/_options``: validation, help,
command-line flags and the site's options table come from here), checked and read the same way
by its ranks and its coordinator side (``hc3i_settings``)."""
from __future__ import annotations

import os

from ftactors.base import ConfigError
from ftactors.runtime import INTERVAL, NONE, Option, STATE, declared_values

from ..shared.units import Groups

NODE = "node"
"""``clusters="node"``: one cluster per Ray node (the default)."""

OPTIONS = (
    # a DDV has an entry per cluster, and logs cross them: they shape the state
    Option("clusters", (str, os.PathLike, list, Groups), NODE, "cluster definition: "
           "'node' (by Ray node; one node: the default group policy), a group policy, "
           "file or list (see protocols/shared/units.py)", roles=(STATE,)),
    Option("clc_interval_s", (float, dict), None, "seconds between unforced CLCs: a "
           "number, or {cluster: seconds} (default: only forced CLCs)", "s",
           roles=(INTERVAL,)),
    Option("gc_interval_s", float, None, "seconds between garbage collections "
           "(default: none on a timer)", "s"),
    Option("gc_clcs_max", (int, NONE), 2, "a garbage collection starts when "
           "a cluster stores more CLCs than this (None: not on commits)"),
    Option("log_bytes_max", float, None, "a rank whose log passes this many bytes asks "
           "for a garbage collection (default: never)", "bytes"),
    Option("ddv_transitive", bool, False, "piggyback the whole DDV, not only the SN"),
)


def hc3i_settings(options: dict) -> dict:
    """The options' values (declared defaults for those not given), checked (cluster
    definitions are checked by the coordinator, which knows the number of ranks).

    Raises:
        ConfigError: an interval or a bound out of range.
    """
    v = declared_values(OPTIONS, options)
    interval = v["clc_interval_s"]
    for s in interval.values() if isinstance(interval, dict) else [interval]:
        if s is not None and not (isinstance(s, (int, float)) and not isinstance(s, bool)
                                  and s > 0):
            raise ConfigError(f"clc_interval_s must be > 0 seconds (or a dict cluster -> "
                              f"seconds), got {interval!r}")
    for name in ("gc_interval_s", "log_bytes_max"):
        x = v[name]
        if x is not None and not (isinstance(x, (int, float)) and not isinstance(x, bool)
                                  and x > 0):
            raise ConfigError(f"{name} must be > 0, got {x!r}")
    x = v["gc_clcs_max"]
    if x is not None and not (isinstance(x, int) and not isinstance(x, bool) and x >= 1):
        raise ConfigError(f"gc_clcs_max must be an int >= 1 (or None: no collection on "
                          f"commits), got {x!r}")
    if v["ddv_transitive"] not in (True, False):
        raise ConfigError(f"ddv_transitive must be True or False, got {v['ddv_transitive']!r}")
    return v
