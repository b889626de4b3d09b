"""The buffer (uppercase) API beyond mpi4py's own tests: data lands in the program's own
buffer (writable, however large), argument errors are clear, reductions are bit-identical
with the lowercase ones (a non-commutative op on arrays), and a program of buffer calls
survives a kill under every protocol stack with the failure-free answer."""
import asyncio
import functools

import numpy as np
import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups


@pytest.fixture(params=["local", "sim"])
def transport(request):
    """Facade and protocol logic: local and sim (the Ray path of these messages is the
    lowercase one, which mpi4py's translated buffer tests also run on Ray)."""
    return request.param


def run(cls, transport, ranks=2, **kw):
    return ft.run(cls, ranks=ranks, transport=transport, **{"timeout_s": 120, **kw})


BIG = 1 << 17
"""Entries of a large array (1 MiB of float64): out of band, read-only as it arrives."""


class OwnBuffers(ft.Rank):
    """Large arrays received point to point and broadcast land in the arrays the program
    passed: the same objects, writable, with the sent values."""

    async def main(self):
        comm, r = self.comm, self.rank
        sent = np.arange(BIG, dtype=np.float64) * (r + 1)
        got = np.zeros(BIG)
        await comm.Sendrecv(sent, 1 - r, 0, got, 1 - r, 0)
        got += 1.0                                       # "output array is read-only" before
        bcast = np.arange(BIG, dtype=np.float64) if r == 0 else np.zeros(BIG)
        await comm.Bcast(bcast, root=0)
        bcast *= 2.0
        status = ft.Status()
        into = np.zeros((4, BIG // 4), order="F")        # any contiguous layout is a buffer
        req = comm.Irecv(into, source=1 - r, tag=5)
        await comm.Send(sent, 1 - r, tag=5)
        await req.wait(status)
        return (float(got[7]), float(bcast[7]), into.flags.writeable, float(into.ravel("K")[7]),
                status.Get_count(ft.DOUBLE), status.Get_count())


def test_received_data_lands_in_the_programs_own_writable_buffer(transport):
    res = run(OwnBuffers, transport).results
    for r in range(2):
        other = 2 - r  # the peer's factor (r + 1)
        assert res[r] == (7.0 * other + 1.0, 14.0, True, 7.0 * other, BIG, BIG * 8)


class ProbedCounts(ft.Rank):
    """mpi4py's idiom for a message of unknown length: ``Probe``, then a buffer of
    ``status.Get_count(datatype)`` entries, then ``Recv``; every kind of send, small and
    out of band, two dtypes, ``Iprobe`` too. Returns per case the entries probed and
    whether the buffer holds exactly what was sent."""

    CASES = [(kind, entries, dtype) for kind in ("Send", "Isend", "Ssend", "Issend", "send")
             for entries in (1, 7, BIG // 4) for dtype in (np.float64, np.int32)]

    async def main(self):
        comm = self.comm
        if self.rank == 0:
            for tag, (kind, entries, dtype) in enumerate(self.CASES):
                data = np.arange(entries, dtype=dtype) + tag
                call = getattr(comm, kind)(data, 1, tag)
                if kind.startswith("I"):
                    await call.wait()
                else:
                    await call
            await comm.send({"not": "an array"}, 1, tag=999)
            return None
        out = []
        for tag, (kind, entries, dtype) in enumerate(self.CASES):
            status = ft.Status()
            if tag % 2:
                while not comm.Iprobe(0, tag, status):
                    await asyncio.sleep(0)
            else:
                await comm.Probe(0, tag, status)
            buf = np.empty(status.Get_count(ft.DOUBLE if dtype is np.float64 else ft.INT),
                           dtype)
            await comm.Recv(buf, 0, tag)
            out.append((buf.size, bool(np.array_equal(buf, np.arange(entries) + tag))))
        status = ft.Status()
        await comm.Probe(0, 999, status)
        pickled = status.Get_count()
        obj = await comm.recv(0, 999, status)
        return out, pickled, status.Get_count(), obj


def test_probe_counts_a_buffer_message_in_entries(transport):
    """The count of a probed numpy array is its data's bytes, as mpi4py counts a buffer
    message: it was the pickled size, so the buffer came out longer than the message
    (for one float64, 20 entries), and ``Recv`` left the rest as ``np.empty`` made it."""
    out, pickled, received, obj = run(ProbedCounts, transport).results[1]
    assert out == [(entries, True) for _, entries, _ in ProbedCounts.CASES]
    assert obj == {"not": "an array"} and pickled == received > 0  # any other object: pickled


class BadArguments(ft.Rank):
    """Each misuse, caught: ``(exception class name, message)``."""

    async def main(self):
        comm, r = self.comm, self.rank
        out = {}

        async def attempt(name, coro_or_call):
            try:
                result = coro_or_call()
                if hasattr(result, "__await__"):
                    await result
            except Exception as exc:  # the test reads what was raised
                out[name] = (type(exc).__name__, str(exc))

        if r == 0:
            await comm.Send(np.arange(5.0), 1, tag=1)          # 5 entries for a 4-entry buffer
            await comm.Send(np.arange(3.0), 1, tag=2)          # float64 for an int32 buffer
            await comm.Send(np.arange(3.0), 1, tag=3)          # for an Irecv too small
            await attempt("strided", lambda: comm.Send(np.arange(10.0)[::2], 1))
            await attempt("not_a_buffer", lambda: comm.Send(5, 1))
            await attempt("objects", lambda: comm.Send(np.array([None, 1]), 1))
            await attempt("count", lambda: comm.Send([np.arange(3.0), 4], 1))
            await attempt("type", lambda: comm.Send([np.arange(3.0), "nonsense"], 1))
            await attempt("items", lambda: comm.Send([np.arange(3.0), 1, 0, ft.DOUBLE, 9], 1))
        else:
            await attempt("truncated", lambda: comm.Recv(np.zeros(4), 0, tag=1))
            await attempt("dtype", lambda: comm.Recv(np.zeros(3, np.int32), 0, tag=2))
            req = comm.Irecv(np.zeros(2), 0, tag=3)
            await attempt("irecv_truncated", req.wait)
            readonly = np.zeros(3)
            readonly.flags.writeable = False
            await attempt("readonly", lambda: comm.Recv(readonly, 0, tag=4))
        await attempt("allreduce_sizes", lambda: comm.Allreduce(np.zeros(3), np.zeros(4)))
        await attempt("gather_split", lambda: comm.Gather(np.zeros(2), np.zeros(5), root=r))
        await attempt("reduce_local", lambda: ft.SUM.Reduce_local(np.zeros(2), np.zeros(3)))
        await attempt("reduce_scatter", lambda: comm.Reduce_scatter(np.zeros(5), np.zeros(2),
                                                                    [2, 2]))
        await attempt("maxloc", lambda: comm.Allreduce(np.zeros(2), np.zeros(2), ft.MAXLOC))
        return out


def test_bad_arguments_raise_clear_errors(transport):
    res = run(BadArguments, transport).results
    sender, receiver = res
    assert sender["strided"][0] == "ValueError" and "not contiguous" in sender["strided"][1]
    assert sender["not_a_buffer"][0] == "TypeError" and "int" in sender["not_a_buffer"][1]
    assert sender["objects"][0] == "TypeError" and "lowercase" in sender["objects"][1]
    assert sender["count"][0] == "ValueError" and "count 4" in sender["count"][1]
    assert sender["type"][0] == "TypeError" and "datatype" in sender["type"][1]
    assert sender["items"][0] == "ValueError" and "2 to 4 items" in sender["items"][1]
    assert receiver["truncated"] == ("ValueError", "Recv: 5 entries arrived for a buffer of 4 "
                                                   "(message truncated)")
    assert receiver["dtype"][0] == "TypeError" and "float64" in receiver["dtype"][1]
    assert receiver["irecv_truncated"][0] == "ValueError"  # out of the wait, not lost
    assert receiver["readonly"][0] == "ValueError" and "read-only" in receiver["readonly"][1]
    for out in res:
        assert out["allreduce_sizes"][0] == "ValueError" and "differ" in out["allreduce_sizes"][1]
        assert out["gather_split"][0] == "ValueError" and "2 blocks" in out["gather_split"][1]
        assert out["reduce_local"][0] == "ValueError"
        assert out["reduce_scatter"][0] == "ValueError" and "add up to 4" in out["reduce_scatter"][1]
        assert out["maxloc"][0] == "ValueError" and "pair datatypes" in out["maxloc"][1]


def _left_heavy(a, b):
    return 0.5 * a + b  # not commutative, so the bits show order and bracketing


class SameBits(ft.Rank):
    """Buffer reductions against the lowercase ones on the same arrays, with a user op."""

    async def main(self):
        comm, r = self.comm, self.rank
        x = np.sin(np.arange(6) * (r + 1.3)) * 10 ** r
        out = {}
        for name, op in (("sum", ft.SUM), ("user", _left_heavy)):
            got = np.empty(6)
            await comm.Allreduce(x, got, op)
            rooted = np.empty(6)
            await comm.Reduce(x, rooted, op, root=self.size - 1)
            nb = np.empty(6)
            await comm.Iallreduce(x, nb, op).wait()
            out[name] = (got.tobytes(), await comm.allreduce(x, op),
                         rooted.tobytes() if r == self.size - 1 else None, nb.tobytes())
        return out


@pytest.mark.parametrize("ranks", [3, 4, 5])
def test_reductions_are_the_lowercase_bits_on_every_rank(ranks):
    res = run(SameBits, "sim", ranks=ranks).results
    for name in ("sum", "user"):
        first = res[0][name][0]
        for r, (got, lower, rooted, nb) in enumerate(r_[name] for r_ in res):
            assert got == first == nb == lower.tobytes()
            if r == ranks - 1:
                assert rooted == first


class Buffers(ft.Rank):
    """A solver-like loop of buffer calls, every kind once an iteration, with numpy state
    registered: a halo ring (Sendrecv), Isend/Irecv, Sendrecv_replace, a large rooted
    Bcast (out of band), an in-place Allreduce, Gatherv/Scatterv, Allgatherv, Alltoallv,
    Reduce_scatter_block, Scan, a nonblocking Iallreduce and a message of varying length
    received by Probe + Get_count."""

    async def main(self, iterations: int):
        comm, r, n = self.comm, self.rank, self.size
        right, left = (r + 1) % n, (r - 1) % n
        counts = [k + 1 for k in range(n)]
        displs = [sum(counts[:k]) for k in range(n)]
        self.register("u", np.linspace(0.0, 1.0, 8) + r)
        self.register("trace", [])
        halo, ring, big = np.empty(8), np.empty(4), np.empty(BIG // 8)
        async for it in self.iterations(iterations):
            u, root = self.u, it % n
            await comm.Sendrecv(u, right, 1, halo, left, 1)
            req = comm.Irecv(ring, left, 2)
            await comm.Isend([u, 4], right, 2).wait()
            await req.wait()
            swapped = u.copy()
            await comm.Sendrecv_replace(swapped, left, 3, right, 3)
            if r == root:
                big[:] = np.cos(np.arange(big.size) * (it + 1.0))
            await comm.Bcast(big, root=root)
            total = u.copy()
            await comm.Allreduce(ft.IN_PLACE, total)
            gathered = np.empty(sum(counts))
            await comm.Gatherv(np.full(r + 1, it + r * 0.5), [gathered, counts, displs], root)
            piece = np.empty(r + 1)
            await comm.Scatterv([gathered * 2.0, counts, displs] if r == root else None,
                                piece, root)
            everyone = np.empty(sum(counts))
            await comm.Allgatherv(piece, [everyone, (counts, displs)])
            swap_out = np.empty(n * 2)
            await comm.Alltoallv([np.repeat(u[:n], 2), 2], [swap_out, [2] * n])
            block = np.empty(2)
            await comm.Reduce_scatter_block(np.tile(u[:2], n), block, ft.MAX)
            prefix = np.empty(8)
            await comm.Scan(u, prefix)
            most = np.empty(8)
            await comm.Iallreduce(u, most, ft.MAX).wait()
            # a message whose length its receiver learns by probing (large every other
            # iteration: out of band), received into a buffer of that many entries
            entries = 3 + it + r if it % 2 else BIG // 8 + it + r
            sent = comm.Isend(np.full(entries, u[0]), right, 4)
            status = ft.Status()
            await comm.Probe(left, 4, status)
            probed = np.empty(status.Get_count(ft.DOUBLE))
            await comm.Recv(probed, left, 4)
            await sent.wait()
            self.u = (0.5 * u + 0.1 * halo + 0.01 * swapped + 1e-3 * total / n
                      + 1e-4 * big[:8] + 1e-5 * prefix + 1e-6 * most
                      + 1e-7 * probed.sum() / probed.size)
            self.u[:4] += 1e-3 * ring
            self.trace.append((float(everyone.sum()), float(swap_out.sum()),
                               float(block.sum()), int(it)))
        return self.u.tobytes(), list(self.trace)


def test_buffers_program_gives_its_answer(transport):
    res = run(Buffers, transport, ranks=4, args=(3,)).results
    n = 4
    counts = [1, 2, 3, 4]
    for r, (_, trace) in enumerate(res):
        for everyone, swap_out, block, it in trace:
            root_gather = sum((it + k * 0.5) * 2.0 * counts[k] for k in range(n))
            assert everyone == root_gather
    assert len({u for u, _ in res}) == n  # each rank its own state


@pytest.mark.parametrize("protocol", sorted(setups()))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_buffers_survive_a_kill_under_every_protocol(transport, protocol):
    """Buffer messages are ordinary envelopes: logged, flushed, replayed and piggybacked
    like any other, so a kill under every stack gives the failure-free bits."""
    setup = setups()[protocol]
    cls = type(f"Buffers_{protocol}", (*setup.mixins, Buffers), {})
    r = run(cls, transport, ranks=4, args=(8,), spares=min(setup.spares, 1),
            chaos=ft.Chaos(kill=[(1, 5)]), **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == _reference()


@functools.cache
def _reference():
    return run(Buffers, "sim", ranks=4, args=(8,)).results


@pytest.mark.ray
def test_buffers_survive_a_sigkill_on_ray(ray_session):
    """What only Ray shows: a real process death in a program whose large Bcast travels
    through the object store (put there by the root that owns it), a spare taking the
    dead rank's place and the survivors rolled back: the failure-free bits."""
    setup = setups()["standby"]
    cls = type("Buffers_standby", (*setup.mixins, Buffers), {})
    r = run(cls, "ray", ranks=4, args=(8,), spares=1, chaos=ft.Chaos(kill=[(1, 5)]),
            **setup.options)
    assert r.metrics["recoveries"] >= 1 and r.metrics["kills_unfired"] == []
    assert r.results == _reference()
