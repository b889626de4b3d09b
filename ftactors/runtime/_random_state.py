"""Random generators that a loop draws from but that no checkpoint holds.

A program that seeds a generator before its loop and does not register it, or draws from
numpy's or Python's global generator, gets after a restore the draws of a generator set
up again by the code before the loop (or by a new process), not those that followed the
checkpoint: its answer differs from a failure-free run's, without an error. sim-check
names such state after a failed run (``tools/_simcheck_programs``); a real run is told
as it starts. Between the first two safe points of its first life, a rank compares the
states of the generators bound to the loop's locals and to its unregistered attributes,
and the two global ones; those whose state changed are reported
(``unregistered_random``), and the driver warns once (``_notices``,
``RandomStateWarning``). Only generators are watched: a scratch buffer changes in place
between safe points too, but its loop writes it before reading it, and a warning for it
would teach users to ignore the warning.
"""
from __future__ import annotations

import pickle
import random

import numpy as np

GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
"""The generator types whose state is watched."""

NUMPY_GLOBAL = "numpy's global generator (np.random.rand, np.random.normal, ...)"
RANDOM_GLOBAL = "the random module's global generator (random.random, random.choice, ...)"


class RandomStateWatch:
    """One rank's first life: the generators' states at its first safe point, compared at
    its second (``look``)."""

    def __init__(self):
        self._first: dict[str, tuple[int, bytes]] | None = None

    def look(self, rank, frame) -> list[str] | None:
        """At a safe point of ``rank`` whose loop runs in ``frame``: None at the first;
        at the second, the generators whose state changed since (their names as the
        warning gives them), and the watch is over."""
        now = _states(rank, frame)
        if self._first is None:
            self._first = now
            return None
        return sorted(name for name, (ident, state) in now.items()
                      if self._first.get(name, (ident, state)) != (ident, state)
                      and self._first[name][0] == ident)


def _states(rank, frame) -> dict[str, tuple[int, bytes]]:
    """name -> (object id, pickled state) of the generators outside the checkpoint."""
    registered = set(rank.ft.registered)
    kept = {id(getattr(rank, name, None)) for name in registered}
    found = {f"local {name!r}": value for name, value in frame.f_locals.items()
             if isinstance(value, GENERATORS) and id(value) not in kept}
    found.update({f"self.{name}": value for name, value in vars(rank).items()
                  if isinstance(value, GENERATORS) and name not in registered})
    states = {name: (id(g), pickle.dumps(_state_of(g))) for name, g in found.items()}
    states[NUMPY_GLOBAL] = (0, pickle.dumps(np.random.get_state()))
    states[RANDOM_GLOBAL] = (0, pickle.dumps(random.getstate()))
    return states


def _state_of(generator):
    if isinstance(generator, np.random.Generator):
        return generator.bit_generator.state
    return generator.get_state() if isinstance(generator, np.random.RandomState) \
        else generator.getstate()
