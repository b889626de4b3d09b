"""The mpi4py-like facade programs call: Communicator (``_comm``), collectives built on
point-to-point messages, Request/Status and reduction ops. Imports ``ftactors.engine`` and
``ftactors.base``."""
