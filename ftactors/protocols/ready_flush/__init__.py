"""CoCheck (Stellner, 1996), ``--protocol ready-flush``: coordinated checkpoints after the
ready messages are flushed, global restart and migration (``ReadyMessageFlush``)."""

from .rank import ReadyMessageFlush

__all__ = ["ReadyMessageFlush"]
