"""Direct rank-to-rank channels beside Ray (``data_plane="direct"``).

Ray stays the control plane (actors, placement, spares, failure detection, the object
store); envelope batches between ranks travel on sockets that the ranks open to each
other: a Unix domain socket when both ends run on one node, TCP on the node's address
otherwise. Nothing here knows Ray: a rank's ``Listener`` is started where its actor
lives, the coordinator hands every rank the listeners' ``DirectEndpoint``s when it wires
them, and ``Peers`` opens one outbound channel per peer on first use.

Theory of operation
-------------------
A connection is one-way: the connecting rank sends frames, the listening rank reads
them and sends back only acknowledgements. The plane is made of parts that decide
without I/O, each stepped by its own tests, and two modules of asyncio glue that
perform what they decide:

- ``wire``: the frame format, encoded, decoded and read out of a stream; a frame too
  long is refused from its head, before any of its body is buffered.
- ``handshake``: the proof, both ways, that each end holds the run's secret
  (``RunSecret``), before a single frame byte is read; a peer that cannot prove it is
  dropped, counted by what it did, and none of its bytes is unpickled.
- ``window``: a channel's unacknowledged frames, the listener's cumulative
  acknowledgements and where a new connection resumes, so a connection that closes on
  its own loses no frame and delivers none twice; the window also bounds memory.
- ``shm``: shared-memory segments between ranks on one node (anonymous, sealed, passed
  on the Unix socket with the proof; nothing named to clean up), into which a sender
  copies a large buffer once, as it pickles it.
- ``areas``: the receive areas a connection reuses for the large buffers it reads from
  its socket, once nothing references them.
- ``listener`` and ``peers``: the listening and the sending side on the rank's event
  loop (buffered reads into a receive area, ``os.writev`` of a frame's pieces,
  reconnection with backoff, backpressure).
- ``counters``: what a rank's plane accepted and refused (``RunResult.metrics["direct"]``).

Batches that hold object-store references never come here (Ray must see those to keep
them alive): the transport sends them by actor call, and the channel layer puts both
paths back in order.
"""
from .counters import Counters
from .handshake import RunSecret
from .listener import DirectEndpoint, Listener, secure_run_dir
from .peers import Peers
from .window import WINDOW_BYTES
from .wire import encode

__all__ = ["Counters", "DirectEndpoint", "Listener", "Peers", "RunSecret", "WINDOW_BYTES",
           "encode", "secure_run_dir"]
