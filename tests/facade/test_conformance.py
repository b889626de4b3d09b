"""One set of test bodies, run on every transport: MPI semantics, errors, failures."""
import pickle

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups

from .. import bodies as b


PURE = pytest.mark.parametrize("transport", ["local", "sim"])
"""For the semantics the facade and the matcher decide alone, whatever carries the
messages (matching, status, probe, requests, split, argument checks): Ray adds only its
start-up to them. What Ray's planes change (batching, reordering, the object store,
process deaths, tracebacks) keeps its Ray case below."""


def run(cls, transport, ranks=4, **kw):
    return ft.run(cls, ranks=ranks, transport=transport, timeout_s=120, **kw)


def test_ring_readme_example(transport):
    r = run(b.Ring, transport, args=(10,))
    assert r.results[0] == 40
    assert r.results[1:] == [37, 38, 39]


def test_order_holds_under_reordering(transport):
    count = 3000
    r = run(b.Flood, transport, ranks=2, args=(count,))
    got, more = r.results[1]
    assert got == list(range(count))
    assert more == list(range(count))


@PURE
def test_tag_matching_and_non_overtaking(transport):
    assert run(b.TagMatching, transport, ranks=2).results[1] == ["B", "A", "C"]


@PURE
def test_any_source_and_status(transport):
    seen = run(b.AnySource, transport, ranks=5).results[0]
    assert sorted(s[0] for s in seen) == [1, 2, 3, 4]
    for source, tag, count, obj, pickled in seen:
        assert tag == 10 + source
        assert obj == {"from": source}
        assert count >= pickled > 0


@PURE
def test_probe_iprobe(transport):
    before, st, still, value, after = run(b.Probing, transport, ranks=2).results[0]
    assert before is False
    assert st[0] == 1 and st[1] == 7 and st[2] > 0
    assert still == (True, 1)
    assert value == [0, 1, 2, 3, 4]
    assert after is False


@PURE
def test_isend_irecv_test_wait(transport):
    early, value, st, again = run(b.NonBlocking, transport, ranks=2).results[0]
    assert early == (False, None)
    assert value == "pong"
    assert st == (1, 3)
    assert again == (True, "pong")


@PURE
def test_sendrecv(transport):
    r = run(b.SendRecvShift, transport, ranks=3)
    assert r.results == [(200, 2), (0, 0), (100, 1)]


def test_numpy_arrays_roundtrip(transport):
    out = run(b.Arrays, transport, ranks=2).results[1]
    for name, arr in b.ARRAYS.items():
        dtype, shape, writeable, value = out[name]
        assert dtype == arr.dtype.str and shape == arr.shape, name
        np.testing.assert_array_equal(value, arr)
        # documented: large buffers arrive read-only on local and sim (shared copies),
        # writable on Ray's direct plane (owned by the receiver), small ones writable
        assert writeable == (arr.nbytes < 100 * 1024 or transport == "ray"), name


@pytest.mark.parametrize("ranks", [3, 4])
def test_collectives(transport, ranks):
    check_collectives(transport, ranks)


@PURE
def test_collectives_of_one_rank(transport):
    check_collectives(transport, 1)  # it sends nothing: Ray's planes add nothing


def check_collectives(transport, ranks):
    results = run(b.Collectives, transport, ranks=ranks).results
    n = ranks
    vecs = [np.arange(4, dtype=np.int64) + r for r in range(n)]
    ops = {"SUM": np.add, "PROD": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
           "LAND": np.logical_and, "LOR": np.logical_or, "BAND": np.bitwise_and,
           "BOR": np.bitwise_or}
    nums = {"SUM": sum(range(1, n + 1)), "PROD": np.prod(range(1, n + 1)), "MIN": 1, "MAX": n,
            "LAND": True, "LOR": True, "BAND": _fold(lambda a, c: a & c, range(1, n + 1)),
            "BOR": _fold(lambda a, c: a | c, range(1, n + 1))}
    bracketing = {1: "0", 3: "((0+1)+2)", 4: "((0+1)+(2+3))"}[n]
    for r, out in enumerate(results):
        assert out["bcast"] == [{"root": root} for root in range(n)]
        # the root keeps its own (writable) object; others get read-only large buffers,
        # except on Ray's direct plane (buffers of their own)
        assert out["bcast_big"] == (float(np.arange(2**16).sum()),
                                    r == n - 1 or transport == "ray")
        for name, fn in ops.items():
            expect = _fold(fn, vecs)
            if r == n - 1:
                np.testing.assert_array_equal(out[f"reduce_{name}"], expect)
            else:
                assert out[f"reduce_{name}"] is None
            np.testing.assert_array_equal(out[f"allreduce_{name}"], expect)
            assert out[f"allreduce_num_{name}"] == nums[name], name
        # operands in rank order, the same bracketing on every rank (recursive doubling)
        assert out["fold"] == bracketing
        assert out["fold"].replace("(", "").replace(")", "") == "+".join(map(str, range(n)))
        assert out["reduce_is_allreduce"]  # the same bits on the root
        for root in range(n):
            assert out["gather"][root] == ([i * i for i in range(n)] if r == root else None)
        assert out["scatter"] == r * 10
        assert out["allgather"] == [("r", i) for i in range(n)]
        assert out["alltoall"] == [(i, r) for i in range(n)]


def _fold(fn, values):
    values = list(values)
    acc = values[0]
    for v in values[1:]:
        acc = fn(acc, v)
    return acc


@PURE
def test_split_key_order_undefined_and_dup(transport):
    res = run(b.SplitDup, transport, ranks=5).results
    for r, out in enumerate(res):
        color = r % 2
        members = sorted((m for m in range(5) if m % 2 == color), reverse=True)  # key = -rank
        assert out["sub"] == (members.index(r), len(members), members, sum(members))
        assert out["none"] == (None if r == 0 else (r - 1, 4))
        left = (r - 1) % 5
        assert out["world"] == ("world", left)
        assert out["dup"] == ("dup", left)


@PURE
def test_bad_input_errors(transport):
    errors = run(b.BadInput, transport, ranks=3).results[0]
    kind, msg = errors["dest"]
    assert kind == "ValueError" and "dest 3" in msg and "size 3" in msg
    assert errors["dest_neg"][0] == "ValueError" and "-1" in errors["dest_neg"][1]
    assert errors["source"][0] == "ValueError" and "source 6" in errors["source"][1]
    assert errors["tag"][0] == "ValueError" and "-5" in errors["tag"][1]
    assert errors["recv_tag"][0] == "ValueError"
    assert errors["pickle"][0] == "TypeError" and "_thread.lock" in errors["pickle"][1]
    assert errors["isend"][0] == "ValueError"
    assert errors["root"][0] == "ValueError" and "root 3" in errors["root"][1]
    assert errors["scatter"][0] == "ValueError" and "3 items" in errors["scatter"][1]
    assert errors["color"][0] == "ValueError"


def test_rank_error_names_rank_with_traceback(transport):
    with pytest.raises(ft.RankError) as info:
        run(b.Raises, transport, ranks=4)
    err = info.value
    assert err.rank == 2
    assert "rank two cannot go on" in str(err)
    assert "explode_here" in err.remote_traceback


def test_killed_rank_raises_rank_failed(transport):
    with pytest.raises(ft.RankFailed) as info:
        run(b.Iterating, transport, ranks=3, args=(50,), chaos=ft.Chaos(kill=[(1, 5)]))
    assert info.value.ranks == (1,)


@PURE
def test_iterations_without_failure(transport):
    r = run(b.Iterating, transport, ranks=3, args=(6,))
    assert r.results == [3 * sum(range(6))] * 3


@PURE
def test_messages_to_self(transport):
    r = run(b.SelfTalk, transport, ranks=3, args=(4,))
    assert r.results == [b.self_talk_result(rank, 4) for rank in range(3)]


def check_self_talk_survives(protocol, transport, kills, method="sigkill", **options):
    """``SelfTalk`` under ``protocol`` (sim-check's settings, updated by ``options``) with
    ``kills`` gives the failure-free results. The ranks talk only to themselves, so they
    drift apart: a kill finds them in different rounds (on sim a survivor is rolled back
    in place to the start of the run: standby, rs), and a second one may find some
    finished, to be rolled back and run again."""
    setup = setups()[protocol]
    cls = type(f"SelfTalk_{protocol}", (*setup.mixins, b.SelfTalk), {})
    r = run(cls, transport, args=(8,), spares=min(setup.spares, len(kills)),
            chaos=ft.Chaos(kill=kills, method=method), **{**setup.options, **options})
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == [b.self_talk_result(rank, 8) for rank in range(4)]


@pytest.mark.parametrize("kills", [[(1, 5)], [(1, 5), (3, 7)]], ids=["one", "two"])
@pytest.mark.parametrize("protocol", sorted(setups()))
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_messages_to_self_survive_kills(transport, protocol, kills):
    if protocol == "ready-flush" and len(kills) > 1:
        # the first kill restarts every rank: the second strikes rank 3's next life
        kills = [kills[0], ft.Kill(3, iteration=7, incarnation=1)]
    if protocol == "standby" and len(kills) > 1:
        # rank 3 holds rank 1's copies, and the ranks run apart: killed before rank 1's
        # death is seen, both copies are gone (a correct give-up, RankFailed); rank 2's
        # copies are on rank 0, so this pair survives in either order
        kills = [kills[0], (2, 7)]
    check_self_talk_survives(protocol, transport, kills)


@pytest.fixture(scope="module")
def big_halos_reference():
    """The failure-free ``BigHalos`` grids (4 ranks, 8 iterations), what every recovered
    run must equal bit for bit."""
    return run(b.BigHalos, "local", args=(8,)).results


@pytest.mark.parametrize("protocol", sorted(setups()))
@pytest.mark.parametrize("transport", ["local", "sim"])
def test_big_halos_survive_a_kill(transport, protocol, big_halos_reference):
    """Out-of-band payloads (halo rows of 104 000 bytes, a big array inside a dict) under
    every stack with a kill: replays, resends and restored grids give the failure-free
    answer. Ray's own planes for large arrays are ``test_large_arrays_ray``'s."""
    setup = setups()[protocol]
    cls = type(f"BigHalos_{protocol}", (*setup.mixins, b.BigHalos), {})
    # sim-check's tiny RS blocks would cut each 312 KB grid into hundreds: its default size
    blocks = {"rs_block_bytes": 1 << 20} if "rs_block_bytes" in setup.options else {}
    r = run(cls, transport, args=(8,), spares=min(setup.spares, 1),
            chaos=ft.Chaos(kill=[(1, 5)]), **{**setup.options, **blocks})
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert len(r.results) == len(big_halos_reference) == 4
    for got, want in zip(r.results, big_halos_reference):
        assert got.shape == (3, b.HALO_COLS) and got.tobytes() == want.tobytes()


def test_messages_to_self_survive_a_kill_in_a_group_of_one():
    # its flush has no peer to wait for: the snapshot follows the send to self at once
    check_self_talk_survives("groups", "sim", [(1, 5)], groups="fixed:1")


@pytest.mark.ray
@pytest.mark.parametrize("protocol", ["standby", "ready-flush"])
def test_messages_to_self_survive_a_sigkill_on_ray(ray_session, protocol):
    """What only Ray shows is the real process death: a rank rolled back in place beside
    a replacement (standby), and every rank restarted in new actors (ready-flush). The
    other protocols' handling of self-messages is the same engine path, checked with
    kills on local and sim above."""
    check_self_talk_survives(protocol, "ray", [(1, 5)])


@pytest.mark.parametrize("ranks", [2, 5, 6, 7, 8])
def test_reductions_for_non_powers_of_two(ranks):
    r = ft.run(b.Collectives, ranks=ranks, transport="sim", timeout_s=120).results
    n = ranks
    for out in r:
        assert out["fold"].replace("(", "").replace(")", "") == "+".join(map(str, range(n)))
        assert out["fold"] == r[0]["fold"]
        assert out["allgather"] == [("r", i) for i in range(n)]
        np.testing.assert_array_equal(out["allreduce_SUM"], sum(np.arange(4) + i for i in range(n)))
        assert out["reduce_is_allreduce"]
