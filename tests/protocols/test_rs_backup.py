"""RSBackup: recovery planning, and runs on local/sim where ranks, groups and virtual
nodes die and the results stay bit-identical to the failure-free run."""
import numpy as np
import pytest

import ftactors as ft
from ftactors.base._storage import latest_complete, open_store
from ftactors.apps.cg import CG
from ftactors.apps.hpl import HPL
from ftactors.protocols.rs.erasure import RSCode
from ftactors.protocols import PROTOCOLS, RSBackup, StandbyReplacement
from ftactors.protocols.rs.machine import RecoveryPlan, Undecodable, choose_recovery
from ftactors.protocols.rs.stable import rebuild_part
from ftactors.protocols.rs.placement import place, undecodable_groups, virtual_nodes

from .programs import Flood, Heat1D


class RSHeat(RSBackup, Heat1D):
    pass


class RSFlood(RSBackup, Flood):
    pass


class RSCG(RSBackup, CG):
    pass


class RSHPL(RSBackup, HPL):
    pass


# 8 ranks on 4 virtual nodes of 2, groups of 2: sectors {n0, n1}, {n2, n3};
# ring G0 = (0, 2), G1 = (4, 6), G2 = (1, 3), G3 = (5, 7)
TOPOLOGY = {"rs_group_size": 2, "rs_ranks_per_node": 2, "rs_interval": 3,
            "rs_block_bytes": 512}
PLACEMENT = place(virtual_nodes(8, 2), 2)


def heat(ranks=8, iterations=20, **kw):
    kw = {**TOPOLOGY, **kw}
    return ft.run(RSHeat, ranks=ranks, transport=kw.pop("transport", "local"),
                  kwargs={"iterations": iterations}, **kw)


_REF = {}


def reference(ranks=8, iterations=20):
    key = (ranks, iterations)
    if key not in _REF:
        _REF[key] = ft.run(Heat1D, ranks=ranks, transport="local",
                           kwargs={"iterations": iterations}).results
    return _REF[key]


def assert_same(results, ref):
    for got, want in zip(results, ref):
        assert got["norms"] == want["norms"]
        assert np.array_equal(got["u"], want["u"])


def decoded(r):
    """``{rank rebuilt: (group, blocks used)}`` from the timeline."""
    return {rank: (e.detail["group"], e.detail["blocks"])
            for e in r.events_of("rs_decoded") for rank in e.detail["ranks"]}


# ------------------------------------------------------------------ planning
def inv(own=(), held=()):
    return {"own": list(own), "held": list(held)}


def test_plan_decodes_lost_data_and_reencodes_lost_parity():
    p, a, b = PLACEMENT, (0, 3), (0, 6)
    assert p.groups == ((0, 2), (4, 6), (1, 3), (5, 7))
    everything = {r: inv([a, b], [(g, j, rnd) for g, j in p.held_by(r) for rnd in (a, b)])
                  for r in range(8)}
    failed = {0, 1}  # node 0: member 0 of G0 and of G2; holders of G3's and G1's parity 0
    plan = choose_recovery(p, failed, {r: v for r, v in everything.items() if r not in failed})
    assert plan.round == b
    assert plan.decode == {0: {"lost": [0], "sources": {1: 2, 2: 4}},
                           2: {"lost": [0], "sources": {1: 3, 2: 5}}}
    assert plan.reencode == {3: [0], 1: [0]}


def test_plan_falls_back_to_the_older_round_when_the_newest_is_incomplete():
    p, a, b = PLACEMENT, (0, 3), (0, 6)
    invs = {r: inv([a, b], [(g, j, a) for g, j in p.held_by(r)]) for r in range(8)}
    # round b was being encoded: no parity of it anywhere, and rank 0's data is lost
    plan = choose_recovery(p, {0}, {r: v for r, v in invs.items() if r != 0})
    assert plan.round == a and list(plan.decode) == [0]


def test_plan_whole_group_from_its_neighbours_parity():
    p, a = PLACEMENT, (0, 3)
    invs = {r: inv([a], [(g, j, a) for g, j in p.held_by(r)]) for r in range(8)}
    plan = choose_recovery(p, {4, 6}, {r: v for r, v in invs.items() if r not in (4, 6)})
    assert plan.decode == {1: {"lost": [0, 1], "sources": {2: 1, 3: 3}}}  # parity only
    assert plan.reencode == {0: [0, 1]}  # G0's parity was held by G1


def test_plan_beyond_reach_and_before_any_commit():
    p, a = PLACEMENT, (0, 3)
    invs = {r: inv([a], [(g, j, a) for g, j in p.held_by(r)]) for r in range(8)}
    dead = {0, 2, 4}  # all of G0 and one holder of its parity
    with pytest.raises(Undecodable) as info:
        choose_recovery(p, dead, {r: v for r, v in invs.items() if r not in dead})
    assert info.value.groups == [0] and info.value.round == a
    no_parity = {r: inv([a]) for r in range(8) if r not in dead}  # first encoding cut short
    assert choose_recovery(p, dead, no_parity) == RecoveryPlan(None)
    # rank 6 dies as the first round is encoded: the other groups' parity is complete,
    # G1's live holders hold none of it, so no round was committed (sim-check rs 5724)
    cut = {r: inv([a], [(g, j, a) for g, j in p.held_by(r) if g != 1])
           for r in range(8) if r != 6}
    assert choose_recovery(p, {6}, cut) == RecoveryPlan(None)


# ---------------------------------------------------------------- failure-free
def test_failure_free_run_encodes_every_round_on_the_ring():
    r = heat()
    assert_same(r.results, reference())
    placement = r.events_of("rs_placement")[0].detail
    assert placement["groups"] == [list(g) for g in PLACEMENT.groups]
    assert placement["sectors"] == [0, 1, 0, 1] and placement["virtual"] is True
    parity = {(e.detail["position"], e.detail["group"], e.detail["parity"]): e.rank
              for e in r.events_of("rs_parity")}
    rounds = [(0, i) for i in (3, 6, 9, 12, 15, 18)]
    assert sorted(parity) == sorted((rnd, g, j) for rnd in rounds for g in range(4)
                                    for j in range(2))
    for (_, g, j), holder in parity.items():
        assert holder == PLACEMENT.holder(g, j)
        assert holder not in PLACEMENT.groups[g]
    enc = r.events_of("rs_encoded")
    assert {e.detail["blocks"] for e in enc} == {-(-e.detail["bytes"] // 512) for e in enc}
    assert min(e.detail["blocks"] for e in enc) > 1  # cut into blocks of z bytes


def test_star_order_is_ring_shifted():
    r = heat(iterations=4, rs_group_size=4, rs_ranks_per_node=1)  # groups of 4, m = 4
    for e in r.events_of("rs_encoded"):
        g, i = PLACE4.group_of(e.rank)
        assert e.detail["parities"] == [(i + s) % 4 for s in range(1, 5)]


PLACE4 = place(virtual_nodes(8, 1), 4)


# ----------------------------------------------------------------- fast recovery
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_one_rank_rebuilt_from_its_group_and_parity(transport):
    r = heat(spares=1, transport=transport, chaos=ft.Chaos(kill=[(6, 10)]))
    assert_same(r.results, reference())
    assert decoded(r) == {6: (1, [0, 2])}  # member 0 (rank 4) and G1's parity 0 (rank 1)
    rec = r.events_of("rs_recovery")[0].detail
    assert rec["position"] == (0, 9) and rec["source"] == "memory"
    assert rec["reencode"] == {0: [1]}  # rank 6 held parity 1 of G0
    t = r.events_of("rs_recovery")[0].time
    again = [(e.rank, e.detail["parity"]) for e in r.events_of("rs_parity")
             if e.time > t and e.detail["position"] == (0, 9)]
    assert again == [(6, 1)]  # G0's parity 1 rebuilt at the replacement, nothing else


@pytest.mark.parametrize("transport", ["local", "sim"])
def test_whole_group_rebuilt_from_the_next_groups_parity(transport):
    # rank 3 dies as the recovery of rank 1 starts: both are lost together
    r = heat(spares=2, transport=transport,
             chaos=ft.Chaos(kill=[(1, 8), ft.Kill(3, recovery_round=0)]))
    assert_same(r.results, reference())
    assert decoded(r) == {1: (2, [2, 3]), 3: (2, [2, 3])}  # parity blocks only
    assert r.events_of("rs_recovery")[0].detail["reencode"] == {1: [0, 1]}


def test_whole_virtual_node_and_two_nodes_of_different_sectors():
    r = heat(spares=2, chaos=ft.Chaos(kill=[(2, 11), (3, 11)]))  # node 1
    assert_same(r.results, reference())
    assert set(decoded(r)) == {2, 3}
    r = heat(spares=4, chaos=ft.Chaos(kill=[(0, 7), (1, 7), (4, 7), (5, 7)]))  # nodes 0, 2
    assert_same(r.results, reference())
    assert set(decoded(r)) == {0, 1, 4, 5}
    assert r.events_of("rs_recovery")[0].detail["source"] == "memory"


def test_no_spares_respawns_and_a_second_failure_uses_the_reencoded_parity():
    r = heat(chaos=ft.Chaos(kill=[(4, 7), ft.Kill(2, iteration=8)]))
    assert_same(r.results, reference())
    assert r.metrics["recoveries"] == 2
    assert [e.detail["warm"] for e in r.events_of("respawned")] == [False, False]
    assert set(decoded(r)) == {4, 2}


def test_sim_runs_with_a_failure_replay_exactly_from_the_seed():
    def timeline():
        r = heat(spares=1, transport="sim", seed=3, sim_jitter_s=1e-4,
                 chaos=ft.Chaos(kill=[(6, 10)]))
        # *_s details are wall-clock measurements (flush, encode, decode times)
        return [(e.time, e.kind, e.rank, {k: v for k, v in e.detail.items()
                                          if not k.endswith("_s")}) for e in r.events]
    first = timeline()
    assert any(kind == "rs_decoded" for _, kind, _, _ in first)
    assert timeline() == first


def test_failure_while_encoding_restores_the_previous_round():
    class Slow(RSHeat):
        protocol_name = "rs"

        async def _encode(self, pos, blob, parities):
            if pos == (0, 6):
                await self.ft.link.fabric.sleep(3600)  # this round never completes
            await super()._encode(pos, blob, parities)
    r = ft.run(Slow, ranks=8, transport="sim", kwargs={"iterations": 20},
               chaos=ft.Chaos(kill=[(4, 7)]), **TOPOLOGY)
    assert_same(r.results, reference())
    assert r.events_of("rs_recovery")[0].detail["position"] == (0, 3)


def test_interval_in_seconds_is_agreed_by_rank_0_and_survives_a_kill():
    def rounds(r):
        by_rank = {}
        for e in r.events_of("rs_checkpoint"):
            by_rank.setdefault(e.rank, []).append(tuple(e.detail["position"]))
        assert all(v == by_rank[0] for v in by_rank.values())  # every rank, the same ones
        return by_rank[0]
    options = {k: v for k, v in TOPOLOGY.items() if k != "rs_interval"}
    often = rounds(heat(transport="sim", rs_interval_s=1e-4, **options))  # virtual s
    seldom = rounds(heat(transport="sim", rs_interval_s=3e-4, **options))
    assert len(often) > len(seldom) >= 2
    r = heat(transport="sim", spares=2, rs_interval_s=2e-4, chaos=ft.Chaos(kill=[(2, 13)]),
             **options)
    assert_same(r.results, reference())
    assert 2 in decoded(r)


def test_bad_interval_in_seconds_is_refused():
    with pytest.raises(ft.ConfigError, match="rs_interval_s must be a number of seconds > 0"):
        heat(rs_interval_s=0)


def test_failure_before_the_first_checkpoint_restarts_from_the_start():
    r = heat(chaos=ft.Chaos(kill=[(5, 2)]))
    assert_same(r.results, reference())
    assert r.events_of("rs_recovery")[0].detail["position"] is None


def test_flood_with_messages_across_every_safe_point():
    kw = {"iterations": 12, "per_peer": 2}
    ref = ft.run(Flood, ranks=8, transport="local", kwargs=kw).results
    r = ft.run(RSFlood, ranks=8, transport="sim", spares=2, kwargs=kw,
               chaos=ft.Chaos(kill=[(0, 8), (1, 8)]), **TOPOLOGY)
    assert r.results == ref
    assert set(decoded(r)) == {0, 1}


def test_cg_and_hpl_bit_identical_after_a_node_loss():
    plain = ft.run(CG, ranks=8, transport="local", kwargs={"problem_class": "S"}).results
    r = ft.run(RSCG, ranks=8, transport="local", spares=2, kwargs={"problem_class": "S"},
               chaos=ft.Chaos(kill=[(6, 10), (7, 10)]), **TOPOLOGY)
    assert [o["zetas"] for o in r.results] == [o["zetas"] for o in plain]
    assert all(o["verified"] for o in r.results) and set(decoded(r)) == {6, 7}
    kwargs = {"n": 96, "nb": 8, "p": 2, "q": 4}
    plain = ft.run(HPL, ranks=8, transport="local", kwargs=kwargs).results
    r = ft.run(RSHPL, ranks=8, transport="local", spares=2, kwargs=kwargs,
               chaos=ft.Chaos(kill=[(2, 7), (3, 7)]), **TOPOLOGY)
    assert np.array_equal(r.results[0]["x"], plain[0]["x"])
    assert [o["fingerprint"] for o in r.results] == [o["fingerprint"] for o in plain]
    assert all(o["verified"] for o in r.results) and set(decoded(r)) == {2, 3}


@pytest.mark.parametrize("seed", range(6))
def test_random_simultaneous_losses_decode_exactly_when_the_placement_says(seed, tmp_path):
    import random
    rng = random.Random(seed)
    dead = sorted(rng.sample(range(8), rng.randint(1, 4)))
    print(f"seed {seed}: ranks {dead} die together at iteration 10")
    kills = [(dead[0], 10)] + [ft.Kill(r, recovery_round=0) for r in dead[1:]]
    r = heat(spares=4, rs_stable_store=str(tmp_path / "rs"), chaos=ft.Chaos(kill=kills))
    assert_same(r.results, reference())
    rec = r.events_of("rs_recovery")[-1].detail
    assert rec["failed"] == dead
    if undecodable_groups(PLACEMENT, set(dead)):
        assert rec["source"] == "stable" and not decoded(r)
    else:
        assert rec["source"] == "memory" and set(decoded(r)) == set(dead)


def test_failure_during_the_decode_phase_restarts_the_round():
    chaos = ft.Chaos(kill=[(6, 10), ft.Kill(1, recovery_round=0, recovery_phase="repaired")])
    r = heat(spares=3, chaos=chaos)
    assert_same(r.results, reference())
    assert len(r.events_of("recovery_restart")) == 1
    assert r.events_of("rs_recovery")[-1].detail["failed"] == [1, 6]
    assert {1, 6} <= set(decoded(r))


# ------------------------------------------------- stacked on StandbyReplacement
class RSStandbyHeat(RSBackup, StandbyReplacement, Heat1D):
    backup_interval = 3


def stacked(**kw):
    return ft.run(RSStandbyHeat, ranks=8, transport=kw.pop("transport", "local"),
                  kwargs={"iterations": 20}, **{**TOPOLOGY, **kw})


def test_stacked_survives_a_partner_pair_that_standby_alone_loses():
    kills = ft.Chaos(kill=[(2, 10), ft.Kill(6, recovery_round=0)])  # partners 2 <-> 6
    with pytest.raises(ft.RankFailed, match="both failed"):
        ft.run(FTHeat8, ranks=8, spares=2, transport="local", kwargs={"iterations": 20},
               chaos=kills)
    r = stacked(spares=2, chaos=kills)
    assert_same(r.results, reference())
    assert set(decoded(r)) == {2, 6}


class FTHeat8(StandbyReplacement, Heat1D):
    backup_interval = 3


# ----------------------------------------------------------------- slow recovery
def test_beyond_reach_without_stable_copy_names_the_groups():
    with pytest.raises(ft.RankFailed) as info:
        heat(spares=3, chaos=ft.Chaos(kill=[(0, 10), (2, 10), (4, 10)]))
    assert "group(s) 0 (ranks [0, 2])" in str(info.value)
    assert info.value.ranks == (0, 2, 4)


def test_beyond_reach_falls_back_to_stable_storage(tmp_path):
    store = str(tmp_path / "rs")
    r = heat(spares=3, rs_stable_store=store, chaos=ft.Chaos(kill=[(0, 10), (2, 10), (4, 10)]))
    assert_same(r.results, reference())
    rec = r.events_of("rs_recovery")[0].detail
    assert r.events_of("rs_undecodable")[0].detail["groups"] == [0]
    sealed = [e.detail["position"] for e in r.events_of("stable_checkpoint")]
    assert rec["position"] in sealed and rec["source"] == "stable"
    assert rec["reencode"] == {g: [0, 1] for g in range(4)}
    assert [e.detail["position"] for e in r.events_of("stable_checkpoint")][-1] == (0, 18)


def test_whole_job_killed_restores_from_stable_and_a_new_job_restarts_there(tmp_path):
    store = str(tmp_path / "rs")
    opts = {**TOPOLOGY, "rs_ranks_per_node": 1, "rs_stable_store": store}
    r = heat(ranks=4, rs_stable_store=store, rs_ranks_per_node=1,
             chaos=ft.Chaos(kill=[(0, 13)] + [ft.Kill(k, recovery_round=0) for k in (1, 2, 3)]))
    assert_same(r.results, reference(ranks=4))
    rec = r.events_of("rs_recovery")[0].detail  # the round restarted with every rank lost
    assert rec["failed"] == [0, 1, 2, 3] and rec["source"] == "stable"
    # a job that ended at iteration 14 (last set: 12), then a new one from its sets,
    # run longer on purpose (other arguments: restart_from_any)
    store = opts["rs_stable_store"] = str(tmp_path / "rs2")
    heat(ranks=4, iterations=14, **opts)
    r = ft.run(RSHeat, ranks=4, transport="local", kwargs={"iterations": 20},
               restart_from=store, restart_from_any=True, **opts)
    assert_same(r.results, reference(ranks=4))
    assert [e.detail["position"] for e in r.events_of("restored")] == [(0, 12)] * 4
    again = {(e.detail["group"], e.detail["parity"]) for e in r.events_of("rs_parity")
             if e.detail["position"] == (0, 12)}
    assert again == {(0, 0), (0, 1), (1, 0), (1, 1)}  # the restored round, encoded again


def test_stable_parity_rebuilds_a_part_lost_on_disk(tmp_path):
    store = str(tmp_path / "rs")
    r = heat(iterations=7, rs_stable_store=store, rs_stable_parity=True)
    fs = open_store(store)
    prefix = latest_complete(fs, f"run-{r.run_id}")
    for rank in (0, 5):
        want = fs.get_bytes(f"{prefix}/rank-{rank:05d}")
        assert rebuild_part(fs, prefix, PLACEMENT, rank) == want
    rs = RSCode(2, 2)  # and the stored parity is the encoding of the group's parts
    parts = [np.frombuffer(fs.get_bytes(f"{prefix}/rank-{r:05d}"), np.uint8) for r in (0, 2)]
    size = max(p.size for p in parts)
    parity = rs.encode([np.concatenate([p, np.zeros(size - p.size, np.uint8)]) for p in parts])
    stored = fs.get(f"{prefix}/parity-g0000-j001")
    assert stored["block"] == parity[1].tobytes() and stored["lengths"] == {0: parts[0].size,
                                                                           1: parts[1].size}


# ---------------------------------------------------------------------- config
def test_registered_and_bad_options_fail_before_start():
    assert PROTOCOLS["rs"] is RSBackup
    for opts, match in [({"rs_group_size": 0}, "rs_group_size"),
                        ({"rs_parity": "2"}, "rs_parity"),
                        ({"rs_block_bytes": -1}, "rs_block_bytes"),
                        ({"rs_interleave": 1}, "rs_interleave"),
                        ({"rs_stable_parity": True}, "needs rs_stable_store")]:
        with pytest.raises(ft.ConfigError, match=match):
            ft.run(RSHeat, ranks=2, transport="local", **opts)
    with pytest.raises(ft.ConfigError, match="one Ray node id per rank"):  # before Ray starts
        ft.run(RSHeat, ranks=2, transport="ray", rank_nodes=["only-one"])
    with pytest.raises(TypeError, match="put RSBackup before StandbyReplacement"):
        type("Both", (StandbyReplacement, RSBackup, Heat1D), {})
