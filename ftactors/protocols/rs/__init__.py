"""Distributed diskless checkpoint (Bautista Gomez et al., 2010), ``--protocol rs``:
Reed-Solomon encoded checkpoints in memory across nodes (``RSBackup``)."""

from .rank import RSBackup

__all__ = ["RSBackup"]
