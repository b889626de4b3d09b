"""Warnings for fault tolerance that does less than it seems to.

A run can finish with the right answer while no failure was survived or no state was
protected: a planned kill that never fired, a rank restored with nothing registered, a
protocol that never checkpoints, a spares role with no spares, a local that a restore
could not set. None of these is an error
(the answer is right), but a user who believes the program was tested must be told. Each
is a ``FaultToleranceWarning`` (filter them all with that class) and is also recorded in
the run's timeline or metrics, which is what the chaos tools read.

One more is about speed, not protection: ``RankNicenessWarning``.
"""
from __future__ import annotations

import warnings


class FaultToleranceWarning(UserWarning):
    """The run's fault tolerance protects, or was tested for, less than it seems to."""


class KillNotFiredWarning(FaultToleranceWarning):
    """A kill of the ``ft.Chaos`` plan never fired: the run did not survive it
    (``RunResult.metrics["kills_unfired"]`` says which and why)."""


class NothingRegisteredWarning(FaultToleranceWarning):
    """A rank was restored past its first loop's top with no registered state
    (``self.register``) while a loop of the program carries state from one iteration to
    the next: its loop resumes with every variable as ``main()`` first set it."""


class NoCheckpointWarning(FaultToleranceWarning):
    """A protocol of the stack will never checkpoint in this run (no interval set, or
    no safe point reached): a failure restarts from the start of the run."""


class NoSparesWarning(FaultToleranceWarning):
    """The stack's spares role has ``spares=0``: what a failure does instead."""


class UnsavedStateWarning(FaultToleranceWarning):
    """The program's loop changes state that no checkpoint holds: a random generator it
    draws from (made before the loop and not registered, or a global one), a variable of
    its module or an attribute of its class. After a restore that state is not what it
    was at the checkpoint, so a run with a failure gives another answer."""


class StaleLocalWarning(FaultToleranceWarning):
    """A restore could not write a registered attribute's checkpoint value into the
    program's own object (a number, a tuple, an array of another shape or dtype), and a
    local of the program still holds that object: its loop goes on from another state
    than the checkpoint's."""


class RankNicenessWarning(UserWarning):
    """Ray's rank processes could not be given the run's ``rank_niceness`` (lowering a
    niceness needs ``CAP_SYS_NICE``): they compute at Ray's niceness, with a smaller
    share of a busy CPU than a plain process."""


def warn(category: type[Warning], message: str) -> None:
    """Issue ``message`` as a warning attributed to ftactors (not to whichever line of
    the framework happened to notice), every time it is issued."""
    warnings.warn_explicit(message, category, "ftactors", 0, module="ftactors")
