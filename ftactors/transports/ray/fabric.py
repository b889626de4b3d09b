"""The driver's side of the ``ray`` transport: ``RayFabric`` (a ``runtime.Fabric``),
an actor per rank and per spare.

Ray is the control plane: the fabric starts actors (or takes processes an earlier run
of this driver kept, ``warm``), promotes them to ranks with the user's code shipped by
value (``by_value``), hands out the direct plane's endpoints (``wire``), calls, pings,
watches and kills them, and drains the ``Inbox`` where ranks post what must outlive them.
A death as an actor starts or is set up is a ``RankDied`` like any other, never a Ray
exception past this module; actors are created with ``max_restarts=0`` and calls with
``max_task_retries=0`` (a retried call would re-run from the start) because recovery is
the framework's job. The fabric tells ``driver.DEATH_NOTICES`` which rank workers die on
purpose, so that Ray's crash notice is not printed for a planned kill.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import time

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...base import ConfigError, RankNicenessWarning, warn
from ...runtime import RankDied, RankSpec
from ..direct import RunSecret
from .warm import INBOXES, WARM, Warm
from . import by_value
from .actors import Inbox, RankActor, remove_run_dir
from .driver import DEATH_NOTICES, ensure_ray


class RayFabric:
    """An actor per rank and per spare (a ``runtime._fabric.Fabric``)."""

    name = "ray"
    hosts_here = False
    heartbeat_interval_s = 1.0  # a real process can hang (SIGSTOP, a stuck call)
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
        self._token = secrets.token_hex(8)  # this run's, on its actor calls (``warm``)
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
        """An Inbox an earlier run of this driver left (``warm``), opened for this run;
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
        (``warm``), else a new one. (Hard affinity: Ray 2.60's soft affinity put every
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
        sources = by_value.collect(by_value.ship(spec.rank_cls))
        self.rank_of[actor] = spec.rank
        worker = self.worker_of.get(actor)
        self._rank_worker[(spec.rank, spec.incarnation)] = worker
        if spec.doomed and worker is not None:
            DEATH_NOTICES.doomed(worker)
        try:
            pid, node, self.endpoints[actor] = await actor.setup.remote(
                by_value.dumps((spec, sources)), self.inbox, self._plane, self._t0,
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

    def metrics(self) -> dict:
        """No figures of its own (each rank's link counts its traffic)."""
        return {}

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
        next run (``warm``) unless chaos touched it."""
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
            if actor is self.inbox:  # killed on purpose: Ray may report its process as
                DEATH_NOTICES.expect(self._inbox_worker)  # crashed (under load), unprinted
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
            remove_run_dir(run_name)
        remove = ray.remote(num_cpus=0, max_retries=0)(remove_run_dir)
        tasks = [remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False)).remote(run_name) for node in nodes if node != here]
        await asyncio.gather(*(asyncio.wait_for(t, CLOSE_TIMEOUT_S) for t in tasks),
                             return_exceptions=True)


DRAIN_STOP_S = 10.0
"""How long the end of a run waits for the Inbox's last answer before giving it up."""

WARM_START_S = 10.0
"""How long a kept process (``warm``) may take to answer that it can start a run; one
that does not (stopped, hung) is killed and passed over."""

CLOSE_TIMEOUT_S = 5.0
"""How long the end of a run waits for an actor or task to remove socket files."""


def _death_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return "its actor died" + (f" ({text[0][:200]})" if text else "")
