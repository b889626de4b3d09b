"""The driver process's side of Ray: who starts the embedded Ray, and which of Ray's
worker-death notices reach the user.

**The embedded Ray outlives the thread that first needed it.** Ray starts its processes
(GCS, raylet, ...) with ``PR_SET_PDEATHSIG``, and on Linux the "parent" whose death sends
that signal is the *thread* that forked them: a program that calls ``ft.run`` from a worker
thread (a notebook runner, a web server's pool, a GUI) lost its GCS when that thread ended,
and a minute later Ray ended the whole process ("Failed to connect to GCS within 60
seconds", Ray issue 45570). So ``ensure_ray`` starts the embedded Ray from the main thread
(which ends only with the process) or, when called from any other thread, from one daemon
thread of its own that lives as long as the process.

**A Ray job's driver joins its job's cluster.** The embedded Ray is ``address="local"``:
it never joins a cluster some other process started (Ray's own ``ray.init()`` would
follow ``/tmp/ray/ray_current_cluster``, possibly to a cluster that is gone). A script
run by ``ray job submit`` is different: its cluster is the point, and Ray's job
supervisor tells its driver so with ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (the job's
runtime_env, which ``ray.init`` applies to the job's workers) and ``RAY_ADDRESS``. There
a plain ``ft.run`` joins that cluster (``address="auto"``), as a plain ``ray.init()``
does; a private Ray inside the job would run the program beside the cluster, not on it.

**Planned deaths are told once, in the framework's words.** When a worker process dies,
the raylet publishes "A worker died or was killed while executing a task by an unexpected
system error ... OOM killer ..." and Ray's error listener in the driver prints it. For a
rank that chaos kills on purpose the run's timeline already says it (kill, detection,
recovery), and Ray's text reads as a crash. ``DEATH_NOTICES`` filters that printer: a
notice about a worker the fabric was told to expect dead (``expect``: it killed it, or
the rank reported its own planned kill) is dropped; one about a worker that is planned to
die at an iteration (``doomed``) but has not reported it yet waits for that report (or
``HOLD_S``, then it is printed: the worker died before its planned kill); any other
notice, an unexpected death, is printed as Ray wrote it.
"""
from __future__ import annotations

import os
import queue
import re
import threading

import ray
import ray._private.worker as ray_worker


def ensure_ray(address: str | None = None) -> None:
    """Connect to ``address``, or start an embedded local Ray once per process (from a
    thread that lives as long as the process, see the module docstring)."""
    if address is None and os.environ.get(JOB_DRIVER):
        address = "auto"  # the job's cluster (module docstring)
    with _START_LOCK:
        if not ray.is_initialized():
            if address is not None:
                ray.init(address=address, logging_level="WARNING")
            elif threading.current_thread() is threading.main_thread():
                _init_embedded()
            else:
                _OWNER.call(_init_embedded)
        DEATH_NOTICES.install()


_START_LOCK = threading.Lock()
#: set by Ray's job supervisor in the environment of a job's driver (its job config)
JOB_DRIVER = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _init_embedded() -> None:
    # "local": never join a cluster some other process started
    ray.init(address="local", include_dashboard=False, logging_level="WARNING",
             log_to_driver=True)


class _OwnerThread:
    """One daemon thread, started on first use, that runs the calls handed to it and then
    waits for more: the processes a call forks keep a live parent thread until the
    process ends."""

    def __init__(self):
        self._calls: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def call(self, fn):
        """``fn()`` run in the owner thread; returns its value or raises its exception."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ftactors-ray-owner",
                                            daemon=True)
            self._thread.start()
        done: queue.Queue = queue.Queue(maxsize=1)
        self._calls.put((fn, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            fn, done = self._calls.get()
            try:
                done.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                done.put((False, exc))


_OWNER = _OwnerThread()


HOLD_S = 10.0
"""How long a notice about a doomed worker waits for the rank's report of its planned
kill before it is printed after all (it holds Ray's listener thread, which
``ray.shutdown`` joins, so no longer than this)."""

_WORKER_ID = re.compile(r"Worker ID: ([0-9a-f]+)")


class DeathNotices:
    """Which of the raylet's worker-death notices the driver prints (module docstring)."""

    def __init__(self):
        self._changed = threading.Condition()
        self._expected: set[str] = set()
        self._doomed: set[str] = set()
        self._print = None  # Ray's printer, once install() wrapped it
        self.dropped = 0  # notices dropped so far (tests wait on it)

    def install(self) -> None:
        """Wrap Ray's printer of raylet errors in this process (once)."""
        if self._print is None:
            self._print = ray_worker.print_to_stdstream
            ray_worker.print_to_stdstream = self._filter

    def expect(self, worker_id: str | None) -> None:
        """Worker ``worker_id`` dies on purpose: its notice is not printed."""
        if worker_id is not None:
            with self._changed:
                self._expected.add(worker_id)
                self._changed.notify_all()

    def doomed(self, worker_id: str) -> None:
        """Worker ``worker_id`` is planned to die at an iteration, which it reports."""
        with self._changed:
            self._doomed.add(worker_id)

    def _filter(self, data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            lines = [line for line in data["lines"] if not self._planned(line)]
            if not lines:
                return
            data = dict(data, lines=lines)
        self._print(data, ignore_prefix)

    def _planned(self, line: str) -> bool:
        """Whether ``line`` is a death notice for a worker that died on purpose; waits
        (in Ray's listener thread) up to HOLD_S for a doomed worker's report."""
        found = _WORKER_ID.search(line)
        if found is None:
            return False
        worker = found.group(1)
        with self._changed:
            if worker in self._doomed:
                self._changed.wait_for(lambda: worker in self._expected, HOLD_S)
                self._doomed.discard(worker)
            planned = worker in self._expected
            self._expected.discard(worker)  # one notice per worker
            if planned:
                self.dropped += 1
                self._changed.notify_all()
        return planned

    def wait_dropped(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` notices were dropped (for tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.dropped >= count, timeout_s)


DEATH_NOTICES = DeathNotices()
