"""The message engine: payloads and envelopes, FIFO channels, MPI matching, and the
endpoint that numbers, batches, logs and snapshots a rank's messages. Imports only
``ftactors.base``; knows nothing of ranks' programs, protocols or transports."""
from ._constants import ANY_SOURCE, ANY_TAG, PROC_NULL, SUCCESS, TAG_UB, UNDEFINED
from ._determinants import ANY, DETS, SOME
from ._endpoint import Endpoint, Link
from ._envelope import APP, COLLECTIVE_SUFFIX, CTRL, Envelope, from_rows, to_rows
from ._hooks import passes_on
from ._payload import LentPayload, Payload, is_plain, unpack, unpack_lent
from ._snapshots import blank_snapshot
from ._synchronous import Synchronous
from ._vector import RankVector
from ._waits import Wait

__all__ = [
    "ANY", "ANY_SOURCE", "ANY_TAG", "APP", "COLLECTIVE_SUFFIX", "CTRL", "DETS",
    "Endpoint", "Envelope", "LentPayload", "Link", "PROC_NULL", "Payload", "RankVector",
    "SOME", "SUCCESS", "Synchronous", "TAG_UB", "UNDEFINED", "Wait", "blank_snapshot",
    "from_rows", "is_plain", "passes_on", "to_rows", "unpack", "unpack_lent",
]
