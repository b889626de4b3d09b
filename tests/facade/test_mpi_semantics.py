"""The facade's MPI semantics beyond mpi4py's own tests: what a cancelled receive does, a
CancelledError out of main(), when a synchronous send completes (and that it survives
every protocol's recovery), nonblocking collectives in call order, scan's bracketing."""
import asyncio

import pytest

import ftactors as ft
from ftactors.tools.simcheck import setups


@pytest.fixture(params=["local", "sim"])
def transport(request):
    """Protocol and facade logic: local and sim (Ray adds nothing here)."""
    return request.param


def run(cls, transport, ranks=2, **kw):
    return ft.run(cls, ranks=ranks, transport=transport, **{"timeout_s": 120, **kw})


class CancelledReceive(ft.Rank):
    async def main(self):
        comm = self.comm
        if self.rank == 1:
            await comm.recv(source=0, tag=1)              # rank 0 has cancelled
            await comm.send("late", dest=0, tag=7)
            return None
        req = comm.irecv(source=1, tag=7)
        req.cancel()
        st = ft.Status()
        tested = req.test(st)
        after = bool(req)
        waited = await req.wait()
        await comm.send("go", dest=1, tag=1)
        later = await comm.recv(source=1, tag=7)          # the message was not taken
        return tested, st.cancelled, after, waited, later


def test_cancelled_irecv_completes_and_leaves_its_message(transport):
    assert run(CancelledReceive, transport).results[0] == ((True, None), True, False, None, "late")


class CancelledErrorOut(ft.Rank):
    async def main(self):
        if self.rank == 1:
            raise asyncio.CancelledError()
        return 0


def test_cancelled_error_out_of_main_is_a_rank_error(transport):
    with pytest.raises(ft.RankError) as info:
        run(CancelledErrorOut, transport, timeout_s=60)
    assert info.value.rank == 1
    assert "CancelledError" in str(info.value)


class SsendWaitsForTheReceive(ft.Rank):
    """Rank 1 confirms that rank 0's synchronous message has arrived, and only then rank
    0 tests its request: still not complete, since rank 1 has not received it yet."""

    async def main(self):
        comm = self.comm
        if self.rank == 0:
            req = comm.issend("sync", dest=1, tag=5)
            await comm.send("plain", dest=1, tag=6)       # after the synchronous one (FIFO)
            await comm.recv(source=1, tag=8)              # rank 1 has both, received neither
            before = (req.test(), bool(req))
            await comm.send("receive it now", dest=1, tag=9)
            await req.wait()
            return before, bool(req)
        if self.rank == 1:
            await comm.probe(source=0, tag=6)
            arrived = comm.iprobe(source=0, tag=5)
            await comm.send("both here", dest=0, tag=8)
            await comm.recv(source=0, tag=9)
            return arrived, await comm.recv(source=0, tag=5), await comm.recv(source=0, tag=6)
        return None


def test_issend_completes_only_once_the_receive_started(transport):
    r = run(SsendWaitsForTheReceive, transport).results
    assert r[0] == (((False, None), True), False)
    assert r[1] == (True, "sync", "plain")


class SsendRing(ft.Rank):
    """Synchronous sends around a ring in a safe-point loop, two ways: receives posted
    first (irecv, then ssend), and blocking ssend/recv by parity."""

    async def main(self, rounds: int):
        comm = self.comm
        self.register("acc", 0)
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        async for it in self.iterations(rounds):
            req = comm.irecv(source=left, tag=it)
            await comm.issend(self.acc + self.rank, dest=right, tag=it).wait()
            got = await req.wait()
            if self.rank % 2 == 0:
                await comm.ssend(got * 3 + it, dest=right, tag=100 + it)
                got2 = await comm.recv(source=left, tag=100 + it)
            else:
                got2 = await comm.recv(source=left, tag=100 + it)
                await comm.ssend(got * 3 + it, dest=right, tag=100 + it)
            self.acc = (self.acc * 7 + got + got2) % 1_000_003
        return self.acc


def _ssend_reference(ranks: int, rounds: int) -> list:
    return run(SsendRing, "sim", ranks=ranks, args=(rounds,)).results


@pytest.mark.parametrize("protocol", sorted(setups()))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_ssend_survives_a_kill_under_every_protocol(transport, protocol):
    """The acknowledgements are control messages the endpoint takes itself; a rollback
    (in place, a restart, a group or cluster alone) must neither lose one (a sender would
    wait for ever) nor change the results."""
    setup = setups()[protocol]
    cls = type(f"SsendRing_{protocol}", (*setup.mixins, SsendRing), {})
    r = run(cls, transport, ranks=4, args=(10,), spares=min(setup.spares, 1),
            chaos=ft.Chaos(kill=[(1, 5)]), **setup.options)
    assert r.metrics["recoveries"] >= 1
    assert r.results == _ssend_reference(4, 10)


def _concat(a, b):
    return a + b  # strings: not commutative, shows order and bracketing


class NonblockingInOrder(ft.Rank):
    """Nonblocking and blocking collectives interleaved on one communicator: each gets
    its own values (they run in call order on every rank)."""

    async def main(self):
        comm = self.comm
        r1 = comm.ibcast(f"first from {self.rank}", root=0)
        r2 = comm.iallgather(self.rank)
        blocking = await comm.bcast(f"second from {self.rank}", root=1)
        r3 = comm.iscatter([f"to {i}" for i in range(self.size)] if self.rank == 2 else None,
                           root=2)
        r4 = comm.ireduce(f"<{self.rank}>", op=_concat, root=1)
        barrier = comm.ibarrier()
        values = await ft.waitall([r1, r2, r3, r4, barrier])
        scan = await comm.scan(f"<{self.rank}>", op=_concat)
        exscan = await comm.exscan(f"<{self.rank}>", op=_concat)
        return [blocking, *values, scan, exscan, bool(r1)]


def test_nonblocking_collectives_run_in_call_order(transport):
    n = 5
    for r, out in enumerate(run(NonblockingInOrder, transport, ranks=n).results):
        assert out == ["second from 1", "first from 0", list(range(n)), f"to {r}",
                       "".join(f"<{i}>" for i in range(n)) if r == 1 else None, None,
                       "".join(f"<{i}>" for i in range(r + 1)),
                       "".join(f"<{i}>" for i in range(r)) or None, False]


class ScanBits(ft.Rank):
    async def main(self):
        x = 0.1 * (self.rank + 1) * 10.0 ** (self.rank % 5 - 2)
        return await self.comm.scan(x), await self.comm.exscan(x)


def test_scan_is_bit_identical_across_runs_and_transports():
    runs = [run(ScanBits, t, ranks=7).results for t in ("local", "sim", "sim")]
    assert runs[0] == runs[1] == runs[2]


class CollectiveInputs(ft.Rank):
    async def main(self):
        comm = self.comm
        return (await comm.scatter(None, root=1),
                await comm.alltoall(None),
                await comm.scatter((i * i for i in range(self.size)) if self.rank == 0 else None),
                await comm.alltoall(range(self.rank, self.rank + self.size)))


def test_scatter_alltoall_take_none_and_any_iterable(transport):
    n = 3
    for r, out in enumerate(run(CollectiveInputs, transport, ranks=n).results):
        assert out == (None, [None] * n, r * r, [i + r for i in range(n)])


class ProcNull(ft.Rank):
    async def main(self):
        comm = self.comm
        st = ft.Status()
        await comm.send("x", dest=ft.PROC_NULL, tag=3)
        got = await comm.recv(source=ft.PROC_NULL, tag=3, status=st)
        probed = comm.iprobe(source=ft.PROC_NULL)
        swapped = await comm.sendrecv("y", dest=ft.PROC_NULL, source=ft.PROC_NULL)
        return got, st.source, st.tag, st.count, probed, swapped, comm.iprobe()


def test_proc_null_moves_nothing(transport):
    for out in run(ProcNull, transport).results:
        assert out == (None, ft.PROC_NULL, ft.ANY_TAG, 0, True, None, False)


def test_status_and_request_errors():
    with pytest.raises(TypeError, match="Status"):
        ft.Status(123)
    st = ft.Status()
    st.source, st.tag, st.error, st.count = 3, 4, 5, 6
    copy = ft.Status(st)
    assert (copy.source, copy.tag, copy.error, copy.count, copy.cancelled) == (3, 4, 5, 6, False)
    assert not ft.Request()


class PollingRing(ft.Rank):
    """Waits for its left neighbour's message by polling, as MPI programs do: ``iprobe``
    or an irecv's ``test`` in a loop with ``sleep(0)`` between polls."""

    async def main(self, rounds=5, how="iprobe"):
        comm, n, r = self.comm, self.size, self.rank
        total, polls = 0.0, 0
        for k in range(rounds):
            send = comm.isend(float(k * r), dest=(r + 1) % n, tag=9)
            if how == "iprobe":
                while not comm.iprobe(source=(r - 1) % n, tag=9):
                    polls += 1
                    await asyncio.sleep(0)
                total += await comm.recv(source=(r - 1) % n, tag=9)
            else:
                req = comm.irecv(source=(r - 1) % n, tag=9)
                while not (done := req.test())[0]:
                    polls += 1
                    await asyncio.sleep(0)
                total += done[1]
            await send.wait()
        return total, polls


@pytest.mark.parametrize("how", ["iprobe", "test"])
def test_a_program_that_polls_for_its_messages_finishes(transport, how):
    """On sim, messages arrive by timers: a poller kept the loop busy at one virtual
    instant for ever, so the run hung past its own timeout (``polled_in_vain``)."""
    result = run(PollingRing, transport, ranks=3, kwargs={"how": how}, timeout_s=30)
    assert [total for total, _ in result.results] == [20.0, 0.0, 10.0]
    assert sum(polls for _, polls in result.results) > 0  # it did poll


class PendingIallreduce(ft.Rank):
    """An ``Iallreduce`` every iteration, waited for at once; at the end, how many
    nonblocking-collective tasks of any execution are still pending."""

    async def main(self, iterations=8):
        self.register("acc", 0.0)
        async for it in self.iterations(iterations):
            out = [0.0]
            req = self.comm.iallreduce(float(self.rank + it))
            out[0] = await req.wait()
            self.acc += out[0]
        await self.comm.barrier()
        left = [t for t in asyncio.all_tasks()
                if "Communicator._after" in repr(t.get_coro()) and not t.done()]
        return self.acc, len(left)


@pytest.mark.parametrize("protocol", ["standby", "ready-flush", "groups"])
def test_a_restore_cancels_the_abandoned_executions_nonblocking_collectives(
        transport, protocol):
    """Rank 1 dies at a safe point while the others wait in an iallreduce that needs
    it. The restored ranks run their own; the abandoned execution's waited for ever on
    receives the restore dropped (on Ray: "Task was destroyed but it is pending!")."""
    setup = setups()[protocol]
    cls = type(f"PendingIallreduce_{protocol}", (*setup.mixins, PendingIallreduce), {})
    r = run(cls, transport, ranks=4, spares=min(setup.spares, 1),
            chaos=ft.Chaos(kill=[(1, 4)]), **setup.options)
    assert r.metrics["recoveries"] == 1
    assert r.results == [(160.0, 0)] * 4
