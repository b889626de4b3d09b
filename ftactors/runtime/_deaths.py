"""How a fabric says that a host is gone (``RankDied``), and how a recovery round learns
that more ranks failed (``NewFailure``); neither reaches a caller of ``ft.run``."""
from __future__ import annotations


class RankDied(Exception):
    """Raised by a fabric when a rank's host is gone (process death, kill)."""

    def __init__(self, rank: int, reason: str = ""):
        super().__init__(rank, reason)
        self.rank = rank
        self.reason = reason


class NewFailure(Exception):
    """Raised inside a recovery round when more ranks are found failed."""

    def __init__(self, ranks):
        super().__init__(ranks)
        self.ranks = set(ranks)
