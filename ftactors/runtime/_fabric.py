"""What the runtime asks of a transport: ``Fabric``.

A fabric starts rank hosts (``spawn``, ``spawn_spare``, ``promote``), calls them, pings,
watches and kills them, and tells the time; the coordinator, its spare pool, its deadlock
watch and the recovery context drive a run through these members alone. ``LocalFabric``
(one process), ``SimFabric`` (the same on a virtual clock) and ``RayFabric`` (an actor
per rank) declare them all, each in its own way; ``tests/test_layers.py`` checks that
every fabric has every member and that the runtime reads no other member of a fabric.

A *handle* is the fabric's own name for a host (a ``RankHost`` in one process, a Ray
actor on Ray) and is opaque to the runtime. Every call on a handle whose host is gone
raises ``RankDied`` (``_deaths``), whatever the transport. What differs between
transports is said by attributes rather than found out by type or name:
``hosts_here`` (the runtime may read a host's endpoint directly),
``heartbeat_interval_s`` (whether heartbeats are needed by default) and
``deadlock_check_s``.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from ._host import RankSpec


@runtime_checkable
class Fabric(Protocol):
    """The transport side of a run, as the runtime uses it (module docstring)."""

    name: str
    """The transport's name (``"local"``, ``"sim"``, ``"ray"``): the run's metrics say it."""
    hosts_here: bool
    """The hosts live in this process: the deadlock watch reads each host's endpoint
    (``handle.ep``) instead of asking it by a call."""
    heartbeat_interval_s: float | None
    """The heartbeat interval when the run's options set none; None: no heartbeats (in
    one process a rank cannot hang apart from the coordinator, only processes do)."""
    deadlock_check_s: float
    """How often the deadlock watch reads the ranks' waits (on the fabric's clock)."""
    on_report: Callable[[Any], None]
    """Set by the coordinator: called with each event a rank reports (``Link.report``)."""

    # -------------------------------------------------------------- the clock
    def clock(self) -> float:
        """Seconds since the run started (virtual on sim)."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the fabric's clock."""

    def on_quiet(self, check: Callable[[], bool]) -> None:
        """Call ``check`` whenever nothing but the coordinator's watching is pending,
        where the fabric can tell (sim); elsewhere nothing."""

    # ------------------------------------------------------------------ hosts
    async def start(self, ranks: int) -> None:
        """Make ready for a run of ``ranks`` ranks (on Ray: join or start the cluster)."""

    async def spawn(self, spec: RankSpec) -> Any:
        """Start a host for ``spec``; returns its handle."""

    async def spawn_spare(self, node: str | None = None) -> Any:
        """Start a spare host (on node ``node``, None: any); returns its handle."""

    async def promote(self, spare: Any, spec: RankSpec) -> Any:
        """Make the spare ``spare`` the host of ``spec``; returns the handle to use."""

    async def wire(self, handles: list) -> None:
        """Tell every host its peers' hosts (after a start or a replacement)."""

    async def watch(self, handle: Any) -> None:
        """Return once the host (or spare) is dead."""

    async def shutdown(self, completed: bool = False) -> None:
        """Stop every host the run started (``completed``: every rank returned)."""

    # ------------------------------------------------------------------ calls
    async def run(self, handle: Any, args: tuple, kwargs: dict, restore=None) -> dict:
        """Run the rank's ``main()`` (from ``restore``, a restore spec, when given)."""

    async def call(self, handle: Any, name: str, *args) -> Any:
        """Call the host's request ``name``."""

    async def call_kept(self, handle: Any, name: str, *args) -> Any:
        """``call``, with the (bytes) answer kept on the coordinator's side, where it
        outlives the rank's process; returns a handle ``Link.fetch`` reads."""

    async def available(self, handles: list) -> bool:
        """Whether every ``call_kept`` handle in ``handles`` can still be fetched."""

    async def ping(self, handle: Any) -> None:
        """Return once the host answers (a heartbeat)."""

    async def progress(self, handle: Any) -> Any:
        """The rank's progress and wait state (``RankHost.progress``)."""

    async def collect(self, handle: Any) -> dict:
        """The rank's events, trace and statistics, at the end of the run."""

    async def drain_reports(self) -> None:
        """Return once every report sent so far has reached ``on_report``."""

    # ------------------------------------------------------------------ nodes
    def nodes(self) -> list[str]:
        """The ids of the nodes ranks can run on."""

    async def node_of(self, handle: Any) -> str:
        """The node the host runs on."""

    def process_state(self, handle: Any) -> str | None:
        """The host process's scheduler state (``/proc/PID/stat``: ``R``, ``D``, ``S``,
        ``T``), or None where it cannot be read."""

    # ------------------------------------------------------------ chaos faults
    async def kill(self, handle: Any, method: str) -> None:
        """Kill the host (or spare) by ``method`` (``Chaos.method``, or ``"ray.kill"``
        to stop a host the run no longer uses)."""

    async def stall(self, handle: Any, seconds: float) -> None:
        """Freeze the host for ``seconds`` (it goes on after)."""

    def track_wires(self) -> None:
        """Network faults are planned: model the connections between ranks from now on."""

    async def cut(self, handle: Any, peers: list[int] | None, seconds: float) -> None:
        """Close the host's connections to ``peers`` (None: all) for ``seconds`` at least."""

    # ---------------------------------------------------------------- results
    def metrics(self) -> dict:
        """The fabric's own figures for the run's metrics (empty where it has none)."""
