"""How rank hosts reach each other: ``local`` (one process, event-loop callbacks),
``sim`` (``local`` on a virtual clock, ``_simloop``) and ``ray`` (one actor per rank, the
only module that imports Ray). Transports import the runtime, the engine and
``ftactors.base``; never a protocol or a tool."""
# public: a rank's polling, which the asyncio floor of ``bench solver`` runs as ranks do
# (from here, without importing Ray)
from ._spin import Spin  # noqa: F401
