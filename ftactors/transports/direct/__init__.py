"""The direct data plane's parts, each without I/O where it can be: shared-memory
segments (``shm``)."""
