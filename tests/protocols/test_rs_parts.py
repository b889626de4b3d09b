"""RSBackup encoding GroupCoordination's and DDVPiggyback's checkpoint parts (issue 17,
stacks 5 and 6): a unit's parity is held by the next unit, so one rank or a whole unit
is decoded; a unit lost with its parity holders falls to the object store; parity of the
execution a rollback abandoned is never used. Local and sim, results bit-identical to
the failure-free run."""
import pytest

import ftactors as ft
from ftactors.runtime._protocol import protocol_classes
from ftactors.protocols import DDVPiggyback, GroupCoordination, RSBackup, StandbyReplacement

from .programs import Heat1D
from .test_rs_backup import assert_same, reference


class EncodedGroups(RSBackup, GroupCoordination, Heat1D):
    pass


class EncodedClusters(RSBackup, DDVPiggyback, Heat1D):
    pass


class ThreeLevelGroups(RSBackup, StandbyReplacement, GroupCoordination, Heat1D):
    pass


class ThreeLevelClusters(RSBackup, StandbyReplacement, DDVPiggyback, Heat1D):
    pass


UNITS = {EncodedGroups: {"groups": "fixed:2", "group_checkpoint_interval": 3},
         EncodedClusters: {"clusters": "fixed:2"},
         ThreeLevelGroups: {"groups": "fixed:2", "group_checkpoint_interval": 3},
         ThreeLevelClusters: {"clusters": "fixed:2"}}
"""Units of two ranks: {0, 1}, {2, 3}, {4, 5}, {6, 7}; unit 1's parity is held by 4, 5."""
STACKS = pytest.mark.parametrize("cls", [EncodedGroups, EncodedClusters])
QUIET = pytest.mark.filterwarnings("ignore::UserWarning")  # Heat1D storms DDV's clusters
TRANSPORTS = pytest.mark.parametrize("transport", ["local", "sim"])


def run(cls, kills, transport="local", **options):
    r = ft.run(cls, ranks=8, transport=transport, kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=kills), **UNITS[cls], **options)
    assert_same(r.results, reference())
    return r


def levels(r) -> list[str]:
    return [e.detail["level"] for e in r.events_of("recovery_level")]


def sources(r) -> list[dict]:
    return [e.detail["sources"] for e in r.events_of("part_sources")]


def decoded(r) -> set[int]:
    return {rank for e in r.events_of("rs_decoded") for rank in e.detail["ranks"]}


def encoded_at(cls, transport, kills=()) -> dict:
    """When rank 2 is killed for unit 1's parts to be decodable (``Kill`` fields): on
    local in iteration 8 (13 after ``kills``, in its next life); on sim, where a kill at
    a safe point strikes just after a part DDV forced (its parity still on the wire), at
    a time found in a run with ``kills`` only (the same run until then): once the
    recovery of ``kills`` is well over, when unit 1's newest parts are encoded at both
    holders and no newer part is begun."""
    if transport == "local":
        return {"iteration": 8} if not kills else {"iteration": 13, "incarnation": 1}
    r = ft.run(cls, ranks=8, transport="sim", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=kills), **UNITS[cls])
    begun = min(e.time for e in r.events_of("recovery_end")) if kills else 0.0
    done: dict = {}
    for e in r.events_of("rs_parity"):
        if e.detail["group"] == 1 and e.time > begun:
            done.setdefault(e.detail["position"], []).append(e.time)
    parts = sorted((e.time, e.detail["position"]) for e in r.events_of("rs_encoded")
                   if e.rank in (2, 3) and e.time > begun)
    for key, times in sorted(done.items(), key=lambda kv: max(kv[1])):
        nxt = [t for t, k in parts if k > key]
        if len(times) == 2 and nxt and min(nxt) > max(times) and max(times) > begun * 1.2:
            return {"time_s": (max(times) + min(nxt)) / 2}
    raise AssertionError("no quiet moment for unit 1")


def unit_lost(cls, transport, *ranks) -> list:
    """Rank 2 (unit 1) killed, ``ranks`` as its recovery starts."""
    return [ft.Kill(2, **encoded_at(cls, transport)),
            *(ft.Kill(x, recovery_round=0) for x in ranks)]


@QUIET
@STACKS
@TRANSPORTS
def test_one_rank_killed_is_decoded(cls, transport):
    r = run(cls, unit_lost(cls, transport), transport)
    assert levels(r) == ["rs"]
    assert set(sources(r)[0].values()) == {"rs"} and 2 in decoded(r)
    assert not r.events_of("rs_parity_mixed")


@QUIET
@STACKS
@TRANSPORTS
def test_a_whole_unit_is_decoded_from_the_next_units_parity(cls, transport):
    r = run(cls, unit_lost(cls, transport, 3), transport)
    assert levels(r) == ["rs"]
    rebuilt = [e.detail for e in r.events_of("rs_decoded") if e.detail["group"] == 1]
    assert rebuilt[-1]["ranks"] == [2, 3] and rebuilt[-1]["blocks"] == [2, 3]  # parity only


def own(cls) -> str:
    """The stack's consistency protocol: its object-store copy is the last level."""
    return next(p.protocol_name for p in protocol_classes(cls) if p.hands_parts)


@QUIET
@STACKS
@TRANSPORTS
def test_a_unit_lost_with_its_parity_holders_falls_to_the_object_store(cls, transport):
    r = run(cls, unit_lost(cls, transport, 3, 4, 5), transport)
    assert levels(r) == [own(cls)]  # groups / hc3i
    assert {sources(r)[-1][x] for x in (2, 3)} == {levels(r)[0]}


@QUIET
@STACKS
@TRANSPORTS
def test_parity_of_an_abandoned_execution_is_never_used(cls, transport):
    """Unit 1 rolled back, then killed again after it checkpointed again: the second
    decode uses the new execution's parity only."""
    first = unit_lost(cls, transport)
    again = ft.Kill(2, **encoded_at(cls, transport, first))
    r = run(cls, [*first, again], transport)
    assert levels(r) == ["rs", "rs"]
    assert not r.events_of("rs_parity_mixed")  # no block of one key XORed in twice


@QUIET
def test_parity_of_a_cascade_rolled_back_cluster_is_dropped():
    """Rank 2's failure rolls cluster 2 back past parts whose parity its holders had
    complete; cluster 2 makes them again under the same keys, and rank 4 is killed
    later. Without the drop (``forget``) two parity blocks mix both executions."""
    r = run(EncodedClusters, [(2, 6), ft.Kill(4, iteration=7, incarnation=1)])
    assert levels(r) == ["rs", "rs"] and not r.events_of("rs_parity_mixed")
    dropped = [tuple(b) for e in r.events_of("rs_parity_dropped") for b in e.detail["blocks"]]
    assert (2, 0, 27) in dropped and (2, 1, 27) in dropped  # cluster 2's CLC 27, made again


@QUIET
@pytest.mark.parametrize("cls", [ThreeLevelGroups, ThreeLevelClusters])
def test_three_levels_partner_copies_then_blocks_then_the_object_store(cls):
    # rank 2 with rank 4, which holds its partner copy: 2 is decoded, 4 has its copy at 6
    r = run(cls, unit_lost(cls, "local", 4), spares=2)
    assert levels(r) == ["rs"] and sources(r)[-1][2] == "rs"
    assert sources(r)[-1][4] == "standby"
    # unit 1 with both its partner-copy and parity holders: the object store
    r = run(cls, unit_lost(cls, "local", 3, 4, 5), spares=2)
    assert levels(r) == [own(cls)]
    assert {sources(r)[-1][x] for x in (2, 3)} == {levels(r)[0]}


@pytest.mark.parametrize("option", [{"rs_interval": 3}, {"rs_group_size": 2},
                                    {"rs_ranks_per_node": 2}, {"rs_stable_store": "/tmp/x"}])
def test_own_round_options_are_refused(option):
    with pytest.raises(ft.ConfigError, match=f"{next(iter(option))}.*RSBackup's own rounds, "
                                             f"which it does not take in a stack with "
                                             f"GroupCoordination"):
        ft.run(EncodedGroups, ranks=8, transport="local", **UNITS[EncodedGroups], **option)


def test_with_one_unit_its_members_hold_its_parity():
    """No next unit: member j holds parity j, so a rank's loss is decoded."""
    r = ft.run(EncodedGroups, ranks=4, transport="local", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(2, 8)]), groups="one", group_checkpoint_interval=3)
    assert_same(r.results, reference(4))
    assert levels(r) == ["rs"] and decoded(r) == {2}


@QUIET
@STACKS
def test_ranks_respawned_by_an_aborted_round_are_not_asked(cls):
    """Rank 5 dies as the recovery of rank 0 begins: the next round finds unit 0
    respawned, not started yet (it holds nothing and answers no call)."""
    r = run(cls, [(0, 5), ft.Kill(5, recovery_round=0)], spares=2)
    assert levels(r) == ["rs"]
