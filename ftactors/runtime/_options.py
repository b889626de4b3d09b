"""The options of ``ft.run``, each declared once, typed: everything else is made from them.

An option is an ``Option`` record: its name, the Python type(s) a value may have, its
default, its unit, what it means, the transports it applies to and its roles in a stack.
The core's options are ``CORE_OPTIONS`` (here); a protocol's are its class's ``OPTIONS``
tuple, declared in its folder's ``options.py`` and read there with ``declared_values`` (a
subclass that refines a protocol names it again and extends its parent's:
``protocol_name = "rs"; OPTIONS = (*RSBackup.OPTIONS, Option(...))``). From those declarations alone come:

* validation (``check_options``): unknown names, types, choices, transports, and the
  refusals of the roles below;
* ``help(ft.run)`` and ``ftactors options [STACK]`` (``options_text``);
* the command-line flags of ``ftactors run`` and ``ftactors chaos``
  (``add_option_flags``: ``--`` and the name with ``-``; a value is read by
  ``Option.from_text``) and the experiment YAML keys (a ``protocols:`` entry takes any
  option of its stack, checked by the same validation);
* the options table of docs/reference/options.md (``options_table``, kept equal by a
  test).

So adding an option to a protocol touches that protocol's ``options.py`` and its tests only.

Roles (``Option.roles``) say what the stack machinery must know of an option:
``INTERVAL``: it sets when its protocol checkpoints (refused beside
``level_intervals="auto"``, which chooses every planned level's interval; a chaos run's
interval column); ``OWN_ROUNDS``: it sets a level's own rounds (refused in a stack whose
consistency protocol hands its checkpoint parts to the levels, where the level takes no
rounds); ``STATE``: its value shapes the state a snapshot holds (part of a run's
fingerprint, so ``restart_from`` refuses a set taken under another value).
"""
from __future__ import annotations

import argparse
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base import ConfigError
from ..facade import LARGE_COLLECTIVES_BYTES

INTERVAL, OWN_ROUNDS, STATE = "interval", "own rounds", "state"
ROLES = {
    INTERVAL: "sets when its protocol checkpoints (refused with level_intervals=\"auto\")",
    OWN_ROUNDS: "sets a level's own rounds (refused in a stack with groups or hc3i, "
                "whose parts the level keeps instead)",
    STATE: "shapes the checkpointed state (part of the run's fingerprint)",
}
NONE = type(None)


@dataclass(frozen=True)
class Option:
    """One option of ``ft.run``.

    Attributes:
        name: the keyword (``rs_interval_s``); units last.
        type: a type or a tuple of types a value may have (``int`` also passes for
            ``float``; ``bool`` never passes for a number; ``type(None)``: None is a
            meaningful value); ``Callable`` for a function (no command-line flag).
        default: the value when the option is not given (None: see ``doc``).
        doc: what it means, one or two sentences.
        unit: ``s``, ``iterations``, ``bytes``, ``B/s`` (empty: none).
        choices: the only values allowed (empty: any of ``type``).
        transports: the transports it applies to (empty: every one); given on another
            it is refused, since taken and ignored it would promise what the run does
            not do.
        roles: what a stack must know of it (``INTERVAL``, ``OWN_ROUNDS``, ``STATE``).
    """

    name: str
    type: Any
    default: Any
    doc: str
    unit: str = ""
    choices: tuple = ()
    transports: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    @property
    def types(self) -> tuple:
        return self.type if isinstance(self.type, tuple) else (self.type,)

    @property
    def flag(self) -> str:
        """Its command-line flag: ``--`` and the name with ``-`` for ``_``."""
        return "--" + self.name.replace("_", "-")

    @property
    def on_command_line(self) -> bool:
        """Whether a value can come from text (a function cannot)."""
        return any(t is not Callable for t in self.types)

    def check(self, value: Any) -> None:
        """Raise ConfigError when ``value`` is not of the declared type or choices."""
        if value is None and (self.default is None or NONE in self.types):
            return
        if self.choices:
            if isinstance(value, bool) or value not in self.choices:
                raise ConfigError(f"{self.name} must be {' or '.join(map(repr, self.choices))}"
                                  f", got {value!r}")
            return
        if not any(_is(value, t) for t in self.types):
            what = "True or False" if self.types == (bool,) else f"of type {self.type_text}"
            raise ConfigError(f"{self.name} must be {what}, got {value!r}")

    @property
    def type_text(self) -> str:
        if self.choices:
            return " | ".join(map(repr, self.choices))
        return " | ".join("None" if t is NONE else "function" if t is Callable else t.__name__
                          for t in self.types)

    def from_text(self, text: str) -> Any:
        """A command-line value as a value of the option: the first declared type that
        reads it (``int``, ``float``, ``str``; a ``list`` from ``a,b`` or YAML ``[...]``;
        a ``dict`` from ``KEY=VALUE``, one pair per flag, merged).

        Raises:
            argparse.ArgumentTypeError: no declared type reads ``text``.
        """
        if self.choices:
            found = [c for c in self.choices if str(c) == text]
            if found:
                return found[0]
            raise argparse.ArgumentTypeError(
                f"one of {', '.join(map(str, self.choices))}, got {text!r}")
        for t in self.types:
            if t in (int, float):
                try:
                    return t(text)
                except ValueError:
                    continue
            if t is str:
                return text
            if t is list:
                if text.lstrip().startswith("["):
                    import yaml
                    try:
                        return yaml.safe_load(text)
                    except yaml.YAMLError:
                        continue
                return [_scalar(v) for v in text.split(",") if v.strip()]
            if t is dict:
                key, eq, value = text.rpartition("=")
                if eq and key.strip():
                    return {_scalar(key): _scalar(value)}
        forms = [("KEY=VALUE" if t is dict else "A,B" if t is list else t.__name__)
                 for t in self.types if t not in (NONE, Callable, bool)]
        raise argparse.ArgumentTypeError(f"takes {' or '.join(forms)}, got {text!r}")


def _is(value, t) -> bool:
    if t is Callable:
        return callable(value)
    if t is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if t is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if t is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, t)


def _scalar(text: str):
    """A word of a command-line value: an int, a float, else the text."""
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _sim(name, doc, unit="", type_=float, default=None):
    """A setting of the sim's network model: taken and ignored by the other transports
    (one set of options serves a body run on every transport; it promises nothing there)."""
    return Option(name, type_, default, f"sim: {doc}", unit)


def _ray(name, type_, default, doc, unit="", choices=()):
    return Option(name, type_, default, doc, unit, choices, transports=("ray",))


CORE_OPTIONS: tuple[Option, ...] = (
    Option("heartbeat_interval_s", (float, NONE), None,
           "seconds between heartbeats to every rank (default: 1 on Ray, off elsewhere)", "s"),
    Option("heartbeat_timeout_s", float, 10.0,
           "a rank silent this long is declared hung and killed (longer while round trips "
           "are slow: 4x the slowest recent one)", "s"),
    Option("progress", (bool, Callable), False,
           "True: show iterations, checkpoints, failures and recoveries on stderr as the "
           "run goes; or a function called with an ft.Progress at each report"),
    Option("progress_interval_s", float, 1.0, "seconds between progress reports", "s"),
    _ray("data_plane", str, "direct",
         "'direct' (rank-to-rank sockets, Unix on one node, TCP across nodes) or 'ray' "
         "(every batch an actor call)", choices=("direct", "ray")),
    _ray("out_of_band_bytes", int, 64 << 10,
         "on the direct plane, array buffers at least this large travel out of band: "
         "written from the sender's copy and read into a buffer the receiver owns, with no "
         "pickling copy on either side (smaller ones are pickled into the message); "
         "default: the measured crossover, see docs/performance.md", "bytes"),
    _ray("shared_memory_bytes", (int, NONE), 64 << 10,
         "on the direct plane, out-of-band buffers at least this large to a rank on the "
         "same node go through a shared-memory segment of the channel (the socket carries "
         "only where they are), smaller ones and those to other nodes on the socket, and "
         "all of them where the segment cannot be passed; None: never; default: the "
         "measured crossover, see docs/performance.md", "bytes"),
    _ray("poll_spin_us", int, 500,
         "on the direct plane, a rank with nothing to do polls for messages this long "
         "(yielding its core to any other runnable process between polls) before its "
         "process sleeps, as MPI ranks do: a message that comes meanwhile is taken without "
         "a wake-up; 0: sleep at once; default: measured, see docs/performance.md", "us"),
    _ray("object_store_bytes", int, 16 << 20,
         "out-of-band buffers at least this large travel by "
         "reference through Ray's object store and an actor call, smaller ones on the direct "
         "plane's sockets, without a joined copy (with data_plane='ray': every one through "
         "the object store); default: the measured crossover, see docs/performance.md", "bytes"),
    Option("collectives", str, "auto",
           "allreduce/allgather schedule: 'auto' (recursive doubling on power-of-two "
           "communicators of Ray's direct plane, binomial trees elsewhere), 'tree' or "
           "'doubling' (same bits either way)", choices=("auto", "tree", "doubling")),
    Option("large_collectives_bytes", (int, NONE), LARGE_COLLECTIVES_BYTES,
           "buffer Allreduce and Allgather(v) of at least this many bytes split the array "
           "among the ranks (reduce-scatter + allgather with the tree's bits, a ring); "
           "None: never; default: the measured crossover, see docs/performance.md", "bytes"),
    Option("bcast_pipeline_bytes", (int, NONE), None,
           "buffer Bcast of at least this many bytes goes down a chain of ranks in pieces "
           "instead of the binomial tree; None (default): never (on one node the tree was "
           "as fast or faster at most sizes measured, see docs/performance.md)", "bytes"),
    _ray("rank_num_cpus", float, 0, "CPUs reserved per rank actor (0: ranks share the cores)"),
    _ray("rank_niceness", (int, NONE), None,
         "the niceness of every rank's process (Ray starts its workers at 15, which gives "
         "a rank a small share of a busy CPU); default: the driver's own, as the ranks "
         "mpiexec starts inherit it. Below the worker's 15 needs CAP_SYS_NICE, else a "
         "RankNicenessWarning and Ray's 15"),
    _ray("reuse_processes", bool, True,
         "keep the rank processes of a run that completed (and chaos did not touch) for "
         "the driver's next run, instead of starting new ones: a process start costs "
         "about a second of CPU (see transports/ray/warm.py); not with rank_num_cpus > 0 "
         "(an idle kept process would hold its CPUs); False: every run starts its own"),
    _ray("rank_nodes", list, None, "the node id each rank starts on (one per rank; a rank "
                                   "whose node is gone starts anywhere)"),
    _ray("spare_nodes", list, None, "the node ids spares start on, used in turn (a spare "
                                    "whose node is gone starts anywhere; default anywhere)"),
    _sim("sim_latency_s", "per-message latency", "s", default=5e-6),
    _sim("sim_bandwidth_Bps", "link bandwidth", "B/s", default=1e9),
    _sim("sim_jitter_s", "uniform random extra delay per batch, from the seed", "s",
         default=5e-6),
    _sim("sim_send_overhead_s", "a sender's time per message on the wire, one at a time",
         "s", default=0.0),
    _sim("sim_sites", "a partition of the ranks into sites (lists of ranks); links between "
                      "sites use the sim_wide_* settings", type_=list),
    _sim("sim_wide_latency_s", "latency between sites (default sim_latency_s)", "s"),
    _sim("sim_wide_bandwidth_Bps", "bandwidth between sites (default sim_bandwidth_Bps)",
         "B/s"),
    Option("restart_from_any", bool, False,
           "with restart_from: resume from the newest set even when its program, "
           "arguments, stack or state-shaping options differ from this job's (a deliberate "
           "change; the rank count must match)"),
)


def core_default(name: str):
    """The declared default of the core's option ``name``."""
    return next(o.default for o in CORE_OPTIONS if o.name == name)


def declared_values(declared, options: dict) -> dict:
    """``{name: value}`` for each option of ``declared``: its value in ``options``, else its
    declared default. Protocols read their options through it, so that a default is
    written once, in its declaration (the layer test refuses ``options.get(name, ...)``)."""
    return {o.name: options.get(o.name, o.default) for o in declared}


def stack_options(protocols) -> dict[str, tuple[Option, tuple[str, ...]]]:
    """``{name: (option, protocol names that take it)}``: the core's options (no
    protocol) then those of ``protocols`` (classes, in order); an option shared by
    several protocols (the level plan's) is one declaration.

    Raises:
        TypeError: two declarations of one name.
    """
    out = {o.name: (o, ()) for o in CORE_OPTIONS}
    for p in protocols:
        for o in p.OPTIONS:
            had, owners = out.get(o.name, (o, ()))
            if had is not o:  # one name, two meanings: which would a value set?
                raise TypeError(f"{p.__name__} declares option {o.name!r}, which "
                                f"{', '.join(owners) or 'the core'} declares too")
            out[o.name] = (o, (*owners, p.protocol_name))
    return out


def check_options(protocols, options: dict, transport: str) -> None:
    """Refuse unknown options and values of the wrong type or choices, and options of
    another transport (``protocols``: the stack's protocol classes).

    Raises:
        ConfigError: naming the options and why.
    """
    known = stack_options(protocols)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(known))}")
    elsewhere = {}
    for name, value in options.items():
        option = known[name][0]
        option.check(value)
        if option.transports and transport not in option.transports:
            elsewhere.setdefault(" or ".join(option.transports), []).append(name)
    if elsewhere:
        where, names = next(iter(elsewhere.items()))
        raise ConfigError(f"option(s) {', '.join(names)} apply to the {where} transport only; "
                          f"transport {transport!r} has nothing they set")


def with_role(protocols, role: str) -> list[str]:
    """The names of the options of ``protocols`` that have ``role``, in order."""
    names = []
    for p in protocols:
        names += [o.name for o in p.OPTIONS if role in o.roles and o.name not in names]
    return names


# -------------------------------------------------------------------- command line
def add_option_flags(parser: argparse.ArgumentParser, protocols: dict[str, type], *,
                     core: bool = True, skip: tuple[str, ...] = ()) -> None:
    """Add a flag for every option that can come from text: the core's (``core``) in one
    group, then each protocol's (``protocols``: command-line name -> class) in a group
    named after the protocols that take it; ``skip``: names the command sets itself.
    ``option_values`` reads them back."""
    groups: dict[tuple, list[Option]] = {}
    for option, names in stack_options(protocols.values()).values():
        if option.on_command_line and option.name not in skip and (core or names):
            key = tuple(n for n, p in protocols.items() if p.protocol_name in names)
            groups.setdefault(key, []).append(option)
    for key, options in groups.items():
        title = ("options of every run" if not key else
                 f"options of {' or '.join(key)} (in --protocol)")
        g = parser.add_argument_group(title)
        for o in options:
            help_ = o.doc.replace("%", "%%") + (f" (default {o.default!r})"
                                                if o.default is not None else "") + (
                "; repeat for more pairs" if dict in o.types else "")
            if bool in o.types:
                g.add_argument(o.flag, dest=_dest(o), default=None,
                               action=argparse.BooleanOptionalAction, help=help_)
            else:
                g.add_argument(o.flag, dest=_dest(o), default=None, type=o.from_text,
                               action=_Merge, metavar=_metavar(o), help=help_)


def _metavar(o: Option) -> str:
    """What ``from_text`` reads, in declared order up to text (which takes anything)."""
    if o.choices:
        return "|".join(map(str, o.choices))
    words = []
    for t in o.types:
        if t in (int, float):
            words.append(o.unit.upper() or ("INT" if t is int else "NUMBER"))
        elif t in (dict, list):
            words.append("KEY=VALUE" if t is dict else "A,B")
        elif t is str:
            words.append("TEXT")
            break
    return "|".join(dict.fromkeys(words))


def _dest(option: Option) -> str:
    return f"opt_{option.name}"


class _Merge(argparse.Action):
    """Keep a flag's last value; merge the ``KEY=VALUE`` pairs of a dict option."""

    def __call__(self, parser, namespace, values, option_string=None):
        old = getattr(namespace, self.dest, None)
        if isinstance(values, dict) and isinstance(old, dict):
            values = {**old, **values}
        setattr(namespace, self.dest, values)


def option_values(args: argparse.Namespace, protocols: dict[str, type], stack: list[str],
                  *, refuse: bool = True) -> dict:
    """The options whose flags (``add_option_flags``) were given, as ``ft.run`` takes
    them, for the stack of command-line names ``stack``; ``refuse=False`` leaves out
    those of protocols not in it.

    Raises:
        ValueError: (``refuse``) a protocol's flag without that protocol in ``stack``,
            naming the flag and the protocols that take it.
    """
    names = {p.protocol_name: n for n, p in protocols.items()}
    values, missing = {}, []
    for option, owners in stack_options(protocols.values()).values():
        value = getattr(args, _dest(option), None)
        if value is None:
            continue
        wanted = [names[o] for o in owners]
        if wanted and not set(wanted) & set(stack):
            missing.append(f"{option.flag} needs {' or '.join(wanted)} in --protocol")
            continue
        values[option.name] = value
    if missing and refuse:
        raise ValueError(f"{'; '.join(missing)} (got --protocol {'+'.join(stack) or 'none'})")
    return values


# ----------------------------------------------------------------- listings, docs
def _rows(protocols: dict[str, type]):
    """``(option, where)`` per option: the core's, then each protocol's once."""
    for option, owners in stack_options(protocols.values()).values():
        names = [n for n, p in protocols.items() if p.protocol_name in owners]
        yield option, (", ".join(names) if names else
                       ", ".join(option.transports) + " transport" if option.transports
                       else "core")


def _applies(option: Option, where: str) -> str:
    roles = "; ".join(option.roles)
    return where + (f" ({roles})" if roles else "")


def options_text(protocols: dict[str, type], width: int = 88) -> str:
    """Every option of the core and of ``protocols`` as indented text (``help(ft.run)``
    and ``ftactors options``): name, type, default and unit, where it applies, meaning."""
    import textwrap
    lines = []
    for o, where in _rows(protocols):
        unit = f", {o.unit}" if o.unit else ""
        lines.append(f"{o.name} ({o.type_text}{unit}; default {o.default!r}; "
                     f"{_applies(o, where)}):")
        lines += textwrap.wrap(o.doc, width, initial_indent="    ", subsequent_indent="    ",
                               break_on_hyphens=False)
    return "\n".join(lines)


def options_table(protocols: dict[str, type]) -> str:
    """The options table of docs/reference/options.md (markdown), made from the declarations."""
    lines = ["| option | type | default | unit | applies to | meaning |",
             "|---|---|---|---|---|---|"]
    for o, where in _rows(protocols):
        cells = [f"`{o.name}`", o.type_text.replace("|", "or"), f"`{o.default!r}`", o.unit,
                 _applies(o, where), o.doc.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
