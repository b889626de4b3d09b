"""The protocol-mixin base: the hooks every send, receive and recovery passes through.

Theory of operation: a protocol is a mixin class placed before the application class,
``class Solver(StandbyReplacement, RSBackup, CG)``. Python's MRO chains the mixins; every
hook a mixin overrides must call ``super()`` so the next one in the stack sees the event
too, and the base implementations here end the chain. A mixin keeps its state under its
own attribute (for example ``self._standby``) and its decisions in a plain class with no
asyncio and no transport (a *machine*, testable step by step); the mixin only performs the
machine's effects through ``self.ft``, the rank's endpoint.

Hooks that run on the message path (``on_send``, ``on_receive``, ``on_control``) are
synchronous: a send is atomic with respect to protocol events, and control messages are
processed in channel order. A hook that needs to wait starts a task with
``self.ft_spawn``. Hooks on the control path (start, finish, safe points, failures,
rollback) are ``async``.

Composition rules are checked when a class is created, so a bad stack raises
``TypeError`` before any actor starts. A protocol has *roles* (``ROLES``): which states
form a recovery line (consistency), where states are kept (a level), how lost ranks come
back (spares). A stack takes at most one protocol per exclusive role and any number of
levels; two protocols stack only where one names the other in ``stacks_with`` (each such
pair is built and tested), in the order of their ``stack_order``. A protocol may also list
protocol names it ``conflicts`` with or ``requires`` (checked once the stack meets an
``ft.Rank``). With several recovery policies in a stack, recovery escalates from the
cheapest level (``level_cost``) to the costliest (``runtime/_escalation.py``).
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any, ClassVar

from ..engine import Envelope, passes_on
from ..base import ProtocolError

CONSISTENCY, LEVEL, SPARES = "consistency", "level", "spares"
ROLES = {
    CONSISTENCY: "which states form a recovery line (one per stack)",
    LEVEL: "where the states are kept (any number per stack; recovery tries the "
           "cheapest level that holds what it needs)",
    SPARES: "how lost ranks come back: warm standby ranks (one per stack; without it, "
            "new actors)",
}
EXCLUSIVE_ROLES = (CONSISTENCY, SPARES)


MOVED = "moved"
"""The entry of a migration's handed-over protocol state that holds ``moving_state()``."""


class Protocol:
    """Base of every protocol mixin and of ``ft.Rank``."""

    protocol_name: ClassVar[str | None] = None
    """Unique short name; also the ``comm`` field of this protocol's control messages."""
    roles: ClassVar[dict[str, str]] = {}
    """What this protocol does in a stack: role (``ROLES``) -> how it does it."""
    stacks_with: ClassVar[tuple[str, ...]] = ()
    """Protocol names this one is built (and tested) to stack with; a stack of two
    protocols neither of which names the other is refused."""
    stack_order: ClassVar[int] = 0
    """Protocols stack outermost first in increasing ``stack_order``."""
    level_cost: ClassVar[int] = 0
    """A level's place in recovery: cheaper levels (lower) are tried first."""
    conflicts: ClassVar[tuple[str, ...]] = ()
    """Protocol names this one cannot be stacked with."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Protocol names that must also be in the stack."""
    records_deliveries: ClassVar[bool] = True
    """Whether the stack needs received messages logged for replay after a restore."""
    recovery_policy: ClassVar[type | None] = None
    """Coordinator-side class ``Policy(coordinator)`` with ``async recover(failed)``,
    run by the coordinator for each recovery round (the outermost one in the stack)."""
    uses_spares: ClassVar[bool] = False
    """Whether this protocol promotes ``ft.run(spares=k)`` standby ranks."""
    stack_helper: ClassVar[type | None] = None
    """Coordinator-side class with ``for_run(ctx, stack) -> helper or None`` (``ctx``: the
    run's ``RecoveryContext``): work for the whole stack that no one level owns (the
    levels' interval planner), run beside the recovery policies by
    ``runtime/_escalation.Escalation``."""
    hands_parts: ClassVar[bool] = False
    """A consistency protocol whose checkpoints are parts of group or cluster cuts, taken
    by each unit on its own: it hands every part to the stack's levels (``on_part``), and
    its recovery finds the parts it restores at the cheapest level that holds them
    (``runtime/_escalation.PartLevels``); the levels take no cuts of their own."""
    OPTIONS: ClassVar[tuple] = ()
    """This protocol's ``ft.run`` options, each a ``runtime._options.Option`` (name, type,
    default, unit, meaning, transports, roles): validation, ``help(ft.run)``, ``ftactors
    options``, the command-line flags, the experiment keys and the site's options table are made
    from them. A subclass that refines a protocol extends its parent's tuple."""
    needs_safe_points: ClassVar[bool] = False
    """Whether this protocol checkpoints only at safe points (``iterations()`` loops): a
    run whose ranks never offer one is told that nothing was checkpointed
    (``runtime/_notices``)."""
    part_level: ClassVar[type | None] = None
    """Coordinator-side class ``Level(coordinator, units)`` with ``async find(wanted)``
    and ``async forget(after)``: this level's copies of a ``hands_parts`` protocol's parts."""

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ConfigError for a bad value of one of this protocol's ``OPTIONS`` that
        its declared type and choices let pass (a range, a pair that goes together;
        called by ``ft.run`` before anything starts, after those checks)."""

    @classmethod
    def check_stack_options(cls, stack: type, options: dict) -> None:
        """Raise ConfigError for options that only the whole ``stack`` can judge (an MTBF
        naming a level not in it, say); called by ``ft.run`` after ``check_options``."""

    @classmethod
    def start_notices(cls, stack: type, options: dict, spares: int) -> list[tuple[type, str]]:
        """What the user must hear before a run of ``stack`` with these settings starts,
        as ``(warning class, message)`` pairs: protection this protocol will not give
        (it will never checkpoint, no spare to promote); the message names the option
        that changes it. Called by ``ft.run`` as the job starts."""
        return []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        check_stack(cls)

    # --------------------------------------------------------------- message path
    # (the endpoint does not call these three where no mixin overrides them: ``passes_on``)
    @passes_on
    def on_send(self, env: Envelope) -> Envelope | None:
        """An outgoing application envelope. Return it (maybe changed) to go on, or None
        when the protocol holds it (release later with ``self.ft.transmit``)."""
        return env

    @passes_on
    def on_receive(self, env: Envelope) -> Envelope | None:
        """An incoming application envelope, in channel order, before matching. Return it
        to deliver, or None to hold it (release later with ``self.ft.deliver_now``)."""
        return env

    def on_control(self, env: Envelope) -> None:
        """A control envelope; a protocol handles those whose ``env.comm`` is its name and
        passes the others on with ``super()``."""
        raise ProtocolError(
            f"rank {getattr(self, 'rank', '?')} got a control message for protocol "
            f"{env.comm!r}, which is not in its stack {protocol_names(type(self))}")

    @passes_on
    def on_blocked(self) -> None:
        """A receive or probe of the rank just began to wait: nothing queued matches it
        (``Endpoint.blocked`` lists the sources of such waits). Synchronous, on the receive's path: a
        protocol may take the rank's state now (``Endpoint.state_now``) or release a
        message it holds (``deliver_now``), which ends the wait at once."""

    # --------------------------------------------------------------- control path
    async def on_start(self) -> None:
        """The rank is wired to its peers; ``main()`` has not started."""

    async def on_finish(self) -> None:
        """``main()`` returned on this rank."""

    async def on_safe_point(self, iteration: int) -> None:
        """The rank is at the top of ``iteration`` of an ``iterations()`` loop: the
        registered state is consistent and may be saved."""

    async def on_peer_failure(self, ranks: tuple[int, ...]) -> None:
        """The coordinator reports ``ranks`` failed (all ranks see failures in one order)."""

    async def on_restored(self) -> None:
        """The rank was restored from a snapshot and ``main()`` is about to re-enter."""

    async def on_finalize(self) -> None:
        """Every rank's ``main()`` has returned: the run is over (asked by the
        coordinator when the stack has a recovery policy)."""

    def on_part(self, key: Any, blob: bytes) -> None:
        """This rank made ``blob``, its part ``key`` of a group or cluster checkpoint of a
        ``hands_parts`` protocol (keys of one rank grow with time): a level keeps a copy."""

    def parts_floor(self) -> Any:
        """A ``hands_parts`` protocol's oldest part key of this rank's unit that its
        recovery may still restore (None: any): a level keeps every copy from it on and
        may drop older ones (the recovery line is never older than a complete set)."""
        return None

    def part_units(self):
        """A ``hands_parts`` protocol's units (its groups or clusters, as ``Groups``): a
        level places the copies of a unit's parts outside it."""
        raise ProtocolError(f"no protocol of the stack {protocol_names(type(self))} hands "
                            f"checkpoint parts to levels")

    # -------------------------------------------------------------------- state
    def protocol_state(self) -> dict[str, Any]:
        """Each protocol adds its own entry under its name; saved in every snapshot."""
        return {}

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        """Each protocol takes back its own entry."""

    def moving_state(self) -> dict[str, Any]:
        """What this rank's protocols keep only in its process's memory (copies held for
        partners, their own rounds), under each one's name: a migration carries it to
        the rank's new process (``MOVED`` in the state it hands over), where the
        protocol takes it back in ``restore_protocol_state``; a snapshot never holds it."""
        return {}

    # ------------------------------------------------------------------ helpers
    def ft_spawn(self, coro) -> asyncio.Task:
        """Run protocol work concurrently with ``main()`` (errors fail the rank)."""
        return self.ft.spawn(coro)


def protocol_classes(cls) -> list[type]:
    """The protocol mixins of a class, outermost first.

    A subclass that keeps its parent's ``protocol_name`` refines that protocol (for
    example to change a setting) and stands for it: the parent is not listed again.
    """
    out: list[type] = []
    for k in cls.__mro__:
        name = k.__dict__.get("protocol_name") if isinstance(k, type) else None
        if not name or not issubclass(k, Protocol):
            continue
        if any(o.protocol_name == name and issubclass(o, k) for o in out):
            continue
        out.append(k)
    return out


def protocol_names(cls) -> list[str]:
    return [k.protocol_name for k in protocol_classes(cls)]


def parts_lead(cls) -> type | None:
    """The protocol of ``cls``'s stack that hands its parts to the levels
    (``Protocol.hands_parts``), or None: then the levels keep copies of its parts and take
    no rounds of their own."""
    return next((p for p in protocol_classes(cls) if p.hands_parts), None)


def check_stack(cls) -> None:
    """Raise TypeError when ``cls`` stacks protocols that cannot work together."""
    names = protocol_names(cls)
    seen = set()
    for name in names:
        if name in seen:
            raise TypeError(f"{cls.__qualname__}: two different protocols are named {name!r}")
        seen.add(name)
    protos = protocol_classes(cls)
    for i, proto in enumerate(protos):
        for other in protos[i + 1:]:
            _check_pair(cls, proto, other)
    for proto in protos:
        for other in proto.conflicts:
            if other in seen:
                raise TypeError(
                    f"{cls.__qualname__}: protocol {proto.protocol_name!r} cannot be combined "
                    f"with {other!r}")
        for needed in proto.requires:
            if needed not in seen and getattr(cls, "_ft_rank_class", False):
                raise TypeError(
                    f"{cls.__qualname__}: protocol {proto.protocol_name!r} needs {needed!r} "
                    f"in the same stack")


def shared_role(a: type, b: type) -> str | None:
    """An exclusive role both ``a`` and ``b`` take (they cannot stack then), or None."""
    return next((r for r in EXCLUSIVE_ROLES if r in a.roles and r in b.roles), None)


def stack_verdict(a: type, b: type) -> str | None:
    """Why protocols ``a`` and ``b`` cannot be in one stack (in any order), or None."""
    role = shared_role(a, b)
    if role is not None:
        return (f"{a.__name__} and {b.__name__} both take the {role} role "
                f"({a.roles[role]}; {b.roles[role]}): a stack takes one {role} protocol")
    if not (a.roles and b.roles):
        return None  # a protocol without roles (a user's tracer, say) stacks with anything
    if b.protocol_name in a.stacks_with or a.protocol_name in b.stacks_with:
        return None
    lead = next((p for p in (a, b) if CONSISTENCY in p.roles), None)
    if lead is not None:
        level = b if lead is a else a
        return (f"{level.__name__} does not stack with {lead.__name__} yet: "
                f"{level.__name__} keeps global cuts of its own, and {lead.__name__}'s "
                f"{lead.roles[CONSISTENCY]} are not handed to other levels")
    return f"{a.__name__} does not stack with {b.__name__}"


def _check_pair(cls, outer: type, inner: type) -> None:
    why = stack_verdict(outer, inner)
    if why is not None:
        raise TypeError(f"{cls.__qualname__}: {why}")
    if outer.roles and inner.roles and outer.stack_order > inner.stack_order:
        right = sorted(protocol_classes(cls), key=lambda p: p.stack_order)
        raise TypeError(
            f"{cls.__qualname__}: put {inner.__name__} before {outer.__name__}: stack "
            f"them as ({', '.join(p.__name__ for p in right if p.roles)}, <app>)")


def stack_refusal(mixins) -> str | None:
    """Why ``check_stack`` refuses these protocol mixins stacked in this order (outermost
    first), or None when it takes them."""
    try:
        type("Stack", tuple(mixins), {})
    except TypeError as exc:
        return str(exc).partition(": ")[2] or str(exc)
    return None


def working_stacks(protocols: dict[str, type]) -> list[list[str]]:
    """Every stack of two or more of ``protocols`` (command-line name -> mixin) that
    ``check_stack`` takes, each as its names in the one order it takes them."""
    ordered = sorted(protocols, key=lambda n: protocols[n].stack_order)
    return [list(names) for size in range(2, len(ordered) + 1)
            for names in itertools.combinations(ordered, size)
            if stack_refusal(protocols[n] for n in names) is None]


def composition_table(protocols: dict[str, type]) -> str:
    """The composition table of docs/reference/options.md, made from ``roles`` and
    ``stack_verdict``: each protocol's roles, then for every pair whether it stacks (and in
    which order), and the stacks that work (``--protocol`` takes them joined by ``+``)."""
    names = list(protocols)

    def role(p, r):
        return p.roles.get(r, "")

    def pair(a, b):
        pa, pb = protocols[a], protocols[b]
        shared = shared_role(pa, pb)
        if a == b:
            return ""
        if shared is not None:
            return f"no: one {shared} protocol per stack"
        if stack_verdict(pa, pb) is not None:
            return "not built yet"
        first, second = sorted((a, b), key=lambda n: protocols[n].stack_order)
        return f"`{first}+{second}`"

    lines = ["| protocol | `--protocol` | consistency | level (recovery tries cheapest first) "
             "| spares |", "|---|---|---|---|---|"]
    for n in names:
        p = protocols[n]
        level = f"{role(p, LEVEL)} (cost {p.level_cost})" if LEVEL in p.roles else ""
        lines.append(f"| {p.__name__} | `{n}` | {role(p, CONSISTENCY)} | {level} "
                     f"| {role(p, SPARES)} |")
    lines += ["", "| stacks with | " + " | ".join(f"`{n}`" for n in names) + " |",
              "|---|" + "---|" * len(names)]
    lines += [f"| `{a}` | " + " | ".join(pair(a, b) for b in names) + " |" for a in names]
    lines += ["", "Stacks that work: " + ", ".join(
        f"`{'+'.join(s)}`" for s in working_stacks(protocols)) + "."]
    return "\n".join(lines) + "\n"
