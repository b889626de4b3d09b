"""RSBackup's name, what it keeps, and its options: declared once (``runtime/_options``:
validation, help, command-line flags and the site's options table come from here), read and
checked (``rs_settings``) for its rank side, its coordinator side and the encoded parts
of another protocol (``parts.py``)."""
from __future__ import annotations

import os

from ftactors.base import ConfigError
from ftactors.runtime import INTERVAL, OWN_ROUNDS, Option, declared_values

from ..shared.level_plan import OPTIONS as PLAN_OPTIONS

NAME = "rs"
KEEP_ROUNDS = 2
"""Rounds kept by ranks (own snapshots) and holders (parity): the newest two."""
KEEP_STABLE = 2
"""Complete checkpoint sets kept on stable storage."""

OPTIONS = (
    Option("rs_group_size", int, 4, "ranks per encoding group, on different nodes",
           roles=(OWN_ROUNDS,)),
    Option("rs_parity", int, None, "parity blocks per group (default: as many as "
           "members, m = k)"),
    Option("rs_interval", int, 5, "iterations between encoded checkpoints",
           "iterations", roles=(INTERVAL, OWN_ROUNDS)),
    Option("rs_interval_s", float, None, "seconds between encoded checkpoints, about "
           "(overrides rs_interval; rank 0 turns it into iterations)", "s",
           roles=(INTERVAL, OWN_ROUNDS)),
    Option("rs_block_bytes", int, 1 << 20, "z: bytes of each block of the star "
           "encoding", "bytes"),
    Option("rs_ranks_per_node", int, None, "virtual topology: rank r on node r // this "
           "(default: the transport's nodes; one rank per node if there is one node)",
           roles=(OWN_ROUNDS,)),
    Option("rs_interleave", bool, True, "interleave the sectors' groups on the ring",
           roles=(OWN_ROUNDS,)),
    Option("rs_stable_store", (str, os.PathLike), None, "also write every round to this directory or "
           "pyarrow URI (slow recovery; ft.run(restart_from=...) restarts from it)",
           roles=(OWN_ROUNDS,)),
    Option("rs_stable_parity", bool, False, "also write the parity blocks to "
           "rs_stable_store", roles=(OWN_ROUNDS,)),
    *PLAN_OPTIONS,
)


def rs_settings(opts: dict) -> dict:
    """The protocol's settings (declared defaults for options not given), checked."""
    v = declared_values(OPTIONS, opts)

    def positive_int(key):
        if v[key] is not None and (isinstance(v[key], bool) or not isinstance(v[key], int)
                                   or v[key] < 1):
            raise ConfigError(f"{key} must be an int >= 1, got {v[key]!r}")
        return v[key]
    settings = {
        "group_size": positive_int("rs_group_size"),
        "parity": positive_int("rs_parity"),
        "interval": positive_int("rs_interval"),
        "interval_s": v["rs_interval_s"],
        "block_bytes": positive_int("rs_block_bytes"),
        "ranks_per_node": positive_int("rs_ranks_per_node"),
        "interleave": v["rs_interleave"],
        "stable": v["rs_stable_store"],
        "stable_parity": v["rs_stable_parity"],
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
