"""``ft.run`` / ``ft.run_async`` / ``ft.launch``: make the run's settings, pick a
transport, run the job.

The three take the same arguments, written once as ``RunConfig.of``'s signature
(``runtime/_config``): each makes one ``RunConfig`` from them (every check happens there,
before any actor or task starts) and hands it on whole, to the fabric of its transport
and to the ``Coordinator``.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import textwrap

from .base import ConfigError, ProtocolError
from .protocols import PROTOCOLS
from .runtime import (Coordinator, RunConfig, RunResult, background, notices, options_text,
                      write_trace)


def _fabric(config: RunConfig):
    """The fabric of ``config.transport`` (Ray is imported only when it is chosen)."""
    if config.transport == "local":
        from .transports.local import LocalFabric
        return LocalFabric(config.options)
    if config.transport == "sim":
        from .transports.sim import SimFabric
        return SimFabric(config.options, config.seed)
    from .transports.ray import RayFabric
    return RayFabric(config.options, config.address)


def _prepare(config: RunConfig):
    """A zero-argument coroutine factory that runs the job ``config`` describes (its
    ``coordinator()`` makes the run's coordinator without starting it)."""
    def coordinator() -> Coordinator:
        return Coordinator(_fabric(config), config)

    async def job(c: Coordinator | None = None) -> RunResult:
        c = c or coordinator()
        notices.at_start(config.rank_cls, config.options, config.spares)
        result = await _within(c, config.timeout_s)
        notices.after_run(config.rank_cls, config.kills, result.metrics, result.events)
        if config.trace is not None:
            result.metrics["trace_rows"] = write_trace(config.trace, result.trace_rows)
            result.metrics["trace_path"] = str(config.trace)
        return result

    job.coordinator = coordinator
    return job


def _takes_run_settings(entry):
    """``entry(config)`` as a public entry point that takes ``ft.run``'s arguments: they
    are written once, as ``RunConfig.of``'s signature, which the entry point shows."""
    if inspect.iscoroutinefunction(entry):
        @functools.wraps(entry)
        async def public(rank_cls, ranks, **settings):
            return await entry(RunConfig.of(rank_cls, ranks, **settings))
    else:
        @functools.wraps(entry)
        def public(rank_cls, ranks, **settings):
            return entry(RunConfig.of(rank_cls, ranks, **settings))
    shown = inspect.signature(RunConfig.of, eval_str=True)
    public.__signature__ = shown.replace(
        return_annotation=inspect.signature(entry, eval_str=True).return_annotation)
    del public.__wrapped__  # (its signature is RunConfig.of's, not entry's)
    return public


async def _within(c: Coordinator, timeout_s: float | None) -> RunResult:
    """``c.run()``, given up after ``timeout_s`` (a ``TimeoutError``). The timeout's
    timer is the coordinator's watching (``background``): it wakes no rank, so a
    simulated deadlock is found at its moment, not when the timeout comes."""
    task = asyncio.ensure_future(c.run())  # (made first: the ranks' timers stay theirs)
    try:
        with background():
            done, _ = await asyncio.wait((task,), timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        waits = c.watch.last_waits()  # (before the ranks are stopped)
        task.cancel()
        await asyncio.wait((task,))
        if not task.cancelled() and task.exception() is None:
            return task.result()  # it ended as it was cancelled
        exc = TimeoutError(f"the run did not finish within {timeout_s} s" + "".join(
            f"\n  {w}" for w in waits.values()))
        exc.events = list(c.events.events)  # the coordinator's timeline so far
        exc.waits = waits  # each rank's wait in words (``DeadlockWatch.last_waits``)
        raise exc from None
    return task.result()


class Run:
    """A job started by ``ft.launch``: ask it for checkpoints and migrations while it
    runs; ``await run`` (or ``run.result()``) gives its ``RunResult``."""

    def __init__(self, coordinator: Coordinator, task: asyncio.Task):
        self._c = coordinator
        self._task = task

    async def checkpoint(self) -> dict:
        """Take a coordinated checkpoint now; returns its position, size and timings
        once every rank's part is stored."""
        return await self._while_running(self._service("checkpoint")())

    async def migrate(self, rank: int, node: str | None = None) -> dict:
        """Move rank ``rank`` to a new actor on Ray node ``node`` (a node id; None: any)
        while the job runs; returns the move's timings."""
        return await self._while_running(self._service("migrate")(rank, node))

    async def nodes(self) -> list[str]:
        """The ids of the nodes ranks can run on."""
        await self._while_running(self._c.wired.wait())
        return self._c.fabric.nodes()

    async def node_of(self, rank: int) -> str:
        """The node rank ``rank`` runs on now."""
        await self._while_running(self._c.wired.wait())
        return await self._c.fabric.node_of(self._c.handles[rank])

    async def result(self) -> RunResult:
        return await self._task

    def clock(self) -> float:
        """Seconds since the run started: the clock of ``RunResult.events``, to stamp
        events of one's own (a node kill) on the run's timeline."""
        return self._c.fabric.clock()

    def __await__(self):
        return self._task.__await__()

    def _service(self, name: str):
        method = getattr(self._c.policy, name, None)
        if method is None:
            raise ProtocolError(f"run.{name}() needs a protocol that provides it in "
                                f"{self._c.rank_cls.__qualname__}'s stack (ReadyMessageFlush)")
        return method

    async def _while_running(self, coro):
        """``coro``'s result; if the run ends first, its outcome (error) instead."""
        work = asyncio.ensure_future(coro)
        await asyncio.wait([work, self._task], return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            return work.result()
        work.cancel()
        self._task.result()  # raises the run's error
        raise ProtocolError("the run ended before the request was served")


@_takes_run_settings
async def launch(config: RunConfig) -> Run:
    """Start a job like ``run_async`` (same arguments) and return at once with a ``Run``
    handle to talk to it. Not for ``transport="sim"`` (its virtual clock runs the job in
    a loop of its own): there, ranks request checkpoints themselves."""
    if config.transport == "sim":
        raise ConfigError("ft.launch does not drive the sim transport; use ft.run and "
                          "checkpoint options or self.request_checkpoint()")
    job = _prepare(config)
    c = job.coordinator()
    return Run(c, asyncio.ensure_future(job(c)))


@_takes_run_settings
async def run_async(config: RunConfig) -> RunResult:
    job = _prepare(config)
    if config.transport == "sim":
        from .transports import run_virtual
        return await asyncio.to_thread(run_virtual, job)
    return await job()


@_takes_run_settings
def run(config: RunConfig) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("ft.run() was called inside a running event loop; "
                           "use 'await ft.run_async(...)'")
    job = _prepare(config)
    if config.transport == "sim":
        from .transports import run_virtual
        return run_virtual(job)
    return asyncio.run(job())


_RUN_DOC = """Run ``rank_cls.main`` on ``ranks`` ranks and return every rank's result.

    Keyword arguments (all optional):
        args, kwargs: passed to every rank's ``main()``.
        transport: ``"ray"`` (actors; starts an embedded local Ray when none is running,
            or joins the job's cluster in a script run by ``ray job submit``; the default), ``"local"`` (asyncio tasks in this process) or ``"sim"``
            (deterministic discrete-event simulation on a virtual clock).
        address: a Ray cluster to join (``"auto"``, ``"ray://host:10001"``, ``"host:port"``).
        spares: standby ranks for protocols that promote them.
        seed: seed of the sim's network jitter and of random chaos.
        chaos: a failure plan (``ft.Chaos``).
        timeout_s: give up (and stop every rank) after this many seconds.
        trace: write every message to this Parquet file.
        restart_from: a store (a directory or pyarrow URI) holding checkpoint sets: every
            rank starts from the newest complete set of this job's fingerprint (program,
            ranks, arguments, stack: a restart after the job was lost); with the option
            ``restart_from_any=True``, from the newest set of this rank count.
        **options: the core's options, and those of the protocols in ``rank_cls``'s
            stack (an option of a protocol not in the stack is refused), each declared
            once (``runtime/_options``; ``ftactors options [STACK]`` lists them too):

{options}

    Raises:
        ConfigError: bad arguments (nothing was started), or ``restart_from`` holds no
            set of this job (the message says what differs).
        TypeError: ``rank_cls`` is not an ``ft.Rank`` with ``async def main``.
        RankError: a rank's ``main()`` raised; carries its traceback.
        RankFailed: a rank died and no protocol recovered it.
        Deadlock: every live rank waits and nothing in flight can wake any of them (the
            program's own deadlock, or a protocol's round): raised at once, naming each
            rank's wait and position (``waits``, ``details``).
        TimeoutError: ``timeout_s`` passed (its ``events``: the coordinator's timeline so
            far, to see where the run stopped; ``waits``: what each rank was waiting
            for, ``busy`` for a rank that ran).

    Warns:
        FaultToleranceWarning: the run tests or protects less than it seems to (a kill
            that never fired, a rank restored with nothing registered, a protocol that
            never checkpoints, no spares): see ``runtime/_notices``.
    """
_RUN_DOC = _RUN_DOC.format(options=textwrap.indent(options_text(PROTOCOLS, width=76), " " * 12))
run_async.__doc__ = _RUN_DOC
run.__doc__ = ("Synchronous ``run_async`` (not callable inside a running event loop): "
               + _RUN_DOC[0].lower() + _RUN_DOC[1:])
