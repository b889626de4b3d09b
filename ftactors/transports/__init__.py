"""How rank hosts reach each other: ``local`` (one process, event-loop callbacks),
``sim`` (``local`` on a virtual clock, ``_simloop``) and ``ray`` (one actor per rank: a
package whose modules are the only ones of the library that import Ray). Each has a
fabric that declares ``runtime.Fabric``. Transports import the runtime, the engine and
``ftactors.base``; never a protocol or a tool.

Exported for the layers above: ``run_virtual`` (``ft.run`` runs a sim job in it) and
``Spin`` (a rank's polling, which the asyncio floor of ``bench solver`` runs as ranks do,
without importing Ray)."""
from ._simloop import run_virtual
from ._spin import Spin

__all__ = ["Spin", "run_virtual"]
