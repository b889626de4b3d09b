"""Recursive doubling for allreduce and allgather gives the same bits as the binomial
tree (the rank-order bracketing), on every rank; other sizes keep the tree."""
import numpy as np
import pytest

import ftactors as ft


def _concat(a, b):
    return a + b  # strings: not commutative, shows the order and bracketing


class Mix(ft.Rank):
    async def main(self, rounds: int):
        rng = np.random.default_rng(self.rank)
        out = []
        for _ in range(rounds):
            x = float(rng.standard_normal() * 10.0 ** rng.integers(-8, 8))
            out.append(await self.comm.allreduce(x))
            out.append(await self.comm.allreduce(f"<{self.rank}>", op=_concat))
            out.append(await self.comm.allgather((self.rank, x)))
        return out, self.ft.doubling_collectives()


@pytest.mark.parametrize("ranks", [2, 4, 8, 6])
def test_doubling_gives_the_trees_bits(ranks):
    tree = ft.run(Mix, ranks, args=(5,), transport="local", collectives="tree")
    doubling = ft.run(Mix, ranks, args=(5,), transport="local", collectives="doubling")
    assert all(out == tree.results[0][0] for out, _ in tree.results + doubling.results)
    assert doubling.results[0][0][1] == "".join(f"<{r}>" for r in range(ranks))
    assert [d for _, d in tree.results] == [False] * ranks
    sent_tree, sent_doubling = tree.metrics["sent"], doubling.metrics["sent"]
    if ranks & (ranks - 1):  # not a power of two: the tree either way
        assert sent_doubling == sent_tree
    else:  # n log2 n messages per collective instead of 2 (n - 1)
        log2 = ranks.bit_length() - 1
        assert sent_doubling == 15 * ranks * log2 and sent_tree == 15 * 2 * (ranks - 1)


def test_auto_follows_the_link_and_bad_values_are_refused():
    local = ft.run(Mix, 4, args=(1,), transport="local")
    assert [d for _, d in local.results] == [False] * 4  # local: messages are not "cheap"
    with pytest.raises(ft.ConfigError, match="collectives"):
        ft.run(Mix, 2, args=(1,), transport="local", collectives="ring")
