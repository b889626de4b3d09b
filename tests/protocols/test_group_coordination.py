"""GroupCoordination (group-based checkpoint/restart): only the failed group rolls back,
inter-group messages are resent from the senders' logs exactly, logs stay bounded."""
import asyncio

import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols import GroupCoordination
from ftactors.transports.local import LocalFabric

from .programs import FLOOD, Flood, Heat1D, ranks_of


class GFlood(GroupCoordination, Flood):
    pass


class GHeat(GroupCoordination, Heat1D):
    pass


@pytest.mark.parametrize("transport, seed", [("local", 0), ("sim", 1), ("sim", 2), ("sim", 3)])
def test_only_the_failed_group_rolls_back(transport, seed, flood_reference):
    """Rank 3 dies: its group {2, 3} restarts from its checkpoint at 4; ranks 0, 1, 4, 5
    never restart, and resend from their logs what 2 and 3 had not received. Every
    message's identity and order is checked by the program."""
    r = ft.run(GFlood, 6, transport=transport, seed=seed, kwargs=FLOOD, groups="fixed:2",
               group_checkpoint_interval=4, chaos=ft.Chaos(kill=[(3, 6)]), timeout_s=60,
               sim_jitter_s=2e-5)
    assert [x["digest"] for x in r.results] == [x["digest"] for x in flood_reference(6)]
    assert ranks_of(r, "respawned") == [2, 3] and ranks_of(r, "restored") == [2, 3]
    (rollback,) = r.events_of("group_rollback")
    assert rollback.detail["groups"] == [1] and rollback.detail["positions"] == {1: (0, 4)}
    assert r.events_of("group_resumed")[0].detail["resent"] > 0
    # skip: the restarted ranks were told what each survivor holds and sent none of it
    # again; the resends stop at the fence; the group's checkpoint is an exact cut
    skips = {e.rank: e.detail["upto"] for e in r.events_of("group_skip")}
    assert sorted(skips) == [2, 3] and all(set(s) == {0, 1, 4, 5} for s in skips.values())
    assert sum(e.detail["messages"] for e in r.events_of("group_skipped")) > 0
    assert r.metrics["duplicates_dropped"] == 0
    assert ranks_of(r, "group_caught_up") == [2, 3]


def test_two_groups_fail_together_and_resend_to_each_other(flood_reference):
    r = ft.run(GFlood, 6, transport="local", kwargs=FLOOD, groups="fixed:2",
               group_checkpoint_interval=4, chaos=ft.Chaos(kill=[(0, 7), (5, 7)]), timeout_s=60)
    assert [x["digest"] for x in r.results] == [x["digest"] for x in flood_reference(6)]
    # one round, or two when the second death is found during the first round's resend
    assert set(ranks_of(r, "respawned")) == {0, 1, 4, 5}


def test_groups_checkpoint_on_their_own_intervals(flood_reference):
    r = ft.run(GFlood, 6, transport="sim", kwargs=FLOOD, groups="fixed:2",
               group_checkpoint_interval={0: 3, 1: 5}, chaos=ft.Chaos(kill=[(1, 8)]))
    taken = sorted((e.detail["group"], tuple(e.detail["position"]))
                   for e in r.events_of("group_checkpoint"))
    # group 0 every 3 (restarted from 6, it goes on to 9), group 1 every 5; group 2
    # has no interval and never checkpoints
    assert {g for g, _ in taken} == {0, 1}
    assert {p[1] for g, p in taken if g == 0} == {3, 6, 9}
    assert {p[1] for g, p in taken if g == 1} == {5, 10}
    assert ranks_of(r, "respawned") == [0, 1]
    assert [x["digest"] for x in r.results] == [x["digest"] for x in flood_reference(6)]


def test_logs_are_collected_and_stay_bounded_over_a_long_run():
    """A ring split in groups of two: every rank sends one inter-group message per
    iteration (and allreduce traffic). With a checkpoint every 10 iterations the logs
    hold about one interval's messages, whatever the length of the run."""
    r = ft.run(GHeat, 6, transport="sim", kwargs={"iterations": 300}, groups="fixed:2",
               group_checkpoint_interval=10)
    sizes = [e.detail["log_messages"] for e in r.events_of("group_checkpoint_part")]
    early, late = max(sizes[:len(sizes) // 3]), max(sizes[-len(sizes) // 3:])
    assert late <= early * 1.5, (early, late)
    assert r.metrics["sent"] > 10 * late


def test_a_group_without_a_checkpoint_restarts_from_the_start(flood_reference):
    r = ft.run(GFlood, 6, transport="local", kwargs=FLOOD, groups="fixed:3",
               chaos=ft.Chaos(kill=[(4, 5)]))
    assert r.events_of("group_rollback")[0].detail["positions"] == {1: None}
    assert ranks_of(r, "respawned") == [3, 4, 5]
    assert [x["digest"] for x in r.results] == [x["digest"] for x in flood_reference(6)]


def test_heat_verifies_after_a_group_restart():
    reference = ft.run(Heat1D, 8, transport="local", kwargs={"iterations": 60}).results
    r = ft.run(GHeat, 8, transport="sim", kwargs={"iterations": 60},
               group_checkpoint_interval=7, chaos=ft.Chaos(kill=[(5, 40)]))
    assert ranks_of(r, "respawned") == [3, 4, 5]  # default: groups of ceil(sqrt(8)) = 3
    for got, want in zip(r.results, reference):
        assert np.array_equal(got["u"], want["u"]) and got["norms"] == want["norms"]


@pytest.mark.parametrize("bad, message", [
    ({"group_checkpoint_interval": 0}, "group_checkpoint_interval"),
    ({"group_checkpoint_interval": {0: "x"}}, "group_checkpoint_interval"),
    ({"groups": [[0, 1], [1, 2, 3]]}, "rank"),
])
def test_bad_settings_fail_before_anything_starts(bad, message):
    with pytest.raises(ft.ConfigError, match=message):
        ft.run(GHeat, 4, transport="local", kwargs={"iterations": 5}, **bad)


@pytest.fixture(scope="module")
def hpl_reference():
    from ftactors.apps.hpl import HPL
    return ft.run(HPL, 8, transport="local", kwargs=HPL_KW).results


HPL_KW = {"n": 96, "nb": 8, "p": 2, "q": 4}


def test_hpl_verifies_after_a_process_column_restarts(hpl_reference):
    """HPL on a 2 x 4 grid, groups = process columns (what Algorithm 2 finds on our HPL's
    traces): a kill restarts one column; the solution is bit-identical to the failure-free
    run, and the other columns never restart."""
    from ftactors.apps.hpl import HPL

    class GHPL(GroupCoordination, HPL):
        pass

    columns = [[0, 4], [1, 5], [2, 6], [3, 7]]
    r = ft.run(GHPL, 8, transport="sim", kwargs=HPL_KW, groups=columns,
               group_checkpoint_interval=2, chaos=ft.Chaos(kill=[(5, 5)]), timeout_s=120)
    assert ranks_of(r, "respawned") == [1, 5] and ranks_of(r, "restored") == [1, 5]
    assert all(x["verified"] for x in r.results)
    for got, want in zip(r.results, hpl_reference):
        assert got["fingerprint"] == want["fingerprint"]
    assert np.array_equal(r.results[0]["x"], hpl_reference[0]["x"])


def test_stencil_verifies_after_a_block_restarts():
    """The 2-D stencil on a 4 x 2 grid in 2 x 2 blocks of neighbours: a kill restarts one
    block, the grid is bit-identical to the single-process reference."""
    from ftactors.apps.stencil import Stencil

    class GStencil(GroupCoordination, Stencil):
        pass

    kw = {"ny": 32, "nx": 32, "iterations": 30}
    r = ft.run(GStencil, 8, transport="sim", kwargs=kw, group_checkpoint_interval=4,
               groups=[[0, 1, 2, 3], [4, 5, 6, 7]], chaos=ft.Chaos(kill=[(6, 17)]))
    assert ranks_of(r, "respawned") == [4, 5, 6, 7]
    assert r.events_of("group_rollback")[0].detail["positions"] == {1: (0, 16)}
    assert all(x["verified"] for x in r.results)


def test_a_member_lost_before_its_part_is_taken_restarts_its_group_from_the_set_before(
        monkeypatch, flood_reference):
    """A member goes on once its part is reported, without waiting for the coordinator to
    take it. Rank 3's part of the checkpoint at 8 is held back here and rank 3 dies at 9:
    that set is incomplete, so group {2, 3} restarts from its set at 4, and nothing is
    lost or duplicated (the survivors' logs still reach back to 4)."""
    real = LocalFabric.call_kept

    async def held_back(self, host, name, *args):
        if (name == "group_part" and (host.spec.rank, host.spec.incarnation) == (3, 0)
                and tuple(args[0]) == (0, 8)):
            await asyncio.get_running_loop().create_future()  # never taken
        return await real(self, host, name, *args)

    monkeypatch.setattr(LocalFabric, "call_kept", held_back)
    r = ft.run(GFlood, 6, transport="local", kwargs=FLOOD, groups="fixed:2",
               group_checkpoint_interval=4, chaos=ft.Chaos(kill=[(3, 9)]), timeout_s=60)
    assert [x["digest"] for x in r.results] == [x["digest"] for x in flood_reference(6)]
    (rollback,) = r.events_of("group_rollback")
    assert rollback.detail["positions"] == {1: (0, 4)}
    assert {tuple(e.detail["position"]) for e in r.events_of("group_checkpoint_part")
            if e.rank == 3} >= {(0, 4), (0, 8)}
    assert r.metrics["duplicates_dropped"] == 0


def test_a_group_that_fails_while_a_restarted_one_runs_again_gets_no_message_twice():
    """Group 2 restarts from the start and runs again below the messages group 0 holds
    from its old life; group 0 fails then, and restores a part that holds more from
    group 2 than group 2 has sent again: group 2 must skip those when it gets there, not
    send them again (sim-check seed 109 found 21 such duplicates: orphans of the line;
    seed 100 makes that order since the first message to a peer leaves as it is sent;
    the first assertion says the order is the one meant)."""
    options = dict(groups="fixed:2", group_checkpoint_interval=3, sim_jitter_s=2e-5)
    first = ft.run(GFlood, 6, transport="sim", seed=100, kwargs={"iterations": 9, "per_peer": 2},
                   chaos=ft.Chaos(kill=[(4, 3)]), **options)
    end = first.events_of("recovery_end")[0].time
    saved = next(e.time for e in first.events_of("group_checkpoint")
                 if e.time > end and e.detail["group"] == 0)
    caught_up = next(e.time for e in first.events_of("group_caught_up") if e.rank == 4)
    assert saved < caught_up  # group 0 saved more from group 2 than it has sent again
    r = ft.run(GFlood, 6, transport="sim", seed=100, kwargs={"iterations": 9, "per_peer": 2},
               chaos=ft.Chaos(kill=[(4, 3)], kill_at=[(0, (saved + caught_up) / 2)]), **options)
    plain = ft.run(Flood, 6, transport="sim", kwargs={"iterations": 9, "per_peer": 2})
    assert r.metrics["recoveries"] == 2
    assert r.metrics["duplicates_dropped"] == 0
    assert r.results == plain.results
