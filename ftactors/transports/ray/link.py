"""The rank's side of the ``ray`` transport: ``RayLink``, how a rank's batches, large
buffers, shared snapshots and reports travel.

With ``data_plane="direct"`` (the default) batches go on the sockets of ``direct`` and
only batches that hold object-store references go by actor call; with
``data_plane="ray"`` every batch is an actor call (``RankActor.deliver``). What the
actor-call path handles, measured on Ray 2.60 (see docs/architecture/transports.md):

* calls to async actors run out of submission order, so envelopes go in batches (one
  actor call per destination per flush) and the channel layer reorders them;
* Ray pickles call arguments with its own cloudpickle, whose per-object Python hooks
  cost more than the rest of a small message's path (profiled: 60% of a flooding
  sender's time). A batch of envelopes that carry nothing Ray must see (no object
  references, plain piggyback data) is therefore pickled by the C pickler, as tuples of
  fields (``to_rows``), into one ``bytes`` argument, which Ray passes through untouched;
  other batches go as objects;
* out-of-band buffers (option ``out_of_band_bytes``, 64 KiB, and more) of less than
  ``object_store_bytes`` travel on the direct plane as out-of-band frames (``direct``:
  written without a joined copy, read into a writable buffer the receiver owns; to a rank
  on the same node, from ``shared_memory_bytes`` on, through the channel's shared-memory
  segment, into which ``put_large`` copies them as they are pickled: the sender's one
  copy). Larger ones (every one with ``data_plane="ray"``) are ``ray.put`` once by
  the sender and travel as references; receivers fetch them before the channel layer
  sees the envelope, as read-only zero-copy views of the object store. The sender owns
  those objects, so a message from a rank that died before its receiver fetched it is
  lost with that rank, as on a real network.
"""
from __future__ import annotations

import asyncio
import pickle
import time

import numpy as np
import ray

from ...engine import Envelope, Link, Payload, is_plain, to_rows
from ...runtime import CORE_OPTIONS
from ..direct import Listener, Peers, encode


class RayLink(Link):
    """Sends batches on the direct plane (``direct``, see ``direct``) or with one-way
    actor calls; large buffers through the object store."""

    def __init__(self, rank: int, inbox, clock_zero: float, store_bytes: int, token: str):
        self.rank = rank
        self.token = token  # the run's: an actor call from another run is dropped
        self.store_bytes = store_bytes  # out-of-band buffers from this size on: object store
        self.inbox = inbox
        self.clock_zero = clock_zero  # the run's start (epoch seconds, the driver's)
        self.peers: list = []
        self.direct: Peers | None = None
        self.listener: Listener | None = None
        self.posted: list = []  # reports the Inbox may not have yet (``settle``)

    @property
    def cheap_messages(self) -> bool:
        return self.direct is not None

    def send(self, dst: int, envs: list[Envelope]) -> None:
        refs, plain = _shape(envs)
        if self.direct is not None and not refs:
            if self.direct.send(dst, *encode(envs, plain)):
                return
        if refs:
            _writable(envs)
        batch = pickle.dumps(to_rows(envs), protocol=5) if plain and not refs else envs
        self.peers[dst].deliver.remote(batch, self.token)

    def congested(self, dst: int):
        return None if self.direct is None else self.direct.congested(dst)

    def cut(self, peers: list[int] | None, seconds: float) -> None:
        """Chaos: end the direct connections to ``peers`` (None: every connection, both
        ways); the channels connect again after ``seconds`` and resend."""
        if self.direct is not None:
            self.direct.disconnect(peers, seconds)
            if peers is None:
                self.listener.disconnect()

    def put_large(self, view: memoryview, dst: int | None = None):
        """A buffer for the direct plane, or from ``store_bytes`` on a reference to it in
        the object store. For the direct plane it is copied (the sender may change its
        array once ``send`` returns) once: to ``dst`` on this node, straight into the
        channel's shared-memory segment (``Peers.place``); otherwise into a bytearray (so
        that it also arrives writable in a batch that goes by actor call with a
        reference beside it)."""
        if self.direct is not None and view.nbytes < self.store_bytes:
            if dst is not None:
                placed = self.direct.place(dst, view)
                if placed is not None:
                    return placed
            return bytearray(view)
        return ray.put(np.frombuffer(view, dtype=np.uint8))

    async def resolve(self, payload: Payload) -> Payload:
        refs = [b for b in payload.buffers if isinstance(b, ray.ObjectRef)]
        fetched = iter(await asyncio.gather(*refs))
        buffers = [next(fetched) if isinstance(b, ray.ObjectRef) else b for b in payload.buffers]
        resolved = Payload(payload.data, tuple(buffers), payload.nbytes)
        resolved.origin = payload
        return resolved

    def share(self, data: bytes | tuple):
        if isinstance(data, tuple):  # a transfer: buffers in chunks, see fetch
            stream, buffers = data
            chunks = []
            for buf in buffers:
                view = memoryview(buf).cast("B")
                chunks.append([ray.put(np.frombuffer(view[i:i + TRANSFER_CHUNK], np.uint8))
                               for i in range(0, max(len(view), 1), TRANSFER_CHUNK)])
            return (ray.put(stream), chunks)
        return (ray.put(data),)  # wrapped: a bare ref in a return value would be fetched

    async def fetch(self, handle) -> bytes | tuple:
        if isinstance(handle, (bytes, bytearray, memoryview)):
            return handle  # sent by value (a restart from stable storage)
        if len(handle) == 1:
            return await handle[0]
        # a transfer: every chunk is pulled at once (by the object manager, another
        # process) while this one copies the chunks that have arrived into writable buffers
        stream_ref, chunks = handle
        pulls = [[asyncio.ensure_future(_awaited(ref)) for ref in refs] for refs in chunks]
        buffers = []
        for parts in pulls:
            arrays = [await part for part in parts]
            out = bytearray(sum(a.nbytes for a in arrays))
            dst, at = np.frombuffer(out, np.uint8), 0
            for a in arrays:
                dst[at:at + a.nbytes] = a
                at += a.nbytes
            buffers.append(out)
        return await stream_ref, buffers

    def report(self, event) -> None:
        self.posted.append(self.inbox.post.remote(event, self.token))
        if len(self.posted) >= POSTED_PRUNE:
            self.posted = ray.wait(self.posted, num_returns=len(self.posted), timeout=0)[1]

    async def settle(self) -> None:
        """Wait until every event this rank reported is in the Inbox. Ray orders the
        calls of one caller to one actor only, so the rank's result could reach the
        driver before the reports that came first, and the run end without them (a
        chaos disconnect then counted as never fired)."""
        posted, self.posted = self.posted, []
        await asyncio.gather(*posted, return_exceptions=True)

    async def report_now(self, event) -> None:
        await self.inbox.post.remote(event, self.token)

    def clock(self) -> float:
        """Seconds since the run started (``RayFabric.clock``)."""
        return time.time() - self.clock_zero


OBJECT_STORE_BYTES = next(o.default for o in CORE_OPTIONS if o.name == "object_store_bytes")
"""Out-of-band buffers from this size on go through the object store (the option's default)."""

OUT_OF_BAND_BYTES = next(o.default for o in CORE_OPTIONS if o.name == "out_of_band_bytes")
"""Buffers from this size on travel out of band on the direct plane (the option's default)."""

SHARED_MEMORY_BYTES = next(o.default for o in CORE_OPTIONS if o.name == "shared_memory_bytes")
"""Out-of-band buffers from this size on go through shared memory to a rank on the same
node (the option's default)."""

POLL_SPIN_US = next(o.default for o in CORE_OPTIONS if o.name == "poll_spin_us")
"""Microseconds a rank's loop polls before it sleeps (the option's default, ``_spin``)."""

POSTED_PRUNE = 256
"""A rank forgets the reports the Inbox has taken once this many are outstanding."""

TRANSFER_CHUNK = 16 << 20
"""A moving rank's large buffers travel in objects of this size, so that the receiver
copies the first ones while the object manager pulls the rest."""


async def _awaited(ref):
    return await ref


def _writable(envs: list[Envelope]) -> None:
    """Before a batch with object references goes by actor call: the payloads' arrays
    (a region of a shared-memory segment, ``put_large``; an area a forwarded message
    was read into) become bytearrays, which Ray pickles in band, so that they arrive
    writable as on the direct plane (Ray would rebuild an array as a read-only view of
    the object store). A copy, on this rare path only: a message with a buffer of
    ``object_store_bytes`` and a smaller one."""
    for env in envs:
        buffers = env.payload.buffers
        if any(type(b) is np.ndarray for b in buffers):
            env.payload.buffers = tuple(bytearray(b) if type(b) is np.ndarray else b
                                        for b in buffers)


def _shape(envs: list[Envelope]) -> tuple[bool, bool]:
    """Whether any payload of ``envs`` holds object references (out-of-band buffers from
    ``object_store_bytes`` on: Ray must see those to keep them alive), and whether every
    piggyback is plain data (``is_plain``: the C pickler will do). One pass, no generator:
    every batch is asked."""
    refs, plain = False, True
    for env in envs:
        buffers = env.payload.buffers
        if buffers and not refs:
            for b in buffers:
                if isinstance(b, ray.ObjectRef):
                    refs = True
                    break
        if env.piggyback is not None and plain:
            plain = is_plain(env.piggyback)
    return refs, plain
