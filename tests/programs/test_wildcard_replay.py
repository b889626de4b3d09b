"""Wildcard receives replayed exactly (issue 40, part 2).

GroupCoordination restarts only the failed ranks' group while the others go on, resends
what they logged and drops what the restarted ranks had sent already. A task farm's
master restarted so took its ``recv(ANY_SOURCE, ANY_TAG)`` messages in another order,
handed tasks to other workers than in its first life, and the survivors' counts then
dropped the wrong messages: tasks lost or done twice, with no error. Now the master's
receive determinants travel with its messages to the survivors and come back to it on
a restart (``engine/_determinants``, ``protocols/shared/determinants``).

DDVPiggyback's recovery line has no orphan message, so its restarted clusters may take
messages in any order past their cut; its parts (taken "now", re-executed from the last
safe point) replay their own determinants up to the cut.

The farm's answer must be the failure-free one, every task done exactly once (the
workers' counts add up to the tasks), and the order-dependent programs must agree with
themselves, for kills of a worker, of the master and of both, at random iterations: 24 seeds per configuration on
``sim``, every kind of kill once on ``local``. The farm is also run under the global
rollbacks (ReadyMessageFlush, StandbyReplacement, RSBackup), where every rank restarts
from one cut and the order cannot matter.
"""
import random

import pytest

import ftactors as ft
from ftactors.protocols import (DDVPiggyback, GroupCoordination, ReadyMessageFlush,
                                RSBackup, StandbyReplacement)

from .shapes import Farm
from .wildcards import ProbeAny, WaitanyOrder, consistent, farm_check

# kills of a rank that an earlier kill's recovery restarted never fire, as planned
pytestmark = pytest.mark.filterwarnings("ignore::ftactors.KillNotFiredWarning")

NTASKS = 16
SEEDS = range(24)

CONFIGS = {
    # the default groups pair the master with worker 1: restarted together from the start
    "groups": (GroupCoordination, lambda n: {}),
    # master and workers in different groups, the master checkpointing on its own (the
    # workers' loops differ in length: their group's rounds would wait for a worker that
    # left its loop, issue 40 part 1)
    "groups-split": (GroupCoordination, lambda n: dict(
        groups=[[0], list(range(1, n))], group_checkpoint_interval={0: 2})),
    "groups-single": (GroupCoordination, lambda n: dict(
        groups="single", group_checkpoint_interval=3)),
    "hc3i-split": (DDVPiggyback, lambda n: dict(
        clusters=[[0], list(range(1, n))], clc_interval_s=0.002)),
    "hc3i-pairs": (DDVPiggyback, lambda n: dict(clusters="fixed:2", clc_interval_s=0.002)),
    # the levels of a stack keep the parts; the consistency protocol restarts
    "standby+groups": ((StandbyReplacement, GroupCoordination), lambda n: dict(spares=2)),
    "rs+groups": ((RSBackup, GroupCoordination), lambda n: dict(
        groups="single", group_checkpoint_interval=3, spares=2)),
    "standby+hc3i": ((StandbyReplacement, DDVPiggyback), lambda n: dict(
        clusters="fixed:2", clc_interval_s=0.002, spares=2)),
    "rs+hc3i": ((RSBackup, DDVPiggyback), lambda n: dict(
        clusters="fixed:2", clc_interval_s=0.002, spares=2)),
}


def stack(protocols, program):
    """``program`` under ``protocols`` (one mixin, or a stack's, outermost first)."""
    mixins = protocols if isinstance(protocols, tuple) else (protocols,)
    return type(f"{program.__name__}{''.join(m.__name__ for m in mixins)}",
                (*mixins, program), {})


def kills_for(seed: int, n: int, ntasks: int = NTASKS) -> list[ft.Kill]:
    """A worker, the master, or both, at random iterations of their loops (the master
    turns once per message, about three per task; a worker once per task)."""
    rng = random.Random(seed)
    worker = ft.Kill(rank=rng.randrange(1, n), iteration=rng.randrange(1, ntasks // (n - 1)))
    master = ft.Kill(rank=0, iteration=rng.randrange(1, 2 * ntasks))
    return [[worker], [master], [master, worker]][seed % 3]


@pytest.fixture(scope="module")
def references():
    return {n: ft.run(Farm, ranks=n, transport="sim", args=(NTASKS,)).results
            for n in (4, 5)}


def run_farm(config: str, n: int, transport: str, seed: int, kills):
    protocol, options = CONFIGS[config]
    return ft.run(stack(protocol, Farm), ranks=n, transport=transport, seed=seed,
                  args=(NTASKS,), timeout_s=60, chaos=ft.Chaos(kill=kills), **options(n))


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_farm_gives_the_failure_free_answer_after_kills_on_sim(config, n, references):
    planned = fired = 0
    wrong = []
    for seed in SEEDS:
        kills = kills_for(seed, n)
        result = run_farm(config, n, "sim", seed, kills)
        planned += len(kills)
        fired += len(result.metrics["kills_fired"])
        if not farm_check(result.results, references[n]):
            wrong.append((seed, kills, result.results))
    assert wrong == []
    # most kills struck, so the runs were recoveries (a kill of a rank that a first kill
    # restarted before its iteration does not: it was planned for its first life)
    assert fired >= planned // 2


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_farm_gives_the_failure_free_answer_after_kills_on_local(config, references):
    worker, master = ft.Kill(rank=3, iteration=1), ft.Kill(rank=0, iteration=10)
    for seed, kills in enumerate([[worker], [master], [master, worker]]):
        result = run_farm(config, 4, "local", seed, kills)
        assert result.metrics["kills_fired"]
        assert farm_check(result.results, references[4]), (seed, result.results)


def test_a_restarted_master_replays_the_determinants_its_survivors_hold():
    """The master restarted with worker 1 from the start (default groups): what workers 2
    and 3 hold of its receives comes back to it, and it takes them again."""
    result = run_farm("groups", 4, "sim", 1, [ft.Kill(rank=0, iteration=12)])
    replayed = [e for e in result.events if e.kind == "determinants_replayed"]
    assert {e.rank for e in replayed} == {0, 1}
    assert max(e.detail["count"] for e in replayed) > 0
    assert farm_check(result.results, ft.run(Farm, ranks=4, transport="sim",
                                             args=(NTASKS,)).results)


def test_a_farm_on_ray_gives_the_failure_free_answer_after_its_master_is_sigkilled(
        ray_session, references):
    """The master's process SIGKILLed (with worker 1, its group, restarted from the
    start): the survivors' determinants reach its new actor over Ray."""
    result = run_farm("groups", 4, "ray", 0, [ft.Kill(rank=0, iteration=12)])
    assert result.metrics["kills_fired"]
    replayed = {e.rank: e.detail["count"] for e in result.events
                if e.kind == "determinants_replayed"}
    assert set(replayed) == {0, 1} and replayed[0] > 0
    assert farm_check(result.results, references[4])


# ------------------------------------------------------- probes and waitany
def probe_kills(seed: int, n: int) -> list[ft.Kill]:
    """The receiver (the last rank), a sender, or both."""
    rng = random.Random(seed)
    receiver = ft.Kill(rank=n - 1, iteration=rng.randrange(1, 6 * (n - 1)))
    sender = ft.Kill(rank=rng.randrange(n - 1), iteration=rng.randrange(1, 6))
    return [[receiver], [sender], [receiver, sender]][seed % 3]


SHAPES = {
    # the receiver in a group of its own (a group checkpoint waits for every member at
    # one iteration: senders and receiver turn at different paces)
    "groups": (GroupCoordination, lambda n: dict(
        groups=[list(range(n - 1)), [n - 1]], group_checkpoint_interval=2)),
    "groups-single": (GroupCoordination, lambda n: dict(
        groups="single", group_checkpoint_interval=3)),
    "groups-default": (GroupCoordination, lambda n: {}),
    "hc3i": (DDVPiggyback, lambda n: dict(clusters="fixed:2", clc_interval_s=0.002)),
}


@pytest.mark.parametrize("config", sorted(SHAPES))
def test_probe_any_source_then_a_named_recv_is_taken_in_the_first_lifes_order(config):
    """mpi4py's ex-2.29: ``Probe(ANY_SOURCE)`` then ``recv(source=status.source)``; the
    senders keep the receiver's running checksum of its order, so a restarted receiver
    that took another order disagrees with them."""
    protocol, options = SHAPES[config]
    n = 4
    for seed in SEEDS:
        result = ft.run(stack(protocol, ProbeAny), ranks=n, transport="sim", seed=seed,
                        timeout_s=60, chaos=ft.Chaos(kill=probe_kills(seed, n)), **options(n))
        taken = result.results[-1]
        assert sorted((s, i) for s, i, _ in taken) == [(s, i) for s in range(n - 1)
                                                       for i in range(6)], seed
        assert consistent(taken, {s: result.results[s] for s in range(n - 1)}), seed


@pytest.mark.parametrize("config", sorted(SHAPES))
def test_waitany_serves_in_the_first_lifes_order(config):
    """A server that serves ``waitany``'s request first and hands out running tickets:
    clients keep theirs, so a restarted server that served another order disagrees."""
    protocol, options = SHAPES[config]
    n = 4
    for seed in SEEDS:
        rng = random.Random(seed)
        server = ft.Kill(rank=0, iteration=rng.randrange(1, 6))
        client = ft.Kill(rank=rng.randrange(1, n), iteration=rng.randrange(1, 6))
        result = ft.run(stack(protocol, WaitanyOrder), ranks=n, transport="sim", seed=seed,
                        timeout_s=60, chaos=ft.Chaos(kill=[[server], [client],
                                                           [server, client]][seed % 3]),
                        **options(n))
        served = result.results[0]
        assert len(served) == 6 * (n - 1), seed
        assert consistent(served, {c: result.results[c] for c in range(1, n)}), seed


# ------------------------------------------------------------ global rollbacks
GLOBAL = {
    "standby": (StandbyReplacement, dict(backup_interval=1000), dict(backup_interval=3)),
    "ready-flush": (ReadyMessageFlush, dict(checkpoint_interval=1000),
                    dict(checkpoint_interval=3)),
    "rs": (RSBackup, dict(rs_interval=1000), dict(rs_interval=3)),
}


@pytest.mark.parametrize("name", sorted(GLOBAL))
def test_global_rollbacks_need_no_determinants(name, references):
    """Every rank restarts from one consistent cut: the farm's order cannot matter,
    without checkpoints (a restart from the start) and with them (rounds the ranks join
    out of step)."""
    protocol, no_rounds, rounds = GLOBAL[name]
    for seed in range(3):
        kills = kills_for(seed, 4)
        result = ft.run(stack(protocol, Farm), ranks=4, transport="sim", seed=seed,
                        args=(NTASKS,), spares=2, chaos=ft.Chaos(kill=kills), **no_rounds)
        assert result.metrics["kills_fired"]
        assert farm_check(result.results, references[4]), (seed, result.results)
    result = ft.run(stack(protocol, Farm), ranks=4, transport="sim", seed=0,
                    args=(NTASKS,), spares=2, timeout_s=15,
                    chaos=ft.Chaos(kill=kills_for(1, 4)), **rounds)
    assert result.metrics["kills_fired"]
    assert farm_check(result.results, references[4])
