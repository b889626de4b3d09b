"""How a fabric says that a host is gone: ``RankDied`` (the coordinator and the spare
pool take it; it never reaches a caller of ``ft.run``)."""
from __future__ import annotations


class RankDied(Exception):
    """Raised by a fabric when a rank's host is gone (process death, kill)."""

    def __init__(self, rank: int, reason: str = ""):
        super().__init__(rank, reason)
        self.rank = rank
        self.reason = reason
