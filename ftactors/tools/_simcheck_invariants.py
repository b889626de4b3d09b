"""sim-check's footprint and give-up invariants, judged from a run's timeline alone.

* DDVPiggyback's garbage collection keeps memory bounded: after every collection every
  cluster keeps exactly its CLCs from the smallest SN a single failure could send it back
  to (nothing older survives a collection), the coordinator holds no more parts than those
  CLCs and one being taken, and the senders' logs no more than a bounded number of
  messages (:func:`hc3i_unbounded`). How many CLCs that is depends on the other clusters:
  a cluster that has not checkpointed for a while can send the ones it talks to back to
  before their first receipt from its current epoch, so they keep every CLC taken since
  (Algorithm 8 bounds what a recovery line can use, not the count; the paper gives no
  bound). What is bounded is the part of it that is older than every cluster's newest
  CLC: each step of a rollback cascade adds at most one such CLC, so never more than there
  are clusters. (The count of all CLCs held is not bounded by the number of clusters:
  in a program that splits its communicator in every iteration, a cluster waiting out
  a recovery takes no CLC while the others go on.)
* A give-up (``ft.RankFailed``) of StandbyReplacement or RSBackup is correct only if the
  failures really took data no copy or code can rebuild. That is decided here from the
  failed ranks and the placement of the copies, not from the protocol's own inventories
  (:func:`needless_give_up`): StandbyReplacement loses a rank's backup only when the rank
  and its partner fail in one recovery after a backup was taken; RSBackup loses a group
  only when fewer than ``k`` of its ``k + m`` blocks (members and parity holders) survive.
  StandbyReplacement also ends the run when no standby rank is left (NR-MPI's ABORT: the
  spares are its resource, refilled in the background after each recovery); such a
  give-up passes only if the timeline shows the spares used up (every spare that became
  ready was taken or died, or the run had none).
* A multi-level stack names the level of every recovery, and never recovers at a level
  that cannot hold the loss (unless it went back to the start, which holds any loss:
  the last level does when nothing was saved yet), nor past one that surely can
  (:func:`level_problem`),
  judged from the failed ranks of each recovery and the rounds completed before it:
  partner copies cannot hold a rank whose partner failed with it, and surely hold a
  loss without such a pair once every surviving rank has backed up two rounds since the
  last recovery (a failed rank's own events die with it, but it finished the older
  round before it could flush the newer one) (a missing spare is a new actor in a stack);
  RS blocks cannot hold a group with fewer than
  ``k`` blocks left. (Whether an RS round's encoding was complete at the failure is not
  in the timeline, so that the RS level surely holds a loss is not decided.) The last
  level never gives up in a run that ends.
* In a stack whose consistency protocol hands its parts to the levels (GroupCoordination
  or DDVPiggyback under StandbyReplacement or RSBackup), every recovery names its level,
  the costliest source of a part it restored, no part comes from a copy whose holder
  failed in that recovery nor from RS blocks of a unit left with fewer than ``k`` blocks
  (members and parity holders) outside the failed ranks, and no parity block ever mixes
  two executions' encodings of one part (:func:`part_level_problem`).
"""
from __future__ import annotations

def hc3i_unbounded(events, ranks: int, log_max: int) -> str:
    """What grew past its bound in a DDVPiggyback run ("" if nothing did)."""
    committed: dict[tuple[int, int], int] = {}  # (cluster, sn) -> its commit's place
    for place, e in enumerate(events):
        if e.kind == "hc3i_commit":
            committed[e.detail["cluster"], e.detail["sn"]] = place
        if e.kind != "hc3i_gc":
            continue
        d = e.detail
        clusters = len(d["stored_after"])
        # the oldest of the clusters' newest CLCs (CLC 1, the start, has no commit)
        laggard = min(committed.get((k, sn), -1) for k, sn in d["newest"].items())
        for k, stored in d["stored_after"].items():
            usable = d["newest"][k] - d["lowest"][k] + 1
            if stored != usable:
                return (f"cluster {k} kept {stored} CLCs after a garbage collection, but "
                        f"{usable} can still be used (SN {d['lowest'][k]} to "
                        f"{d['newest'][k]})")
            older = sum(committed.get((k, sn), -1) < laggard
                        for sn in range(d["lowest"][k], d["newest"][k] + 1))
            if older > clusters:
                return (f"cluster {k} kept {older} CLCs older than every cluster's newest "
                        f"after a garbage collection (at most {clusters}, the number of "
                        f"clusters)")
        most = (max(d["stored_after"].values()) + 1) * ranks
        if d["parts_kept"] > most:
            return (f"the coordinator kept {d['parts_kept']} parts after a garbage "
                    f"collection (at most {most})")
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


def spares_used_up(events) -> bool:
    """Whether the timeline shows no standby rank left at its end: every spare that
    became ready (``spare_ready``) was taken (``spare_taken``: promoted, or dead as it
    was) or died idle (``spare_lost``)."""
    ready = sum(e.kind == "spare_ready" for e in events)
    gone = sum(e.kind == "spare_taken" or (e.kind == "spare_lost"
                                           and e.detail["moment"] == "idle") for e in events)
    return ready == gone


def needless_give_up(protocol: str, exc, ranks: int, options: dict) -> str:
    """Why the give-up ``exc`` (an ``ft.RankFailed`` with its timeline) was not forced by
    lost data or, for StandbyReplacement, by want of a spare ("" when it was)."""
    events = exc.events
    failed = failed_in_last_round(events)
    if protocol == "standby" and "no spare left" in exc.reason:
        return "" if spares_used_up(events) else (
            "StandbyReplacement said no spare was left, but the timeline shows one")
    if protocol == "standby":
        from ftactors.protocols.standby.machine import partner
        pairs = sorted((r, partner(r, ranks)) for r in failed if partner(r, ranks) in failed)
        backed_up = any(e.kind == "backup" for e in events)
        if pairs and backed_up:
            return ""
        return (f"StandbyReplacement gave up after failures {sorted(failed)}, but every "
                f"failed rank's partner survived" if not pairs else
                "StandbyReplacement gave up before any backup (the start was restorable)")
    if protocol == "rs":
        from ftactors.protocols.rs.placement import place, undecodable_groups, virtual_nodes
        placement = place(virtual_nodes(ranks, options["rs_ranks_per_node"]),
                          options["rs_group_size"])
        if undecodable_groups(placement, failed):
            return ""
        return (f"RSBackup gave up after failures {sorted(failed)}, but every group keeps "
                f"k of its k + m blocks")
    return f"{protocol} gave up"


def level_problem(events, levels: list[str], ranks: int, options: dict) -> str:
    """What a finished run of a multi-level stack (``levels`` cheapest first) got wrong
    about its recovery levels ("" if nothing)."""
    standby_round: dict = {}  # position -> ranks that backed it up, since the last recovery
    failed, lost, named, tried, from_start = set(), set(), None, [], False
    for e in events:
        d = e.detail
        if e.kind == "backup" and not failed:
            standby_round.setdefault(tuple(d["position"]), set()).add(e.rank)
        elif e.kind == "recovery_start":
            from_start = False
        elif e.kind in ("recovery_line", "rs_recovery"):
            from_start = d["position"] is None  # the named level's line, when it has one
        elif e.kind == "failure_detected":
            failed.add(e.rank)
        elif e.kind == "level_exhausted":
            if d["level"] == levels[-1]:
                return f"the last level ({levels[-1]}) gave up, yet the run went on"
            tried.append(d["level"])
        elif e.kind == "recovery_level":
            named = d["level"]
            lost = set(d["failed"])  # the round's own (a rank may die as it ends)
        elif e.kind == "recovery_end":
            if named is None:
                return f"the recovery of ranks {sorted(failed)} names no level"
            survivors = set(range(ranks)) - lost
            rounds = sum(survivors <= done for done in standby_round.values())
            can = _levels_holding(lost, levels, ranks, options, backed_up=rounds >= 2)
            if can.get(named) is False and not from_start:
                return (f"level {named} recovered ranks {sorted(lost)}, which it cannot "
                        f"hold")
            cheaper = levels[:levels.index(named)]
            sure = [lv for lv in cheaper if can.get(lv)]
            if sure:
                return (f"level {named} recovered ranks {sorted(lost)}, but the cheaper "
                        f"level {sure[0]} holds them (it tried {tried or 'nothing'})")
            # a rank found failed during the round but not in it is the next round's
            standby_round, failed, named, tried = {}, failed - lost, None, []
            from_start = False
    return ""


def _levels_holding(failed: set[int], levels: list[str], ranks: int, options: dict, *,
                    backed_up: bool) -> dict[str, bool]:
    """For each level: True if it surely holds the loss of ``failed``, False if it
    surely cannot; absent when the timeline cannot tell."""
    can: dict[str, bool] = {}
    if "standby" in levels:
        from ftactors.protocols.standby.machine import partner
        if any(partner(r, ranks) in failed for r in failed):
            can["standby"] = False
        elif backed_up:  # without a spare, a new actor (below a costlier level)
            can["standby"] = True
    if "rs" in levels:
        from ftactors.protocols.rs.placement import place, undecodable_groups, virtual_nodes
        placement = place(virtual_nodes(ranks, options["rs_ranks_per_node"]),
                          options["rs_group_size"])
        if undecodable_groups(placement, failed):
            can["rs"] = False
    return can


def part_level_problem(events, levels: list[str], units, parity: int | None = None) -> str:
    """What a finished run of a stack whose levels keep the consistency protocol's parts
    (``levels`` cheapest first, that protocol last; ``units`` its groups or clusters;
    ``parity``: ``rs_parity``) got wrong about where its parts came from ("" if
    nothing)."""
    from ftactors.protocols.standby.machine import part_holder
    failed, sources, named = set(), {}, False
    given = set()  # (rank, holder): the holder's new life was given that rank's copies
    for e in events:
        d = e.detail
        if e.kind == "rs_parity_mixed":
            return (f"a parity block of unit {d['group']}'s part {d['position']} mixed two "
                    f"executions' encodings")
        if e.kind == "failure_detected":
            failed.add(e.rank)
            given = {(r, h) for r, h in given if h != e.rank}
        elif e.kind == "part_copies_restored":  # a cascade's earlier round gave them back
            given |= {(int(r), h) for r, h in d["holders"].items()}
        elif e.kind == "part_sources":
            sources = {int(r): s for r, s in d["sources"].items()}
        elif e.kind == "recovery_level":
            costliest = max((levels.index(s) for s in sources.values()),
                            default=len(levels) - 1)
            if d["level"] != levels[costliest]:
                return (f"the recovery of ranks {sorted(failed)} names level {d['level']}, "
                        f"but its parts came from {sources}")
            lost = [r for r, s in sources.items()
                    if s == "standby" and part_holder(units, r) in failed
                    and (r, part_holder(units, r)) not in given]
            if lost:
                return (f"the parts of ranks {lost} came from partner copies whose holders "
                        f"failed in that recovery ({sorted(failed)})")
            short = _undecodable_units(units, failed, parity,
                                       {r for r, s in sources.items() if s != "rs"})
            decoded = sorted(r for r in failed if sources.get(r) == "rs"
                             and units.group_of(r) in short)
            if decoded:
                return (f"the parts of ranks {decoded} came from RS blocks, but their units "
                        f"kept fewer than k blocks outside the failed ranks {sorted(failed)}")
            named = True
        elif e.kind == "recovery_end":
            if not named:
                return f"the recovery of ranks {sorted(failed)} names no level"
            failed, sources, named, given = set(), {}, False, set()
    return ""


def _undecodable_units(units, failed: set[int], parity: int | None,
                       restored: set[int] = frozenset()) -> set[int]:
    """Units with fewer than ``k`` blocks left: members outside ``failed`` or whose part
    a cheaper level ``restored`` (a partner copy is a data block too), and parity
    holders outside ``failed``."""
    from ftactors.protocols.rs.placement import unit_code, unit_holder
    short = set()
    for g, members in enumerate(units.groups):
        k, m = unit_code(units, g, parity)
        data = sum(x not in failed or x in restored for x in members)
        held = sum(unit_holder(units, g, j) not in failed for j in range(m))
        if data + held < k:
            short.add(g)
    return short
