"""The ``ray`` transport: each rank is a Ray async actor. With ``data_plane="direct"``
(the default) Ray is the control plane only: batches between ranks go on the sockets of
``transports.direct`` (each rank listens from ``setup`` on, the driver makes the run's
secret and hands out the endpoints in ``wire``), and only batches that hold object-store
references still go by actor call. With ``data_plane="ray"`` every batch is an actor call.

The package holds every module of ftactors that imports Ray, one role each:

============  =========================================================================
``link``      the rank's side: ``RayLink``, how its batches, large buffers, shared
              snapshots and reports travel
``actors``    what runs in a rank's process: ``RankActor`` around one ``RankHost``,
              and the coordinator's ``Inbox``
``fabric``    the driver's side: ``RayFabric`` (a ``runtime.Fabric``), which starts,
              promotes, calls, watches and kills the actors
``by_value``  the user's code shipped by value, with its source lines for tracebacks
``warm``      rank processes kept between the runs of one driver
``driver``    the driver process's Ray: who starts the embedded Ray, which of its
              worker-death notices are printed
============  =========================================================================

``address`` joins an existing cluster (``"auto"``, ``"ray://host:10001"``, ``host:port``);
with none, an embedded local Ray is started once per process and reused, by a thread that
lives as long as the process (``driver.ensure_ray``). Ray 2.60 turns token
authentication on by default: a client joining an explicit address needs
``RAY_AUTH_MODE=token`` (and the cluster's token) in its environment.
"""
from .actors import Inbox, RankActor, run_dir, set_niceness
from .driver import DEATH_NOTICES, ensure_ray
from .fabric import RayFabric
from .link import RayLink

__all__ = ["DEATH_NOTICES", "Inbox", "RankActor", "RayFabric", "RayLink", "ensure_ray",
           "run_dir", "set_niceness"]
