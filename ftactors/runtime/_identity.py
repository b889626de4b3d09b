"""Which run a stored checkpoint set belongs to, and what it is a state of.

A checkpoint directory outlives the run that wrote it and is often shared (a user's
``/shared/ckpt``, an experiment's store): the next run of the same or of another program
writes its sets beside the earlier ones. A set restored into the wrong run is a state of
another computation, and the run goes on from it to a wrong answer without a word. So
every run gets an identity when ``ft.run`` prepares it (:class:`RunIdentity`): a fresh
random *run id*, which names the folder its sets go to and is written into each set's
manifest, and a *fingerprint* of what its state is a state of:

- ``program``: the rank class's module and qualified name (the program and its stack's
  class attributes);
- ``ranks``: the rank count (a set holds one part per rank);
- ``args``: a digest of the pickled ``args`` and ``kwargs`` of ``main()``;
- ``stack``: the protocol names, outermost first (each protocol's state is in every part);
- ``options``: the options that shape the state a snapshot holds (the ``STATE`` role of
  ``runtime/_options``: GroupCoordination's groups, DDVPiggyback's clusters), by value.

Inside a run, recovery reads only the run's own folder and sets whose manifest names its
run id (``_checkpoints.load_own``). ``ft.run(restart_from=DIR)`` resumes a lost job, a run
of another id by nature, so it matches fingerprints instead: it takes the newest set whose
fingerprint equals the new run's, and refuses otherwise with what differs
(:func:`differences`); ``restart_from_any=True`` takes the newest set whatever its
fingerprint (a deliberate change: more iterations, a changed stack), except a set of
another rank count, which cannot be restored at all.

The arguments are compared by their pickled bytes, so a job must be resumed with equal
arguments built the same way: a ``set`` of strings pickles in an order that changes from
one process to the next (hash randomisation), and a dict in its insertion order; such an
argument reads as "args differ" and needs the override.
"""
from __future__ import annotations

import hashlib
import pickle
import uuid
from dataclasses import dataclass

import cloudpickle

from ._options import STATE, with_role
from ._protocol import protocol_classes

OPTION_TEXT_MAX = 80
"""An option value whose repr is longer is fingerprinted by its digest."""


@dataclass(frozen=True)
class RunIdentity:
    """A run's id and fingerprint (see the module docstring)."""

    run_id: str
    fingerprint: dict

    @property
    def root(self) -> str:
        """The folder of this run's sets in a store (``run-<id>``)."""
        return f"run-{self.run_id}"


def new_identity(rank_cls: type, ranks: int, args: tuple, kwargs: dict,
                 options: dict) -> RunIdentity:
    """A new run's identity: a fresh id (random on every transport: two simulated runs
    with one seed are still two runs) and the fingerprint of what it computes."""
    return RunIdentity(uuid.uuid4().hex[:16], fingerprint(rank_cls, ranks, args, kwargs, options))


def fingerprint(rank_cls: type, ranks: int, args: tuple, kwargs: dict, options: dict) -> dict:
    """What a run's state is a state of (see the module docstring)."""
    protos = protocol_classes(rank_cls)
    shaping = sorted(name for name in with_role(protos, STATE) if name in options)
    return {"program": f"{rank_cls.__module__}.{rank_cls.__qualname__}",
            "ranks": int(ranks),
            "args": _digest((tuple(args), sorted(dict(kwargs).items()))),
            "stack": [p.protocol_name for p in protos],
            "options": {name: _option_text(options[name]) for name in shaping}}


def differences(stored: dict | None, wanted: dict) -> list[str]:
    """What differs between a stored set's fingerprint and a run's, in words (empty: the
    set is a state of this run's computation). None: the set has no identity."""
    if stored is None:
        return ["the set has no run identity (written by an older ftactors)"]
    out = []
    if stored.get("program") != wanted["program"]:
        out.append(f"program differs ({stored.get('program')} vs {wanted['program']})")
    if stored.get("ranks") != wanted["ranks"]:
        out.append(f"ranks {stored.get('ranks')} vs {wanted['ranks']}")
    if stored.get("args") != wanted["args"]:
        out.append("args differ (main()'s args/kwargs)")
    if stored.get("stack") != wanted["stack"]:
        out.append(f"stack differs ({'+'.join(stored.get('stack') or ['none'])} vs "
                   f"{'+'.join(wanted['stack']) or 'none'})")
    theirs, ours = stored.get("options", {}), wanted["options"]
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            out.append(f"option {name} differs ({theirs.get(name, 'unset')} vs "
                       f"{ours.get(name, 'unset')})")
    return out


def _digest(obj) -> str:
    """SHA-256 of ``obj`` pickled (cloudpickle for what plain pickle cannot take)."""
    try:
        data = pickle.dumps(obj, protocol=5)
    except Exception:  # lambdas, local classes: whatever pickle refuses
        data = cloudpickle.dumps(obj, protocol=5)
    return hashlib.sha256(data).hexdigest()[:32]


def _option_text(value) -> str:
    text = repr(value)
    if len(text) <= OPTION_TEXT_MAX:
        return text
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
