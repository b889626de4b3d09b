"""Collective operations written on point-to-point messages.

Theory of operation: each collective sends ordinary application envelopes on the
communicator's collective context, so every protocol mixin sees (and may log, hold or
replay) them like any other message. Receives always name their source, and channels
are FIFO, so consecutive collectives on one communicator never mix up their messages
even with a single tag per kind of collective.

Shapes: barrier is a dissemination barrier (ceil(log2 n) rounds); bcast and scatter go
down a binomial tree rooted at ``root``; gather goes up the same tree. Reductions fold up
the binomial tree rooted at rank 0, combining at every inner node (n - 1 messages, each one
operand), then allreduce and allgather broadcast the result back down; ``reduce`` to
another root adds one message. Operands are combined in rank order with a fixed
bracketing — a node's range always on the left, e.g. ``((x0 op x1) op (x2 op x3))`` for
four ranks — so results never depend on arrival order, are bit-identical on every rank and
in every run, ``reduce`` gives the same bits as ``allreduce``, and non-commutative
operations are fine (like MPI, an op is assumed associative).

Recursive doubling (``_exchange_doubling``) halves the sequential hops of allreduce and
allgather (log2 n instead of 2 log2 n) but sends n log2 n messages instead of 2(n - 1),
and keeps the bracketing only on power-of-two communicators. Where each message is an
actor call (``data_plane="ray"``) the extra messages cost more than the hops save: CG W
on 8 ranks went from 17 to 21 s. On the direct plane a message is cheap and a hop is a
process wake-up, so there it is the default (``collectives="auto"``); the option
``collectives="tree"`` or ``"doubling"`` forces one schedule on any transport. bcast packs the object once at the root and forwards the same packed payload
down the tree: on Ray, large buffers are put in the object store once and only references
travel.

Large arrays (the buffer API's ``Allreduce`` and ``Allgather(v)`` from the option
``large_collectives_bytes`` on, ``Bcast`` from ``bcast_pipeline_bytes`` on; the decision
depends only on sizes every rank knows alike) take schedules that split the array so
that every rank sends and combines about as much as any other, instead of the root or
the tree's upper ranks carrying the whole array at every step:

* ``allreduce_pieces``: Rabenseifner's reduce-scatter by recursive halving with distance
  doubling, then an allgather. Its bracketing is the binomial tree's, entry by entry: the
  tree of n ranks is ``B1 op (B2 op (... op Bt))`` over the power-of-two blocks of ranks
  that the binary digits of n give (largest first, e.g. ``[0, 4) [4, 6) [6]`` for 7), each
  block its own complete tree. Inside a block, ranks at distance 1, then 2, 4, ... pair
  and split what they hold, the lower rank's range on the left: each piece is combined
  as the tree combines it. The blocks then fold from the last to the first, the earlier
  block on the left, each block's pieces nested in the larger block's; the first block
  then holds the result, one unit per member: each sends its unit to every rank of the
  other blocks and the first block gathers the rest among itself. So the bits are those
  of the tree (and of ``reduce``) for every size. The op is applied to pieces of the
  arrays: an elementwise op, as MPI's are.
* ``allgather_ring``: n - 1 steps around the ring, each rank forwarding the payload it
  just received as it came (no arithmetic, so no order to keep).
* ``bcast_pipeline``: the array cut into pieces that flow down the chain root, root + 1,
  ... (each rank forwards a piece as it came, then copies it in), so the array crosses
  every link once and the links work at the same time.
"""
from __future__ import annotations

import numpy as np

from ._ops import Op, check_op
from ..engine import unpack

BARRIER, BCAST, GATHER, SCATTER, ALLTOALL, REDUCE, DOUBLING, SCAN = 1, 2, 3, 4, 5, 6, 7, 8
PIECES, RING, PIPELINE = 9, 10, 11

LARGE_COLLECTIVES_BYTES = 8 << 20
"""Default of the option ``large_collectives_bytes``: a buffer ``Allreduce`` or
``Allgather(v)`` of at least this many bytes takes the large-array schedule (measured:
docs/performance.md)."""

PIPELINE_PIECE_BYTES = 1 << 20
"""``bcast_pipeline`` cuts an array in pieces of at most this many bytes, and in at least
as many pieces as there are ranks (so the chain fills)."""


def pipeline_pieces(nbytes: int, n: int) -> int:
    """How many pieces ``bcast_pipeline`` cuts ``nbytes`` in on ``n`` ranks."""
    return max(n, -(-nbytes // PIPELINE_PIECE_BYTES))


async def barrier(comm) -> None:
    n, me = comm.size, comm.rank
    k = 1
    while k < n:
        comm._csend(None, (me + k) % n, BARRIER)
        await comm._crecv((me - k) % n, BARRIER)
        k <<= 1


async def _from_parent(comm, root: int, tag: int):
    """Top of a walk down the binomial tree rooted at ``root``.

    Returns ``(n, vr, top, env)``: the size, this rank's virtual rank, the mask above its
    highest child edge, and the envelope from its parent (None at the root).
    """
    n, vr = comm.size, (comm.rank - root) % comm.size
    if vr == 0:
        top = 1
        while top < n:
            top <<= 1
        return n, vr, top, None
    top = 1
    while not vr & top:
        top <<= 1
    env = await comm._crecv((vr - top + root) % n, tag)
    return n, vr, top, env


def _children(n: int, vr: int, top: int):
    """The edge masks to this rank's children, farthest first."""
    mask = top >> 1
    while mask:
        if vr + mask < n:
            yield mask
        mask >>= 1


async def bcast(comm, obj, root: int):
    n, vr, top, env = await _from_parent(comm, root, BCAST)
    if env is None:
        payload, value = comm._ep.pack(obj), obj
    else:
        payload, value = env.payload.origin, unpack(env.payload)
    for mask in _children(n, vr, top):
        comm._csend(payload, (vr + mask + root) % n, BCAST)
    return value


async def _gather_items(comm, obj, root: int) -> list | None:
    """Binomial gather of ``(rank, obj)`` pairs; the root gets all of them."""
    n, vr = comm.size, (comm.rank - root) % comm.size
    items = [(comm.rank, obj)]
    mask = 1
    while mask < n:
        if vr & mask:
            comm._csend(items, (vr - mask + root) % n, GATHER)
            return None
        if vr + mask < n:
            env = await comm._crecv((vr + mask + root) % n, GATHER)
            items.extend(unpack(env.payload))
        mask <<= 1
    items.sort(key=lambda item: item[0])
    return items


async def gather(comm, obj, root: int) -> list | None:
    items = await _gather_items(comm, obj, root)
    return None if items is None else [v for _, v in items]


async def _fold_to_zero(comm, value, combine):
    """Fold every rank's value up the binomial tree rooted at rank 0, combining at each
    inner node: rank 0 gets the result, with operands in rank order and a fixed bracketing
    (a node's range is always the left operand of the range of the child it receives)."""
    n, r = comm.size, comm.rank
    mask = 1
    while mask < n:
        if r & mask:
            comm._csend(value, r - mask, REDUCE)
            return None
        if r + mask < n:
            value = combine(value, unpack((await comm._crecv(r + mask, REDUCE)).payload))
        mask <<= 1
    return value


async def _exchange_doubling(comm, value, combine):
    """Recursive doubling on a power-of-two communicator: log2 n rounds, in each of which
    a rank swaps its block's value with the rank whose number differs in that bit and
    combines them lower block on the left, which is exactly the binomial tree's
    bracketing, so every rank gets the same bits as ``_fold_to_zero`` + ``bcast``."""
    r, mask = comm.rank, 1
    while mask < comm.size:
        partner = r ^ mask
        comm._csend(value, partner, DOUBLING)
        other = unpack((await comm._crecv(partner, DOUBLING)).payload)
        value = combine(value, other) if r < partner else combine(other, value)
        mask <<= 1
    return value


def _doubling(comm) -> bool:
    """Whether allreduce and allgather use recursive doubling here (see the module
    docstring): a power-of-two communicator whose messages are cheap."""
    n = comm.size
    return n > 1 and n & (n - 1) == 0 and comm._ep.doubling_collectives()


async def allreduce(comm, obj, op):
    if _doubling(comm):
        return await _exchange_doubling(comm, obj, check_op(op))
    return await bcast(comm, await _fold_to_zero(comm, obj, check_op(op)), 0)


async def reduce(comm, obj, op, root: int):
    value = await _fold_to_zero(comm, obj, check_op(op))
    if root == 0:
        return value
    if comm.rank == 0:
        comm._csend(value, root, REDUCE)
    elif comm.rank == root:
        return unpack((await comm._crecv(0, REDUCE)).payload)
    return None


async def allgather(comm, obj) -> list:
    if _doubling(comm):
        return await _exchange_doubling(comm, [obj], lambda a, b: a + b)
    return await bcast(comm, await _fold_to_zero(comm, [obj], lambda a, b: a + b), 0)


def _one_per_rank(comm, objs, what: str) -> list:
    """``objs`` (any iterable) as a list of one item per rank; None gives None to every
    rank, as in mpi4py."""
    if objs is None:
        return [None] * comm.size
    items = list(objs)
    if len(items) != comm.size:
        raise ValueError(f"{what} needs {comm.size} items (one per rank), got {len(items)} items")
    return items


async def scatter(comm, objs, root: int):
    items = _one_per_rank(comm, objs, "scatter root") if comm.rank == root else None
    n, vr, top, env = await _from_parent(comm, root, SCATTER)
    # entries for virtual ranks vr .. vr+len-1
    chunk = [items[(v + root) % n] for v in range(n)] if env is None else unpack(env.payload)
    for mask in _children(n, vr, top):
        comm._csend(chunk[mask:], (vr + mask + root) % n, SCATTER)
        chunk = chunk[:mask]
    return chunk[0]


async def alltoall(comm, objs) -> list:
    n, me = comm.size, comm.rank
    items = _one_per_rank(comm, objs, "alltoall")
    out = [None] * n
    out[me] = items[me]
    for k in range(1, n):
        comm._csend(items[(me + k) % n], (me + k) % n, ALLTOALL)
    for k in range(1, n):
        src = (me - k) % n
        out[src] = unpack((await comm._crecv(src, ALLTOALL)).payload)
    return out


async def scan(comm, obj, op, exclusive: bool):
    """Prefix reduction in ceil(log2 n) rounds (Hillis and Steele): in the round of
    ``mask`` a rank sends what it holds of ranks ``r-mask+1 .. r`` up to ``r + mask`` and
    puts what comes from ``r - mask`` on the left. Operands stay in rank order and each
    rank's bracketing depends only on its rank and the size, never on arrival order, so
    results are bit-identical in every run (not those of ``allreduce``: another tree).
    ``exclusive``: ranks ``0 .. r-1`` (None on rank 0), else ``0 .. r``."""
    combine = check_op(op)
    n, r = comm.size, comm.rank
    inclusive, before = obj, None
    mask = 1
    while mask < n:
        if r + mask < n:
            comm._csend(inclusive, r + mask, SCAN)
        if r - mask >= 0:
            left = unpack((await comm._crecv(r - mask, SCAN)).payload)
            inclusive = combine(left, inclusive)
            before = left if before is None else combine(left, before)
        mask <<= 1
    return before if exclusive else inclusive


# ----------------------------------------------------------------- large arrays
def _blocks(n: int) -> list[tuple[int, int]]:
    """The power-of-two blocks of ranks the binary digits of ``n`` give, in rank order
    (largest first), as ``(first rank, size)``: the binomial tree of ``n`` ranks combines
    them as ``B1 op (B2 op (... op Bt))``, each block a complete tree."""
    out, first = [], 0
    for bit in reversed(range(n.bit_length())):
        if n >> bit & 1:
            out.append((first, 1 << bit))
            first += 1 << bit
    return out


def _reversed_bits(value: int, size: int) -> int:
    """``value``'s bits below ``size`` (a power of two) in reverse order: after halving
    with distance doubling, member j of a block holds the piece numbered so (the array
    cut in as many equal units as the largest block has ranks)."""
    out = 0
    while size > 1:
        out, value, size = out << 1 | value & 1, value >> 1, size >> 1
    return out


def _combine_into(combine, left, right, out) -> None:
    """``out[...] = combine(left, right)``; an ``ft`` op that is a numpy ufunc writes
    into ``out`` itself (the same bits, without a temporary of the piece's size)."""
    if isinstance(combine, Op) and isinstance(combine.array_fn, np.ufunc):
        combine.array_fn(left, right, out=out)
    else:
        out[...] = combine(left, right)


async def allreduce_pieces(comm, work, combine):
    """``allreduce`` of a 1-D array by reduce-scatter and allgather (module docstring):
    the tree's bits, about 2 (n-1)/n of the array sent per rank on power-of-two sizes.

    ``work``: this rank's operand, writable; it is overwritten and returned with the result.
    """
    n, r = comm.size, comm.rank
    blocks = _blocks(n)
    units = blocks[0][1]
    bounds = [work.size * k // units for k in range(units + 1)]

    def piece(first: int, count: int):
        return work[bounds[first]:bounds[first + count]]

    index = next(i for i, (first, size) in enumerate(blocks) if first <= r < first + size)
    first, size = blocks[index]
    j, lo, width, mask = r - first, 0, units, 1
    while mask < size:  # reduce-scatter inside the block, distance doubling
        width >>= 1
        partner = j ^ mask
        keep, give = (lo, lo + width) if j < partner else (lo + width, lo)
        comm._csend(piece(give, width), first + partner, PIECES)
        other = unpack((await comm._crecv(first + partner, PIECES)).payload)
        mine = piece(keep, width)
        _combine_into(combine, *((mine, other) if j < partner else (other, mine)), mine)
        lo, mask = keep, mask << 1
    if index + 1 < len(blocks):  # the later blocks' result, on the right
        after, after_size = blocks[index + 1]
        owner = _reversed_bits(lo // (units // after_size), after_size)
        mine = piece(lo, width)
        later = unpack((await comm._crecv(after + owner, PIECES)).payload)
        _combine_into(combine, mine, later, mine)
    if index:  # hand this block's pieces to the members of the one before that hold them
        before, before_size = blocks[index - 1]
        step = units // before_size
        for unit in range(lo, lo + width, step):
            comm._csend(piece(unit, step), before + _reversed_bits(unit // step, before_size),
                        PIECES)
        for k in range(units):  # the result, a unit from each member of the first block
            piece(_reversed_bits(k, units), 1)[...] = unpack(
                (await comm._crecv(k, PIECES)).payload)
        return work
    for other in range(units, n):  # this member's unit of the result to the other blocks
        comm._csend(piece(lo, width), other, PIECES)
    mask = size >> 1
    while mask:  # allgather inside the first block: the halving undone
        partner = j ^ mask
        other_lo = lo + width if j < partner else lo - width
        comm._csend(piece(lo, width), partner, PIECES)
        piece(other_lo, width)[...] = unpack((await comm._crecv(partner, PIECES)).payload)
        lo, width, mask = min(lo, other_lo), width << 1, mask >> 1
    return work


async def allgather_ring(comm, mine, blocks: list, deliver) -> None:
    """Allgather around the ring: ``blocks[k]`` is where rank k's entries land (this
    rank's own, ``mine``, is sent, not copied in); in each of the n - 1 steps the block
    that came from the left is forwarded as it came and copied in with
    ``deliver(value, into)``."""
    n, r = comm.size, comm.rank
    if n == 1:
        return
    right, left = (r + 1) % n, (r - 1) % n
    comm._csend(mine, right, RING)
    for step in range(1, n):
        env = await comm._crecv(left, RING)
        if step < n - 1:
            comm._csend(env.payload.origin, right, RING)
        deliver(unpack(env.payload), blocks[(r - step) % n])


async def bcast_pipeline(comm, entries, root: int, pieces: int, deliver) -> None:
    """Broadcast a 1-D array down the chain root, root + 1, ... in ``pieces`` pieces:
    each rank forwards a piece as it came, then copies it into ``entries`` with
    ``deliver(value, into)`` (the root's ``entries`` are sent)."""
    n = comm.size
    vr = (comm.rank - root) % n
    after = (comm.rank + 1) % n if vr < n - 1 else None
    bounds = [entries.size * k // pieces for k in range(pieces + 1)]
    for k in range(pieces):
        part = entries[bounds[k]:bounds[k + 1]]
        if vr == 0:
            if after is not None:
                comm._csend(part, after, PIPELINE)
            continue
        env = await comm._crecv((comm.rank - 1) % n, PIPELINE)
        if after is not None:
            comm._csend(env.payload.origin, after, PIPELINE)
        deliver(unpack(env.payload), part)
