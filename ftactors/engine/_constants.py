"""Wildcards and sentinels, with mpi4py's values so that ported code reads the same."""

ANY_SOURCE = -1
"""Receive from any rank of the communicator."""

ANY_TAG = -1
"""Receive a message with any tag."""

UNDEFINED = -32766
"""``split(color=UNDEFINED)``: the caller gets no new communicator (None)."""

TAG_UB = 2**31 - 1
"""The largest tag a user may send with."""

PROC_NULL = -2
"""No process: sends to it and receives from it complete at once and move nothing (a
receive gives None); ``Shift`` gives it past a non-periodic edge. Open MPI's value (the
one that goes with ``ANY_SOURCE = -1``)."""

SUCCESS = 0
"""``Status.error`` of an operation that succeeded."""
