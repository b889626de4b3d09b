"""``ft.run`` / ``ft.run_async``: validate everything, pick a transport, run the job.

All checks happen here, before any actor or task starts: the class must be an
``ft.Rank`` with ``async def main``, ``ranks`` a positive int, the transport known, every
option known to the core or to a protocol in the stack, and the chaos plan must name
existing ranks.
"""
from __future__ import annotations

import asyncio
import numbers
import textwrap

from .runtime import _notices
from .runtime._chaos import Chaos
from .runtime._checkpoints import find_resumable
from .runtime._coordinator import Coordinator, RunResult
from .runtime._deadlock import background
from .base._errors import ConfigError, ProtocolError
from .runtime._identity import new_identity
from .protocols import PROTOCOLS
from .runtime._options import OWN_ROUNDS, check_options, options_text, with_role
from .runtime._protocol import parts_lead, protocol_classes
from .runtime._rank import check_rank_class
from .runtime._trace import write_trace

TRANSPORTS = ("ray", "local", "sim")


def _check_part_mode(rank_cls, options: dict) -> None:
    """Refuse a level's own-round options (role ``OWN_ROUNDS``) in a stack where it keeps
    another protocol's parts instead (``Protocol.hands_parts``)."""
    lead = parts_lead(rank_cls)
    for p in protocol_classes(rank_cls) if lead is not None else ():
        own = [name for name in with_role([p], OWN_ROUNDS) if name in options]
        if own:
            raise ConfigError(
                f"option(s) {', '.join(own)} set {p.__name__}'s own rounds, which it does "
                f"not take in a stack with {lead.__name__}: there it keeps copies of "
                f"{lead.__name__}'s checkpoint parts, made at that protocol's checkpoints")


def _validate(rank_cls, ranks, transport, spares, chaos, timeout_s, options) -> list:
    check_rank_class(rank_cls)
    if not isinstance(ranks, numbers.Integral) or isinstance(ranks, bool) or ranks < 1:
        raise ConfigError(f"ranks must be an int >= 1, got {ranks!r}")
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}; choose one of {', '.join(TRANSPORTS)}")
    if not isinstance(spares, numbers.Integral) or spares < 0:
        raise ConfigError(f"spares must be an int >= 0, got {spares!r}")
    if spares and not any(getattr(p, "uses_spares", False) for p in protocol_classes(rank_cls)):
        raise ConfigError(
            f"spares={spares} but no protocol in {rank_cls.__qualname__}'s stack promotes spares "
            f"(add StandbyReplacement)")
    if timeout_s is not None and timeout_s <= 0:
        raise ConfigError(f"timeout_s must be > 0, got {timeout_s!r}")
    _check_part_mode(rank_cls, options)
    check_options(protocol_classes(rank_cls), options, transport)
    homes = options.get("rank_nodes")
    if homes is not None and len(homes) != ranks:
        raise ConfigError(f"rank_nodes must list one Ray node id per rank ({ranks}), "
                          f"got {homes!r}")
    spare_homes = options.get("spare_nodes")
    if spare_homes is not None and not spare_homes:
        raise ConfigError(f"spare_nodes must list at least one Ray node id, got {spare_homes!r}")
    for name in ("large_collectives_bytes", "bcast_pipeline_bytes"):
        if (options.get(name) or 0) < 0:
            raise ConfigError(f"{name} must be >= 0 bytes or None, got {options[name]!r}")
    for proto in protocol_classes(rank_cls):
        proto.check_options(options)
        proto.check_stack_options(rank_cls, options)
    if chaos is not None and not isinstance(chaos, Chaos):
        raise ConfigError(f"chaos must be an ft.Chaos, got {type(chaos).__name__}")
    if (chaos is not None and (chaos.method == "disconnect" or chaos.partitions)
            and transport == "ray" and options.get("data_plane", "direct") != "direct"):
        raise ConfigError("network faults (method='disconnect', partitions) strike the direct "
                          "data plane's connections: data_plane='ray' has none")
    return chaos.plan(ranks) if chaos is not None else []


def _fabric(transport: str, address: str | None, seed: int, options: dict):
    if transport == "local":
        from .transports.local import LocalFabric
        return LocalFabric(options)
    if transport == "sim":
        from .transports.sim import SimFabric
        return SimFabric(options, seed)
    from .transports.ray import RayFabric
    return RayFabric(options, address)


def _prepare(rank_cls, ranks, *, args=(), kwargs=None, transport="ray", address=None,
             spares=0, seed=0, chaos=None, timeout_s=None, trace=None, restart_from=None,
             **options):
    """Validate everything; return a zero-argument coroutine factory that runs the job."""
    kills = _validate(rank_cls, ranks, transport, spares, chaos, timeout_s, options)
    kwargs = dict(kwargs or {})
    any_fingerprint = options.pop("restart_from_any", False)
    if any_fingerprint and restart_from is None:
        raise ConfigError("restart_from_any=True needs restart_from (the store to resume from)")
    identity = new_identity(rank_cls, ranks, tuple(args), kwargs, options)
    restore = start = None
    if restart_from is not None:
        _, restore, meta = find_resumable(restart_from, identity, any_fingerprint)
        line = meta.get("line") or meta.get("position")  # see newest_stable_set
        start = None if line is None else tuple(line)

    def coordinator() -> Coordinator:
        return Coordinator(
            _fabric(transport, address, seed, options), rank_cls, ranks, tuple(args), kwargs,
            kills=kills, kill_method=chaos.method if chaos is not None else "sigkill",
            stall_s=chaos.stall_s if chaos is not None else 0.0,
            job_lost_at=chaos.job_lost_at if chaos is not None else None,
            partitions=chaos.partitions if chaos is not None else (),
            spares=spares, trace=trace is not None, options=options, identity=identity,
            restore=restore, start=start)

    async def job(c: Coordinator | None = None) -> RunResult:
        c = c or coordinator()
        _notices.at_start(rank_cls, options, spares)
        result = await _within(c, timeout_s)
        _notices.after_run(rank_cls, kills, result.metrics, result.events)
        if trace is not None:
            result.metrics["trace_rows"] = write_trace(trace, result.trace_rows)
            result.metrics["trace_path"] = str(trace)
        return result

    job.coordinator = coordinator
    return job


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


async def launch(rank_cls, ranks: int, *, args=(), kwargs=None, transport="ray",
                 address=None, spares=0, seed=0, chaos=None, timeout_s=None, trace=None,
                 restart_from=None, **options) -> Run:
    """Start a job like ``run_async`` (same arguments) and return at once with a ``Run``
    handle to talk to it. Not for ``transport="sim"`` (its virtual clock runs the job in
    a loop of its own): there, ranks request checkpoints themselves."""
    if transport == "sim":
        raise ConfigError("ft.launch does not drive the sim transport; use ft.run and "
                          "checkpoint options or self.request_checkpoint()")
    job = _prepare(rank_cls, ranks, args=args, kwargs=kwargs, transport=transport,
                   address=address, spares=spares, seed=seed, chaos=chaos,
                   timeout_s=timeout_s, trace=trace, restart_from=restart_from, **options)
    c = job.coordinator()
    return Run(c, asyncio.ensure_future(job(c)))


async def run_async(rank_cls, ranks: int, *, args=(), kwargs=None, transport="ray",
                    address=None, spares=0, seed=0, chaos=None, timeout_s=None, trace=None,
                    restart_from=None, **options) -> RunResult:
    job = _prepare(rank_cls, ranks, args=args, kwargs=kwargs, transport=transport,
                   address=address, spares=spares, seed=seed, chaos=chaos,
                   timeout_s=timeout_s, trace=trace, restart_from=restart_from, **options)
    if transport == "sim":
        from .transports._simloop import run_virtual
        return await asyncio.to_thread(run_virtual, job)
    return await job()


def run(rank_cls, ranks: int, *, args=(), kwargs=None, transport="ray", address=None,
        spares=0, seed=0, chaos=None, timeout_s=None, trace=None, restart_from=None,
        **options) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("ft.run() was called inside a running event loop; "
                           "use 'await ft.run_async(...)'")
    job = _prepare(rank_cls, ranks, args=args, kwargs=kwargs, transport=transport,
                   address=address, spares=spares, seed=seed, chaos=chaos,
                   timeout_s=timeout_s, trace=trace, restart_from=restart_from, **options)
    if transport == "sim":
        from .transports._simloop import run_virtual
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
