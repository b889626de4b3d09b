"""A run's settings as one value: ``RunConfig``, made once from ``ft.run``'s arguments.

``RunConfig.of`` takes exactly what ``ft.run`` takes (its signature is the one that
``ft.run``, ``ft.run_async`` and ``ft.launch`` show), checks all of it before anything
starts, and returns a frozen value that is passed whole: ``ft.run`` picks the fabric
from it, the coordinator keeps it (``Coordinator.config``) and reads each setting where
it is used. What is derived from the arguments is derived here, once: the chaos plan's
kills (``Chaos.plan``, random ones drawn from its seed), the run's identity
(``_identity``), and, for ``restart_from``, the set the job resumes from.

The checks: the class must be an ``ft.Rank`` with ``async def main``, ``ranks`` a
positive int, the transport known, every option known to the core or to a protocol in
the stack (and accepted by each protocol's own checks), and the chaos plan must name
existing ranks. A bad setting raises ``ConfigError`` (``TypeError`` for the class).
"""
from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field

from ..base import ConfigError
from ._chaos import Chaos, Kill, Partition
from ._checkpoints import find_resumable
from ._identity import RunIdentity, new_identity
from ._options import OWN_ROUNDS, check_options, with_role
from ._protocol import parts_lead, protocol_classes
from ._rank import check_rank_class

TRANSPORTS = ("ray", "local", "sim")


@dataclass(frozen=True)
class RunConfig:
    """One run's settings (``ft.run``'s arguments, checked) and what follows from them.

    Attributes:
        rank_cls, ranks, args, kwargs, transport, address, spares, seed, chaos,
            timeout_s, trace: ``ft.run``'s arguments of those names (``args`` a tuple).
        options: the core's and the stack's options (``**options``), without
            ``restart_from_any`` (spent on finding the set to resume from).
        kills: the chaos plan for this rank count (``Chaos.plan``), empty without chaos.
        identity: the run's id and fingerprint (``_identity``).
        restore: with ``restart_from``, each rank's part of the set the job resumes
            from; else None.
        start: the position of that set's recovery line (None: the start of the run).
    """

    rank_cls: type
    ranks: int
    identity: RunIdentity
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    transport: str = "ray"
    address: str | None = None
    spares: int = 0
    seed: int = 0
    chaos: Chaos | None = None
    timeout_s: float | None = None
    trace: str | os.PathLike | None = None
    options: dict = field(default_factory=dict)
    kills: tuple[Kill, ...] = ()
    restore: list[bytes] | None = None
    start: tuple | None = None

    @classmethod
    def of(cls, rank_cls, ranks: int, *, args=(), kwargs=None, transport="ray", address=None,
           spares=0, seed=0, chaos=None, timeout_s=None, trace=None, restart_from=None,
           **options) -> RunConfig:
        """Check ``ft.run``'s arguments and make the run's settings from them (the module
        docstring says what is checked); nothing starts here. ``restart_from`` is read
        now: the set to resume from is found (or refused) before any rank starts."""
        kills = _checked(rank_cls, ranks, transport, spares, chaos, timeout_s, options)
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
        return cls(rank_cls, ranks, identity, tuple(args), kwargs, transport, address, spares,
                   seed, chaos, timeout_s, trace, options, tuple(kills), restore, start)

    # the chaos plan's settings, as the coordinator applies them (no chaos: none of them)
    @property
    def kill_method(self) -> str:
        """How a kill strikes (``Chaos.method``)."""
        return "sigkill" if self.chaos is None else self.chaos.method

    @property
    def stall_s(self) -> float:
        """How long a ``"stall"`` kill freezes its rank."""
        return 0.0 if self.chaos is None else self.chaos.stall_s

    @property
    def job_lost_at(self) -> int | None:
        """The iteration at which the whole job is lost (``Chaos.job_lost_at``)."""
        return None if self.chaos is None else self.chaos.job_lost_at

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """The network partitions of the chaos plan."""
        return () if self.chaos is None else self.chaos.partitions


def _checked(rank_cls, ranks, transport, spares, chaos, timeout_s, options: dict) -> list:
    """Every check of ``ft.run``'s arguments; returns the chaos plan's kills."""
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
    _check_options(rank_cls, ranks, transport, options)
    if chaos is not None and not isinstance(chaos, Chaos):
        raise ConfigError(f"chaos must be an ft.Chaos, got {type(chaos).__name__}")
    if (chaos is not None and (chaos.method == "disconnect" or chaos.partitions)
            and transport == "ray" and options.get("data_plane", "direct") != "direct"):
        raise ConfigError("network faults (method='disconnect', partitions) strike the direct "
                          "data plane's connections: data_plane='ray' has none")
    return chaos.plan(ranks) if chaos is not None else []


def _check_options(rank_cls, ranks: int, transport: str, options: dict) -> None:
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

