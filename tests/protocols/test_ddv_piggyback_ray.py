"""DDVPiggyback on real Ray actors: the coupled two-module app with one cluster per module
survives a SIGKILL in each cluster and verifies; the rollbacks are exactly the ones the
alert cascade decided (a cluster that did not depend on the failed one kept running)."""
import pytest

import ftactors as ft
from ftactors.apps.coupled import Coupled
from ftactors.protocols import DDVPiggyback

pytestmark = pytest.mark.ray


class HCoupled(DDVPiggyback, Coupled):
    pass


KW = {"ny": 32, "nx": 64, "iterations": 40, "couple_every": 5, "left_ranks": 2}
CLUSTERS = [[0, 1], [2, 3]]  # one per module


@pytest.mark.parametrize("victim, at", [(1, 23), (2, 31)], ids=["left", "right"])
def test_coupled_app_survives_a_kill_in_each_cluster(ray_session, victim, at):
    r = ft.run(HCoupled, 4, transport="ray", kwargs=KW, clusters=CLUSTERS,
               clc_interval_s=0.2, chaos=ft.Chaos(kill=[(victim, at)]), timeout_s=180)
    assert all(x["verified"] for x in r.results)
    rolled = {e.detail["cluster"]: e.detail["failed"] for e in r.events_of("hc3i_rollback")}
    assert rolled[victim // 2] is True
    # the timeline: a cluster rolled back iff an alert reached it, and only its ranks
    # were restarted; the other cluster's ranks never restarted
    reached = {e.detail["cluster"] for e in r.events_of("hc3i_alert")
               if e.detail["rolled_back_to"] is not None}
    assert set(rolled) == reached | {victim // 2}
    restored = {e.rank for e in r.events_of("restored")}
    assert restored == {x for k in rolled for x in CLUSTERS[k]}
    assert r.events_of("hc3i_commit")  # CLCs were taken (forced by the couplings, or timed)
