"""A plain ft.run script (docs/cluster.md): run it here with ``python my_script.py``,
or on a cluster with ``ray job submit --working-dir . -- python my_script.py``, where
``ft.run`` joins the job's cluster."""
import json

import ftactors as ft
from ftactors.protocols import StandbyReplacement
from solver import Solver


class FTSolver(StandbyReplacement, Solver):
    pass


reference = ft.run(Solver, ranks=2, kwargs={"iterations": 8})
result = ft.run(FTSolver, ranks=2, kwargs={"iterations": 8}, spares=1, backup_interval=2,
                chaos=ft.Chaos(kill=[ft.Kill(1, iteration=4)]), timeout_s=300)
assert result.results == reference.results, (result.results, reference.results)
print("RESULTS", json.dumps({"results": result.results,
                             "kills": len(result.events_of("killed"))}))
