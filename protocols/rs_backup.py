"""RSBackup: Reed-Solomon encoded in-memory checkpoints, fast and slow recovery.

Paper: distributed-diskless-rs-checkpoint.txt (Bautista Gomez, Maruyama, Cappello,
Matsuoka, 2010), sections IV and V.

Theory of operation
-------------------
*Placement* (IV.B-C, ``rs_placement``): when the run starts the coordinator learns the node
of every rank (``Fabric.node_of``; ``rs_ranks_per_node`` builds a virtual topology where
there are no nodes) and cuts the ranks into groups of at most ``rs_group_size`` members
on different nodes, in sectors, on a ring whose neighbours are in different sectors. It
sends every rank the placement. A group of ``k`` members encodes ``m = k`` parity blocks
(``rs_parity`` for fewer); parity ``j`` of group ``G_i`` is held by member ``j`` of
``G_{i+1}``, so a whole group can be lost with its parity intact.

*Checkpoint* (every ``rs_interval`` iterations, at the same safe point on every rank): the
ranks flush every channel with ready messages (``_flush``, as StandbyReplacement does), so
the snapshots of a round form a consistent cut, and each rank keeps its own snapshot
(``s`` bytes). Then, in a task that runs beside ``main()``, the *star encoding* (V.A):
rank ``i`` of a group cuts its snapshot into blocks of ``rs_block_bytes`` (``z``), and
for each block computes its ``m`` partial products ``M[j][i] * block`` (its column of
the Cauchy matrix, ``erasure.partial_products``) and sends product ``j`` to the holder
of parity ``j``, in ring-shifted order (step ``s`` goes to holder ``i + s``), so at
every step every holder receives from one sender. The holder XORs what it receives at
the block's offset (parity is linear; a shorter snapshot is a zero-padded one). Once
every member's last block has arrived the parity block is complete; the holder keeps it
as an object of its own (``Link.share``: on Ray an object in the object store owned by
the holder's actor, so it lives as long as the holder; in-process elsewhere). Encoding
costs ``m * s`` field products per rank whatever the number of groups (V.B): groups
encode in parallel. The next checkpoint waits for the previous encoding to be sent, so
its markers follow every block of it on each channel: when a round's flush is over, the
previous round is complete on every live holder. Ranks and holders keep the newest two
rounds (ping-pong): a failure in the middle of an encoding leaves the round before.

*Fast recovery* (IV.E): the survivors pause and report the rounds they hold (own
snapshots, complete parity blocks). ``choose_recovery`` picks the newest round in which
every group either lost no data or keeps ``k`` of its ``k + m`` blocks; for each group
with a loss, one live rank (a member, else a parity holder) fetches ``k`` blocks, decodes
(``RSCode.decode``: the inverse of the chosen rows of the distribution matrix) and shares
the rebuilt snapshots. Failed ranks are replaced by spares (``ft.run(spares=k)``), or by
new actors when none is left; everyone restores the round (survivors their own copy,
replacements the decoded one) and ``main()`` resumes there. Parity blocks of the round
that died with their holders are then re-encoded by their group (only those indices),
after every rank has dropped what it held of them.

*Slow recovery*: with ``rs_stable_store`` every rank also writes its snapshot to stable
storage (``pyarrow.fs``) and the coordinator seals the round's set when all parts are in
(``_checkpoints``). When no round is decodable the run restores the newest complete set
there (every rank; all parity re-encoded); a lost job restarts from it with
``ft.run(restart_from=...)``. With ``rs_stable_parity`` the holders also write their
parity blocks beside the set (``rebuild_part`` decodes a part lost on disk from them). With
no stable copy, an undecodable loss ends the run with ``ft.RankFailed`` naming the groups
that could not be rebuilt. A failure before the first complete encoding restarts from
the start of the run.

*Deviations.* Checkpoints stay in memory (no SSD tier, IV.D). Placement is fixed for the
run by rank number: a replacement may start on another node than the rank it replaces.
RSBackup promotes spares itself, so it replaces StandbyReplacement's partner copies rather
than stacking with it. The decoder holds ``k`` snapshots at once (not ``z``-sized blocks).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ftactors import _storage
from ftactors._checkpoints import (load_latest, position_index, prune_sets, seal_set,
                                   store_part)
from ftactors._coordinator import NewFailure, RankDied
from ftactors._errors import ConfigError, ProtocolError, RankFailed
from ftactors._protocol import Protocol
from ftactors._storage import open_store
from ftactors.erasure import RSCode, partial_products, xor_into

from ._flush import Flush
from .rs_placement import Placement, place, virtual_nodes

NAME = "rs"
KEEP_ROUNDS = 2
"""Rounds kept by ranks (own snapshots) and holders (parity): the newest two."""
KEEP_STABLE = 2
"""Complete checkpoint sets kept on stable storage."""


def _options(opts: dict) -> dict:
    """The protocol's settings with defaults, checked."""
    def positive_int(key, default):
        v = opts.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{key} must be an int >= 1, got {v!r}")
        return v
    settings = {
        "group_size": positive_int("rs_group_size", 4),
        "parity": positive_int("rs_parity", None),
        "interval": positive_int("rs_interval", 5),
        "block_bytes": positive_int("rs_block_bytes", 1 << 20),
        "ranks_per_node": positive_int("rs_ranks_per_node", None),
        "interleave": opts.get("rs_interleave", True),
        "stable": opts.get("rs_stable_store"),
        "stable_parity": opts.get("rs_stable_parity", False),
    }
    for key in ("interleave", "stable_parity"):
        if not isinstance(settings[key], bool):
            raise ConfigError(f"rs_{key} must be True or False, got {settings[key]!r}")
    if settings["stable_parity"] and settings["stable"] is None:
        raise ConfigError("rs_stable_parity needs rs_stable_store (where to write them)")
    return settings


# ------------------------------------------------------------ recovery planning
@dataclass
class Plan:
    """What a recovery round does (``choose_recovery``).

    Attributes:
        round: the position every rank restores (None: the start of the run).
        decode: ``{group: {"lost": [member index], "sources": {block index: rank}}}``:
            ``k`` blocks to decode from (data ``0..k-1``, parity ``k..k+m-1``).
        reencode: ``{group: [parity index]}``: parity blocks of the round no live holder
            has complete, to be encoded again by the group.
    """

    round: tuple | None
    decode: dict = field(default_factory=dict)
    reencode: dict = field(default_factory=dict)


class Undecodable(Exception):
    """No round can be rebuilt; ``groups``: those that fail for the newest round."""

    def __init__(self, groups: list[int], round_id):
        super().__init__(groups, round_id)
        self.groups = groups
        self.round = round_id


def choose_recovery(placement: Placement, failed: set[int], inventories: dict) -> Plan:
    """The newest round every group can restore, and how.

    ``inventories[r]`` (survivors only): ``{"own": [rounds], "held": [(group, parity
    index, round)]}`` with complete parity blocks only.

    Raises:
        Undecodable: some parity block was completed (a round was committed) yet no
            round is decodable in every group.
    """
    rounds = sorted({tuple(r) for inv in inventories.values() for r in inv["own"]},
                    reverse=True)
    first_failure = None
    for round_id in rounds:
        plan, bad = _plan_round(placement, round_id, inventories)
        if not bad:
            return plan
        if first_failure is None:
            first_failure = bad
    if any(inv["held"] for inv in inventories.values()):
        raise Undecodable(first_failure or list(range(len(placement.groups))),
                          rounds[0] if rounds else None)
    return Plan(None)  # nothing was ever committed: the start of the run


def _plan_round(placement: Placement, round_id: tuple, inventories: dict):
    """``(plan, groups that cannot be rebuilt)`` for one round."""
    own = {r: {tuple(x) for x in inv["own"]} for r, inv in inventories.items()}
    parity: dict[tuple[int, int], int] = {}
    for holder, inv in sorted(inventories.items()):
        for g, j, rnd in inv["held"]:
            if tuple(rnd) == round_id:
                parity.setdefault((g, j), holder)
    plan, bad = Plan(round_id), []
    for g, members in enumerate(placement.groups):
        k, m = placement.k(g), placement.m(g)
        data = {i: r for i, r in enumerate(members) if round_id in own.get(r, ())}
        have = {j: parity[(g, j)] for j in range(m) if (g, j) in parity}
        lost = [i for i in range(k) if i not in data]
        if lost:
            blocks = {**data, **{k + j: r for j, r in have.items()}}
            if len(blocks) < k:
                bad.append(g)
                continue
            plan.decode[g] = {"lost": lost, "sources": dict(sorted(blocks.items())[:k])}
        missing = [j for j in range(m) if j not in have]
        if missing:
            plan.reencode[g] = missing
    return plan, bad


# ------------------------------------------------------------------ rank side
@dataclass
class _Parity:
    """One parity block being accumulated (or complete) at its holder."""

    k: int
    buf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    lengths: dict = field(default_factory=dict)  # member index -> snapshot bytes
    done: set = field(default_factory=set)        # members whose last block arrived
    handle: Any = None                            # Link.share handle once complete
    xor_s: float = 0.0                            # CPU time spent accumulating

    def add(self, member: int, offset: int, length: int, last: bool, block) -> bool:
        """XOR ``block`` in at ``offset``; returns True when the parity became complete."""
        t0 = time.thread_time()
        self.lengths[member] = length
        end = offset + len(block)
        if length > self.buf.size:  # the longest snapshot so far: grow once, not per block
            self.buf = np.concatenate([self.buf, np.zeros(length - self.buf.size, np.uint8)])
        xor_into(self.buf[offset:end], block)
        if last:
            self.done.add(member)
        self.xor_s += time.thread_time() - t0
        return len(self.done) == self.k


@dataclass
class _RS:
    """One rank's RSBackup state (under ``self._rs``)."""

    settings: dict
    placed: asyncio.Future
    flush: Flush = field(default_factory=Flush)
    own: dict = field(default_factory=dict)       # round -> snapshot blob
    held: dict = field(default_factory=dict)      # (group, parity index, round) -> _Parity
    encoding: list = field(default_factory=list)  # encoding tasks under way
    last: tuple | None = None                     # position of the last checkpoint
    restored: tuple | None = None                 # position of the last restore
    store: Any = None


def _keep_newest(d: dict, round_of, keep: int, group_of=lambda key: None) -> None:
    """Drop the entries of ``d`` older than the ``keep`` newest rounds (per group)."""
    by_group: dict = {}
    for key in d:
        by_group.setdefault(group_of(key), set()).add(round_of(key))
    for group, rounds in by_group.items():
        old = sorted(rounds)[:-keep]
        for key in [key for key in d if group_of(key) == group and round_of(key) in old]:
            del d[key]


class RSBackup(Protocol):
    """Mixin: Reed-Solomon encoded in-memory checkpoints, fast and slow recovery."""

    protocol_name = NAME
    conflicts = ("standby", "ready_flush")
    uses_spares = True
    ft_options = {
        "rs_group_size": "ranks per encoding group, on different nodes (default 4)",
        "rs_parity": "parity blocks per group (default: as many as members, m = k)",
        "rs_interval": "iterations between encoded checkpoints (default 5)",
        "rs_block_bytes": "z: bytes of each block of the star encoding (default 1 MiB)",
        "rs_ranks_per_node": "virtual topology: rank r on node r // this (default: the "
                             "transport's nodes; one rank per node if there is one node)",
        "rs_interleave": "interleave the sectors' groups on the ring (default True)",
        "rs_stable_store": "also write every round to this directory or pyarrow URI (slow "
                           "recovery; ft.run(restart_from=...) restarts from it)",
        "rs_stable_parity": "also write the parity blocks to rs_stable_store",
    }

    @classmethod
    def check_options(cls, options: dict) -> None:
        _options(options)
        super().check_options(options)

    # ----------------------------------------------------------------- start, end
    async def on_start(self) -> None:
        st = self._rs = _RS(_options(getattr(self, "options", {})),
                            asyncio.get_running_loop().create_future())
        if st.settings["stable"] is not None:
            st.store = open_store(st.settings["stable"])
        await super().on_start()

    async def on_finish(self) -> None:
        await self._encoded()  # the last round's parity is complete at the end
        await super().on_finish()

    def ft_rpc_rs_placement(self, placement: Placement) -> None:
        """The coordinator's placement (once per run, or with a restore)."""
        if not self._rs.placed.done():
            self._rs.placed.set_result(placement)

    # ---------------------------------------------------------------- checkpoints
    async def on_safe_point(self, iteration: int) -> None:
        await super().on_safe_point(iteration)
        st, pos = self._rs, self.ft.position
        due = iteration > 0 and iteration % st.settings["interval"] == 0
        if due and (st.last is None or pos > st.last):
            await self.rs_checkpoint()

    async def rs_checkpoint(self) -> None:
        """Flush every channel, keep this rank's snapshot and start its star encoding.
        Collective: every rank calls it at the same safe point (the protocol does)."""
        st, ft = self._rs, self.ft
        pos = ft.position
        if pos is None:
            raise ProtocolError("rs_checkpoint() must be called at a safe point")
        await self._encoded()  # their blocks go out before this round's markers
        t0 = time.perf_counter()
        peers = [r for r in range(self.size) if r != self.rank]
        st.flush.start(ft, NAME, pos, peers)
        await st.flush.wait(pos, peers)
        flush_s = time.perf_counter() - t0
        st.last = pos  # saved in the snapshot: a rank restored here does not take it again
        blob = ft.snapshot(cut=st.flush.last_cut)
        st.own[pos] = blob
        _keep_newest(st.own, lambda key: key, KEEP_ROUNDS)
        ft.events.record("rs_checkpoint", position=pos, bytes=len(blob), flush_s=flush_s)
        st.encoding.append(self.ft_spawn(self._encode_and_store(pos, blob)))

    async def _encoded(self) -> None:
        """Wait for the encodings under way (their blocks are all sent then)."""
        tasks, self._rs.encoding = self._rs.encoding, []
        for task in tasks:
            await task

    async def _encode_and_store(self, pos: tuple, blob: bytes) -> None:
        st = self._rs
        placement = await st.placed
        g, _ = placement.group_of(self.rank)
        await self._encode(pos, blob, range(placement.m(g)))
        if st.store is not None:
            await asyncio.to_thread(store_part, st.store, "", position_index(pos),
                                    self.rank, blob)
            await self.ft.link.report_now(self.ft.events.make("rs_stored", position=pos))

    async def _encode(self, pos: tuple, blob: bytes, parities) -> None:
        """The star encoding of this rank's ``blob`` for the parity blocks ``parities``
        of its group: block by block, partial products in ring-shifted order."""
        st, ft = self._rs, self.ft
        placement = await st.placed
        g, i = placement.group_of(self.rank)
        k, m = placement.k(g), placement.m(g)
        targets = sorted(parities, key=lambda j: (j - i - 1) % m)  # step s: holder i + s
        column = RSCode(k, m).cauchy[targets, i]
        data = np.frombuffer(blob, np.uint8)
        z = st.settings["block_bytes"]
        t0, work_s = time.perf_counter(), 0.0
        for offset in range(0, data.size, z):
            t_block = time.thread_time()
            block = data[offset:offset + z]
            last = offset + z >= data.size
            mine = []
            for j, product in zip(targets, partial_products(block, column)):
                part = (pos, g, j, i, k, offset, data.size, last, product)
                holder = placement.holder(g, j)
                if holder == self.rank:
                    mine.append(part)  # a ring of one group: this rank holds its own
                else:
                    ft.send_control(holder, NAME, "part", part)
            work_s += time.thread_time() - t_block  # CPU time of this rank's own steps
            for part in mine:
                self._take_part(part)  # counted as the holder's (xor_s)
            await asyncio.sleep(0)  # the application runs between blocks
        ft.events.record("rs_encoded", position=pos, group=g, parities=list(targets),
                         bytes=data.size, blocks=-(-data.size // z),
                         encode_s=time.perf_counter() - t0, work_s=work_s)

    def _take_part(self, part: tuple) -> None:
        """A holder XORs a partial product into its parity block."""
        pos, g, j, i, k, offset, length, last, product = part
        st, key = self._rs, (g, j, tuple(pos))
        parity = st.held.get(key)
        if parity is None:
            parity = st.held[key] = _Parity(k)
            _keep_newest(st.held, lambda key: key[2], KEEP_ROUNDS, lambda key: key[:2])
        if parity.add(i, offset, length, last, product):
            blob = parity.buf.tobytes()
            parity.handle, parity.buf = self.ft.link.share(blob), None
            self.ft.events.record("rs_parity", position=key[2], group=g, parity=j,
                                  bytes=len(blob), xor_s=parity.xor_s)
            if st.store is not None and st.settings["stable_parity"]:
                self.ft_spawn(asyncio.to_thread(
                    store_parity, st.store, position_index(key[2]), g, j, parity.lengths, blob))

    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        op, data = self.ft.control_data(env)
        if op == "marker":
            self._rs.flush.on_marker(self.ft, env.src, data)
        elif op == "part":
            self._take_part(data)
        else:
            raise ProtocolError(f"rs: unknown control message {op!r} from rank {env.src}")

    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        state[NAME] = {"last": self._rs.last}
        return state

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        last = state[NAME]["last"]
        self._rs.last = None if last is None else tuple(last)

    # ------------------------------------------------- recovery (coordinator calls)
    def ft_rpc_rs_failure(self, failed: list[int]) -> dict:
        """A failure notice (the rank is paused): the rounds this rank holds."""
        st = self._rs
        st.encoding = []  # cancelled by the pause
        held = [(g, j, rnd) for (g, j, rnd), p in st.held.items() if p.handle is not None]
        return {"own": sorted(st.own), "held": sorted(held)}

    def ft_rpc_rs_share(self, round_id, what: tuple) -> Any:
        """A handle to this rank's own snapshot of ``round_id`` (``("own",)``), or
        ``(handle, member lengths)`` of a parity block it holds (``("parity", g, j)``)."""
        st = self._rs
        if what[0] == "own":
            return self.ft.link.share(st.own[tuple(round_id)])
        parity = st.held[(what[1], what[2], tuple(round_id))]
        return parity.handle, dict(parity.lengths)

    async def ft_rpc_rs_decode(self, round_id, g: int, k: int, m: int, sources: dict,
                               lengths: dict, members: list[int], lost: list[int]) -> dict:
        """Rebuild the lost snapshots of group ``g`` from ``sources`` (block index ->
        handle); returns ``{member index: handle}`` of the rebuilt ones."""
        ft = self.ft
        t0 = time.perf_counter()
        fetched = await asyncio.gather(*(ft.link.fetch(h) for h in sources.values()))
        size = max(lengths.values())
        blocks = {}
        for idx, blob in zip(sources, fetched):
            b = np.frombuffer(blob, np.uint8)
            blocks[idx] = b if b.size == size else np.concatenate(
                [b, np.zeros(size - b.size, np.uint8)])
        data = await asyncio.to_thread(RSCode(k, m).decode, blocks, size)
        out = {i: ft.link.share(data[i][:lengths[i]].tobytes()) for i in lost}
        ft.events.record("rs_decoded", position=tuple(round_id), group=g,
                         ranks=[members[i] for i in lost], blocks=sorted(sources),
                         bytes=size, decode_s=time.perf_counter() - t0)
        return out

    def ft_rpc_rs_reencode(self, round_id, reencode: dict, phase: str) -> None:
        """Parity blocks of ``round_id`` to build again: ``phase="drop"`` forgets what
        this rank holds of them; ``"send"`` encodes this rank's share of them."""
        st, round_id = self._rs, tuple(round_id)
        placement = st.placed.result()
        if phase == "drop":
            for g, js in reencode.items():
                for j in js:
                    st.held.pop((g, j, round_id), None)
            return
        g, _ = placement.group_of(self.rank)
        if reencode.get(g) and round_id in st.own:
            st.encoding.append(self.ft_spawn(self._encode(round_id, st.own[round_id],
                                                          reencode[g])))

    async def on_restored(self) -> None:
        st, ft = self._rs, self.ft
        notes = ft.restore_notes.get(NAME)
        if notes is not None:
            self.ft_rpc_rs_placement(notes["placement"])
        st.flush.reset()
        st.encoding = []
        position, blob = ft.restored_from
        st.restored = position
        st.own = {} if position is None else {position: blob}
        st.held = {key: p for key, p in st.held.items()
                   if key[2] == position and p.handle is not None}
        ft.restored_from = None
        await super().on_restored()

    def ft_rpc_rs_restored(self):
        """The position this rank was last restored at (None: the start)."""
        return self._rs.restored


def store_parity(store, index: int, g: int, j: int, lengths: dict, blob: bytes) -> str:
    """Write parity block ``j`` of group ``g`` beside checkpoint set ``index``."""
    key = f"{_storage.checkpoint_prefix('', index)}/parity-g{g:04d}-j{j:03d}"
    store.put(key, {"lengths": lengths, "block": blob})
    return key


def rebuild_part(store, index: int, placement: Placement, rank: int) -> bytes:
    """Decode rank ``rank``'s part of checkpoint set ``index`` from the other parts of
    its group and the parity blocks written with ``rs_stable_parity`` (a part lost on
    stable storage, IV.E). Raises ValueError when fewer than ``k`` blocks are there."""
    g, i = placement.group_of(rank)
    k, m = placement.k(g), placement.m(g)
    prefix = _storage.checkpoint_prefix("", index)
    blocks, lengths = {}, None
    for idx, member in enumerate(placement.groups[g]):
        key = f"{prefix}/rank-{member:05d}"
        if member != rank and store.exists(key):
            blocks[idx] = store.get_bytes(key)
    for j in range(m):
        key = f"{prefix}/parity-g{g:04d}-j{j:03d}"
        if store.exists(key):
            entry = store.get(key)
            blocks[k + j], lengths = entry["block"], entry["lengths"]
    if lengths is None:
        raise ValueError(f"no parity block of group {g} in set {index}")
    size = max(lengths.values())
    padded = {idx: np.frombuffer(b, np.uint8) for idx, b in blocks.items()}
    padded = {idx: b if b.size == size else np.concatenate([b, np.zeros(size - b.size, np.uint8)])
              for idx, b in padded.items()}
    return RSCode(k, m).decode(padded, size)[i][:lengths[i]].tobytes()


# ------------------------------------------------------------ coordinator side
class RSRecovery:
    """Coordinator side: placement, stable sets, and recovery rounds (module docstring)."""

    def __init__(self, coordinator):
        self.c = coordinator
        self.settings = _options(coordinator.options)
        self.store = None if self.settings["stable"] is None else open_store(
            self.settings["stable"])
        self.placement: Placement | None = None
        self._placing = asyncio.Lock()
        self.stored: dict[tuple, set[int]] = {}
        self.sealing = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------- placement
    async def ensure_placement(self) -> Placement:
        async with self._placing:
            if self.placement is None:
                c, s = self.c, self.settings
                if s["ranks_per_node"] is not None:
                    nodes, virtual = virtual_nodes(c.n, s["ranks_per_node"]), True
                else:
                    nodes = await asyncio.gather(*(self._node(r) for r in range(c.n)))
                    virtual = len(set(nodes)) == 1  # one node: rank failures only
                    if virtual:
                        nodes = list(range(c.n))
                self.placement = place(nodes, s["group_size"], interleave=s["interleave"],
                                       parity=s["parity"])
                c.events.record("rs_placement", virtual=virtual, **self.placement.as_dict())
        return self.placement

    async def _node(self, rank: int):
        try:
            return await self.c.fabric.node_of(self.c.handles[rank])
        except RankDied:
            return ("gone", rank)

    async def service(self) -> None:
        """At the start: place the ranks and tell them; after ``restart_from``, have every
        group encode the restored round again."""
        c = self.c
        await c.wired.wait()
        placement = await self.ensure_placement()
        try:
            await asyncio.gather(*(self._tell(r, placement) for r in range(c.n)))
            if c.restore is not None:
                restored = await c.call(0, "rs_restored")
                if restored is not None:
                    await self._reencode(restored, self._everything())
        except NewFailure:
            return  # the recovery round tells the ranks it restarts

    async def _tell(self, rank: int, placement: Placement) -> None:
        await self.c.call(rank, "ready")
        await self.c.call(rank, "rs_placement", placement)

    def _everything(self) -> dict:
        p = self.placement
        return {g: list(range(p.m(g))) for g in range(len(p.groups))}

    async def _reencode(self, round_id, reencode: dict) -> None:
        c = self.c
        for phase in ("drop", "send"):  # nobody holds stale blocks when new ones come
            await asyncio.gather(*(c.call(r, "rs_reencode", round_id, reencode, phase)
                                   for r in range(c.n)))

    # ------------------------------------------------------------ stable sets
    def on_report(self, event) -> None:
        if event.kind != "rs_stored":
            return
        pos = tuple(event.detail["position"])
        ranks = self.stored.setdefault(pos, set())
        ranks.add(event.rank)
        if len(ranks) == self.c.n:
            del self.stored[pos]
            task = asyncio.ensure_future(self._seal(pos))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _seal(self, pos: tuple) -> None:
        async with self.sealing:
            try:
                await asyncio.to_thread(seal_set, self.store, "", position_index(pos),
                                        self.c.n, {"position": list(pos), "protocol": NAME})
            except KeyError as missing:  # pruned: the store holds newer sets (another job)
                self.c.events.record("stable_checkpoint_failed", position=pos,
                                     reason=str(missing))
                return
            await asyncio.to_thread(prune_sets, self.store, "", KEEP_STABLE)
        self.c.events.record("stable_checkpoint", position=pos)

    async def finish(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks)

    # --------------------------------------------------------------- recovery
    async def recover(self, failed: set[int]) -> None:
        c = self.c
        placement = await self.ensure_placement()
        survivors = [r for r in range(c.n) if r not in failed]
        await asyncio.gather(*(c.call(r, "pause") for r in survivors))
        answers = await asyncio.gather(
            *(c.call(r, "rs_failure", sorted(failed)) for r in survivors))
        await c.phase("notified")
        plan, source = await self._plan(placement, failed, dict(zip(survivors, answers)))
        c.events.record("rs_recovery", position=plan.round, failed=sorted(failed),
                        source="memory" if isinstance(source, str) else "stable",
                        reencode=plan.reencode,
                        decode={g: [placement.groups[g][i] for i in d["lost"]]
                                for g, d in plan.decode.items()})
        for rank in sorted(failed):
            await (c.replace(rank) if c.spares else c.respawn(rank))
        for rank in survivors:
            c.epochs[rank] = c.next_epoch()
        await c.rewire()
        await c.phase("repaired")
        handles = await self._snapshots(plan, source, survivors)
        notes = {NAME: {"placement": placement}}

        def restore(rank):
            return {"snapshot": handles[rank], "peer_epochs": list(c.epochs), "notes": notes}
        waits = []
        for rank in range(c.n):
            if rank in survivors and c.running(rank):
                waits.append(c.call(rank, "resume", restore(rank), c.epochs[rank]))
            else:
                c.start_rank(rank, restore(rank))
                waits.append(c.call(rank, "ready"))
        await asyncio.gather(*waits)
        if plan.round is not None and plan.reencode:
            await self._reencode(plan.round, plan.reencode)
        c.events.record("resumed", position=plan.round)
        c.refill_spares()

    async def _plan(self, placement, failed, inventories) -> tuple[Plan, Any]:
        """The recovery plan from memory, else from stable storage (``source`` is then
        the blobs of the newest complete set). A plan to restart from the start of the
        run (nothing known in memory: the whole job was lost) also prefers a stable set.
        """
        try:
            plan = choose_recovery(placement, failed, inventories)
            if plan.round is not None:
                return plan, "memory"
            lost = None
        except Undecodable as exc:
            lost = exc
        stable = await self._load_stable()
        if stable is not None:
            if lost is not None:
                self.c.events.record("rs_undecodable", groups=lost.groups,
                                     position=lost.round, fallback="stable")
            position, blobs = stable
            return Plan(position, {}, self._everything()), blobs
        if lost is None:
            return plan, "memory"
        groups = ", ".join(f"{g} (ranks {list(placement.groups[g])})" for g in lost.groups)
        raise RankFailed(sorted(failed), f"RSBackup cannot rebuild group(s) {groups}: too "
                                         f"few blocks survive and there is no stable copy "
                                         f"(rs_stable_store)")

    async def _load_stable(self):
        """``(position, blob per rank)`` of the newest complete stable set, or None."""
        if self.store is None:
            return None
        try:
            async with self.sealing:  # not while a set is being sealed or pruned
                _, blobs, meta = await asyncio.to_thread(load_latest, self.store, self.c.n)
        except ConfigError:
            return None
        return tuple(meta["position"]), blobs

    async def _snapshots(self, plan: Plan, source, survivors: list[int]) -> list:
        """A snapshot handle per rank: own copies, decoded ones, stable blobs or blanks."""
        c, placement = self.c, self.placement
        if not isinstance(source, str):
            return list(source)
        if plan.round is None:
            return [c.blank(r) for r in range(c.n)]
        handles: list = [None] * c.n
        decoded = await asyncio.gather(*(self._decode(g, d, plan.round)
                                         for g, d in plan.decode.items()))
        for g, out in zip(plan.decode, decoded):
            for i, handle in out.items():
                handles[placement.groups[g][i]] = handle
        shared = await asyncio.gather(*(c.call(r, "rs_share", plan.round, ("own",))
                                        for r in range(c.n) if handles[r] is None))
        for r, handle in zip([r for r in range(c.n) if handles[r] is None], shared):
            handles[r] = handle
        return handles

    async def _decode(self, g: int, decode: dict, round_id) -> dict:
        """Group ``g``'s lost snapshots, decoded by one live rank holding a source."""
        c, placement = self.c, self.placement
        k, members = placement.k(g), placement.groups[g]
        sources, lengths = {}, {}
        for idx, rank in decode["sources"].items():
            if idx < k:
                sources[idx] = await c.call(rank, "rs_share", round_id, ("own",))
            else:
                sources[idx], lengths = await c.call(rank, "rs_share", round_id,
                                                     ("parity", g, idx - k))
        decoder = next(iter(decode["sources"].values()))
        return await c.call(decoder, "rs_decode", round_id, g, k, placement.m(g), sources,
                            lengths, list(members), decode["lost"])


RSBackup.recovery_policy = RSRecovery
