"""NR-MPI's decisions in plain Python, no I/O: the process state machine of one rank
(Tables 1 and 2: ``TRANSITIONS``, ``StandbyMachine``), the round every rank can restore
(``choose_round``) and who keeps whose copy (``partner``, ``part_holder``). The mixin that
performs them is in ``rank.py``."""

from __future__ import annotations

import enum

from ftactors.base import ProtocolError, RankFailed

INITIAL = None
"""The round "before main() first ran": every rank can restore it without a backup."""


class State(enum.Enum):
    """The NR-MPI process states (Table 1)."""

    INIT = "INIT"
    RUNNING = "RUNNING"
    FINISH = "FINISH"
    ABORT = "ABORT"
    FAILURE = "FAILURE"
    RECOVER = "RECOVER"
    REPLACE_RECOVER = "REPLACE_RECOVER"
    REPLACE_FAILURE = "REPLACE_FAILURE"


class Input(enum.Enum):
    """What drives the state machine."""

    STARTED = "started"              # a normal process leaves MPI_Init
    PROMOTED = "promoted"            # a standby process is chosen as a replacement
    FAILURE = "failure"              # a failure notice
    CORE_RECOVERED = "core_recovered"  # communicators repaired
    DATA_RECOVERED = "data_recovered"  # application data restored
    FINALIZE = "finalize"            # the program ended on every rank
    UNRECOVERABLE = "unrecoverable"


S, I = State, Input
TRANSITIONS: dict[tuple[State, Input], tuple[State, int]] = {
    (S.INIT, I.FAILURE): (S.INIT, 2),
    (S.INIT, I.PROMOTED): (S.REPLACE_RECOVER, 3),
    (S.INIT, I.UNRECOVERABLE): (S.ABORT, 4),
    (S.INIT, I.STARTED): (S.RUNNING, 5),
    (S.REPLACE_RECOVER, I.DATA_RECOVERED): (S.RUNNING, 6),
    (S.REPLACE_RECOVER, I.FAILURE): (S.REPLACE_FAILURE, 7),
    (S.REPLACE_FAILURE, I.CORE_RECOVERED): (S.REPLACE_RECOVER, 8),
    (S.REPLACE_FAILURE, I.FAILURE): (S.REPLACE_FAILURE, 9),
    (S.RUNNING, I.FINALIZE): (S.FINISH, 10),
    (S.RUNNING, I.FAILURE): (S.FAILURE, 11),
    (S.FAILURE, I.FAILURE): (S.FAILURE, 12),
    (S.INIT, I.FINALIZE): (S.FINISH, 13),
    (S.FAILURE, I.CORE_RECOVERED): (S.RECOVER, 14),
    (S.RECOVER, I.FAILURE): (S.FAILURE, 15),
    (S.RECOVER, I.DATA_RECOVERED): (S.RUNNING, 16),
    (S.RUNNING, I.UNRECOVERABLE): (S.ABORT, 17),
    (S.FAILURE, I.UNRECOVERABLE): (S.ABORT, 18),
    (S.REPLACE_FAILURE, I.UNRECOVERABLE): (S.ABORT, 19),
}
"""Table 2 of the paper: (state, input) -> (next state, transition id). The paper draws
only four transitions to ABORT (4, 17, 18, 19); we read them as from INIT, RUNNING,
FAILURE and REPLACE_FAILURE."""


class StandbyMachine:
    """The NR-MPI process state machine of one rank; no I/O.

    ``fire`` returns the ``(from, to, id)`` of the transition so that the caller can
    record it; an input with no transition from the current state is a ProtocolError.
    """

    def __init__(self):
        self.state = State.INIT

    def fire(self, inp: Input) -> tuple[State, State, int]:
        try:
            nxt, tid = TRANSITIONS[(self.state, inp)]
        except KeyError:
            raise ProtocolError(f"NR-MPI: no transition from {self.state.value} on "
                                f"{inp.value}") from None
        prev, self.state = self.state, nxt
        return prev, nxt, tid

    def set_state(self, state: State) -> tuple[State, State, int]:
        """NR_Set_state: the program declares its data recovered (-> RUNNING)."""
        if state is not State.RUNNING:
            raise ProtocolError(f"NR_Set_state only sets RUNNING, not {state.value}")
        return self.fire(Input.DATA_RECOVERED)


def partner(rank: int, size: int) -> int:
    """The rank that holds ``rank``'s backup copy (another node when ranks are spread)."""
    return (rank + max(1, size // 2)) % size if size > 1 else rank


def choose_round(size: int, failed: set[int], inventories: dict[int, dict]):
    """The newest backup round every rank can restore, or INITIAL.

    ``inventories[r]`` (survivors only) is ``{"own": [rounds], "held": {rank: [rounds]}}``.

    Raises:
        RankFailed: a failed rank's partner failed too (its copies are gone) while the
            failed rank had backed up at least once.
    """
    candidates = None
    for r in range(size):
        if r in failed:
            holder = partner(r, size)
            if holder in failed or holder == r:
                if _ever_backed_up(inventories):
                    raise RankFailed(sorted({r, holder}),
                                     f"rank {r} and its backup partner {holder} both failed: "
                                     f"the backup of rank {r} is lost")
                return INITIAL
            have = set(inventories[holder]["held"].get(r, ()))
        else:
            have = set(inventories[r]["own"])
        candidates = have if candidates is None else candidates & have
    return max(candidates) if candidates else INITIAL


def _ever_backed_up(inventories: dict[int, dict]) -> bool:
    return any(inv["own"] for inv in inventories.values())


def part_holder(units, rank: int) -> int:
    """Who keeps the copies of ``rank``'s parts: the member at its place in the next unit
    of ``units`` (a ``Groups``); with one unit, the member half of it further on (the
    rank itself in a unit of one: no copy)."""
    g = units.group_of(rank)
    members = units.groups[g]
    i = members.index(rank)
    if len(units) == 1:
        return members[(i + len(members) // 2) % len(members)]
    nxt = units.groups[(g + 1) % len(units)]
    return nxt[i % len(nxt)]


def next_backup(iteration: int, planned: bool, every: int, seconds: float | None,
                pacer) -> int:
    """NR_Need_backup's agreement, rank 0's decision at the round of ``iteration``: the
    iteration of the next backup round. ``planned``: the levels' plan decides at each
    iteration (so the next iteration is asked); else every ``every`` iterations, or about
    every ``seconds`` in iterations measured by ``pacer`` (``shared/intervals.Pacer``)."""
    if planned:
        return iteration + 1
    if seconds is None:
        return iteration + max(1, every)
    return pacer.next_after(iteration, seconds)
