"""Forced-checkpoint storms of DDVPiggyback (HC3I): noticed, recorded, explained.

HC3I forces a CLC in the receiving cluster whenever a message carries a sequence number
newer than the last one that cluster saw from the sender's (Algorithm 6). Two clusters that
exchange messages at every step therefore force each other into a CLC for nearly every
message: the protocol working as written (the paper's section 6.3: "the overhead of our
protocol will not be good in that case"), but a run that pays a checkpoint per step. The
coordinator counts each cluster's committed CLCs, forced and unforced, with the clusters
whose messages forced them; once a cluster has forced many more than it took on its timer,
the run says so once: a ``hc3i_storm`` event in the timeline and a
``ForcedCheckpointStorm`` warning (shown on the command line), naming the cluster pairs
responsible and the remedy.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

STORM_MIN_FORCED = 20
"""A cluster is in a storm only after this many forced CLCs (a few are the protocol's
normal work)."""
STORM_RATIO = 4
"""... and more than this many forced CLCs per unforced one (plus one)."""

REMEDY = ("put ranks that exchange messages at every step in one cluster: clusters='node' "
          "(one cluster per node), one cluster for the whole run, or the groups "
          "`ftactors groups suggest --trace` forms from a message trace of the run")


class ForcedCheckpointStorm(UserWarning):
    """A DDVPiggyback run forces CLCs much faster than it takes unforced ones."""


@dataclass
class StormWatch:
    """Per-cluster tallies of committed CLCs; says once per cluster when it storms."""

    unforced: Counter = field(default_factory=Counter)      # cluster -> CLCs
    forced: Counter = field(default_factory=Counter)        # cluster -> CLCs
    pairs: Counter = field(default_factory=Counter)         # (sender, receiver) -> CLCs
    told: set = field(default_factory=set)                  # clusters already reported

    def commit(self, cluster: int, by: list[int]) -> dict | None:
        """A CLC of ``cluster`` committed, forced by messages from the clusters ``by``
        (empty: unforced). Returns the storm's details the first time the cluster storms."""
        if not by:
            self.unforced[cluster] += 1
            return None
        self.forced[cluster] += 1
        for sender in by:
            self.pairs[(sender, cluster)] += 1
        forced, unforced = self.forced[cluster], self.unforced[cluster]
        if (cluster in self.told or forced < STORM_MIN_FORCED
                or forced <= STORM_RATIO * (unforced + 1)):
            return None
        self.told.add(cluster)
        pairs = sorted(((s, r), n) for (s, r), n in self.pairs.items() if r == cluster)
        return {"cluster": cluster, "forced": forced, "unforced": unforced,
                "pairs": [[s, r, n] for (s, r), n in pairs], "remedy": REMEDY}


def message(storm: dict) -> str:
    """The command-line warning for a storm's details."""
    pairs = ", ".join(f"cluster {s} -> cluster {r} ({n} forced)" for s, r, n in storm["pairs"])
    return (f"DDVPiggyback: cluster {storm['cluster']} took {storm['forced']} forced CLCs "
            f"and {storm['unforced']} unforced ones (a forced-checkpoint storm: clusters "
            f"that talk at every step force a checkpoint per message). Forced by: {pairs}. "
            f"Remedy: {storm['remedy']}.")
