"""A restored rank on its way back to its resume point.

Theory of operation
-------------------
A restore re-enters ``main()`` from the top. The code before the resumed
``iterations()`` loop (set-up, a halo exchange, a ``split``, the loops that had finished,
the code between them) runs again; its sends are suppressed (they happened before the
snapshot) and its receives are served again with the messages it received in its first
life, which the snapshot logged in order (the *pre-loop messages*). Two things can go
wrong there, and both used to give silently wrong answers:

* That code writes registered attributes (``self.halo = await comm.recv(...)``, or
  ``self.u[0] = ...`` in place), so the state the loop resumes with is no longer the
  checkpoint's. Hence the registered values are put back when the resumed loop is
  reached, whatever the code before it did to them.
* The program goes on with its own objects, not with the attributes: a port of an MPI
  program writes ``A = np.zeros(...); self.register("A", A)`` and its loop uses the
  local ``A``, views of it and persistent requests made on its buffers (mpi4py's
  ``Send_init(A[1], ...)``), as it did in its first life. So ``register`` writes the
  checkpoint's contents into the very object it is given, in place (``put_back``:
  arrays, Fortran-order ones and views included, whose base's memory is written; lists,
  dicts, sets, deques, bytearrays, ``array.array``, tuples' elements), and returns that
  object; the attribute is bound to it, and at the resumed loop it is refilled again
  from an untouched copy loaded before the first one was handed out. Where the object
  cannot take the checkpoint's contents (a number or another immutable, an array of
  another shape or dtype), ``register`` returns the checkpoint's value and ``unfilled``
  says which and why: the runtime names the locals that still hold the program's own
  object and warns (``runtime/_stale_locals``).
* That code does not make the receives it made in its first life (it is skipped when
  ``self.restored``, or it depends on something that changed). A pre-loop message left
  over would be handed to the next matching receive inside the loop, and every later one
  would be off by one; a receive the first life did not make would take a message meant
  for the loop, or wait for one that is never sent again. Hence, until the resume point,
  every receive must be served at once by a pre-loop message (else ``ProtocolError``
  there), and any pre-loop message not received again by the resumed loop is a
  ``ProtocolError`` at the loop, naming the messages (source, tag, count).

Under piecewise determinism neither check can fire for a program that runs the same code
before the loop: its k-th receive is the first life's k-th, and the pre-loop messages
are queued first, in the order it received them, so each receive takes its own again.

A snapshot taken "now" before the first loop (``Endpoint.state_now``: DDVPiggyback's cut)
has no resume point: the code before the loop goes on past the cut and receives from the
network once the pre-loop messages are all received again.
"""
from __future__ import annotations

import array
import collections
import pickle
from collections import Counter
from typing import Any

import numpy as np

from ..base import ProtocolError
from ._constants import ANY_SOURCE, ANY_TAG
from ._envelope import COLLECTIVE_SUFFIX, Envelope


class Reentry:
    """What a restored rank must find again before its resume point.

    Args:
        rank: this rank (for the errors).
        resume: the saved position ``(loop index, iteration)``, None for a snapshot
            taken before the first loop.
        again: the pre-loop messages, in the order the first life received them.
        registered, buffers: the snapshot's pickled registered values and their
            out-of-band buffers (a transfer's, or those of a snapshot taken from a base,
            ``Endpoint._take_base``: the values are views of them), None when the
            pickle holds them.
    """

    def __init__(self, rank: int, resume: tuple[int, int] | None, again: list[Envelope],
                 registered: bytes, buffers: list | None = None):
        self.rank = rank
        self.resume = resume
        self._left = {id(env): env for env in again}
        self._registered = registered
        self._buffers = buffers
        self.values: dict[str, Any] = pickle.loads(registered, buffers=buffers)
        """The checkpoint's registered values: what ``register`` hands out, and what
        the resumed loop goes on with."""
        self._pristine: dict[str, Any] | None = None  # loaded before any was handed out
        self._handed: set[str] = set()
        self.unfilled: dict[str, tuple[str, Any]] = {}
        """Registered names whose program object could not take the checkpoint's value
        in place: name -> (why, the program's object)."""

    def value(self, name: str, initial: Any) -> Any:
        """What ``register(name, initial)`` gives the code before the resume point: the
        checkpoint's value (so expensive set-up can be skipped), written into ``initial``
        in place when it can take it (then ``initial`` itself is returned), else the
        checkpoint's own object (``unfilled`` says why); ``initial`` when the checkpoint
        has no such name."""
        if name not in self.values:
            return initial
        if self._pristine is None:
            buffers = self._buffers
            self._pristine = pickle.loads(self._registered, buffers=(
                None if buffers is None else [bytearray(b) for b in buffers]))
        self._handed.add(name)
        saved = self.values[name]
        if put_back(initial, saved) is initial:
            self.values[name] = initial
            self.unfilled.pop(name, None)
        else:
            self.unfilled[name] = (why_not_in_place(initial, saved), initial)
        return self.values[name]

    def took(self, env: Envelope | None, source: int, tag: int) -> bool:
        """A receive for (``source``, ``tag``) found ``env`` queued (None: nothing).
        Returns whether the re-run is over (no resume point, every pre-loop message
        received again): receives then wait for the network as usual.

        Raises:
            ProtocolError: ``env`` is not a pre-loop message (the first life did not
                make this receive here).
        """
        if env is not None and self._left.pop(id(env), None) is not None:
            return self.resume is None and not self._left
        wanted = (f"source {'any' if source == ANY_SOURCE else source}, "
                  f"tag {'any' if tag == ANY_TAG else tag}")
        left = f"; it still had to receive {describe(self._left.values())}" if self._left else ""
        raise ProtocolError(
            f"rank {self.rank}, restored {self._where()}: the code before that loop makes "
            f"a receive ({wanted}) that it did not make there in its first life{left}. "
            f"{RULE}")

    def at_loop(self) -> dict[str, Any]:
        """The resumed loop is reached (or, with no resume point, the first loop): returns
        the registered values to bind, with the checkpoint's contents.

        Raises:
            ProtocolError: pre-loop messages were not received again.
        """
        if self._left:
            raise ProtocolError(
                f"rank {self.rank}, restored {self._where()}: the code before that loop "
                f"did not receive again what it received there in its first life: "
                f"{describe(self._left.values())}. {RULE}")
        for name in self._handed:
            held = self.values[name]
            self.values[name] = put_back(held, self._pristine[name])
            if self.values[name] is not held and name not in self.unfilled:
                self.unfilled[name] = (why_not_in_place(held, self._pristine[name]), held)
        return self.values

    def _where(self) -> str:
        if self.resume is None:
            return "to a state before its first iterations() loop"
        index, iteration = self.resume
        loop = "its iterations() loop" if index == 0 else f"its iterations() loop #{index + 1}"
        return f"at iteration {iteration} of {loop}"


RULE = ("After a restore the code before the loop runs again and gets the same messages "
        "back: it must make the same receives (do not skip it when self.restored); the "
        "registered attributes are set back to the checkpoint's values when the loop "
        "resumes.")


def describe(envs) -> str:
    """``envs`` counted by source, tag and communicator, in the order first seen."""
    counts = Counter((env.src, env.tag, env.comm) for env in envs)
    said = []
    for (src, tag, comm), n in counts.items():
        collective = comm.endswith(COLLECTIVE_SUFFIX)
        name = comm[:-len(COLLECTIVE_SUFFIX)] if collective else comm
        said.append(f"{n} message{'s' if n != 1 else ''} from rank {src} (tag {tag}, "
                    f"communicator {name!r}{', a collective' if collective else ''})")
    return ", ".join(said)


MUTABLE = (np.ndarray, list, dict, set, tuple, bytearray, array.array, collections.deque)
"""The containers ``put_back`` writes into in place (a tuple: its elements)."""

SCALARS = (int, float, complex, str, bytes, bool, type(None), frozenset)
"""Immutables: one is "put back" only when it already equals the saved value."""


def put_back(dst: Any, src: Any, memo: dict | None = None) -> Any:
    """``dst`` with the contents of ``src`` (a saved copy of what ``dst`` was), copied
    in place where the structure still matches, so whatever holds ``dst`` or a view of
    it sees them; else ``src``. ``memo``: the containers already put back, by id
    (shared and self-containing structures)."""
    kind = type(dst)
    if type(src) is not kind:
        return src
    if kind in SCALARS:
        return dst if dst == src or dst != dst and src != src else src  # NaN is NaN
    if kind not in MUTABLE:
        return src
    memo = {} if memo is None else memo
    if id(dst) in memo:
        return memo[id(dst)]
    memo[id(dst)] = dst
    if kind is np.ndarray:
        if dst.shape == src.shape and dst.dtype == src.dtype and dst.flags.writeable:
            np.copyto(dst, src)  # a view writes its base's memory
        else:
            memo[id(dst)] = src
    elif kind is list:  # appended to, or shortened: the rest as it was
        dst[:] = [put_back(d, s, memo) for d, s in zip(dst, src)] + src[len(dst):]
    elif kind is dict:
        kept = {k: put_back(dst[k], v, memo) if k in dst else v for k, v in src.items()}
        dst.clear()
        dst.update(kept)
    elif kind is set:
        dst.clear()
        dst.update(src)
    elif kind is bytearray:
        dst[:] = src
    elif kind is array.array:
        if dst.typecode == src.typecode:
            dst[:] = src
        else:
            memo[id(dst)] = src
    elif kind is collections.deque:
        if dst.maxlen == src.maxlen:
            kept = [put_back(d, s, memo) for d, s in zip(dst, src)] + list(src)[len(dst):]
            dst.clear()
            dst.extend(kept)
        else:
            memo[id(dst)] = src
    else:
        back = tuple(put_back(d, s, memo) for d, s in zip(dst, src)) + src[len(dst):]
        if len(back) != len(dst) or any(b is not d for b, d in zip(back, dst)):
            memo[id(dst)] = back
    return memo[id(dst)]


def why_not_in_place(dst: Any, src: Any) -> str:
    """Why ``put_back(dst, src)`` could not write ``src`` into ``dst``, in words."""
    mine, saved = _a(type(dst).__name__), _a(type(src).__name__)
    if type(src) is not type(dst):
        return f"the checkpoint holds {saved} there, and yours is {mine}"
    if isinstance(dst, np.ndarray):
        if dst.shape != src.shape:
            return (f"the checkpoint's array has shape {src.shape} and yours "
                    f"{dst.shape}: an array cannot change its shape in place")
        if dst.dtype != src.dtype:
            return f"the checkpoint's array is of {src.dtype} and yours of {dst.dtype}"
        if not dst.flags.writeable:
            return "your array is read-only"
    if isinstance(dst, array.array) and dst.typecode != src.typecode:
        return f"the checkpoint's array is of type {src.typecode!r} and yours {dst.typecode!r}"
    if isinstance(dst, collections.deque) and dst.maxlen != src.maxlen:
        return f"the checkpoint's deque has maxlen {src.maxlen} and yours {dst.maxlen}"
    if isinstance(dst, (*SCALARS, tuple)):
        return f"{mine} cannot be changed in place"
    return f"{mine} is not one of the objects a restore writes into in place"


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"
