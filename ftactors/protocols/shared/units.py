"""Process groups for group-based checkpointing: definitions, policies and trace-based formation.

Paper: group-based-checkpoint.txt (Ho, Wang & Lau, 2008), section 3.2, Algorithm 2,
Table 1. The GroupCoordination protocol (``protocols/groups``) checkpoints each group in a
coordinated way and logs only the messages that cross groups; this module decides the
groups.

Theory of operation
-------------------
*Definitions.* A group definition partitions the ranks ``0 .. n-1``: every rank in
exactly one group. :func:`load_groups` turns any of these into a checked :class:`Groups`:

- a policy name: ``"one"`` (one group of every rank: global coordinated checkpointing,
  the paper's NORM), ``"single"`` (one rank per group: uncoordinated checkpointing with
  message logging, GP1), ``"fixed:K"`` (consecutive ranks in groups of K, the last one
  smaller when K does not divide n: GP4 is ``fixed:n/4``), ``"trace:PATH"`` (Algorithm 2
  on a message trace, groups of at most ``ceil(sqrt(n))``), ``"default"`` or ``None``
  (``fixed:ceil(sqrt(n))``: the paper's default bound on the group size, as consecutive
  ranks when there is no trace to say better);
- a JSON file, either ``{"groups": [[0, 4], [1, 5], ...], ...}`` (what
  ``ftactors groups suggest`` writes; other keys are ignored except ``nranks``, which must
  match) or a bare list of groups; a ``.yaml``/``.yml`` file of the same shape when PyYAML
  is importable (it is not a dependency);
- a list of groups (lists of ranks), or a :class:`Groups`.

A string is a policy when it is one of the names above or starts with ``fixed:`` or
``trace:``, and a file path otherwise. Anything that is not a partition of ``0 .. n-1``
raises :class:`ftactors.ConfigError` naming the problem (which rank is missing, in two
groups, out of range, which group is empty, ...). Ranks inside a group are sorted; the
groups keep their order, so a group's index is its id.

*Trace-based formation* (Algorithm 2). :func:`pairs_from_trace` reads a trace
(``ft.run(..., trace=PATH)``, see ``ftactors.runtime._trace``; or any Parquet or CSV file with
``source``, ``dest`` and ``bytes`` columns, such as one converted from an MPI tracer) and
adds up, per unordered rank pair, the messages and payload bytes between them. Only
application (``"app"``) and collective (``"coll"``: collectives are point-to-point
messages on a collective context, real traffic of the program) messages count by default
(a trace without a ``kind`` column counts whole). Protocol control messages
(``"ctrl"``) do not: they belong to whichever protocol ran while the trace was taken, not
to the program. StandbyReplacement, for one, ships every rank's backup to its partner
``(r + n//2) % n`` as control messages, the largest messages of the run: counted, they
would group each rank with its backup partner, and a trace taken under a group-based
protocol would feed its own grouping back into the next one.

:func:`form_groups` is Algorithm 2 as the paper states it. The pairs are sorted by bytes,
then message count, descending, then by the pair itself (the paper sorts "finally by P"
without a direction; we take ascending ranks, so ties are broken the same way every time,
lowest ranks first). For each pair ``(a, b)`` with the groups ``Ra``, ``Rb`` that already
hold ``a`` and ``b`` in the output list:

1. neither is grouped: the pair becomes a new group of two (only if ``G >= 2``: the
   paper inserts it unconditionally, which with ``G = 1`` would break the bound; with
   ``G = 1`` every rank ends alone);
2. one is grouped: the other joins that group if it still has room, else nothing
   happens. The paper's prose says a tuple that merges nowhere "is inserted to the output
   list", but inserting ``(a, b)`` when ``a`` already has a group would put ``a`` in two
   groups; Algorithm 2 has no such case, so we follow it: the free rank stays free and may
   still pair with another free rank later;
3. both are in the same group: the pair's messages and bytes are added to it;
4. they are in two different groups: the two groups merge, whole, if their union has at
   most ``G`` ranks; otherwise both stay as they are and the pair's traffic crosses groups
   (it will be logged). A rank never moves from one group to another: its group was
   formed by heavier pairs than this one.

The output list holds only ranks that talk to someone. :func:`suggest_groups` completes
it to a partition: a rank that never appears in a counted message, or whose partners'
groups were all full when its pairs came up, becomes a group of its own (every rank it
talks to is in a group with no room for it: its messages are logged, as in GP1); groups
are listed by smallest rank. Because groups only grow, a rank left alone could not have
joined any group it talks to later either. Groups need not be equal or reach ``G``: unrelated
ranks are never merged just to fill a group.

On our HPL (``apps/hpl.py``, a ``P x Q`` grid in row-major order) a pair of ranks in one
process column exchanges about twice the bytes of a pair in one process row: the
panel's allgather, the pivot row swaps and the ``U12`` broadcast run down the columns,
only the panel broadcast (each process row's ``1/P`` share of it) runs along the rows.
So ``G = P`` gives the paper's Table 1: ``Q`` groups of ``P`` ranks ``c, c+Q, c+2Q, ...``
(as long as every process column owns a few panels, ``n/nb >= ~2Q``).
"""
from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ftactors.base import ConfigError
from ftactors.runtime import read_traffic

__all__ = [
    "DEFAULT_KINDS", "POLICIES", "Groups", "PairTraffic", "default_group_size", "form_groups",
    "load_groups", "pairs_from_trace", "policy_groups", "ranks_in_trace", "suggest_groups",
    "traffic_inside", "validate_groups",
]

DEFAULT_KINDS = ("app", "coll")
"""Trace kinds that count as traffic between ranks (control messages do not)."""

POLICIES = ("one", "single", "fixed:K", "trace:PATH", "default")
"""Policy names accepted by :func:`load_groups` (``K`` a group size, ``PATH`` a trace)."""


class PairTraffic(NamedTuple):
    """Messages between two ranks, both directions: the paper's tuple ``(P, N, S)``."""

    ranks: tuple[int, int]
    """The two ranks, smaller first."""
    count: int
    """Number of messages."""
    bytes: int
    """Total payload bytes."""


def default_group_size(nranks: int) -> int:
    """``ceil(sqrt(nranks))``, the paper's default bound on the group size (exact)."""
    if nranks < 1:
        raise ConfigError(f"the number of ranks must be at least 1, got {nranks}")
    return math.isqrt(nranks - 1) + 1


# --------------------------------------------------------------------------- definitions


@dataclass(frozen=True)
class Groups:
    """A checked partition of ranks ``0 .. nranks-1`` into groups.

    ``groups[i]`` is group ``i``, its ranks ascending. Build one with
    :func:`load_groups` (policies, files) or directly from a list of groups, which is
    checked like any definition (ConfigError if it is not a partition).
    """

    groups: tuple[tuple[int, ...], ...]
    nranks: int
    source: str = ""
    """Where the definition came from (a policy, a file), for messages and reports."""
    _group_of: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        what = f"group definition {self.source!r}" if self.source else "group definition"
        groups = validate_groups(self.groups, self.nranks, what=what)
        object.__setattr__(self, "groups", tuple(tuple(g) for g in groups))
        group_of = [0] * self.nranks
        for i, group in enumerate(self.groups):
            for rank in group:
                group_of[rank] = i
        object.__setattr__(self, "_group_of", tuple(group_of))

    def group_of(self, rank: int) -> int:
        """The index of ``rank``'s group."""
        return self._group_of[rank]

    def members(self, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group (``rank`` included), ascending."""
        return self.groups[self._group_of[rank]]

    def same_group(self, a: int, b: int) -> bool:
        """Whether messages between ``a`` and ``b`` stay inside one group."""
        return self._group_of[a] == self._group_of[b]

    @property
    def max_size(self) -> int:
        return max(len(g) for g in self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self):
        return iter(self.groups)

    def to_json(self) -> dict:
        """``{"groups": [[...], ...], "nranks": n, "source": ...}`` (loads back)."""
        return {"groups": [list(g) for g in self.groups], "nranks": self.nranks,
                "source": self.source}


def validate_groups(groups, nranks: int, *, what: str = "group definition") -> list[list[int]]:
    """Check that ``groups`` (a list of lists of ranks) partitions ``0 .. nranks-1``.

    Returns the groups as lists with their ranks sorted, in the given order.

    Raises:
        ConfigError: naming the first problem: not a list, an empty group, something that
            is not a rank, a rank out of range, a rank in two groups (or twice in one),
            ranks in no group.
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ConfigError(f"{what}: the number of ranks must be an integer >= 1, got {nranks!r}")
    if not _is_list(groups):
        raise ConfigError(f"{what}: expected a list of groups (lists of ranks), "
                          f"got {type(groups).__name__}")
    where: dict[int, int] = {}
    out = []
    for i, group in enumerate(groups):
        if not _is_list(group):
            raise ConfigError(f"{what}: group {i} must be a list of ranks, got {group!r}")
        group = list(group)
        if not group:
            raise ConfigError(f"{what}: group {i} is empty")
        for rank in group:
            if not _is_rank(rank):
                raise ConfigError(f"{what}: group {i} holds {rank!r}, which is not a rank")
            rank = int(rank)
            if not 0 <= rank < nranks:
                raise ConfigError(f"{what}: rank {rank} in group {i} is out of range for "
                                  f"{nranks} ranks (0..{nranks - 1})")
            if rank in where:
                other = where[rank]
                place = f"twice in group {i}" if other == i else f"in groups {other} and {i}"
                raise ConfigError(f"{what}: rank {rank} is {place}; every rank must be in "
                                  f"exactly one group")
            where[rank] = i
        out.append(sorted(int(r) for r in group))
    missing = [r for r in range(nranks) if r not in where]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (
            f", ... ({len(missing)} in all)" if len(missing) > 10 else "")
        plural = "s" if len(missing) > 1 else ""
        raise ConfigError(f"{what}: rank{plural} {shown} {'are' if plural else 'is'} in no "
                          f"group; every rank of the {nranks} must be in exactly one group")
    return out


def _is_list(x) -> bool:
    """A list, tuple, range, set or array: anything iterable but a string or mapping."""
    return hasattr(x, "__iter__") and not isinstance(x, (str, bytes, dict))


def _is_rank(x) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def policy_groups(policy: str, nranks: int) -> Groups | None:
    """The groups of a policy name, or None when ``policy`` is not one (see POLICIES).

    Raises:
        ConfigError: a malformed ``fixed:K`` or ``trace:PATH``, or an unusable trace.
    """
    if nranks < 1:
        raise ConfigError(f"the number of ranks must be at least 1, got {nranks}")
    name = policy.strip()
    if name == "one":
        return Groups((tuple(range(nranks)),), nranks, "one")
    if name == "single":
        return Groups(tuple((r,) for r in range(nranks)), nranks, "single")
    if name == "default":
        k = default_group_size(nranks)
        return Groups(_consecutive(nranks, k), nranks, f"default (fixed:{k})")
    if name.startswith("fixed:"):
        text = name[len("fixed:"):].strip()
        try:
            k = int(text)
        except ValueError:
            raise ConfigError(f"group policy {policy!r}: the group size must be an integer "
                              f"(fixed:K), got {text!r}") from None
        if k < 1:
            raise ConfigError(f"group policy {policy!r}: the group size must be >= 1, got {k}")
        return Groups(_consecutive(nranks, k), nranks, f"fixed:{k}")
    if name.startswith("trace:"):
        path = name[len("trace:"):].strip()
        if not path:
            raise ConfigError(f"group policy {policy!r}: give a trace file, trace:PATH")
        try:
            table = read_traffic(path)
            seen = ranks_in_trace(table)
            if seen > nranks:
                raise ConfigError(f"trace {path!r} has ranks up to {seen - 1}, more than the "
                                  f"{nranks} ranks of the run")
            groups = suggest_groups(pairs_from_trace(table), default_group_size(nranks), nranks)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"group policy {policy!r}: {exc}") from exc
        return Groups(groups, nranks, f"trace:{path}")
    return None


def _consecutive(nranks: int, k: int) -> list[list[int]]:
    return [list(range(lo, min(lo + k, nranks))) for lo in range(0, nranks, k)]


def load_groups(spec, nranks: int) -> Groups:
    """A checked group definition for ``nranks`` ranks from a policy, file or list.

    Args:
        spec: None or ``"default"``, ``"one"``, ``"single"``, ``"fixed:K"``,
            ``"trace:PATH"``, a path to a JSON (or, with PyYAML, YAML) file, a list of
            groups, or a :class:`Groups` (checked against ``nranks``).
        nranks: the number of ranks of the run.

    Raises:
        ConfigError: an unknown policy or missing file, a file that does not parse, or a
            definition that is not a partition of ``0 .. nranks-1``.
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ConfigError(f"the number of ranks must be an integer >= 1, got {nranks!r}")
    if spec is None:
        spec = "default"
    if isinstance(spec, Groups):
        if spec.nranks != nranks:
            raise ConfigError(f"group definition {spec.source or 'given'} is for "
                              f"{spec.nranks} ranks, the run has {nranks}")
        return spec
    if isinstance(spec, str):
        groups = policy_groups(spec, nranks)
        if groups is not None:
            return groups
    if isinstance(spec, (str, os.PathLike)):
        return _load_file(os.fspath(spec), nranks)
    return Groups(spec, nranks)


def _load_file(path: str, nranks: int) -> Groups:
    what = f"group definition {path!r}"
    if not os.path.isfile(path):
        raise ConfigError(f"{what} is neither a policy ({', '.join(POLICIES)}) nor an "
                          f"existing file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} cannot be read: {exc}") from exc
    if path.lower().endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{what}: reading YAML needs PyYAML, which is not installed; "
                              f"write the definition as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{what} is not valid YAML: {' '.join(str(exc).split())}") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{what} is not valid JSON: {exc}") from exc
    if isinstance(data, dict):
        if "groups" not in data:
            raise ConfigError(f"{what} has no \"groups\" key (expected {{\"groups\": "
                              f"[[ranks], ...]}} or a bare list of groups)")
        declared = data.get("nranks")
        if declared is not None and declared != nranks:
            raise ConfigError(f"{what} is for {declared} ranks, the run has {nranks}")
        data = data["groups"]
    return Groups(data, nranks, path)


# --------------------------------------------------------------------------- traces


def ranks_in_trace(path_or_table) -> int:
    """The number of ranks a trace shows: its highest rank (any kind of message) + 1.

    Raises:
        ValueError: a bad trace file (see ``ftactors.runtime._trace.read_traffic``) or one with no
            messages.
    """
    table = read_traffic(path_or_table)
    tops = [v for v in (pc.max(table[c]).as_py() for c in ("source", "dest")) if v is not None]
    if not tops:
        raise ValueError("the trace holds no messages")
    return int(max(tops)) + 1


def pairs_from_trace(path_or_table, *, kinds: Iterable[str] = DEFAULT_KINDS) -> list[PairTraffic]:
    """Messages and bytes per unordered rank pair, Algorithm 2's sorted input list.

    Each delivered message is one trace row (recorded at the receiver); rows of the
    given ``kinds`` between two different ranks are added up per pair ``{source, dest}``
    (a missing byte count adds 0). Rows without a source or destination are skipped. A
    trace without a ``kind`` column (one converted from another tool) is all program
    traffic: ``kinds`` does not apply.

    Returns:
        ``PairTraffic`` tuples sorted by bytes, then count, descending, then by pair.

    Raises:
        ValueError: the file is missing, empty, unreadable or lacks source, dest or
            bytes (from ``read_traffic``); the trace holds no messages; none is of the
            given kinds between two ranks; a rank is negative.
    """
    kinds = tuple(kinds)
    table = read_traffic(path_or_table)
    if table.num_rows == 0:
        raise ValueError("the trace holds no messages")
    src, dst = table["source"], table["dest"]
    keep = pc.and_(pc.is_valid(src), pc.is_valid(dst))
    if "kind" in table.column_names:
        keep = pc.and_(keep, pc.is_in(table["kind"], value_set=pa.array(kinds, pa.string())))
    keep = pc.and_(pc.fill_null(keep, False), pc.not_equal(src, dst))
    kept = table.filter(pc.fill_null(keep, False))
    if kept.num_rows == 0:
        of_kind = (f" of kind {' or '.join(kinds) or '(none given)'}"
                   if "kind" in table.column_names else "")
        raise ValueError(f"the trace has {table.num_rows} messages but none{of_kind} "
                         f"between two different ranks")
    lo = pc.min_element_wise(kept["source"], kept["dest"])
    hi = pc.max_element_wise(kept["source"], kept["dest"])
    if pc.min(lo).as_py() < 0:
        raise ValueError(f"the trace has a negative rank ({pc.min(lo).as_py()})")
    agg = pa.table({"lo": lo, "hi": hi, "bytes": pc.fill_null(kept["bytes"], 0)}).group_by(
        ["lo", "hi"]).aggregate([("hi", "count"), ("bytes", "sum")])
    pairs = [PairTraffic((int(a), int(b)), int(n), int(s)) for a, b, n, s in zip(
        agg["lo"].to_pylist(), agg["hi"].to_pylist(), agg["hi_count"].to_pylist(),
        agg["bytes_sum"].to_pylist())]
    return _sorted_pairs(pairs)


def _sorted_pairs(pairs: Iterable[PairTraffic]) -> list[PairTraffic]:
    return sorted(pairs, key=lambda p: (-p.bytes, -p.count, p.ranks))


# --------------------------------------------------------------------------- Algorithm 2


def _aggregate(pairs) -> list[PairTraffic]:
    """Algorithm 2's preprocessing: one tuple per unordered pair, checked."""
    totals: dict[tuple[int, int], list[int]] = {}
    for item in pairs:
        try:
            (a, b), count, nbytes = item
        except (TypeError, ValueError):
            raise ConfigError(f"a traffic entry must be ((rank, rank), count, bytes), "
                              f"got {item!r}") from None
        for r in (a, b):
            if not _is_rank(r) or r < 0:
                raise ConfigError(f"traffic entry {item!r}: {r!r} is not a rank")
        a, b = int(a), int(b)
        if a == b:
            raise ConfigError(f"traffic entry {item!r} pairs rank {a} with itself")
        key = (a, b) if a < b else (b, a)
        total = totals.setdefault(key, [0, 0])
        total[0] += int(count)
        total[1] += int(nbytes)
    return _sorted_pairs(PairTraffic(k, n, s) for k, (n, s) in totals.items())


def _check_max_size(max_size) -> int:
    if not _is_rank(max_size) or max_size < 1:
        raise ConfigError(f"the maximum group size must be an integer >= 1, got {max_size!r}")
    return int(max_size)


@dataclass(eq=False)  # compared by identity: delete(R2, M) removes that very tuple
class _Tuple:
    """An output tuple ``(P, N, S)`` of Algorithm 2."""

    ranks: set
    count: int = 0
    bytes: int = 0


def form_groups(pairs: Iterable, max_size: int) -> list[tuple[tuple[int, ...], int, int]]:
    """Algorithm 2 literally: the output list M of groups that communicate.

    Args:
        pairs: ``((a, b), count, bytes)`` tuples (``PairTraffic`` or plain); tuples for
            the same unordered pair are added up first.
        max_size: G, the largest group allowed.

    Returns:
        M in insertion order, as ``(ranks, count, bytes)`` tuples: ``ranks`` a sorted tuple
        of at least two ranks, ``count`` and ``bytes`` the traffic inside the group. Ranks
        that ended in no group are absent (see :func:`suggest_groups`).

    Raises:
        ConfigError: ``max_size < 1`` or a malformed traffic entry.
    """
    g = _check_max_size(max_size)
    out: list[_Tuple] = []  # M
    where: dict[int, _Tuple] = {}  # find(P, M): groups are disjoint, so "first" is "the"
    for (a, b), count, nbytes in _aggregate(pairs):
        ra, rb = where.get(a), where.get(b)
        if ra is None and rb is None:  # insert(L_i, M)
            if g >= 2:
                t = _Tuple({a, b}, count, nbytes)
                out.append(t)
                where[a] = where[b] = t
        elif rb is None or ra is None:  # only one is grouped: join it if it has room
            grouped, free = (ra, b) if rb is None else (rb, a)
            if len(grouped.ranks) + 1 <= g:
                grouped.ranks.add(free)
                grouped.count += count
                grouped.bytes += nbytes
                where[free] = grouped
        elif ra is rb:  # R1 = R2: the pair is already inside one group
            ra.count += count
            ra.bytes += nbytes
        elif len(ra.ranks) + len(rb.ranks) <= g:  # R1 <- R1 + R2 + L_i; delete(R2, M)
            ra.ranks |= rb.ranks
            ra.count += rb.count + count
            ra.bytes += rb.bytes + nbytes
            for r in rb.ranks:
                where[r] = ra
            out.remove(rb)
        # else: two groups too big to merge; the pair's traffic crosses groups
    return [(tuple(sorted(t.ranks)), t.count, t.bytes) for t in out]


def suggest_groups(pairs: Iterable, max_size: int, nranks: int | None = None) -> list[list[int]]:
    """Groups of at most ``max_size`` ranks from pair traffic (Algorithm 2), as a partition.

    Args:
        pairs: ``((a, b), count, bytes)`` tuples, e.g. from :func:`pairs_from_trace`.
        max_size: G, the largest group allowed.
        nranks: the number of ranks; by default the highest rank in ``pairs`` + 1.
            Ranks in no group (silent ones, or ones whose partners' groups were full)
            become groups of one.

    Returns:
        Every rank ``0 .. nranks-1`` in exactly one group; ranks ascending in a group,
        groups ordered by their smallest rank.

    Raises:
        ConfigError: ``max_size < 1``, a malformed entry, or a rank ``>= nranks``.
    """
    pairs = _aggregate(pairs)
    formed = form_groups(pairs, max_size)
    top = max((b for (_, b), _, _ in pairs), default=-1)
    if nranks is None:
        nranks = top + 1
    elif top >= nranks:
        raise ConfigError(f"the traffic names rank {top}, more than the {nranks} ranks given")
    grouped = {r for ranks, _, _ in formed for r in ranks}
    groups = [list(ranks) for ranks, _, _ in formed]
    groups += [[r] for r in range(nranks) if r not in grouped]
    return sorted(groups, key=lambda g: g[0])


def traffic_inside(pairs: Iterable, groups) -> tuple[int, int]:
    """``(bytes inside groups, all bytes)`` of the pair traffic under a grouping.

    Bytes between groups are what a group-based protocol logs.
    """
    group_of = {r: i for i, g in enumerate(groups) for r in g}
    inside = total = 0
    for (a, b), _, nbytes in _aggregate(pairs):
        total += nbytes
        if a in group_of and group_of.get(a) == group_of.get(b):
            inside += nbytes
    return inside, total


def of_unit(value, unit: int):
    """An option given for every unit at once or per unit (``{unit index: value}``, keys
    as ints or as the strings a YAML file gives): unit ``unit``'s value (None: not
    given for it)."""
    if isinstance(value, dict):
        return value.get(unit, value.get(str(unit)))
    return value
