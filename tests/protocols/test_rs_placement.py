"""RSBackup placement (section IV.B-C): groups across nodes, sectors, the interleaved ring."""
import itertools
import random

import pytest

from ftactors.protocols.rs.placement import (lost_blocks, place, undecodable_groups,
                                             virtual_nodes)


def fig3_nodes():
    """Figure 3: 8 nodes (sector A: A1-A4, sector B: B1-B4), 2 ranks per node."""
    return [f"{s}{i}" for s in "AB" for i in range(1, 5) for _ in range(2)]


def test_figure_3_groups_and_interleaved_ring():
    p = place(fig3_nodes(), 4)
    # rank 2*i + h runs on node i; group h of a sector takes the h-th rank of its nodes
    g1, g2, g3, g4 = (0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)
    assert p.groups == (g1, g3, g2, g4)      # G1 - G3 - G2 - G4
    assert p.sectors == (0, 1, 0, 1)
    assert place(fig3_nodes(), 4, interleave=False).groups == (g1, g2, g3, g4)


def test_parity_of_each_group_is_held_by_the_next_group_on_the_ring():
    p = place(fig3_nodes(), 4)
    for g, members in enumerate(p.groups):
        assert p.m(g) == p.k(g) == 4
        holders = [p.holder(g, j) for j in range(p.m(g))]
        assert holders == list(p.groups[(g + 1) % 4])
    assert sorted(b for r in range(16) for b in p.held_by(r)) == \
        sorted((g, j) for g in range(4) for j in range(4))
    assert p.group_of(10) == (1, 1)
    with pytest.raises(KeyError):
        p.group_of(99)


@pytest.mark.parametrize("n_nodes, per_node, size", [
    (8, 2, 4), (4, 2, 2), (5, 3, 2), (7, 4, 3), (6, 1, 4), (9, 2, 9), (3, 5, 8)])
def test_every_rank_once_and_one_node_costs_each_group_at_most_one_member(n_nodes, per_node, size):
    nodes = [n for n in range(n_nodes) for _ in range(per_node)]
    p = place(nodes, size)
    assert sorted(r for g in p.groups for r in g) == list(range(len(nodes)))
    for members in p.groups:
        assert len({nodes[r] for r in members}) == len(members) <= size
    for node in range(n_nodes):
        dead = {r for r, nd in enumerate(nodes) if nd == node}
        for g, (data, parity) in lost_blocks(p, dead).items():
            assert data <= 1
            if len(set(p.sectors)) > 1 and len({len(m) for m in p.groups}) == 1:
                # neighbours on the ring are in other sectors (with groups of unequal
                # sizes a small next group holds several parity blocks per member)
                assert data + parity <= 1, (g, data, parity)
        assert undecodable_groups(p, dead) == []


def test_sectors_are_balanced():
    p = place(list(range(10)), 4)  # 10 nodes, one rank each, groups of <= 4: sectors 4, 3, 3
    assert sorted(len(g) for g in p.groups) == [3, 3, 4]


def test_interleaving_tolerates_any_m_nodes_and_the_plain_ring_does_not():
    nodes = fig3_nodes()
    ring, plain = place(nodes, 4), place(nodes, 4, interleave=False)
    bad_plain = 0
    for killed in itertools.combinations(sorted(set(nodes)), 4):
        dead = {r for r, nd in enumerate(nodes) if nd in killed}
        assert undecodable_groups(ring, dead) == [], killed  # "four nodes whichever they are"
        bad_plain += bool(undecodable_groups(plain, dead))
    assert bad_plain > 0  # e.g. the whole sector A: G1's data and its parity holders G2
    dead = {r for r, nd in enumerate(nodes) if nd.startswith("A")}
    assert undecodable_groups(plain, dead) == [0]


def test_whole_group_lost_is_decodable_when_the_next_group_lives():
    p = place(fig3_nodes(), 4)
    assert undecodable_groups(p, set(p.groups[2])) == []
    assert undecodable_groups(p, set(p.groups[2]) | {p.groups[3][0]}) == [2]


def test_fewer_parity_blocks():
    p = place(list(range(8)), 4, parity=2)
    assert [p.m(g) for g in range(len(p.groups))] == [2, 2]
    assert undecodable_groups(p, {0, 1}) == []
    assert undecodable_groups(p, {0, 1, 2}) == [0]


def test_random_topologies_keep_the_invariants():
    rng = random.Random(8)
    for _ in range(200):
        n_nodes, size = rng.randint(1, 12), rng.randint(1, 6)
        nodes = [nd for nd in range(n_nodes) for _ in range(rng.randint(1, 4))]
        rng.shuffle(nodes)  # ranks of a node need not be consecutive
        p = place(nodes, size)
        assert sorted(r for g in p.groups for r in g) == list(range(len(nodes)))
        assert all(len({nodes[r] for r in g}) == len(g) for g in p.groups)
        assert all(len(g) <= size for g in p.groups)


def test_bad_input():
    with pytest.raises(ValueError, match="group size"):
        place([0, 1], 0)
    with pytest.raises(ValueError, match="no ranks"):
        place([], 2)
    assert virtual_nodes(5, 2) == [0, 0, 1, 1, 2]
