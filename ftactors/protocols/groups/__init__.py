"""Group-based checkpoint/restart (Ho, Wang & Lau, 2008), ``--protocol groups``: each group
checkpoints alone and logs the messages that cross groups (``GroupCoordination``). The
groups themselves are formed in ``protocols/shared/units.py`` (HC3I's clusters too)."""

from .rank import GroupCoordination

__all__ = ["GroupCoordination"]
