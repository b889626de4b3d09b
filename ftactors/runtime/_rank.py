"""``ft.Rank``: the base class of every program, the end of the protocol-mixin chain.

A program subclasses ``Rank`` and writes ``async def main(self, *args, **kwargs)``. It may
register the state that must survive failures (``self.register``) and offer safe points
(``async for it in self.iterations(n)``). After a rollback the framework re-enters
``main()`` from the top: the code before the loop runs again with the messages it
received the first time (it must make the same receives), every ``iterations()`` loop
that had finished is skipped, and the loop that was running resumes at the saved
iteration with the registered attributes set back to the checkpoint's values.

Rules that make re-entry correct (the piecewise-determinism assumption, see
docs/architecture/recovery.md): whatever ``main()`` computes must follow from its arguments, its
registered state and the messages it receives; state changed inside a loop and used later
must be registered; the code before a loop is not skipped after a restore (docs/writing.md, "Code
before the loop"); safe-point loops are not nested (use ``range`` for inner loops).
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, ClassVar

from ._protocol import Protocol
from ._stale_locals import call_site, unfilled_report


class Rank(Protocol):
    """One MPI-like rank. Attributes set by the framework before ``main()``:

    * ``rank``, ``size``: this rank's number and the number of ranks;
    * ``comm``: the world communicator;
    * ``ft``: the rank's endpoint (for protocols: sends, snapshots, events);
    * ``run_identity``: the run's id and fingerprint (``_identity.RunIdentity``): the
      protocols' stored sets go to its folder of a store.
    """

    _ft_rank_class: ClassVar[bool] = True
    _ft_unsaved_watch = None  # a first life's ``_unsaved_state.UnsavedStateWatch``, if any
    _ft_register_sites: dict | None = None  # after a restore: name -> the local register got

    rank: int
    size: int

    async def main(self, *args, **kwargs) -> Any:
        raise NotImplementedError("a Rank subclass must define async def main(self, ...)")

    def register(self, name: str, initial: Any = None) -> Any:
        """Declare ``self.<name>`` part of the state that survives failures.

        Returns ``initial`` itself and sets ``self.<name>`` to it, except when
        ``main()`` is re-entered after a restore and has not reached its resumed loop
        yet: then the checkpoint's value is written into ``initial`` in place (arrays,
        views of arrays, lists, dicts, sets, deques, bytearrays, ``array.array``), so a
        local bound to it, its views and requests made on it see the checkpoint's state;
        where ``initial`` cannot take it (a number, a tuple, an array of another shape
        or dtype) the checkpoint's value is returned instead and the run warns, naming
        the locals that still hold ``initial`` (``StaleLocalWarning``). The resumed loop
        sets it back to the checkpoint's value again, whatever the code before it did.
        Rebinding ``self.<name>`` later is fine: snapshots read the attribute.
        """
        if not name.isidentifier():
            raise ValueError(f"register() needs an attribute name, got {name!r}")
        value = self.ft.register(name, initial)
        setattr(self, name, value)
        if value is not initial:  # a restore that could not write into ``initial``
            if self._ft_register_sites is None:
                self._ft_register_sites = {}
            self._ft_register_sites[name] = call_site(sys._getframe(1))
        return value

    def iterations(self, n: int) -> "SafePoints":
        """``async for i in self.iterations(n)``: iterations 0..n-1 with a safe point at
        the top of each; after a restore it resumes where the snapshot was taken."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"iterations() needs a count >= 0, got {n!r}")
        return SafePoints(self, n)

    @property
    def restored(self) -> bool:
        """True while ``main()`` runs again after a restore."""
        return self.ft.restored

    def event(self, kind: str, **detail) -> None:
        """Record an application event in the run's timeline."""
        self.ft.events.record(kind, **detail)


class SafePoints:
    """The async iterator behind ``Rank.iterations``."""

    __slots__ = ("_rank", "_n", "_i")

    def __init__(self, rank: Rank, n: int):
        self._rank = rank
        self._n = n
        self._i = 0

    def __aiter__(self):
        ft = self._rank.ft
        self._i = ft.enter_loop(self._n)
        if ft.unfilled:  # a restore that could not write into the program's objects
            sites, self._rank._ft_register_sites = self._rank._ft_register_sites or {}, None
            stale = unfilled_report(ft.unfilled, sites, sys._getframe(1))
            ft.unfilled = {}
            if stale:
                ft.report("restored_not_in_place", stale=stale,
                          position=ft.resumed_at)
        return self

    async def __anext__(self) -> int:
        ft = self._rank.ft
        if self._i >= self._n:
            ft.exit_loop(self._n)
            raise StopAsyncIteration
        i = self._i
        self._i = i + 1
        strike = ft.strikes.pop(i, None)
        if strike is not None:  # chaos strikes before the safe point is offered
            await strike()
        ft.at_safe_point(i)
        watch = self._rank._ft_unsaved_watch
        if watch is not None:
            changed = watch.look(self._rank, sys._getframe(1))
            if changed is not None:
                self._rank._ft_unsaved_watch = None
                if changed:
                    ft.report("unsaved_state", names=changed, iteration=i)
        await self._rank.on_safe_point(i)
        return i


def check_rank_class(cls) -> None:
    """Raise ConfigError-style TypeError unless ``cls`` is a Rank with ``async def main``."""
    if not (isinstance(cls, type) and issubclass(cls, Rank)):
        raise TypeError(f"ft.run needs a subclass of ft.Rank, got {cls!r}")
    main = getattr(cls, "main", None)
    if main is None or main is Rank.main or not inspect.iscoroutinefunction(main):
        raise TypeError(f"{cls.__qualname__} must define 'async def main(self, ...)'")
