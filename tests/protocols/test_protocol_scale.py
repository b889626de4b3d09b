"""The protocols' work per round and per recovery follows the channels in use, not the
rank count (issue 28: sim-check at 4,096 ranks).

Counted, never timed, on a few hundred simulated ranks running Flood on a halo (each rank
talks to its ring neighbours and the allreduce's partners): the markers of a flush, the
peers a group checkpoint's RR names, the peers a restore visits one by one. Each of these
was n - 1 per rank before (a marker on every channel; an RR entry and an epoch update for
every rank), so n^2 per round or recovery: 16.8 million at 4,096 ranks.
"""
from __future__ import annotations

import functools

import ftactors as ft
from ftactors.engine._endpoint import Endpoint
from ftactors.protocols import GroupCoordination, ReadyMessageFlush, StandbyReplacement
from ftactors.tools.simcheck import Flood

N = 128
KW = {"iterations": 7, "per_peer": 1, "reach": 1}
BOUND = 8 + N.bit_length()
"""Peers a rank of Flood(reach=1) talks to: 2 neighbours, the collectives' partners, the
partner or root a protocol adds."""


def _reference():
    return [(x["digest"], x["total"]) for x in ft.run(Flood, N, transport="sim",
                                                     kwargs=KW).results]


def _count_markers(monkeypatch) -> list[int]:
    counts = []
    real = Endpoint.send_control_all

    def counting(self, dsts, protocol, op, data=None):
        dsts = list(dsts)
        if op == "marker":
            counts.append(len(dsts))
        return real(self, dsts, protocol, op, data)

    monkeypatch.setattr(Endpoint, "send_control_all", counting)
    return counts


class Ready(ReadyMessageFlush, Flood):
    pass


class Standby(StandbyReplacement, Flood):
    pass


class Groups(GroupCoordination, Flood):
    pass


def test_a_flush_marks_only_the_channels_in_use_and_still_cuts_consistently(monkeypatch):
    counts = _count_markers(monkeypatch)
    r = ft.run(Ready, N, transport="sim", seed=3, kwargs=KW, checkpoint_interval=2,
               sim_jitter_s=2e-5, chaos=ft.Chaos(kill=[(N // 2, 5)]))
    assert [(x["digest"], x["total"]) for x in r.results] == _reference()
    assert r.metrics["duplicates_dropped"] == 0 and r.metrics["recoveries"] == 1
    rounds = len(r.events_of("checkpoint"))
    assert rounds >= 2
    # CoCheck's every channel: N - 1 markers per rank and round
    assert max(counts) <= BOUND and sum(counts) <= rounds * N * BOUND, (max(counts), rounds)


def test_a_restore_visits_only_the_peers_with_state_waiting(monkeypatch):
    calls = []
    real = Endpoint.set_peer_epoch

    def counting(self, rank, epoch):
        calls.append(rank)
        return real(self, rank, epoch)

    monkeypatch.setattr(Endpoint, "set_peer_epoch", counting)
    r = ft.run(Standby, N, transport="sim", seed=1, kwargs=KW, backup_interval=2, spares=1,
               sim_jitter_s=2e-5, chaos=ft.Chaos(kill=[(7, 5)]))
    assert [(x["digest"], x["total"]) for x in r.results] == _reference()
    assert r.metrics["recoveries"] == 1
    # every rank is renumbered: one call per peer per rank was N * (N - 1)
    assert len(calls) <= 2 * N, len(calls)


def test_a_group_checkpoint_names_only_the_peers_heard_from(monkeypatch):
    sizes = []
    real = GroupCoordination.ft_rpc_group_commit

    @functools.wraps(real)  # the coordinator names the request by its handler's name
    def counting(self, position):
        sizes.append(len(self._gc.member.rr.get(tuple(position), {})))
        return real(self, position)

    monkeypatch.setattr(GroupCoordination, "ft_rpc_group_commit", counting)
    r = ft.run(Groups, N, transport="sim", seed=0, kwargs=KW, groups="fixed:2",
               group_checkpoint_interval=2)
    assert [(x["digest"], x["total"]) for x in r.results] == _reference()
    assert sizes and max(sizes) <= BOUND, max(sizes)  # every rank outside the group: N - 2
