"""What runs in a rank's process on Ray: ``RankActor`` (the actor around one
``RankHost``) and ``Inbox`` (the coordinator's mailbox, on the driver's node).

* nobody waits for a delivery, so ``deliver`` is declared with no return value
  (``num_returns=0``): a call with a return makes the callee store and ship back a
  result object that the caller's core worker then registers and frees (measured:
  10% of the CPU both ranks spend per ping-pong round trip, 2-10% of its wall time).
  An error inside a delivery is printed by the receiver, since no sender sees it;
* every actor has one call that never answers (``watch``): its caller's call fails
  within milliseconds of the process's death, which is how the fabric hears of the
  death of a spare or of a rank that has returned;
* chaos strikes a rank from inside its own process (``die``, ``stop``, ``stall``,
  ``cut``), wherever it runs;
* a process serves one run at a time and may serve the driver's next run (``close``,
  ``warm``): every call carries the run's token, and a call of another run is dropped;
* a rank's process holds Ray's and the program's start-up objects, hundreds of
  thousands of them, which every full collection of Python's cyclic garbage collector
  walked: a rank with many requests alive (a window of ``Irecv``s) ran a full
  collection every few thousand messages, at tens of milliseconds each, half of its
  CPU per message (OSU bw, measured). ``setup`` collects once and freezes what is left
  (``gc.freeze``: never walked again); ``close`` unfreezes it, so that what the run
  left behind can be collected before the next run freezes its own.
"""
from __future__ import annotations

import asyncio
import functools
import gc
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback

import cloudpickle
import ray
from ray.exceptions import RayError

from ...base import ProtocolError
from ...engine import Envelope, from_rows
from ...runtime import RankHost
from ..direct import Listener, Peers
from .._spin import Spin
from . import by_value
from .link import OBJECT_STORE_BYTES, OUT_OF_BAND_BYTES, POLL_SPIN_US, SHARED_MEMORY_BYTES, RayLink


class Inbox:
    """The coordinator's mailbox: ranks post events that must outlive them. It serves
    one run at a time (``open``: a process kept for the driver's next run, ``warm``);
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
        user code shipped by value, ``by_value``) in a run that started at
        ``clock_zero`` with the token ``token`` (``warm``: a call from another run is
        dropped); returns this process's id, its Ray node and, with ``plane``
        (``{"secret", "run_name"}``), where it listens for direct channels (a
        ``DirectEndpoint``, its socket in ``run_dir(run_name)`` on this node; else
        None)."""
        spec, sources = cloudpickle.loads(spec_blob)
        by_value.install(sources)
        self.link = RayLink(spec.rank, inbox, clock_zero,
                            spec.options.get("object_store_bytes", OBJECT_STORE_BYTES), token)
        self.host = RankHost(spec, self.link, self.die)
        gc.collect()
        gc.freeze()  # (module docstring)
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
        hint for the coordinator, which checks ``dst`` itself (``Heartbeats.hinted``)."""
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
        here) and drop the rank, so that the process can serve another run (``warm``);
        returns the node's id."""
        if self.host is not None:  # protocol work still beside a returned main()
            self.host.cancel_all()
        if self.link is not None and self.link.direct is not None:
            self.link.direct.close()
        if self.listener is not None:
            self.listener.close()
        self.spin.stop()
        if run_name is not None:
            remove_run_dir(run_name)
        self.host = self.link = self.listener = None
        gc.unfreeze()
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


def run_dir(run_name: str) -> str:
    """The run's socket directory on this node: ``run_name`` under the node's own temp
    root (``tempfile.gettempdir()``: ``TMPDIR`` of the node's Ray processes), since nodes
    need not share ``/tmp``, nor the driver's ``TMPDIR``."""
    return os.path.join(tempfile.gettempdir(), run_name)


def remove_run_dir(run_name: str) -> None:
    shutil.rmtree(run_dir(run_name), ignore_errors=True)
