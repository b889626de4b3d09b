"""The message engine: payloads and envelopes, FIFO channels, MPI matching, and the
endpoint that numbers, batches, logs and snapshots a rank's messages. Imports only
``ftactors.base``; knows nothing of ranks' programs, protocols or transports."""
