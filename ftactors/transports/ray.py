"""The ``ray`` transport: each rank is a Ray async actor.

With ``ray_driver`` (the driver process's side: who starts the embedded Ray, which of
its notices are printed), the only module of ftactors that imports Ray. With
``data_plane="direct"`` (the default) Ray is the control plane only: batches between ranks
go on the sockets of ``_direct`` (each rank listens from ``setup`` on, the driver makes the
run's secret and hands out the endpoints in ``wire``), and only batches that hold
object-store references still go by actor call. With ``data_plane="ray"`` every batch is an
actor call. What the actor-call path handles, measured on Ray 2.60 (see
docs/architecture/transports.md):

* calls to async actors run out of submission order, so envelopes go in batches (one
  actor call per destination per flush) and the channel layer reorders them;
* Ray pickles call arguments with its own cloudpickle, whose per-object Python hooks
  cost more than the rest of a small message's path (profiled: 60% of a flooding
  sender's time). A batch of envelopes that carry nothing Ray must see (no object
  references, plain piggyback data) is therefore pickled by the C pickler, as tuples of
  fields (``to_rows``), into one ``bytes`` argument, which Ray passes through untouched;
  other batches go as objects;
* nobody waits for a delivery, so ``deliver`` is declared with no return value
  (``num_returns=0``): a call with a return makes the callee store and ship back a
  result object that the caller's core worker then registers and frees (measured:
  10% of the CPU both ranks spend per ping-pong round trip, 2-10% of its wall time).
  An error inside a delivery is printed by the receiver, which is where Ray printed it
  before as an unhandled error of the call;
* a killed actor's pending calls fail with ``ActorDiedError`` within milliseconds, which
  the coordinator turns into a failure; every actor has one call that never answers
  (``watch``), so the death of a spare or of a rank that has returned is seen as soon;
  a death as an actor starts or is set up is a ``RankDied`` like any other (never a Ray
  exception past this module); actors are created with ``max_restarts=0`` and
  calls with ``max_task_retries=0`` (a retried call would re-run from the start) because
  recovery is the framework's job;
* out-of-band buffers (option ``out_of_band_bytes``, 64 KiB, and more) of less than
  ``object_store_bytes`` travel on the direct plane as out-of-band frames (``_direct``:
  written without a joined copy, read into a writable buffer the receiver owns; to a rank
  on the same node, from ``shared_memory_bytes`` on, through the channel's shared-memory
  segment). Larger
  ones (every one with ``data_plane="ray"``) are ``ray.put`` once by the sender and travel
  as references; receivers fetch them before the channel layer sees the envelope, as
  read-only zero-copy views of the object store. The sender owns those objects, so a
  message from a rank that died before its receiver fetched it is lost with that rank, as
  on a real network.

``address`` joins an existing cluster (``"auto"``, ``"ray://host:10001"``, ``host:port``);
with none, an embedded local Ray is started once per process and reused, by a thread that
lives as long as the process (``ray_driver.ensure_ray``). The fabric tells
``ray_driver.DEATH_NOTICES`` which rank workers die on purpose, so that Ray's crash notice
is not printed for a planned kill. Ray 2.60 turns token authentication on by default: a
client joining an explicit address needs ``RAY_AUTH_MODE=token`` (and the cluster's token)
in its environment.
"""
from __future__ import annotations

import asyncio
import functools
import os
import pickle
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import cloudpickle
import numpy as np
import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..runtime._coordinator import RankDied
from ..runtime._options import CORE_OPTIONS
from ..engine._endpoint import Link
from ..base._errors import ConfigError, ProtocolError
from ..base._warnings import RankNicenessWarning, warn
from ..engine._envelope import Envelope, from_rows, to_rows
from ..runtime._host import RankHost, RankSpec
from ..engine._payload import Payload, is_plain
from . import _sources
from .direct import Listener, Peers, RunSecret, encode
from ._spin import Spin
from ._warm import INBOXES, WARM, Warm
from .ray_driver import DEATH_NOTICES, ensure_ray


class RayLink(Link):
    """Sends batches on the direct plane (``direct``, see ``_direct``) or with one-way
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

    def put_large(self, view: memoryview):
        """A buffer for the direct plane (a copy: the sender may change its array once
        ``send`` returns; a bytearray, so that it also arrives writable in a batch that
        goes by actor call with a reference beside it), or from ``store_bytes`` on a
        reference to it in the object store."""
        if self.direct is not None and view.nbytes < self.store_bytes:
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

DRAIN_STOP_S = 10.0
"""How long the end of a run waits for the Inbox's last answer before giving it up."""

POSTED_PRUNE = 256
"""A rank forgets the reports the Inbox has taken once this many are outstanding."""

TRANSFER_CHUNK = 16 << 20
"""A moving rank's large buffers travel in objects of this size, so that the receiver
copies the first ones while the object manager pulls the rest."""


async def _awaited(ref):
    return await ref


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


class Inbox:
    """The coordinator's mailbox: ranks post events that must outlive them. It serves
    one run at a time (``open``: a process kept for the driver's next run, ``_warm``);
    a report of another run is dropped."""

    def __init__(self, token: str):
        self.token = token
        self.events: list = []
        self.arrived = asyncio.Event()

    def open(self, token: str) -> None:
        """Serve the run of ``token`` from now on, with nothing posted (a take of the
        last run still waiting ends with nothing)."""
        self.token, self.events = token, []
        self.arrived.set()  # wakes that take; the next take of this run clears it

    async def post(self, event, token: str) -> None:
        if token != self.token:
            return
        self.events.append(event)
        self.arrived.set()

    async def wake(self) -> str:
        """End a ``take`` that is waiting now (the run is over); returns this process's
        Ray worker id, so that the driver expects its death when it kills it."""
        self.arrived.set()
        return ray.get_runtime_context().get_worker_id()

    async def take(self, wait_s: float, token: str) -> list:
        """Everything the run of ``token`` posted so far, waiting up to ``wait_s`` for
        the first one; nothing for another run (a take of the last run still waiting
        here when this Inbox was opened for the next must not take its reports)."""
        if token == self.token and not self.events:
            try:
                await asyncio.wait_for(self.arrived.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        if token != self.token:
            return []
        self.arrived.clear()
        out, self.events = self.events, []
        return out


def set_niceness(niceness: int) -> str | None:
    """Give every thread of this process the niceness ``niceness``; None, or why not.

    Ray's worker sets 15 on its main thread once its C++ threads have started, and the
    Python threads it starts later (the one that runs an async actor's methods, a rank's
    code) inherit it: on a busy CPU such a thread gets about 1/28 of the share of a
    thread at 0 (the kernel's weights: 36 against 1024), so a rank computed 1.1-1.5x
    slower than a plain process. Linux niceness belongs to a thread, so each one of
    ``/proc/self/task`` is set (elsewhere, the process). Raising a niceness is always
    allowed; lowering it needs ``CAP_SYS_NICE`` (or ``RLIMIT_NICE``).
    """
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for thread in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)
        except ProcessLookupError:
            continue  # a thread that has just ended
        except PermissionError as exc:
            return (f"niceness {os.getpriority(os.PRIO_PROCESS, thread)} cannot be lowered "
                    f"to {niceness} without CAP_SYS_NICE ({exc.strerror})")
    return None


def _take(actor: "RankActor", envs: list[Envelope]) -> None:
    """Hand a batch to ``actor``'s rank, from either plane (none after ``close``). Not a
    method: Ray wraps every method of an actor class (its tracing hook), a Python call
    more for every batch, on the direct plane's path of every message."""
    if actor.host is None:
        return
    try:
        actor.host.ep.deliver(envs)
    except Exception:  # no sender sees a result: report it here
        print(f"ftactors: rank {actor.link.rank} failed to deliver a batch:\n"
              f"{traceback.format_exc()}", file=sys.stderr, flush=True)


class RankActor:
    """The Ray actor around one ``RankHost``."""

    def __init__(self):
        self.host: RankHost | None = None
        self.link: RayLink | None = None
        self.listener: Listener | None = None
        self.spin = Spin()

    async def setup(self, spec_blob: bytes, inbox, plane: dict | None, clock_zero: float,
                    token: str):
        """Become the rank of ``spec_blob`` (its ``RankSpec`` and the source lines of the
        user code shipped by value, ``_sources``) in a run that started at
        ``clock_zero`` with the token ``token`` (``_warm``: a call from another run is
        dropped); returns this process's id, its Ray node and, with ``plane``
        (``{"secret", "run_name"}``), where it listens for direct channels (a
        ``DirectEndpoint``, its socket in ``run_dir(run_name)`` on this node; else
        None)."""
        spec, sources = cloudpickle.loads(spec_blob)
        _sources.install(sources)
        self.link = RayLink(spec.rank, inbox, clock_zero,
                            spec.options.get("object_store_bytes", OBJECT_STORE_BYTES), token)
        self.host = RankHost(spec, self.link, self.die)
        node = ray.get_runtime_context().get_node_id()
        if plane is None:
            return os.getpid(), node, None
        self.listener = Listener(plane["secret"], functools.partial(_take, self))
        endpoint = await self.listener.start(
            node, ray.util.get_node_ip_address(), run_dir(plane["run_name"]),
            f"r{spec.rank}-i{spec.incarnation}-{os.getpid()}")
        self.link.direct = Peers(plane["secret"], node, self.listener.counters,
                                 self._peer_lost, shm_bytes=spec.options.get(
                                     "shared_memory_bytes", SHARED_MEMORY_BYTES))
        self.link.large_bytes = spec.options.get("out_of_band_bytes", OUT_OF_BAND_BYTES)
        self.link.listener = self.listener
        spin_us = spec.options.get("poll_spin_us", POLL_SPIN_US)
        self.spin = Spin()  # this run's count (``close`` stopped the last run's)
        if spin_us and not self.spin.start(asyncio.get_running_loop(), spin_us * 1e-6):
            self.listener.counters.not_polling += 1
        return os.getpid(), node, endpoint

    def _peer_lost(self, dst: int) -> None:
        """The direct connection to rank ``dst`` failed or was closed by its side: a
        hint for the coordinator, which checks ``dst`` itself (``Coordinator.hinted``)."""
        self.host.ep.report("peer_lost", peer=dst)

    async def wire(self, peers: list, endpoints: list | None = None) -> None:
        self.link.peers = peers
        if self.link.direct is not None and endpoints is not None:
            self.link.direct.wire(endpoints)

    async def run(self, args: tuple, kwargs: dict, restore=None) -> dict:
        result = await self.host.run(args, kwargs, restore)
        await self.link.settle()
        return result

    async def close(self, run_name: str | None) -> str:
        """The run is over: close this actor's direct channels, remove the run's socket
        directory ``run_name`` on its node (its own socket and those of ranks that died
        here) and drop the rank, so that the process can serve another run (``_warm``);
        returns the node's id."""
        if self.host is not None:  # protocol work still beside a returned main()
            self.host.cancel_all()
        if self.link is not None and self.link.direct is not None:
            self.link.direct.close()
        if self.listener is not None:
            self.listener.close()
        self.spin.stop()
        if run_name is not None:
            _remove_run_dir(run_name)
        self.host = self.link = self.listener = None
        return ray.get_runtime_context().get_node_id()

    def _ours(self, token: str) -> bool:
        """Whether a call with ``token`` is for the run this process serves now."""
        return self.link is not None and token == self.link.token

    async def call(self, name: str, args: tuple, token: str):
        if not self._ours(token):
            raise ProtocolError(f"a call {name!r} of another run reached this process")
        return await self.host.call(name, *args)

    @ray.method(num_returns=2)
    async def call_kept(self, name: str, args: tuple, token: str):
        """``call`` whose answer is a separate object (see ``RayFabric.call_kept``)."""
        return True, await self.call(name, args, token)

    async def ping(self) -> None:
        """Answered by the event loop: a rank that cannot answer is hung."""

    async def watch(self) -> None:
        """Never answers: the caller's call fails when this process dies (how the
        coordinator hears of the death of a spare, or of a rank that has returned, which
        no other call is waiting on)."""
        await asyncio.get_running_loop().create_future()

    async def start(self, niceness: int) -> tuple[str, str | None]:
        """Make this process ready to become a rank: every thread at ``niceness``
        (``set_niceness``). Returns the Ray worker id of the process (Ray's death notices
        name it) and None, or why the niceness could not be set."""
        return ray.get_runtime_context().get_worker_id(), set_niceness(niceness)

    async def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    @ray.method(num_returns=0)
    async def deliver(self, batch: bytes | list[Envelope], token: str) -> None:
        """Take a batch from a peer: pickled envelopes (see the module docstring), or
        envelopes whose object references are fetched here first. A reference that
        cannot be fetched (its sender died) loses the batch with its sender; a batch of
        another run (``token``: one still in flight when its run ended) is dropped."""
        if not self._ours(token):
            return
        if type(batch) is bytes:
            envs = from_rows(pickle.loads(batch))
        else:
            envs = batch
            try:
                for env in envs:
                    if any(isinstance(b, ray.ObjectRef) for b in env.payload.buffers):
                        env.payload = await self.link.resolve(env.payload)
            except RayError:
                return
        _take(self, envs)

    async def collect(self) -> dict:
        out = self.host.collect()
        if self.listener is not None:
            self.listener.counters.polled_waits = self.spin.caught
            out["stats"]["direct"] = self.listener.counters.as_dict()
        return out

    async def progress(self):
        return self.host.progress()

    def die(self) -> None:
        """SIGKILL this actor's own process (chaos), wherever it runs."""
        os.kill(os.getpid(), signal.SIGKILL)

    def stop(self) -> None:
        """SIGSTOP this actor's own process (chaos: a hang only heartbeats can see)."""
        os.kill(os.getpid(), signal.SIGSTOP)

    def cut(self, peers: list[int] | None, seconds: float) -> None:
        """Chaos: a network fault on this rank's direct connections (``RayLink.cut``)."""
        self.link.cut(peers, seconds)

    def stall(self, seconds: float) -> None:
        """Freeze this actor's process for ``seconds`` (chaos: a paging or starved
        process): SIGSTOP now, SIGCONT from a detached shell when the time is up."""
        subprocess.Popen(["sh", "-c", f"sleep {float(seconds)}; kill -CONT {os.getpid()}"],
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        os.kill(os.getpid(), signal.SIGSTOP)


def _pickle_by_value(cls: type) -> list:
    """Ship the user's classes by value when workers could not import their modules
    (scripts, notebooks, test files); returns those modules.

    A program file loaded by reference (``path/to/solver.py:Solver``) had its folder
    put on the driver's ``sys.path`` only, so the modules it imported from there
    (``from helper import step``) are shipped by value too: the top-level modules of
    the folder of a top-level module shipped (modules of a package are imported by
    their package's name, which a worker resolves as the driver did)."""
    shipped = []
    for klass in cls.__mro__:
        mod = sys.modules.get(klass.__module__)
        name = klass.__module__
        if mod is None or name == "builtins" or name.split(".")[0] in ("ftactors", "ray"):
            continue
        if name == "__main__" or not _importable_everywhere(mod):
            cloudpickle.register_pickle_by_value(mod)
            shipped.append(mod)
    folders = {os.path.dirname(mod.__file__) for mod in shipped
               if "." not in mod.__name__ and getattr(mod, "__file__", None)}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if ("." not in name and path and os.path.dirname(path) in folders
                and mod not in shipped and not _importable_everywhere(mod)):
            cloudpickle.register_pickle_by_value(mod)
            shipped.append(mod)
    return shipped


def _importable_everywhere(mod) -> bool:
    path = getattr(mod, "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path


class RayFabric:
    name = "ray"
    deadlock_check_s = 0.5
    """How often the coordinator asks every rank for its wait (``runtime/_deadlock``): a
    call per rank, answered by its event loop (a computing rank answers late and is
    busy); two readings in a row with every rank blocked and nothing moving end the run."""

    def __init__(self, options: dict, address: str | None):
        self.options = options
        self.address = address
        self.actors: list = []
        self.rank_of: dict = {}
        self.worker_of: dict = {}  # actor -> Ray worker id, while its death is not seen
        self._rank_worker: dict[tuple[int, int], str] = {}
        """(rank, incarnation) -> the worker id of that incarnation's actor: a planned
        kill's report may come after the rank's replacement was promoted, and the notice
        to drop is the dead incarnation's, not the replacement's."""
        self.local_pid: dict = {}  # actor -> its process id, when on the driver's node
        self.on_report = lambda event: None
        self._t0 = time.time()  # the run's start: events count seconds from here
        self._spares_placed = 0  # spares started on the spare_nodes, to use them in turn
        self.endpoints: dict = {}  # actor -> DirectEndpoint, when data_plane="direct"
        self._plane: dict | None = None
        for name in ("object_store_bytes", "out_of_band_bytes", "shared_memory_bytes",
                     "poll_spin_us"):
            if (options.get(name) or 0) < 0:
                raise ConfigError(f"{name} must be >= 0, not {options[name]}")
        if options.get("data_plane", "direct") == "direct":
            self._plane = {"secret": RunSecret(), "run_name": f"ftactors-{secrets.token_hex(8)}"}
        niceness = options.get("rank_niceness")
        if niceness is not None and not -20 <= niceness <= 19:
            raise ConfigError(f"rank_niceness must be from -20 to 19, not {niceness}")
        # the driver's own by default, as the processes mpiexec starts inherit it
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0) if niceness is None else niceness
        self._niceness_refused = False  # warned once a run
        self._token = secrets.token_hex(8)  # this run's, on its actor calls (``_warm``)
        # not with CPUs reserved per rank: a kept process would hold them while idle
        self._reuse = options.get("reuse_processes", True) and not options.get("rank_num_cpus")
        self._job = ""  # the Ray job whose kept processes this run may take
        self._touched: set = set()  # actors chaos killed, stopped, stalled or cut
        self.inbox = None
        self._inbox_worker = None  # known once the Inbox answered ``wake``

    def clock(self) -> float:
        """Seconds since the run started, as on every transport (``RunResult``)."""
        return time.time() - self._t0

    def on_quiet(self, check) -> None:
        """Nothing here tells when nothing is pending: the readings every
        ``deadlock_check_s`` decide."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def start(self, ranks: int) -> None:
        ensure_ray(self.address)
        self._job = ray.get_runtime_context().get_job_id()
        self._cls = ray.remote(RankActor)
        self._actor_options = dict(
            max_restarts=0, max_task_retries=0, max_concurrency=10_000,
            num_cpus=float(self.options.get("rank_num_cpus", 0)))
        # on the driver's node: it must outlive any other node (a rank's node may be lost)
        self._here = ray.get_runtime_context().get_node_id()
        self.inbox = await self._warm_inbox()
        if self.inbox is None:
            self.inbox = ray.remote(Inbox).options(
                num_cpus=0, max_concurrency=1000, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    self._here, soft=False)).remote(self._token)
        self.actors.append(self.inbox)
        self._closing = False
        self._drain = asyncio.ensure_future(self._drain_inbox())

    async def _warm_inbox(self):
        """An Inbox an earlier run of this driver left (``_warm``), opened for this run;
        None if there is none alive."""
        warm, _ = await self._take_kept(INBOXES, self._here, "open", self._token)
        return warm and warm.actor

    async def _take_kept(self, pool, node: str | None, method: str, *args):
        """A process ``pool`` kept on ``node`` (None: any) that answered ``method(*args)``
        within ``WARM_START_S``, and its answer; (None, None) when none is left. One that
        died or hangs (stopped) while it waited is killed and passed over."""
        while self._reuse and (warm := pool.take(self._job, node)) is not None:
            try:
                answer = await asyncio.wait_for(getattr(warm.actor, method).remote(*args),
                                                WARM_START_S)
            except (RayActorError, asyncio.TimeoutError):
                ray.kill(warm.actor, no_restart=True)
                continue
            return warm, answer
        return None, None

    async def _drain_inbox(self) -> None:
        while not self._closing:
            for event in await self.inbox.take.remote(0.5, self._token):
                self._received(event)

    async def _stop_draining(self) -> None:
        """End the drain loop without losing what its take in flight holds (a cancel
        would drop the last reports the Inbox handed over), then take the rest."""
        self._closing = True
        try:
            self._inbox_worker = await self.inbox.wake.remote()
            await asyncio.wait_for(self._drain, DRAIN_STOP_S)
            await self.drain_reports()
        except (asyncio.TimeoutError, RayActorError):
            self._drain.cancel()  # the Inbox is gone or hung: nothing more to hand over

    async def drain_reports(self) -> None:
        """Hand over every report the Inbox holds now (at the end of a run)."""
        for event in await self.inbox.take.remote(0, self._token):
            self._received(event)

    def _received(self, event) -> None:
        if event.kind == "killed":  # a planned kill at an iteration: its last word
            DEATH_NOTICES.expect(self._rank_worker.get(
                (event.rank, event.detail.get("incarnation"))))
        self.on_report(event)

    async def spawn(self, spec: RankSpec):
        homes = self.options.get("rank_nodes")
        home = homes[spec.rank] if homes else None
        if home is not None and home not in self.nodes():
            home = None  # its node is gone: a replacement starts anywhere
        try:
            actor = await self._start_actor(home)
        except RankDied as died:
            raise RankDied(spec.rank, died.reason) from None
        return await self.promote(actor, spec)

    async def spawn_spare(self, node: str | None = None):
        """A spare: on Ray node ``node``, else on the next of the ``spare_nodes``
        option, else anywhere."""
        return await self._start_actor(node if node is not None else self._spare_home())

    async def _start_actor(self, node: str | None):
        """A started actor (its process is up and has imported ftactors) that is not a
        rank yet, so that promoting it costs one call, not a process start; on Ray node
        ``node`` (a node id) when given: one an earlier run of this driver left
        (``_warm``), else a new one. (Hard affinity: Ray 2.60's soft affinity put every
        other actor elsewhere though the node was alive.)"""
        if node is not None and node not in self.nodes():
            raise ConfigError(f"no live Ray node {node!r}; live nodes: "
                              f"{', '.join(self.nodes())}")
        warm, answer = await self._take_kept(WARM, node, "start", self.niceness)
        if warm is not None:
            self.actors.append(warm.actor)
            self.worker_of[warm.actor] = warm.worker
            return self._started(warm.actor, answer[1])
        options = dict(self._actor_options)
        if node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        actor = self._cls.options(**options).remote()
        self.actors.append(actor)
        try:
            self.worker_of[actor], refused = await actor.start.remote(self.niceness)
        except RayActorError as exc:
            raise RankDied(-1, f"could not start: {_death_reason(exc)}") from None
        return self._started(actor, refused)

    def _started(self, actor, refused: str | None):
        """``actor``, warning once a run when its niceness could not be set."""
        if refused is not None and not self._niceness_refused:
            self._niceness_refused = True
            warn(RankNicenessWarning,
                 f"rank processes compute at Ray's niceness: {refused}. Start Ray with "
                 f"RAY_worker_niceness={self.niceness} in its environment (ray start, or "
                 f"the driver's for an embedded Ray), or pass rank_niceness=15 to accept it")
        return actor

    def _spare_home(self) -> str | None:
        """The next live node of the ``spare_nodes`` option, if any."""
        homes = [n for n in self.options.get("spare_nodes") or () if n in self.nodes()]
        if not homes:
            return None
        self._spares_placed += 1
        return homes[(self._spares_placed - 1) % len(homes)]

    async def promote(self, actor, spec: RankSpec):
        sources = _sources.collect(_pickle_by_value(spec.rank_cls))
        self.rank_of[actor] = spec.rank
        worker = self.worker_of.get(actor)
        self._rank_worker[(spec.rank, spec.incarnation)] = worker
        if (spec.kill_iterations or spec.kill_at_return) and worker is not None:
            DEATH_NOTICES.doomed(worker)
        try:
            pid, node, self.endpoints[actor] = await actor.setup.remote(
                _sources.dumps((spec, sources)), self.inbox, self._plane, self._t0,
                self._token)
        except RayActorError as exc:
            raise RankDied(spec.rank, f"could not start: {_death_reason(exc)}") from None
        if node == ray.get_runtime_context().get_node_id():
            self.local_pid[actor] = pid
        return actor

    def process_state(self, handle) -> str | None:
        """The scheduler state of a rank's process (``/proc/PID/stat``: ``R`` running or
        runnable, ``D`` waiting on the disk or paging, ``S`` sleeping, ``T`` stopped), or
        None where it cannot be read (another node, no /proc)."""
        pid = self.local_pid.get(handle)
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None

    async def _ask(self, handle, method: str, *args):
        """Call an actor method; an actor that died surfaces as ``RankDied``."""
        try:
            return await getattr(handle, method).remote(*args)
        except RayActorError as exc:
            raise self._died(handle, exc) from None

    async def call(self, handle, name: str, *args):
        return await self._ask(handle, "call", name, args, self._token)

    async def ping(self, handle) -> None:
        await self._ask(handle, "ping")

    async def watch(self, handle) -> None:
        """Return once ``handle``'s actor (a rank or a spare) is dead."""
        try:
            await self._ask(handle, "watch")
        except RankDied:
            return

    async def wire(self, handles: list) -> None:
        """Hand every rank its peers' actors and direct endpoints (a changed endpoint
        closes the connections to the old one)."""
        endpoints = [self.endpoints.get(h) for h in handles]
        await asyncio.gather(*(self._ask(h, "wire", handles, endpoints) for h in handles))

    async def run(self, handle, args: tuple, kwargs: dict, restore=None) -> dict:
        return await self._ask(handle, "run", args, kwargs, restore)

    async def collect(self, handle) -> dict:
        return await self._ask(handle, "collect")

    async def progress(self, handle):
        return await self._ask(handle, "progress")

    async def node_of(self, handle) -> str:
        """The Ray node id a rank (or spare) runs on."""
        return await self._ask(handle, "node")

    def nodes(self) -> list[str]:
        """Ids of the live Ray nodes."""
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    async def call_kept(self, handle, name: str, *args):
        """Call a rank and keep its (bytes) answer in the object store, owned by the
        driver: it survives the rank's process (not its node). Returns a handle for
        ``Link.fetch``; the driver never copies the data."""
        done, data = handle.call_kept.remote(name, args, self._token)
        try:
            await done  # small: says the call succeeded without fetching the data
        except RayActorError as exc:
            raise self._died(handle, exc) from None
        return (data,)

    async def available(self, handles: list, timeout_s: float = 5.0) -> bool:
        """Whether every ``call_kept`` handle can still be fetched (a node that held
        one may be gone)."""
        refs = [h[0] for h in handles]
        ready, _ = await asyncio.to_thread(ray.wait, refs, num_returns=len(refs),
                                           timeout=timeout_s, fetch_local=False)
        return len(ready) == len(refs)

    def _died(self, handle, exc: Exception) -> RankDied:
        """The failure of a call to an actor that died: from now on its death is known
        (killing it later does not make it planned, so Ray's notice is printed)."""
        self.worker_of.pop(handle, None)
        return RankDied(self.rank_of.get(handle, -1), _death_reason(exc))

    async def stall(self, handle, seconds: float) -> None:
        self._touched.add(handle)
        handle.stall.remote(seconds)

    def track_wires(self) -> None:
        """Network faults are planned: the direct channels need nothing more."""

    async def cut(self, handle, peers: list[int] | None, seconds: float) -> None:
        """Chaos: a network fault on a rank's direct connections (``RayLink.cut``)."""
        self._touched.add(handle)
        await self._ask(handle, "cut", peers, seconds)

    async def kill(self, handle, method: str) -> None:
        self._touched.add(handle)
        DEATH_NOTICES.expect(self.worker_of.get(handle))
        if method == "ray.kill":
            ray.kill(handle, no_restart=True)
        elif method == "sigstop":
            handle.stop.remote()
        else:
            handle.die.remote()

    async def shutdown(self, completed: bool = False) -> None:
        """End the run: every actor closes (its socket directory removed), and is killed
        or, from a run that ``completed`` (every rank returned), kept for the driver's
        next run (``_warm``) unless chaos touched it."""
        if getattr(self, "_drain", None) is not None:
            await self._stop_draining()
        run_name = self._plane["run_name"] if self._plane is not None else None
        closed = await self._close_all(run_name)
        if self._inbox_worker is not None:
            closed[self.inbox] = self._here
            self.worker_of[self.inbox] = self._inbox_worker
        for actor in self.actors:
            pool = INBOXES if actor is self.inbox else WARM
            keep = (completed and self._reuse and actor in closed
                    and actor not in self._touched)
            if keep and pool.give(self._job, Warm(actor, self.worker_of.get(actor),
                                                  closed[actor])):
                continue
            if actor is self.inbox:  # on purpose: Ray once printed its crash notice
                DEATH_NOTICES.expect(self._inbox_worker)  # (it aborted in Ray, loaded)
            ray.kill(actor, no_restart=True)
        self.actors.clear()

    async def _close_all(self, run_name: str | None) -> dict:
        """Close every live actor (rank or spare: ``RankActor.close``); returns the node
        of each that answered. Leave no socket file of the run on any node: on a live
        node where a rank listened but no actor of the run answered, a task removes the
        run's directory."""
        async def close(actor):
            return await asyncio.wait_for(actor.close.remote(run_name), CLOSE_TIMEOUT_S)
        actors = [a for a in self.actors if a is not self.inbox]
        answers = await asyncio.gather(*(close(a) for a in actors), return_exceptions=True)
        closed = {a: node for a, node in zip(actors, answers) if isinstance(node, str)}
        if run_name is not None:
            used = {ep.node for ep in self.endpoints.values() if ep is not None}
            missing = (used - set(closed.values())) & set(self.nodes())
            await self._remove_dir_on(sorted(missing), run_name)
        return closed

    async def _remove_dir_on(self, nodes: list[str], run_name: str) -> None:
        """Remove the run's socket directory (``run_dir(run_name)``, each node's own) on
        each of the Ray nodes ``nodes``: here for the driver's own node (whose temp root
        the driver shares), by a task on the others (a task needs a worker process, whose
        start took more than ``CLOSE_TIMEOUT_S`` on a loaded machine)."""
        here = ray.get_runtime_context().get_node_id()
        if here in nodes:
            _remove_run_dir(run_name)
        remove = ray.remote(num_cpus=0, max_retries=0)(_remove_run_dir)
        tasks = [remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False)).remote(run_name) for node in nodes if node != here]
        await asyncio.gather(*(asyncio.wait_for(t, CLOSE_TIMEOUT_S) for t in tasks),
                             return_exceptions=True)


WARM_START_S = 10.0
"""How long a kept process (``_warm``) may take to answer that it can start a run; one
that does not (stopped, hung) is killed and passed over."""

CLOSE_TIMEOUT_S = 5.0
"""How long the end of a run waits for an actor or task to remove socket files."""


def run_dir(run_name: str) -> str:
    """The run's socket directory on this node: ``run_name`` under the node's own temp
    root (``tempfile.gettempdir()``: ``TMPDIR`` of the node's Ray processes), since nodes
    need not share ``/tmp``, nor the driver's ``TMPDIR``."""
    return os.path.join(tempfile.gettempdir(), run_name)


def _remove_run_dir(run_name: str) -> None:
    shutil.rmtree(run_dir(run_name), ignore_errors=True)


def _death_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return "its actor died" + (f" ({text[0][:200]})" if text else "")
