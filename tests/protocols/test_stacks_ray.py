"""Multi-level stacks on real Ray actors: SIGKILLed ranks are recovered from the cheapest
level that holds them, and CG's answers stay equal bit for bit."""
import pytest

import ftactors as ft
from ftactors.apps.cg import CG
from ftactors.protocols import (GroupCoordination, ReadyMessageFlush, RSBackup,
                                StandbyReplacement)

pytestmark = pytest.mark.ray


class PartnerStableCG(StandbyReplacement, ReadyMessageFlush, CG):
    backup_interval = 2


class ThreeLevelCG(RSBackup, StandbyReplacement, ReadyMessageFlush, CG):
    backup_interval = 2


class GroupsOnSparesCG(StandbyReplacement, GroupCoordination, CG):
    pass


@pytest.fixture(scope="module")
def cg_reference():
    return ft.run(CG, ranks=4, transport="local", kwargs={"problem_class": "S"}).results


def run(cls, tmp_path, kills, **options):
    if issubclass(cls, ReadyMessageFlush):
        options.update(checkpoint_interval=5, checkpoint_storage="stable",
                       checkpoint_dir=str(tmp_path / "stable"))
    return ft.run(cls, ranks=4, spares=4, transport="ray", kwargs={"problem_class": "S"},
                  chaos=ft.Chaos(kill=kills, method="sigkill"), timeout_s=240, **options)


def same(r, reference) -> bool:
    return all(got["verified"] and got["zetas"] == want["zetas"]
               for got, want in zip(r.results, reference))


def levels(r) -> list[str]:
    return [e.detail["level"] for e in r.events_of("recovery_level")]


def test_partner_copies_then_the_global_set(ray_session, cg_reference, tmp_path):
    # rank 1 alone, then partners 0 <-> 2 together
    r = run(PartnerStableCG, tmp_path, [(1, 4), (0, 9), ft.Kill(2, recovery_round=1)])
    assert same(r, cg_reference)
    assert levels(r) == ["standby", "ready_flush"]
    assert [e.detail["level"] for e in r.events_of("level_exhausted")] == ["standby"]


def test_three_levels_each_recover_what_the_cheaper_ones_lost(ray_session, cg_reference,
                                                              tmp_path):
    # groups (0, 1) and (2, 3), each one's parity held by the other; partners 0-2, 1-3;
    # a round that a failure restarts counts again (round 1 restarts as round 2); an
    # iteration kill strikes the first incarnation only, so the last one is rank 3's
    kills = [(1, 3),                                        # a partner copy
             (0, 7), ft.Kill(2, recovery_round=1),          # a partner pair: RS decodes
             (3, 12), ft.Kill(2, recovery_round=3),         # group 1 and a holder of its
             ft.Kill(1, recovery_round=3)]                  # parity: the global set
    r = run(ThreeLevelCG, tmp_path, kills, rs_group_size=2, rs_interval=3)
    assert same(r, cg_reference)
    assert levels(r) == ["standby", "rs", "ready_flush"]
    assert [e.detail["level"] for e in r.events_of("level_exhausted")] == [
        "standby", "standby", "rs"]


def test_a_failed_group_comes_back_on_spares_from_partner_copies(ray_session, cg_reference,
                                                                 tmp_path):
    # groups (0, 1) and (2, 3) hold each other's copies: 0 <-> 2, 1 <-> 3
    kills = [(1, 7),                                  # group 0 from partner copies
             (2, 11), ft.Kill(0, recovery_round=1)]   # a pair: both from the object store
    r = run(GroupsOnSparesCG, tmp_path, kills, groups="fixed:2", group_checkpoint_interval=3)
    assert same(r, cg_reference)
    assert levels(r) == ["standby", "groups"]
    sources = [e.detail["sources"] for e in r.events_of("part_sources")]
    assert sources[0] == {0: "standby", 1: "standby"}
    assert sources[-1] == {0: "groups", 1: "standby", 2: "groups", 3: "standby"}
    assert all(e.detail["warm"] for e in r.events_of("respawned")[:4])  # on spares
