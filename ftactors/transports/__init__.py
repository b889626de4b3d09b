"""How rank hosts reach each other: ``local`` (one process, event-loop callbacks),
``sim`` (``local`` on a virtual clock, ``_simloop``) and ``ray`` (one actor per rank, the
only module that imports Ray). Transports import the runtime, the engine and
``ftactors.base``; never a protocol or a tool."""
from ._simloop import run_virtual
from ._spin import Spin

__all__ = [
    "Spin", "run_virtual",
]
