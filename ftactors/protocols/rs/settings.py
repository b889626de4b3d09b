"""RSBackup's name, what it keeps, and its options read and checked (``rs_settings``),
shared by its rank side, its coordinator side and the encoded parts of another
protocol (``parts.py``)."""
from __future__ import annotations

from ftactors.base._errors import ConfigError

NAME = "rs"
KEEP_ROUNDS = 2
"""Rounds kept by ranks (own snapshots) and holders (parity): the newest two."""
KEEP_STABLE = 2
"""Complete checkpoint sets kept on stable storage."""


def rs_settings(opts: dict) -> dict:
    """The protocol's settings with defaults, checked."""
    def positive_int(key, default):
        v = opts.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{key} must be an int >= 1, got {v!r}")
        return v
    settings = {
        "group_size": positive_int("rs_group_size", 4),
        "parity": positive_int("rs_parity", None),
        "interval": positive_int("rs_interval", 5),
        "interval_s": opts.get("rs_interval_s"),
        "block_bytes": positive_int("rs_block_bytes", 1 << 20),
        "ranks_per_node": positive_int("rs_ranks_per_node", None),
        "interleave": opts.get("rs_interleave", True),
        "stable": opts.get("rs_stable_store"),
        "stable_parity": opts.get("rs_stable_parity", False),
    }
    seconds = settings["interval_s"]
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or seconds <= 0):
        raise ConfigError(f"rs_interval_s must be a number of seconds > 0, got {seconds!r}")
    for key in ("interleave", "stable_parity"):
        if not isinstance(settings[key], bool):
            raise ConfigError(f"rs_{key} must be True or False, got {settings[key]!r}")
    if settings["stable_parity"] and settings["stable"] is None:
        raise ConfigError("rs_stable_parity needs rs_stable_store (where to write them)")
    return settings
