"""What every layer uses: the exception types (``_errors``), the run's event log
(``_events``) and sealed storage (``_storage``: SHA-256 sealed blobs, stores, checkpoint
manifests). Imports nothing else of ftactors."""
