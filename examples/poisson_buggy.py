"""``poisson.Poisson`` with a fault-tolerance bug: its residual history is kept in an
attribute that is not registered.

Without failures it gives the same answer. After a restore, ``main()`` runs again from
the top, sets ``self.history = []`` and resumes the loop at the checkpoint's iteration:
the iterations before it are missing from the history, so ``iterations`` and
``history`` differ from the failure-free run's. ``ftactors sim-check --app
examples/poisson_buggy.py:Poisson --protocol standby`` finds it and names the attribute;
the fix is ``poisson.Poisson``'s ``self.register("history", [])``.
"""
from __future__ import annotations

import numpy as np
from poisson import Poisson as Fixed
from poisson import exchange, rows_of, sweep


class Poisson(Fixed):
    """The solver with ``history`` outside ``register`` (the bug)."""

    async def main(self, n: int = 16, tol: float = 1e-6, omega: float = 1.7,
                   max_iterations: int = 100) -> dict:
        first, last = rows_of(self.rank, self.size, n)
        h2 = 1.0 / (n + 1) ** 2
        self.register("u", None if self.restored else np.zeros((last - first + 2, n + 2)))
        self.history = []                          # BUG: changes every iteration, not registered
        await exchange(self.comm, self.u)
        async for _ in self.iterations(max_iterations):
            change = sweep(self.u, first, 0, h2, omega)
            await exchange(self.comm, self.u)
            change += sweep(self.u, first, 1, h2, omega)
            await exchange(self.comm, self.u)
            residual = await self.comm.allreduce(change)
            self.history.append(residual)
            if residual < tol:
                break
        return {"sum": float(self.u[1:-1].sum()), "iterations": len(self.history),
                "history": list(self.history)}
