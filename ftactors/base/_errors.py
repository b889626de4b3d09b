"""Exceptions raised by ftactors.

Every error a user can meet names what went wrong and where (the rank, the size, the
type): the framework fails loudly before anything is lost or hangs.
"""
from __future__ import annotations


class FTError(Exception):
    """Base class of all ftactors errors."""


class RankError(FTError):
    """An exception escaped a rank's ``main()``.

    Attributes:
        rank: the world rank whose ``main()`` raised.
        remote_traceback: the original traceback, formatted in the rank's process.
        events: the run's timeline up to the error (when raised by ``ft.run``).
    """

    events: list = []

    def __init__(self, rank: int, message: str, remote_traceback: str = ""):
        self.rank = rank
        self.remote_traceback = remote_traceback
        text = f"rank {rank} raised {message}"
        if remote_traceback:
            text += "\n\n--- traceback in rank %d ---\n%s" % (rank, remote_traceback.rstrip())
        super().__init__(text)

    def __reduce__(self):
        return (_rebuild_rank_error, (self.rank, self.args[0], self.remote_traceback))


def _rebuild_rank_error(rank, text, tb):
    err = RankError.__new__(RankError)
    FTError.__init__(err, text)
    err.rank, err.remote_traceback = rank, tb
    return err


class RankFailed(FTError):
    """A rank's process died (or hung) and no protocol in the stack could recover it.

    Attributes:
        ranks: the world ranks that were lost.
        events: the run's timeline up to the failure (when raised by ``ft.run``).
    """

    events: list = []

    def __init__(self, ranks, reason: str = ""):
        self.ranks = tuple(sorted(ranks))
        self.reason = reason
        names = ", ".join(str(r) for r in self.ranks)
        plural = "s" if len(self.ranks) != 1 else ""
        super().__init__(f"rank{plural} {names} failed" + (f": {reason}" if reason else ""))

    def __reduce__(self):
        return (RankFailed, (self.ranks, self.reason))


class JobLost(RankFailed):
    """The whole job was lost (``ft.Chaos(job_lost_at=N)``: every rank and the driver at
    iteration N): no recovery is tried in the lost job; what it left on stable storage
    is what a new job resumes from with ``ft.run(restart_from=...)``."""

    def __reduce__(self):
        return (JobLost, (self.ranks, self.reason))


class Deadlock(FTError):
    """The run can never progress: every live rank waits (a receive, a probe, a request,
    a synchronous send, a protocol's round) and nothing in flight can wake any of them.
    Raised by ``ft.run`` at once, instead of waiting for ever (or for ``timeout_s``).

    Attributes:
        waits: rank -> what it waits for and where (its loop and iteration), in words;
            a rank whose ``main()`` returned reads ``finished``.
        details: rank -> the same as plain fields: ``kind`` (``recv``, ``probe``,
            ``request``, ``any``, ``ssend``, ``round``, ``finished``), ``source``,
            ``tag``, ``comm``, ``what``, ``ranks`` (whom a round has not heard from),
            ``position`` (loop, iteration).
        events: the run's timeline up to the deadlock (when raised by ``ft.run``).
    """

    events: list = []

    def __init__(self, waits: dict, message: str = "", details: dict | None = None):
        self.waits = dict(waits)
        self.details = dict(details or {})
        super().__init__(message or "the run can never progress: "
                         + "; ".join(self.waits.values()))

    def __reduce__(self):
        return (Deadlock, (self.waits, self.args[0], self.details))


class CheckpointCorrupted(FTError):
    """A stored checkpoint failed its content-hash check; it was not unpickled."""


class ProtocolError(FTError):
    """A protocol invariant was violated (illegal state transition, bad control message,
    a replay that does not match the original execution, ...)."""


class ConfigError(FTError, ValueError):
    """Bad configuration given to ``ft.run`` or the CLI (caught before any actor starts)."""
