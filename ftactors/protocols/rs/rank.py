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

*Checkpoint* (every ``rs_interval`` iterations): a rank at its safe point begins a round
and the others join it, at their own safe point or, out of step, when blocked on a
message that may come only after it or once ``main()`` returned (``shared/joining.py``,
as StandbyReplacement and ReadyMessageFlush do); the ranks flush their channels with
ready messages (``shared/flush.py``), so the parts of a round form a consistent cut
(its recovery line is the furthest part, kept beside each own copy and in a stable
set's manifest), and each rank keeps its own part (``s`` bytes). Then, in a task that runs beside ``main()``, the *star encoding* (V.A):
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
encode in parallel. A rank joining the next round first sends the rest of the previous
encoding at once (``joining_round``), so its markers follow every block of it on each
channel (the holders' channels are always
marked, ``Flush.start(also=)``, even where no application message went): when a round's
flush is over, the previous round is complete on every live holder. Ranks and holders keep the newest two
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
(``_checkpoints``). When no round is decodable the run restores its own newest complete
set there (every rank; all parity re-encoded; sets other runs left in the store are
never candidates); a lost job restarts from it with ``ft.run(restart_from=...)``. With
``rs_stable_parity`` the holders also write their parity blocks beside the set
(``rebuild_part`` decodes a part lost on disk from them). With
no stable copy, an undecodable loss ends the run with ``ft.RankFailed`` naming the groups
that could not be rebuilt. A failure before the first complete encoding restarts from
the start of the run.

*In a stack* (``class S(RSBackup, StandbyReplacement, ReadyMessageFlush, App)``, RSBackup
first) the encoded rounds are one level among others, on their own ``rs_interval``:
recovery tries the partner copies first and comes here when a rank and its partner died
together (``runtime/_escalation``); a loss the blocks cannot rebuild passes on to the
global set. Below a costlier level, a failure before the first complete encoding is
passed on (``LevelExhausted``) rather than restarted from the start of the run. A rank
restored by another level keeps no round of ours unless its snapshot is our part of a
round (``part_of`` in its protocol state, ``on_restored``): our parity of it would be
encoded twice.

*Keeping another protocol's parts* (``class S(RSBackup, GroupCoordination, App)``, or
DDVPiggyback; ``_rs_parts``): those protocols checkpoint one group or cluster (a *unit*)
at a time, so no round is taken here (``runtime/_escalation``, "Levels that keep another
protocol's parts"). The code's group is the unit: its members made their parts of one
checkpoint together, so the encoding needs no agreement of its own. At ``on_part`` a
member keeps its part (a data block of the unit's code) and star-encodes it, the first
block at once and the others beside ``main()``; parity ``j`` of unit ``G``'s checkpoint
is held by member ``j mod |G+1|`` of the next unit (``m = k``, ``rs_parity`` for fewer),
so a unit lost whole with its node is decoded from the next one; with one unit, member
``j`` of the unit itself holds it (a rank's loss is decoded, the unit's falls to the
object store). Members and holders keep every checkpoint of a unit from the oldest one
its recovery may still restore on (``parts_floor``: a group's newest complete set, the
oldest CLC the garbage collection keeps), which each partial product carries: a
recovery line may go back past the newest parts, and by more than any fixed count (ranks
run parts ahead of their group's complete sets). The consistency protocol's recovery asks
``EncodedParts.find``: a live rank's own copy as it is, a lost part decoded from ``k``
blocks of live members and holders (and of ranks a DDV cascade stopped, whose parts and
parity blocks were rescued into the driver first: ``rescue``); ``forget`` drops the newer checkpoints of restarted
units at their live members and holders once survivors are fenced (products still in
flight from the old lives are dropped by channel epochs), so a key made again after a
rollback starts a fresh parity block; one that would take a block twice anyway is
spoiled, never used (``rs_parity_mixed``). A restored rank learns its part's key from
the restore notes and keeps it again. The options of our own rounds
(role ``OWN_ROUNDS`` in ``OPTIONS``) are refused in such stacks.

*Deviations.* Checkpoints stay in memory (no SSD tier, IV.D). Placement is fixed for the
run by rank number: a replacement may start on another node than the rank it replaces.
The decoder holds ``k`` snapshots at once (not ``z``-sized blocks). Encoding shares the
rank's event loop (one block, then the application): a worker thread would overlap it
with the application but make the sim transport's runs depend on the OS scheduler. With
another protocol's parts, the driver decodes (the paper: a live rank): the ranks near
the loss are often those the recovery restarts, and the driver hands the result to the
restore directly; and the parity of a restored checkpoint lost with its holders is not
encoded again (the unit's next checkpoint has its parity).

*Footprint* (bounded whatever the run's length): each rank holds its own snapshot and
the parity blocks it holds for the newest ``KEEP_ROUNDS`` (2) rounds (on Ray the parity
blocks are objects in the object store owned by their holder, released when the round is
dropped); with ``rs_stable_store``, the run's ``KEEP_STABLE`` (2) newest sets on stable
storage, in its folder. With
another protocol's parts, its own parts and the parity blocks it holds (as bytes in its
memory) of the checkpoints per unit from its floor on (under GroupCoordination at most
``PARTS_AHEAD_MAX`` + 1, its members are held back; under DDVPiggyback the CLCs the
coordinator keeps). No message log. Measured by ``ftactors bench footprint``.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ftactors.runtime import LEVEL, MOVED, parts_lead, position_index, store_part
from ftactors.base import ProtocolError, open_store
from ftactors.protocols.rs.erasure import RSCode, partial_products, xor_into

from ..shared.flush import OPS as FLUSH_OPS, Flush
from ..shared.intervals import Pacer
from ..shared.joining import JoinsRounds, Part
from .options import KEEP_ROUNDS, NAME, OPTIONS, rs_settings
from .stable import store_parity
from .placement import Placement, as_key, unit_code, unit_holder


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
    added: set = field(default_factory=set)       # (member, offset) of the blocks XORed in
    mixed: bool = False                           # a block came twice: never complete

    def add(self, member: int, offset: int, length: int, last: bool, block) -> bool:
        """XOR ``block`` in at ``offset``; returns True when the parity became complete.
        A block that comes twice (two executions' encodings of one key) spoils it for
        good: ``mixed``, never complete."""
        if self.mixed or self.handle is not None or (member, offset) in self.added:
            self.mixed, self.handle, self.buf = True, None, None
            return False
        self.added.add((member, offset))
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
    floors: dict = field(default_factory=dict)    # parts mode: unit -> its oldest part kept
    encoding: list = field(default_factory=list)  # encoding tasks under way
    steps: list = field(default_factory=list)     # their star encodings (generators)
    lines: dict = field(default_factory=dict)     # own round -> its line (furthest part)
    restored_round: tuple | None = None           # the round of the part restored (ours)
    last: tuple | None = None                     # position of the last checkpoint
    restored: tuple | None = None                 # position of the last restore
    store: Any = None
    parts_mode: bool = False  # encoding a hands_parts protocol's parts, no rounds of ours
    next_round: int = 1       # with rs_interval_s: the iteration rank 0 chose
    pacer: Pacer | None = None
    moved: dict | None = None  # restored by a migration: what came with it


async def _blocks_between(steps, running: list | None = None) -> None:
    """Run a star encoding's steps, letting the application run between blocks; listed
    in ``running`` meanwhile (a round's join sends the rest at once: ``_drain``)."""
    if running is not None:
        running.append(steps)
    try:
        for _ in steps:
            await asyncio.sleep(0)
    finally:
        if running is not None:
            running.remove(steps)


def _keep_newest(d: dict, round_of, keep: int, group_of=lambda key: None) -> None:
    """Drop the entries of ``d`` older than the ``keep`` newest rounds (per group)."""
    by_group: dict = {}
    for key in d:
        by_group.setdefault(group_of(key), set()).add(round_of(key))
    for group, rounds in by_group.items():
        old = sorted(rounds)[:-keep]
        for key in [key for key in d if group_of(key) == group and round_of(key) in old]:
            del d[key]


class RSBackup(JoinsRounds):
    """Mixin: Reed-Solomon encoded in-memory checkpoints, fast and slow recovery."""

    protocol_name = NAME
    roles = {LEVEL: "Reed-Solomon encoded blocks in the object store"}
    stacks_with = ("standby", "ready_flush", "groups", "hc3i")
    stack_order = 0
    level_cost = 2
    uses_spares = True
    needs_safe_points = True
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, options: dict) -> None:
        rs_settings(options)
        super().check_options(options)

    # ----------------------------------------------------------------- start, end
    async def on_start(self) -> None:
        st = self._rs = _RS(rs_settings(getattr(self, "options", {})),
                            asyncio.get_running_loop().create_future())
        if parts_lead(type(self)) is not None:
            st.parts_mode = True
        if st.settings["stable"] is not None:
            st.store = open_store(st.settings["stable"])
        st.pacer = Pacer(self.ft.link.clock)
        if not st.parts_mode:
            self.ft.keep_base = True  # a round may take this rank's state between safe points
            self.add_round_level(NAME, st.flush)
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
        st, pos = self._rs, self.ft.position
        await super().on_safe_point(iteration)
        due = None if st.parts_mode else self.planned_due(NAME, iteration)
        if due is None and st.settings["interval_s"] is not None:
            due = not st.parts_mode and iteration >= st.next_round
        elif due is None:
            due = (not st.parts_mode and iteration > 0
                   and iteration % st.settings["interval"] == 0)
        if st.parts_mode:
            return
        # its own round here, and the rounds other ranks began: this safe point's state
        begin = [pos] if due and (st.last is None or pos > st.last) else []
        await self.joined_at_safe_point(NAME, begin)

    async def rs_checkpoint(self) -> None:
        """Begin a round at this safe point (every other rank joins it,
        ``shared/joining.py``): once flushed, this rank keeps its snapshot and starts
        its star encoding."""
        st, ft = self._rs, self.ft
        if ft.position is None:
            raise ProtocolError("rs_checkpoint() must be called at a safe point")
        if st.parts_mode:
            raise ProtocolError("rs_checkpoint() takes a global round; in this stack the "
                                "encoded blocks are of the consistency protocol's parts")
        await self.joined_at_safe_point(NAME, [ft.position])

    def joining_round(self, name: str, round_id):
        """The encodings under way send their remaining blocks first (so this round's
        markers follow every block of them on each channel: once its flush is over the
        previous round is complete on every live holder); with ``rs_interval_s`` rank
        0's marker carries the iteration of the next round."""
        if name != NAME:
            return super().joining_round(name, round_id)
        st = self._rs
        for steps in list(st.steps):
            for _ in steps:
                pass
        if st.last is None or round_id > st.last:
            st.last = round_id  # saved in the part: a rank restored here does not begin it
        seconds = st.settings["interval_s"]
        if seconds is None or self.rank != 0:
            return None
        st.next_round = st.pacer.next_after(round_id[1], seconds)
        return st.next_round

    def round_also(self, name: str, round_id) -> tuple:
        """The holders' channels too: the last round's blocks are there once this one
        is over (no placement yet: no encoding was sent either)."""
        if name != NAME:
            return super().round_also(name, round_id)
        placed = self._rs.placed
        if not placed.done():
            return ()
        placement = placed.result()
        g, _ = placement.group_of(self.rank)
        return tuple(placement.holder(g, j) for j in range(placement.m(g)))

    def round_agreed(self, name: str, round_id, values: dict, protocols: dict) -> None:
        if name != NAME:
            return super().round_agreed(name, round_id, values, protocols)
        if self._rs.settings["interval_s"] is not None and 0 in values:
            # rank 0's choice, carried by its marker
            self._rs.next_round = protocols[NAME]["next_round"] = values[0]

    async def round_sealed(self, name: str, round_id, part: Part, blob: bytes, values: dict,
                           line) -> None:
        """Every marker is in: keep this rank's part and start its star encoding."""
        if name != NAME:
            return await super().round_sealed(name, round_id, part, blob, values, line)
        st, ft = self._rs, self.ft
        st.pacer.mark(round_id[1])
        st.own[round_id] = blob
        st.lines[round_id] = line
        _keep_newest(st.own, lambda key: key, KEEP_ROUNDS)
        for old in [r for r in st.lines if r not in st.own]:
            del st.lines[old]
        ft.events.record("rs_checkpoint", position=round_id, bytes=len(blob),
                         flush_s=ft.link.clock() - part.at, part_position=part.position)
        st.encoding.append(self.ft_spawn(self._encode_and_store(round_id, blob)))
        self.planned_cost(NAME, part.at)

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
            await asyncio.to_thread(store_part, st.store, self.run_identity,
                                    position_index(pos), self.rank, blob)
            await self.ft.link.report_now(self.ft.events.make(
                "rs_stored", position=pos, line=st.lines.get(pos)))

    async def _encode(self, pos: tuple, blob: bytes, parities) -> None:
        """The star encoding of this rank's ``blob`` for the parity blocks ``parities``
        of its group of the placement."""
        placement = await self._rs.placed
        g, i = placement.group_of(self.rank)
        await _blocks_between(self._star(pos, blob, (g, i, placement.k(g), placement.m(g)),
                                         parities, lambda j: placement.holder(g, j)),
                              self._rs.steps)

    def _star(self, pos, blob: bytes, code: tuple, parities, holder_of, floor=None):
        """The star encoding of this rank's ``blob`` (member ``i`` of group ``g`` coded
        ``k + m``: ``code``) for the parity blocks ``parities``, held by
        ``holder_of(j)``: block by block (a generator: one step per block), partial
        products in ring-shifted order. Parts mode: each product carries ``floor``, the
        oldest part of the unit its recovery may still restore."""
        st, ft = self._rs, self.ft
        g, i, k, m = code
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
                part = (pos, g, j, i, k, offset, data.size, last, product, floor)
                holder = holder_of(j)
                if holder == self.rank:
                    mine.append(part)  # a ring of one group: this rank holds its own
                else:
                    ft.send_control(holder, NAME, "part", part)
            work_s += time.thread_time() - t_block  # CPU time of this rank's own steps
            for part in mine:
                self._take_part(part)  # counted as the holder's (xor_s)
            yield
        ft.events.record("rs_encoded", position=pos, group=g, parities=list(targets),
                         bytes=data.size, blocks=-(-data.size // z),
                         encode_s=time.perf_counter() - t0, work_s=work_s)

    def on_part(self, key, blob: bytes) -> None:
        """Parts mode: keep this rank's part (a data block of its unit's code) and encode
        it for the parity held by the next unit: the first block at once (a part no
        larger than ``rs_block_bytes`` has its products on the wire before the protocol
        reports the part), the others beside the application."""
        super().on_part(key, blob)
        st = self._rs
        units = self.part_units()
        g = units.group_of(self.rank)
        i = units.groups[g].index(self.rank)
        k, m = unit_code(units, g, st.settings["parity"])
        floor = self.parts_floor()
        st.own[key] = blob
        for old in [old for old in st.own if floor is not None and old < floor]:
            del st.own[old]
        steps = self._star(key, blob, (g, i, k, m), range(m), lambda j: unit_holder(units, g, j),
                           floor)
        next(steps, None)
        st.encoding.append(self.ft_spawn(_blocks_between(steps)))

    def _take_part(self, part: tuple) -> None:
        """A holder XORs a partial product into its parity block."""
        pos, g, j, i, k, offset, length, last, product, floor = part
        st, key = self._rs, (g, j, as_key(pos))
        if floor is not None and (g not in st.floors or floor > st.floors[g]):
            st.floors[g] = floor  # parts mode: older parts of unit g are never restored
            for old in [old for old in st.held if old[0] == g and old[2] < floor]:
                del st.held[old]
        if g in st.floors and key[2] < st.floors[g]:
            return  # a late block of an older part (its encoding ran beside a newer one)
        parity = st.held.get(key)
        if parity is None:
            parity = st.held[key] = _Parity(k)
            if not st.parts_mode:  # own rounds: the newest two
                _keep_newest(st.held, lambda key: key[2], KEEP_ROUNDS, lambda key: key[:2])
        if parity.mixed:
            return
        if parity.add(i, offset, length, last, product):
            blob = parity.buf.tobytes()  # kept as bytes in parts mode: the driver decodes
            parity.handle = blob if st.parts_mode else self.ft.link.share(blob)
            parity.buf = None
            self.ft.events.record("rs_parity", position=key[2], group=g, parity=j,
                                  bytes=len(blob), xor_s=parity.xor_s)
            if st.store is not None and st.settings["stable_parity"]:
                self.ft_spawn(asyncio.to_thread(
                    store_parity, st.store, self.run_identity, position_index(key[2]), g, j,
                    parity.lengths, blob))
        elif parity.mixed:  # the protocol failed to drop an abandoned encoding
            self.ft.events.record("rs_parity_mixed", position=key[2], group=g, parity=j,
                                  member=i)

    def on_control(self, env) -> None:
        if env.comm != NAME:
            return super().on_control(env)
        op, data = self.ft.control_data(env)
        if op in FLUSH_OPS:
            self._rs.flush.take(self.ft, env, op, data)
            self.marker_taken()
        elif op == "part":
            self._take_part(data)
        else:
            raise ProtocolError(f"rs: unknown control message {op!r} from rank {env.src}")

    def protocol_state(self) -> dict[str, Any]:
        state = super().protocol_state()
        # ``part_of``: this state is this rank's part of that round of ours (not another
        # level's snapshot)
        state[NAME] = {"last": self._rs.last, "next_round": self._rs.next_round,
                       "part_of": self.joining_part(NAME)}
        return state

    def restore_protocol_state(self, state: dict[str, Any]) -> None:
        super().restore_protocol_state(state)
        last = state[NAME]["last"]
        self._rs.last = None if last is None else tuple(last)
        self._rs.next_round = state[NAME]["next_round"]
        part_of = state[NAME].get("part_of")
        self._rs.restored_round = None if part_of is None else tuple(part_of)
        self._rs.moved = state.get(MOVED, {}).get(NAME)

    def moving_state(self) -> dict[str, Any]:
        st = self._rs
        return {**super().moving_state(),
                NAME: {"own": st.own, "held": st.held, "floors": st.floors, "lines": st.lines,
                       "restored": st.restored, "flush": st.flush.moving()}}

    # ------------------------------------------------- recovery (coordinator calls)
    def ft_rpc_rs_failure(self, failed: list[int]) -> dict:
        """A failure notice (the rank is paused): the rounds this rank holds."""
        st = self._rs
        st.encoding = []  # cancelled by the pause
        held = [(g, j, rnd) for (g, j, rnd), p in st.held.items() if p.handle is not None]
        return {"own": sorted(st.own), "held": sorted(held),
                "lines": {r: st.lines.get(r) for r in st.own}}

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

    # ------------------------------------------- parts mode (coordinator calls)
    def ft_rpc_rs_parts(self) -> dict:
        """The parts this rank keeps (its own, by key) and the complete parity blocks it
        holds ``(unit, parity index, key, member lengths)``."""
        st = self._rs
        return {"own": sorted(st.own), "held": [(g, j, key, dict(p.lengths))
                                                for (g, j, key), p in st.held.items()
                                                if p.handle is not None]}

    def ft_rpc_rs_part(self, key) -> bytes | None:
        """This rank's own part ``key`` (None: dropped since, a newer one was made)."""
        return self._rs.own.get(as_key(key))

    def ft_rpc_rs_part_parity(self, g: int, j: int, key) -> bytes | None:
        """Complete parity block ``j`` of unit ``g``'s part ``key`` (None: dropped)."""
        parity = self._rs.held.get((g, j, as_key(key)))
        return None if parity is None else parity.handle

    def ft_rpc_rs_part_drop(self, after: dict) -> None:
        """Units rolled back to their parts ``after`` {unit: key, None: the start}: drop
        what this rank keeps of their newer parts (the abandoned execution's), its own
        and the parity blocks, complete or not."""
        st, mine = self._rs, self.part_units().group_of(self.rank)
        after = {g: None if key is None else as_key(key) for g, key in after.items()}
        stale = [key for key in st.held
                 if key[0] in after and (after[key[0]] is None or key[2] > after[key[0]])]
        partial = sorted(key for key in stale if st.held.pop(key).handle is None)
        if mine in after:
            st.own = {key: blob for key, blob in st.own.items()
                      if after[mine] is not None and key <= after[mine]}
        if stale:
            self.ft.events.record("rs_parity_dropped", blocks=sorted(stale), partial=partial)

    async def on_restored(self) -> None:
        st, ft = self._rs, self.ft
        if st.parts_mode:  # a restarted unit: its part is again a data block of its code
            key = ft.restore_notes.get(NAME, {}).get("part_keys", {}).get(self.rank)
            st.own = {} if key is None else {as_key(key): ft.restored_from[1]}
            st.held, st.encoding = {}, []
            return await super().on_restored()
        notes = ft.restore_notes.get(NAME)
        if notes is not None:
            self.ft_rpc_rs_placement(notes["placement"])
        st.encoding = []
        position, blob = ft.restored_from
        if st.moved is not None:  # a migration: the same execution, its rounds and blocks too
            st.own, st.held, st.floors, st.restored, st.lines = (
                st.moved[k] for k in ("own", "held", "floors", "restored", "lines"))
            st.flush.moved(self.rank, st.moved["flush"])
            st.moved = None
            return await super().on_restored()
        st.flush.reset()
        st.steps = []
        # the restored round is one of ours if its snapshot is our part of it (not
        # another level's snapshot, which may be at the same position)
        key = st.restored_round
        st.restored = position if key is None else key
        st.own = {} if key is None else {key: blob}
        st.lines = {} if key is None else {key: ft.restored_line or position}
        st.held = {k: p for k, p in st.held.items()
                   if key is not None and k[2] == key and p.handle is not None}
        await super().on_restored()

    def ft_rpc_rs_restored(self):
        """The position this rank was last restored at (None: the start)."""
        return self._rs.restored
