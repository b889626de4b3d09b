"""sim-check's footprint and give-up invariants, judged from a run's timeline alone.

* DDVPiggyback's garbage collection keeps memory bounded: after every collection no
  cluster stores more than ``HC3I_CLCS_MAX`` CLCs, the coordinator holds no more parts
  than those CLCs and one being taken, and the senders' logs hold no more than a bounded
  number of messages (:func:`hc3i_unbounded`).
* A give-up (``ft.RankFailed``) of StandbyReplacement or RSBackup is correct only if the
  failures really took data no copy or code can rebuild. That is decided here from the
  failed ranks and the placement of the copies, not from the protocol's own inventories
  (:func:`needless_give_up`): StandbyReplacement loses a rank's backup only when the rank
  and its partner fail in one recovery after a backup was taken; RSBackup loses a group
  only when fewer than ``k`` of its ``k + m`` blocks (members and parity holders) survive.
"""
from __future__ import annotations

HC3I_CLCS_MAX = 2
"""The most CLCs a cluster may store after a collection (the default ``gc_clcs_max``; the
paper's Tables 2-3 find 2)."""


def hc3i_unbounded(events, ranks: int, log_max: int) -> str:
    """What grew past its bound in a DDVPiggyback run ("" if nothing did)."""
    for e in events:
        if e.kind != "hc3i_gc":
            continue
        d = e.detail
        stored = max(d["stored_after"].values())
        if stored > HC3I_CLCS_MAX:
            return (f"a cluster kept {stored} CLCs after a garbage collection "
                    f"(at most {HC3I_CLCS_MAX})")
        if d["parts_kept"] > (HC3I_CLCS_MAX + 1) * ranks:
            return (f"the coordinator kept {d['parts_kept']} parts after a garbage "
                    f"collection (at most {(HC3I_CLCS_MAX + 1) * ranks})")
        if d["log_after"] > log_max:
            return (f"the logs held {d['log_after']} messages after a garbage collection "
                    f"(at most {log_max})")
    return ""


def failed_in_last_round(events) -> set[int]:
    """The ranks failed since the last completed recovery (the round that gave up)."""
    failed: set[int] = set()
    for e in events:
        if e.kind == "recovery_end":
            failed = set()
        elif e.kind == "failure_detected":
            failed.add(e.rank)
    return failed


def needless_give_up(protocol: str, events, ranks: int, options: dict) -> str:
    """Why a give-up was not forced by lost data ("" when it was)."""
    failed = failed_in_last_round(events)
    if protocol == "standby":
        from ftactors.protocols.standby import partner
        pairs = sorted((r, partner(r, ranks)) for r in failed if partner(r, ranks) in failed)
        backed_up = any(e.kind == "backup" for e in events)
        if pairs and backed_up:
            return ""
        return (f"StandbyReplacement gave up after failures {sorted(failed)}, but every "
                f"failed rank's partner survived" if not pairs else
                "StandbyReplacement gave up before any backup (the start was restorable)")
    if protocol == "rs":
        from ftactors.protocols.rs_placement import place, undecodable_groups, virtual_nodes
        placement = place(virtual_nodes(ranks, options["rs_ranks_per_node"]),
                          options["rs_group_size"])
        if undecodable_groups(placement, failed):
            return ""
        return (f"RSBackup gave up after failures {sorted(failed)}, but every group keeps "
                f"k of its k + m blocks")
    return f"{protocol} gave up"
