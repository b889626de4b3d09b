"""ReadyMessageFlush on real Ray actors: SIGKILLed ranks, every rank restarted in a new
actor from the object store's checkpoint, answers equal bit for bit."""
import asyncio

import numpy as np
import pytest

import ftactors as ft
from ftactors.apps.cg import CG
from ftactors.apps.hpl import HPL
from ftactors.protocols import ReadyMessageFlush

pytestmark = pytest.mark.ray


class RFCG(ReadyMessageFlush, CG):
    pass


class RFHPL(ReadyMessageFlush, HPL):
    pass


HPL_KW = {"n": 160, "nb": 16, "p": 2, "q": 2}


@pytest.fixture(scope="module")
def cg_reference():
    return ft.run(CG, ranks=4, transport="local", kwargs={"problem_class": "S"}).results


def rollbacks(r):
    return [e.detail["position"] and tuple(e.detail["position"]) for e in r.events_of("rollback")]


# a kill between checkpoints is the HPL test's below (and test_stacks_ray's global set)
@pytest.mark.parametrize("kill, line", [((2, 9), (0, 6))], ids=["during-checkpoint"])
def test_cg_restarts_every_rank_from_the_last_complete_checkpoint(
        ray_session, cg_reference, kill, line):
    r = ft.run(RFCG, ranks=4, transport="ray", kwargs={"problem_class": "S"},
               checkpoint_interval=3, chaos=ft.Chaos(kill=[kill]), timeout_s=180)
    assert rollbacks(r) == [line]
    assert sorted(e.rank for e in r.events_of("respawned")) == [0, 1, 2, 3]
    for got, want in zip(r.results, cg_reference):
        assert got["verified"] and got["zetas"] == want["zetas"]


def test_hpl_restarts_in_its_second_loop(ray_session):
    plain = ft.run(HPL, ranks=4, transport="local", kwargs=HPL_KW).results
    # 10 panels (loop 0), then the solve's 10 steps (loop 1): the first kill strikes at
    # panel 9, the restarted rank 3 dies again at step 5 of the solve
    chaos = ft.Chaos(kill=[(3, 9), ft.Kill(3, iteration=5, incarnation=1)])
    r = ft.run(RFHPL, ranks=4, transport="ray", kwargs=HPL_KW, checkpoint_interval=4,
               chaos=chaos, timeout_s=180)
    assert rollbacks(r) == [(0, 8), (1, 4)]
    assert all(x["verified"] for x in r.results)
    assert np.array_equal(r.results[0]["x"], plain[0]["x"])


def test_driver_checkpoint_kept_in_the_object_store_survives_the_rank(ray_session,
                                                                      cg_reference):
    """The only checkpoint is the driver's: rank 0, killed after it, comes back from it.
    (The kill was at 4 s, after CG S had ended: it never fired, and nothing was tested.)"""
    async def go():
        run = await ft.launch(RFCG, 4, transport="ray", kwargs={"problem_class": "S"},
                              chaos=ft.Chaos(kill=[(0, 12)]), timeout_s=180)
        info = await run.checkpoint()
        return info, await run

    with pytest.warns(ft.NoCheckpointWarning):  # no interval: the driver's request only
        info, r = asyncio.run(go())
    assert info["bytes"] > 0 and 1 <= info["position"][1] < 12
    assert r.metrics["kills_unfired"] == []
    assert rollbacks(r) == [tuple(info["position"])]
    for got, want in zip(r.results, cg_reference):
        assert got["zetas"] == want["zetas"]


def test_warm_spares_take_every_rank_and_a_second_restart_works(ray_session, cg_reference):
    """The first restart promotes the four warm spares; they are refilled in the
    background (whether in time for the second restart depends on timing, so the second
    round is not asserted warm)."""
    chaos = ft.Chaos(kill=[(1, 4), ft.Kill(3, iteration=11, incarnation=1)])
    r = ft.run(RFCG, ranks=4, spares=4, transport="ray", kwargs={"problem_class": "S"},
               checkpoint_interval=3, chaos=chaos, timeout_s=180)
    assert rollbacks(r) == [(0, 3), (0, 9)]
    respawned = r.events_of("respawned")
    assert len(respawned) == 8 and all(e.detail["warm"] for e in respawned[:4])
    for got, want in zip(r.results, cg_reference):
        assert got["zetas"] == want["zetas"]


def test_cg_group_restart_leaves_the_other_group_running(ray_session, cg_reference):
    from ftactors.protocols import GroupCoordination

    class GCG(GroupCoordination, CG):
        pass

    r = ft.run(GCG, ranks=4, transport="ray", kwargs={"problem_class": "S"},
               groups="fixed:2", group_checkpoint_interval=3,
               chaos=ft.Chaos(kill=[(1, 7)]), timeout_s=180)
    assert sorted(e.rank for e in r.events_of("respawned")) == [0, 1]
    assert sorted(e.rank for e in r.events_of("restored")) == [0, 1]
    for got, want in zip(r.results, cg_reference):
        assert got["verified"] and got["zetas"] == want["zetas"]
