"""DDVPiggyback's (HC3I) options, checked the same way by its ranks and its coordinator
side (``ddv_piggyback``, ``_hc3i_recovery``)."""
from __future__ import annotations

from ftactors.base._errors import ConfigError

NODE = "node"
"""``clusters="node"``: one cluster per Ray node (the default)."""
GC_CLCS_MAX = 2
"""By default a collection starts once a cluster stores more CLCs than this."""


def check_settings(options: dict) -> None:
    """Raise ConfigError for a bad HC3I setting (cluster definitions are checked by the
    coordinator, which knows the number of ranks)."""
    interval = options.get("clc_interval_s")
    values = interval.values() if isinstance(interval, dict) else [interval]
    for v in values:
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and v > 0):
            raise ConfigError(f"clc_interval_s must be > 0 seconds (or a dict cluster -> "
                              f"seconds), got {interval!r}")
    for name in ("gc_interval_s", "log_bytes_max"):
        v = options.get(name)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and v > 0):
            raise ConfigError(f"{name} must be > 0, got {v!r}")
    v = options.get("gc_clcs_max", GC_CLCS_MAX)
    if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        raise ConfigError(f"gc_clcs_max must be an int >= 1 (or None: no collection on "
                          f"commits), got {v!r}")
    if options.get("ddv_transitive") not in (None, True, False):
        raise ConfigError(f"ddv_transitive must be True or False, "
                          f"got {options['ddv_transitive']!r}")
