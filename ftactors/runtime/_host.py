"""Hosting one rank: its user object, its endpoint and its ``main()`` task.

A ``RankHost`` is transport-agnostic: the local and sim transports keep hosts as plain
objects in one process, the Ray transport wraps one in each actor. The coordinator talks
to a host only through ``run``, ``collect``, ``progress`` and ``call`` (pause, resume,
and the protocols' own ``ft_rpc_<name>`` methods), so the three transports share one code
path above the wire.

Recovery in place: ``pause`` cancels ``main()`` and the protocol tasks and parks the
rank; ``resume`` installs a snapshot as a new incarnation and re-enters ``main()``. A
replacement host gets its snapshot with ``run(..., restore=...)`` and installs it before
it takes any message, so nothing from the new incarnations of its peers is counted
against a fresh state.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import cloudpickle

from ..facade import Communicator
from ..engine import Endpoint, Link
from ..base import CHECKPOINT_KINDS, ProtocolError
from ._identity import RunIdentity
from ._protocol import protocol_classes
from ._stale_locals import unset_after_restore
from ._unsaved_state import UnsavedStateWatch
from ._trace import TraceBuffer

WORLD = "w"
"""The world communicator's id."""


@dataclass
class RankSpec:
    """Everything a host needs to become rank ``rank`` of a run."""

    rank_cls: type
    rank: int
    size: int
    epoch: int = 0
    trace: bool = False
    options: dict = field(default_factory=dict)
    incarnation: int = 0
    run: RunIdentity | None = None  # the run's identity: where its stored sets go
    chaos: tuple = ()  # ``_chaos.Strike``s: what this host does to itself (``ChaosFabric``)

    @property
    def doomed(self) -> bool:
        """Whether chaos plans this host's death (a disconnect is none)."""
        return any(strike.action == "die" for strike in self.chaos)


def ahead(position, line) -> bool:
    """Whether safe-point ``position`` is past ``line`` (None: the start of the run)."""
    return position is not None and (line is None or tuple(position) > tuple(line))


class Killed(BaseException):
    """Raised inside a local/sim rank that chaos kills: it stops dead, like a process."""


class RankHost:
    """One rank's runtime; ``die`` is how the transport makes it vanish."""

    def __init__(self, spec: RankSpec, link: Link, die: Callable[[], None]):
        self.spec = spec
        self.link = link
        self._die = die
        self.obj = spec.rank_cls()
        self.obj.rank = spec.rank
        self.obj.size = spec.size
        self.obj.options = dict(spec.options)
        self.obj.incarnation = spec.incarnation
        self.obj.run_identity = spec.run
        self.ep = Endpoint(spec.rank, spec.size, link, self.obj, epoch=spec.epoch,
                           trace=TraceBuffer() if spec.trace else None,
                           record_deliveries=any(p.records_deliveries
                                                 for p in protocol_classes(spec.rank_cls)))
        self.ep.spawn = self.spawn
        self._die_at_return = None  # the plan's kill due as main() returns, if any
        for strike in spec.chaos:  # the first strike at an iteration is the one there
            if strike.at == "return":
                self._die_at_return = functools.partial(self.die, moment="return",
                                                        kill=strike.kill)
            elif strike.at not in self.ep.strikes:
                act = self.die if strike.action == "die" else self.disconnect
                self.ep.strikes[strike.at] = functools.partial(act, strike.at, kill=strike.kill)
        self.obj.ft = self.ep
        self.obj.comm = Communicator(self.ep, WORLD, range(spec.size))
        self._main: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._failure: BaseException | None = None
        self._parked: asyncio.Future | None = None
        self._installed: asyncio.Future | None = None
        self._ready: asyncio.Future | None = None
        self._started = False

    # ------------------------------------------------------------------- running
    async def run(self, args: tuple, kwargs: dict, restore: Any = None) -> dict:
        """Run ``main()`` to the end, re-entering it after every resume; never raises for
        an application error: returns ``{"ok": False, "error", "traceback"}`` instead.

        ``restore``: a shared snapshot handle (``Link.share``) this replacement starts
        from, or a survivor that had finished is rolled back to.
        """
        ep = self.ep
        ep.events.record("start", epoch=ep.epoch, incarnation=self.spec.incarnation)
        ep.rank_task = asyncio.current_task()  # whose waits are the rank's (``_waits``)
        self._parked = None
        self._ready = asyncio.get_running_loop().create_future()
        try:
            await self._begin(restore)
            value = await self._main_to_end(args, kwargs)
            ep.rank_task = asyncio.current_task()
            if self._die_at_return is not None:
                die, self._die_at_return = self._die_at_return, None
                await die()
            await self.obj.on_finish()
        except Killed:
            raise
        except Exception as exc:  # an application (or protocol) error: report, don't crash
            return self._error(unset_after_restore(exc, ep.resumed_at)
                               or f"{type(exc).__name__}: {exc}", exc)
        return self._returned(value)

    async def _begin(self, restore: Any) -> None:
        """Start the rank (``on_start`` once per host), install ``restore`` if given,
        open the endpoint and say the rank is ready (``ready``)."""
        ep = self.ep
        if not self._started:
            self._started = True
            await self.obj.on_start()
            ep.started()
        if restore is not None:
            # the incarnation the restore makes this rank: a new host's own, or a new
            # one for a rank that had finished and runs again (a survivor rolled back)
            await self._install(restore, restore["peer_epochs"][self.spec.rank])
        ep.open()
        if restore is None and self.spec.incarnation == 0:
            self.obj._ft_unsaved_watch = UnsavedStateWatch(type(self.obj))
        self._ready.set_result(None)

    async def _main_to_end(self, args: tuple, kwargs: dict) -> Any:
        """``main()``'s return value, with every pause and restore in between: a paused
        rank waits for its restore, installs it and runs ``main()`` again."""
        ep = self.ep
        while True:
            if self._parked is not None:
                # paused: wait for the restore (a pause that came while the last one
                # was installed holds too: main() must not run that restore's state
                # while the round that paused it gives every rank another)
                ep.rank_task = asyncio.current_task()
                handle, epoch = await self._parked
                self._parked = None
                await self._install(handle, epoch)
                continue
            self._main = ep.rank_task = asyncio.ensure_future(self.obj.main(*args, **kwargs))
            try:
                return await self._main
            except asyncio.CancelledError as exc:
                if self._failure is not None:
                    raise self._failure from None
                if self._parked is None:
                    if self._main.cancelling():  # cancelled from outside: the run ends
                        raise
                    # main() itself raised it: an application error like any other
                    raise RuntimeError("main() raised asyncio.CancelledError") from exc

    def _returned(self, value: Any) -> dict:
        """``run``'s outcome for ``main()``'s return value: it must travel pickled."""
        unpicklable = _unpicklable(value)
        if unpicklable is not None:
            return self._error(f"{type(unpicklable).__name__}: main() returned a "
                               f"{type(value).__name__} that cannot be pickled "
                               f"({unpicklable}); a rank's result travels to the driver "
                               f"pickled, on every transport: return plain data",
                               unpicklable)
        self.ep.flush()
        # the position says whether the rank ever offered a safe point (None: never)
        self.ep.events.record("finish", position=self.ep.position)
        return {"ok": True, "value": value}

    def _error(self, message: str, exc: BaseException) -> dict:
        """``run``'s outcome for an error of the rank: ``message`` and ``exc``'s
        traceback, formatted here (the driver may be another process)."""
        self.ep.flush()
        self.ep.events.record("error", error=message)
        return {"ok": False, "error": message,
                "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}

    async def _install(self, restore: dict, epoch: int) -> None:
        """Become incarnation ``epoch`` from ``restore``: ``{"snapshot": share handle,
        "peer_epochs": [epoch of every rank, this one's included]}``, and optionally
        ``"notes"``: what the recovery policy tells the restored protocols beyond the
        snapshot (e.g. which messages their peers already have), read in ``on_restored``,
        and ``"line"``: the recovery line's position; a snapshot ahead of it is refused."""
        ep = self.ep
        blob = await self.link.fetch(restore["snapshot"])
        parts = ep.load(blob)
        if "line" in restore and ahead(parts["position"], restore["line"]):
            raise ProtocolError(
                f"rank {self.spec.rank} refused a snapshot at position {parts['position']}: "
                f"it is ahead of the recovery line chosen, {restore['line'] or 'the start'} "
                f"(a state of another execution)")
        ep.set_peer_epochs(restore["peer_epochs"])  # every rank's epoch, in rank order
        ep.restore(parts, epoch)
        self.obj._ft_unsaved_watch = None  # the first life is over
        if parts["position"] not in (None, (0, 0)) and not ep.registered:
            # resumed past the top of the first loop with nothing registered: the program
            # goes on with every variable as main() first set it (``_notices`` warns in
            # the driver); at the first loop's top nothing was lost yet
            ep.report("restored_unregistered", position=parts["position"],
                      incarnation=self.spec.incarnation)
        ep.restored_from = (parts["position"], blob)
        ep.restored_line = restore.get("line")
        ep.restore_notes = restore.get("notes", {})
        self.obj.comm = Communicator(ep, WORLD, range(self.spec.size))
        ep.events.record("restored", epoch=epoch, position=parts["position"])
        await self.obj.on_restored()
        ep.open()
        if self._installed is not None and not self._installed.done():
            self._installed.set_result(None)

    def spawn(self, coro) -> asyncio.Task:
        """Run protocol work beside ``main()``; an exception in it fails the rank."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        self._failure = task.exception()
        if self._main is not None and not self._main.done():
            self._main.cancel()

    async def die(self, iteration: int | None = None, moment: str | None = None,
                  kill: int | None = None) -> None:
        """Chaos: this rank's process dies now, at the top of ``iteration`` (or at
        ``moment``: ``"return"``, as ``main()`` returns), firing the plan's kill ``kill``
        (None: the job's loss); its last word goes to the coordinator. Nothing (not even
        a pause) can cancel a planned death."""
        where = {"iteration": iteration} if moment is None else {"moment": moment}
        if kill is not None:
            where["kill"] = kill
        event = self.ep.events.make("killed", how="chaos", **where,
                                    incarnation=self.spec.incarnation)
        try:
            await asyncio.shield(self.link.report_now(event))
        finally:
            self._die()

    async def disconnect(self, iteration: int, kill: int) -> None:
        """Chaos: every direct connection of this rank closes now, at the top of
        ``iteration``, firing the plan's kill ``kill`` (a network fault, not a death: the
        channels reconnect)."""
        self.link.report(self.ep.events.make("disconnected", how="chaos", iteration=iteration,
                                             kill=kill, incarnation=self.spec.incarnation))
        self.link.cut(None, 0.0)

    # ------------------------------------------------------- coordinator calls
    async def call(self, name: str, *args) -> Any:
        """A coordinator request: ``pause``/``resume`` here, else the rank's
        ``ft_rpc_<name>`` method (protocols add those)."""
        if name in ("pause", "resume", "ready"):
            return await getattr(self, name)(*args)
        if name == "finalize":
            return await self.obj.on_finalize()
        method = getattr(self.obj, f"ft_rpc_{name}", None)
        if method is None:
            raise ProtocolError(f"rank {self.spec.rank} has no coordinator request {name!r}")
        result = method(*args)
        return await result if inspect.isawaitable(result) else result

    async def pause(self) -> None:
        """Stop ``main()`` and the protocol tasks; the rank waits for ``resume``."""
        if self._parked is None:
            self._parked = asyncio.get_running_loop().create_future()
        self.cancel_all()

    async def ready(self) -> None:
        """Return once ``run`` has started and installed its snapshot (if any)."""
        while self._ready is None:
            await asyncio.sleep(0)
        await asyncio.shield(self._ready)

    async def resume(self, restore: dict, epoch: int) -> None:
        """Install ``restore`` (see ``_install``) as incarnation ``epoch``, re-enter
        ``main()``; returns once the state is installed."""
        if self._parked is None or self._parked.done():
            raise ProtocolError(f"rank {self.spec.rank} was resumed without being paused")
        self._installed = asyncio.get_running_loop().create_future()
        self._parked.set_result((restore, epoch))
        await self._installed

    # ------------------------------------------------------------------ queries
    def collect(self) -> dict:
        """Events, trace rows and counters recorded so far (events are handed over)."""
        return {
            "rank": self.spec.rank,
            "events": self.ep.events.drain(),
            "trace": self.ep.trace.rows() if self.ep.trace is not None else None,
            "stats": self.ep.stats(),
        }

    def progress(self) -> tuple:
        """``(position, {checkpoint kind: events recorded}, wait state)``: for progress
        reports and the deadlock watch (``Endpoint.wait_state``)."""
        counts = self.ep.events.counts
        return (self.ep.position, {k: counts[k] for k in CHECKPOINT_KINDS if k in counts},
                self.ep.wait_state())

    def cancel_all(self) -> None:
        """Cancel ``main()``, the protocol tasks and the tasks of the program's
        nonblocking operations (``Endpoint.program_tasks``), which would otherwise wait
        for ever on receives a restore dropped."""
        for task in [*self._tasks, *self.ep.program_tasks]:
            task.cancel()
        if self._main is not None:
            self._main.cancel()


def _unpicklable(value: Any) -> Exception | None:
    """The error pickling ``value`` raises, or None when it pickles. Ray pickles a
    rank's result to return it; local and sim check the same, so that a result that
    works there works on Ray."""
    try:
        cloudpickle.dumps(value, protocol=5)
    except Exception as exc:  # whatever the object's __reduce__ raises
        return exc
    return None
