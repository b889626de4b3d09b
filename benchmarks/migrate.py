"""Migration with ReadyMessageFlush: t(x) = a + x/B against the object store's bandwidth.

What is measured, all in one invocation, on a local multi-node Ray cluster
(``ray.cluster_utils.Cluster``: a head and ``--workers`` worker nodes, each with its own
raylet and object store, on this machine; ``--address`` joins an existing cluster
instead):

1. *Migration time* for state sizes x (``--sizes-mib``, default 1 to 256 MiB). One run per
   size: ``--ranks`` ranks exchange messages with both ring neighbours and fold an
   ``allreduce`` every iteration, so messages flow while a rank moves; the migrating
   rank (``--rank``) holds a registered numpy array of x bytes that it updates every
   iteration and feeds into its messages. The driver moves that rank ``--moves`` times
   with ``await run.migrate(rank, node)``, each time to a node it is not on and never
   back to the node it started on, and checks with ``run.node_of`` that it runs on the
   target afterwards (with two nodes only, it goes back and forth). Each move's figures are the protocol's own (``info``): ``total_s``
   (from the warm actor being ready to the partners having released what they held),
   split into ``stop_s`` (the rank reaches its next safe point and sends its RMs),
   ``state_s`` (notices, the partners' RMs, snapshot, ``ray.put``) and ``restore_s``
   (new incarnation promoted, peers rewired, snapshot fetched, checked and installed);
   ``spare_s`` (starting the warm actor on the target node) comes before and is not
   part of ``total_s``. Every run's result must equal a failure-free reference run of
   the same program (``transport="local"``): the program is deterministic.
2. *The baseline*, in the same run (right before each size's run, so that both see the
   same load on a shared machine): a ``ray.put`` of x bytes (a numpy array) in an actor
   on one worker node, fetched with ``ray.get`` by an actor on another (the put and the
   fetch timed inside the actors; ``--repeat`` times per size). The same fetch of a ``bytes`` object (what a snapshot
   is) is timed beside it: unlike an array, it is copied out of the store.
3. *Where the time goes*: each step of the state's way (``Endpoint.transfer``: pickled
   with the large buffers out of band, no seal), timed inside the ranks' own processes
   (``instrument``) and reported to the coordinator: pickle, ``ray.put`` of the buffers;
   on the new actor the fetch, the writable copy out of the object store, the unpickle;
   what is left of ``state_s`` and ``restore_s`` is waiting for the partners and the
   coordinator's calls.

Both t(x) = a + x/B (least squares over every move) and the object store's fetch time
(same fit) give a bandwidth; the target of the migration issue is B >= 0.5 x the object
store's. CoCheck's published fit (Stellner 1996), t(x) = 1.77 s + x / 763 KB/s, is
printed for comparison. Pacing: rank 0 (never the migrating rank) starts at most
``--rate`` iterations per second (an ``IterationGate`` actor); after the last move the driver
tells it to stop, every rank stops after that iteration, and the reference run is the
same program stopped after the same iteration (see ``MigrationWorkload``).

Ray 2.60 and token authentication: ``Cluster`` starts its nodes with this process's
environment and ``ray.init(address=cluster.address)`` never turns token authentication on
by itself (only ``ray.init()`` without an address, or ``address="auto"`` with a token on
disk, does), so both sides agree with nothing set; with ``RAY_AUTH_MODE=token`` exported
both use the token in ``~/.ray/auth_token``.
"""
from __future__ import annotations

import asyncio
import hashlib
import math
import pickle
import statistics
import time

import numpy as np

import ftactors as ft
from ftactors.protocols import ReadyMessageFlush
from ftactors.tools.node_loss import shutdown_cluster

from ._harness import add_repetitions, table, usage_error, write_results

MIB = 1 << 20
MB = 1e6
COCHECK = {"a_s": 1.77, "B_Bps": 763e3}
"""CoCheck's migration time fit (Stellner 1996): t(x) = 1.77 s + x / (763 KB/s)."""
TARGET_RATIO = 0.5
"""The issue's target: B >= 0.5 x the object store's bandwidth measured in the same run."""
PACED_RANK = 0


# ------------------------------------------------------------------------- the program
def initial_state(nbytes: int, seed: int) -> np.ndarray:
    """The migrating rank's state: ``nbytes`` pseudo-random bytes (incompressible)."""
    return np.frombuffer(np.random.default_rng(seed).bytes(nbytes), dtype=np.uint8).copy()


class MigrationWorkload(ft.Rank):
    """Ring exchange with both neighbours and an allreduce every iteration; rank
    ``holder`` keeps ``state_bytes`` bytes of registered state, changes one byte of it
    per iteration and mixes that byte into what it sends.

    The run lasts until the driver is done moving ranks: rank 0 asks ``pacer`` before each
    iteration (which also paces it) and folds the answer, "stop after this iteration",
    into the iteration's allreduce, so every rank stops after the same iteration. The
    reference run gets that count as ``stop_at`` instead. A run is thus deterministic
    given its iteration count (which it returns): with migrations it must equal the
    failure-free run bit for bit. (Rank 0 asks from outside the program, which a rank
    that rolls back could not replay; rank 0 never moves or rolls back here.)"""

    async def main(self, state_bytes: int, holder: int, pacer=None, stop_at: int = 0,
                   max_iterations: int = 1_000_000):
        comm, me, n = self.comm, self.rank, self.size
        right, left = (me + 1) % n, (me - 1) % n
        self.register("x", np.linspace(0.0, 1.0, 16) + me)
        self.register("norms", [])
        if me == holder:
            # after a restore the registered value comes back: do not build it again
            self.register("state", None if self.restored else
                          initial_state(state_bytes, seed=1000 + me))
            if not self.state.flags.writeable:
                self.state = self.state.copy()
        done = 0
        async for i in self.iterations(max_iterations):
            stop = 0.0
            if me == PACED_RANK:
                if pacer is not None:
                    stop = float(await pacer.step.remote(i))
                else:
                    stop = float(i + 1 >= stop_at)
            if me == holder and self.state.size:
                k = (i * 7919) % self.state.size
                self.state[k] = (int(self.state[k]) + i + 1) & 0xFF
                self.x[i % self.x.size] += float(self.state[k]) / 256.0
            from_left = await comm.sendrecv(self.x, dest=right, sendtag=1,
                                            source=left, recvtag=1)
            from_right = await comm.sendrecv(self.x, dest=left, sendtag=2,
                                             source=right, recvtag=2)
            self.x = 0.5 * self.x + 0.25 * (from_left + from_right)
            total = await comm.allreduce(np.array([float(self.x @ self.x), stop]))
            self.norms.append(float(total[0]))
            done = i + 1
            if total[1] > 0:
                break
        result = {"iterations": done, "x": [float(v) for v in self.x],
                  "norms": [float(v) for v in self.norms]}
        if me == holder:
            result["state_sha256"] = hashlib.sha256(self.state).hexdigest()
        return result


class MigratingWorkload(ReadyMessageFlush, MigrationWorkload):
    """The workload with CoCheck's protocol, so that ``run.migrate`` can move ranks; it
    times the steps of each snapshot's way (see ``instrument``)."""

    async def on_start(self) -> None:
        instrument(self)
        await super().on_start()


PROFILE_EVENT = "migrate_profile"


def instrument(rank) -> None:
    """Time, inside this rank's process, the steps a migration's state goes through, and
    report them to the coordinator (reports outlive the rank; the old actor is gone after
    the move). Sender side (``side="out"``): ``Endpoint.transfer`` (the registered values
    and the rest of the state pickled, large buffers left out of band) and ``Link.share``
    (``ray.put``: the buffers' one copy, into the object store). Receiver side
    (``side="in"``): ``Link.fetch`` (the transfer from the old node), ``Endpoint.load``
    (the writable copy of the buffers out of the object store, and the state unpickled)
    and ``Endpoint.restore`` (the registered values unpickled around those buffers).
    The wrappers are set on this rank's own objects only; they change no result."""
    ep, link = rank.ft, rank.ft.link
    if getattr(ep, "_bench_timed", False):
        return
    ep._bench_timed = True
    spent: dict[str, float] = {}

    def timed(owner, name: str, key: str, after=None) -> None:
        fn = getattr(owner, name)
        if asyncio.iscoroutinefunction(fn):
            async def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
                    if after is not None:
                        after()
        else:
            def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
                    if after is not None:
                        after()
        setattr(owner, name, wrapper)

    def send(side: str, keys: tuple) -> None:
        ep.report(PROFILE_EVENT, side=side, incarnation=rank.incarnation,
                  **{k: spent.pop(k, 0.0) for k in keys})

    timed(ep, "transfer", "pickle_s")
    timed(link, "share", "put_s", after=lambda: send("out", ("pickle_s", "put_s")))
    timed(link, "fetch", "fetch_s")
    timed(ep, "load", "load_s")
    timed(ep, "restore", "restore_s",
          after=lambda: send("in", ("fetch_s", "load_s", "restore_s")))


class IterationGate:
    """A Ray actor that rank 0 asks before each iteration: it lets rank 0 start at most
    one iteration per ``period_s``, tells the driver how far rank 0 got, and answers
    True ("stop after this iteration") once the driver called ``finish``."""

    def __init__(self, period_s: float):
        self.period_s = period_s
        self.last = 0.0
        self.iteration = -1
        self.finished = False

    async def step(self, i: int) -> bool:
        self.iteration = i
        if not self.finished:
            wait = self.last + self.period_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        self.last = time.monotonic()
        return self.finished

    async def finish(self) -> None:
        self.finished = True

    async def position(self) -> int:
        return self.iteration


# ------------------------------------------------------------------ object-store probe
class Probe:
    """A Ray actor pinned to one node: puts objects, or fetches other nodes' objects."""

    def node(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def put(self, nbytes: int, kind: str):
        """``ray.put`` of ``nbytes`` bytes (an array, or a ``bytes`` object); returns the
        reference (wrapped, so the caller does not fetch it) and the put time."""
        import ray
        value = np.full(nbytes, 7, dtype=np.uint8)
        if kind == "bytes":
            value = value.tobytes()
        t0 = time.perf_counter()
        ref = ray.put(value)
        return [ref], time.perf_counter() - t0

    def fetch(self, refs: list, nbytes: int) -> float:
        """Fetch another node's object; returns the time ``ray.get`` took."""
        import ray
        t0 = time.perf_counter()
        value = ray.get(refs[0])
        elapsed = time.perf_counter() - t0
        if len(value) != nbytes:
            raise AssertionError(f"fetched {len(value)} bytes, expected {nbytes}")
        del value
        return elapsed


def _pinned(cls, node: str):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.remote(cls).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))


async def measure_objectstore(src: str, dst: str, sizes: list[int], repeat: int) -> list[dict]:
    """Put x bytes on node ``src``, fetch them on node ``dst``: arrays (the baseline)
    and ``bytes`` objects (a snapshot's kind), ``repeat`` times per size."""
    import ray
    a, b = _pinned(Probe, src).remote(), _pinned(Probe, dst).remote()
    try:
        assert await a.node.remote() == src and await b.node.remote() == dst
        samples = []
        for _ in range(repeat):
            for nbytes in sizes:
                for kind in ("array", "bytes"):
                    refs, put_s = await a.put.remote(nbytes, kind)
                    get_s = await b.fetch.remote(refs, nbytes)
                    samples.append({"bytes": nbytes, "kind": kind, "put_s": put_s,
                                    "get_s": get_s})
                    del refs
        return samples
    finally:
        ray.kill(a)
        ray.kill(b)


# ---------------------------------------------------------------------- machine rates
def machine_rates(nbytes: int = 64 * MIB) -> dict:
    """This machine's memory copy and SHA-256 rates now (bytes/s), for reading the
    breakdown: each copy or hash of x bytes costs about x / rate."""
    data = initial_state(nbytes, seed=3).tobytes()
    t0 = time.perf_counter()
    bytearray(data)
    t1 = time.perf_counter()
    hashlib.sha256(data).digest()
    t2 = time.perf_counter()
    return {"copy_Bps": nbytes / (t1 - t0), "sha256_Bps": nbytes / (t2 - t1)}


# ---------------------------------------------------------------------------- fitting
def fit_line(xs: list[float], ts: list[float]) -> dict:
    """Least squares t = a + x / B; B in bytes per second (inf when t does not grow)."""
    if len(set(xs)) < 2:
        return {"a_s": float("nan"), "B_Bps": float("nan"), "points": len(xs)}
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ts, float), 1)
    return {"a_s": float(intercept), "B_Bps": float(1.0 / slope) if slope > 0 else math.inf,
            "points": len(xs)}


# ------------------------------------------------------------------------- migrations
async def _wait_for_iteration(pacer, target: int, done: asyncio.Future,
                              timeout_s: float = 120.0) -> int:
    """Wait until rank 0 started iteration ``target`` (the run must still be going)."""
    t0 = time.monotonic()
    while True:
        at = await pacer.position.remote()
        if at >= target:
            return at
        if done.done():
            done.result()
            raise RuntimeError("the run ended before the driver's moves")
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"rank 0 did not reach iteration {target} in {timeout_s} s")
        await asyncio.sleep(0.02)


def _plan_targets(start: str, nodes: list[str], moves: int) -> list[str]:
    """Move targets: never the start node, never the node the rank is on."""
    others = [n for n in nodes if n != start] or nodes
    if len(others) < 2 and moves > 1:
        others = nodes  # two nodes only: go back and forth
    targets, here = [], start
    for j in range(moves):
        choices = [n for n in others if n != here]
        here = choices[j % len(choices)] if len(choices) > 1 else choices[0]
        targets.append(here)
    return targets


async def migrate_run(args, nbytes: int, address: str, nodes: list[str]) -> dict:
    """One run with state size ``nbytes``: ``--moves`` migrations while messages flow,
    checked against the failure-free reference."""
    import ray

    kw = {"state_bytes": nbytes, "holder": args.rank}
    pacer = ray.remote(IterationGate).options(num_cpus=0).remote(1.0 / args.rate)
    t_run = time.perf_counter()
    run = await ft.launch(MigratingWorkload, args.ranks, transport="ray", address=address,
                          kwargs={**kw, "pacer": pacer}, timeout_s=args.timeout_s)
    done = asyncio.ensure_future(run.result())
    moves = []
    try:
        start = await run.node_of(args.rank)
        await _wait_for_iteration(pacer, args.warmup, done)
        t_moves = time.perf_counter()
        for target in _plan_targets(start, nodes, args.moves):
            at = await pacer.position.remote()
            before = await run.node_of(args.rank)
            info = await run.migrate(args.rank, target)
            after = await run.node_of(args.rank)
            info = dict(info, from_node=before, to_node=target, on_node=after,
                        on_target=after == target, iteration=at)
            moves.append(info)
            print(f"    {nbytes / MIB:7.0f} MiB  move {len(moves)}: {before[:8]} -> "
                  f"{after[:8]}  total {info['total_s']:.3f} s", flush=True)
            at = await pacer.position.remote()
            await _wait_for_iteration(pacer, at + args.settle, done)  # runs on its new node
        final = await run.node_of(args.rank)
        await pacer.finish.remote()
        t_free = time.perf_counter()
        result = await done
    finally:
        if not done.done():
            done.cancel()  # stops the run's actors
            try:
                await done
            except BaseException:  # noqa: BLE001 - the error being raised matters more
                pass
        ray.kill(pacer)
    wall_s = time.perf_counter() - t_run
    _attach_steps(moves, [e for e in result.events
                          if e.kind == PROFILE_EVENT and e.rank == args.rank])
    iterations = result.results[0]["iterations"]
    t_ref = time.perf_counter()
    reference = (await ft.run_async(MigrationWorkload, args.ranks, transport="local",
                                    kwargs={**kw, "stop_at": iterations})).results
    ref_s = time.perf_counter() - t_ref
    equal = _same(result.results, reference)
    verified = equal and bool(moves) and all(m["on_target"] for m in moves) and final != start
    return {"bytes": nbytes, "size_mib": nbytes / MIB, "verified": verified,
            "iterations": iterations,
            "result_equals_reference": equal, "start_node": start, "final_node": final,
            "moves": moves, "wall_s": wall_s, "reference_s": ref_s,
            "start_s": t_moves - t_run, "moving_s": t_free - t_moves,
            "finish_s": time.perf_counter() - t_free,
            "state_bytes_moved": [m["bytes"] for m in moves]}


STEPS = ("wait_s", "pickle_s", "put_s", "fetch_s", "copy_s", "unpickle_s", "rewire_s",
         "release_s")
"""Where a move's time goes: ``state_s`` = wait (notices, the partners' RMs, calls) +
pickle (``Endpoint.transfer``) + put (the buffers into the object store); ``restore_s`` =
rewire (new incarnation promoted, peer tables, calls) + fetch (from the old node) + copy
(``Endpoint.load``: writable copies of the buffers, the state unpickled) + unpickle
(``Endpoint.restore``: the registered values); release: the partners send what they
held, the old actor is stopped."""


def _attach_steps(moves: list[dict], reports: list) -> None:
    """Give each move the times its rank's processes reported (``instrument``)."""
    by = {(e.detail["side"], e.detail["incarnation"]): e.detail for e in reports}
    for j, m in enumerate(moves):
        out, into = by.get(("out", j)), by.get(("in", j + 1))
        if out is None or into is None:
            m["steps"] = None
            continue
        m["steps"] = {
            "wait_s": m["state_s"] - out["pickle_s"] - out["put_s"],
            "pickle_s": out["pickle_s"], "put_s": out["put_s"],
            "fetch_s": into["fetch_s"], "copy_s": into["load_s"],
            "unpickle_s": into["restore_s"],
            "rewire_s": m["restore_s"] - into["fetch_s"] - into["load_s"] - into["restore_s"],
            "release_s": m["total_s"] - m["stop_s"] - m["state_s"] - m["restore_s"],
        }


def _same(got: list, want: list) -> bool:
    return pickle.dumps(got) == pickle.dumps(want) or got == want


# ------------------------------------------------------------------------------ cluster
class LocalCluster:
    """A head and ``workers`` worker nodes on this machine (``ray.cluster_utils``)."""

    def __init__(self, workers: int, object_store_mib: int):
        from ray.cluster_utils import Cluster
        store = object_store_mib * MIB
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "object_store_memory": store, "include_dashboard": False})
        for _ in range(workers):
            self.cluster.add_node(num_cpus=1, object_store_memory=store)
        self.address = self.cluster.address

    def connect(self) -> None:
        import ray
        ray.init(address=self.address, logging_level="WARNING")
        self.cluster.wait_for_nodes()

    def shutdown(self) -> None:
        import ray
        ray.shutdown()
        shutdown_cluster(self.cluster)


# ---------------------------------------------------------------------------- the CLI
def add_arguments(parser) -> None:
    parser.add_argument("--sizes-mib", default="1,4,16,64,256",
                        help="state sizes of the migrating rank in MiB (default 1,4,16,64,256)")
    parser.add_argument("--ranks", type=int, default=4, help="ranks (default 4)")
    parser.add_argument("--rank", type=int, default=1, help="the rank that moves (default 1)")
    parser.add_argument("--moves", type=int, default=3, help="migrations per run (default 3)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker nodes besides the head (default 2)")
    parser.add_argument("--object-store-mib", type=int, default=2048,
                        help="object store size of each local node (default 2048)")
    parser.add_argument("--address", default=None,
                        help="join this Ray cluster instead of starting a local one")
    add_repetitions(parser, 3, "object-store fetches per size", flag="--repeat")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="iterations per second of rank 0 while ranks move (default 20)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per run (default 600)")


def _fmt_bw(bps: float) -> str:
    return "inf" if math.isinf(bps) else ("nan" if math.isnan(bps) else f"{bps / MB:.1f}")


def main(args) -> int:
    sizes = [int(float(s) * MIB) for s in args.sizes_mib.split(",") if s.strip()]
    if (not sizes or args.ranks < 2 or not 0 < args.rank < args.ranks or args.moves < 1
            or args.rate <= 0 or any(s < 0 for s in sizes)):
        return usage_error("migrate", "needs sizes >= 0, --ranks >= 2, 0 < --rank < --ranks, "
                           "--moves >= 1, --rate > 0")
    args.warmup, args.settle = 5, 5
    t_all = time.perf_counter()
    cluster, cluster_s = None, 0.0
    try:
        if args.address is None:
            print(f"bench migrate: starting a local Ray cluster (head + {args.workers} "
                  f"workers)", flush=True)
            t0 = time.perf_counter()
            cluster = LocalCluster(args.workers, args.object_store_mib)
            cluster.connect()
            cluster_s = time.perf_counter() - t0
            address = cluster.address
        else:
            import ray
            ray.init(address=args.address, logging_level="WARNING")
            address = args.address
        out = asyncio.run(_bench(args, sizes, address))
    finally:
        t0 = time.perf_counter()
        if cluster is not None:
            cluster.shutdown()
        else:
            import ray
            ray.shutdown()
    out["cluster_start_s"], out["cluster_stop_s"] = cluster_s, time.perf_counter() - t0
    out["wall_s"] = time.perf_counter() - t_all
    _print(out)
    print(f"  wall time {out['wall_s']:.1f} s")
    write_results(args, "migrate", out)
    return 0 if all(r["verified"] for r in out["runs"]) else 1


async def _bench(args, sizes: list[int], address: str) -> dict:
    import ray
    head = ray.get_runtime_context().get_node_id()
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    if len(nodes) < 2:
        raise RuntimeError(f"migration needs two nodes or more; the cluster has {len(nodes)}")
    workers = [n for n in nodes if n != head] or nodes
    src, dst = (workers[0], workers[1]) if len(workers) > 1 else (head, workers[0])
    print(f"  nodes: {', '.join(n[:8] + (' (head)' if n == head else '') for n in nodes)}; "
          f"{args.ranks} ranks, rank {args.rank} moves {args.moves} times per size, "
          f"{args.rate:g} iterations/s", flush=True)
    runs, store, store_s = [], [], 0.0
    for nbytes in sizes:
        # the baseline right before each size's run, so both see the same load
        t0 = time.perf_counter()
        store += await measure_objectstore(src, dst, [nbytes], args.repetitions)
        store_s += time.perf_counter() - t0
        runs.append(await migrate_run(args, nbytes, address, nodes))
    t0 = time.perf_counter()
    rates = machine_rates()
    rates["measured_in_s"] = time.perf_counter() - t0
    moves = [m for r in runs for m in r["moves"]]
    fit = fit_line([m["bytes"] for m in moves], [m["total_s"] for m in moves])
    fit_state = fit_line([m["bytes"] for m in moves],
                         [m["state_s"] + m["restore_s"] for m in moves])
    fit_spare = fit_line([m["bytes"] for m in moves],
                         [m["spare_s"] + m["total_s"] for m in moves])
    arrays = [s for s in store if s["kind"] == "array"]
    blobs = [s for s in store if s["kind"] == "bytes"]
    fit_store = fit_line([s["bytes"] for s in arrays], [s["get_s"] for s in arrays])
    fit_store_bytes = fit_line([s["bytes"] for s in blobs], [s["get_s"] for s in blobs])
    fit_store_put_get = fit_line([s["bytes"] for s in arrays],
                                 [s["put_s"] + s["get_s"] for s in arrays])
    ratio = fit["B_Bps"] / fit_store["B_Bps"]
    per_size = []
    for r in runs:
        med = {k: statistics.median(m[k] for m in r["moves"])
               for k in ("spare_s", "stop_s", "state_s", "restore_s", "total_s")}
        st = [s for s in arrays if s["bytes"] == r["bytes"]]
        sb = [s for s in blobs if s["bytes"] == r["bytes"]]
        per_size.append({"bytes": r["bytes"], "size_mib": r["size_mib"], **med,
                         "snapshot_bytes": statistics.median(r["state_bytes_moved"]),
                         "objectstore_get_s": statistics.median(s["get_s"] for s in st),
                         "objectstore_put_s": statistics.median(s["put_s"] for s in st),
                         "objectstore_bytes_get_s": statistics.median(s["get_s"] for s in sb),
                         "verified": r["verified"]})
        steps = [m["steps"] for m in r["moves"] if m.get("steps")]
        per_size[-1]["steps"] = ({k: statistics.median(st[k] for st in steps) for k in STEPS}
                                 if steps else None)
    return {
        "protocol": "ready_flush", "address": address,
        "local_cluster": args.address is None, "nodes": nodes, "head": head,
        "ranks": args.ranks, "rank": args.rank, "moves_per_run": args.moves,
        "rate": args.rate, "repeat": args.repetitions,
        "sizes_bytes": sizes, "runs": runs, "per_size": per_size,
        "fit": fit, "fit_state_and_restore": fit_state, "fit_with_spare": fit_spare,
        "objectstore": {"src": src, "dst": dst, "samples": store, "fit": fit_store,
                        "measured_in_s": store_s,
                        "fit_bytes_objects": fit_store_bytes,
                        "fit_put_and_get": fit_store_put_get},
        "ratio_B_over_objectstore": ratio, "target_ratio": TARGET_RATIO,
        "target_met": bool(ratio >= TARGET_RATIO),
        # a move does a put and a fetch: against the same pair of operations
        "ratio_B_over_put_and_get": fit["B_Bps"] / fit_store_put_get["B_Bps"],
        "cocheck": COCHECK, "machine_rates": rates,
        "verified": all(r["verified"] for r in runs),
    }


def _print(out: dict) -> None:
    print()
    print(table([("size", "snapshot", "spare", "stop", "state", "restore", "total", "store get",
                  "bytes get", "ok"),
                 ("MiB", "MiB", "s", "s", "s", "s", "s", "s", "s", "")]
                + [(f"{p['size_mib']:.1f}", f"{p['snapshot_bytes'] / MIB:.1f}",
                    *(f"{p[k]:.3f}" for k in ("spare_s", "stop_s", "state_s", "restore_s",
                                              "total_s", "objectstore_get_s",
                                              "objectstore_bytes_get_s")),
                    "yes" if p["verified"] else "NO") for p in out["per_size"]],
                left=0, header=2))
    print(f"  (medians of {out['moves_per_run']} moves per size; spare_s is not part of "
          f"total_s; store get: fetch of an array put on another node)")
    fit, fs, cc = out["fit"], out["objectstore"]["fit"], out["cocheck"]

    def line(label: str, f: dict, note: str = "") -> None:
        print(f"  {label:22s} t(x) = {f['a_s']:6.3f} s + x / ({_fmt_bw(f['B_Bps'])} MB/s){note}")

    print()
    line("migration (total_s)", fit, f"   ({fit['points']} moves)")
    line("  state_s + restore_s", out["fit_state_and_restore"])
    line("  spare_s + total_s", out["fit_with_spare"])
    line("object store", fs, "   (fetch of an array put on another node)")
    line("  bytes object", out["objectstore"]["fit_bytes_objects"])
    print(f"  {'CoCheck (1996)':22s} t(x) = {cc['a_s']:6.2f} s + x / "
          f"({cc['B_Bps'] / 1e3:.0f} KB/s)")
    print(f"  B / B_objectstore = {out['ratio_B_over_objectstore']:.3f}   (target >= "
          f"{out['target_ratio']}: {'met' if out['target_met'] else 'NOT met'});  "
          f"B / B_CoCheck = {fit['B_Bps'] / cc['B_Bps']:.0f}x")
    line("  put + fetch", out["objectstore"]["fit_put_and_get"])
    print(f"  B / B_(put + fetch) = {out['ratio_B_over_put_and_get']:.3f}   (a move does "
          f"both: the old actor puts, the new one fetches)")
    if any(p["steps"] for p in out["per_size"]):
        print("\n  where the time goes (s; medians; timed inside the ranks' processes):")
        names = [k[:-2] for k in STEPS]
        print("  " + f"{'MiB':>8s} " + " ".join(f"{n[:11]:>11s}" for n in names))
        for p in out["per_size"]:
            if p["steps"]:
                print("  " + f"{p['size_mib']:8.1f} " +
                      " ".join(f"{p['steps'][k]:11.3f}" for k in STEPS))
        rates = out["machine_rates"]
        print(f"  (this machine now: memory copy {rates['copy_Bps'] / MB:.0f} MB/s, SHA-256 "
              f"{rates['sha256_Bps'] / MB:.0f} MB/s)")
    print(f"\n  verified: {'yes' if out['verified'] else 'NO'} (every run equals the "
          f"failure-free reference; the rank ran on each target node)")
