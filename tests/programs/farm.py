"""User-shaped programs whose receives are nondeterministic: the classic task-pull farm
(``recv(ANY_SOURCE, ANY_TAG)``), mpi4py's ex-2.29 (``Probe(ANY_SOURCE)`` then a named
``Recv``) and a farm whose master waits with ``waitany`` on one ``irecv`` per worker.

Each is ported from mpi4py with the smallest honest change (``async def main``, ``await``,
``register``, ``iterations()``); their answers do not depend on the order messages
arrive in, so a failure-free run gives the reference answer, and a run with failures must
give the same one, with every task done exactly once.
"""
import ftactors as ft

READY, START, DONE, EXIT = 0, 1, 2, 3


def work(task: int) -> int:
    return task * task + 1


class Farm(ft.Rank):
    """Task-pull master/worker: the master loops over ``recv(ANY_SOURCE, ANY_TAG)`` and
    replies; each worker loops ``send READY / recv task / send DONE`` until told to exit.
    The master returns ``{task: (worker, result)}``; a worker, the tasks it did, in
    order (``farm_consistent`` checks the two agree)."""

    async def main(self, ntasks=12):
        comm = self.comm
        st = ft.Status()
        if self.rank == 0:
            self.register("results", {})
            self.register("next", 0)
            self.register("closed", 0)
            async for _ in self.iterations(10**9):
                if self.closed == self.size - 1:
                    break
                data = await comm.recv(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st)
                src, tag = st.Get_source(), st.Get_tag()
                if tag == READY:
                    if self.next < ntasks:
                        await comm.send(self.next, dest=src, tag=START)
                        self.next += 1
                    else:
                        await comm.send(None, dest=src, tag=EXIT)
                elif tag == DONE:
                    task, value = data
                    assert task not in self.results, f"task {task} done twice"
                    self.results[task] = (src, value)
                else:
                    self.closed += 1
            return dict(sorted(self.results.items()))
        self.register("done", [])
        async for _ in self.iterations(10**9):
            await comm.send(None, dest=0, tag=READY)
            task = await comm.recv(source=0, tag=ft.ANY_TAG, status=st)
            if st.Get_tag() != START:
                break
            await comm.send((task, work(task)), dest=0, tag=DONE)
            self.done.append(task)
        await comm.send(None, dest=0, tag=EXIT)
        return self.done


class ProbeAny(ft.Rank):
    """mpi4py's ex-2.29 shape: every rank but the last sends ``rounds`` messages to the
    last one, which loops ``Probe(ANY_SOURCE)`` then ``recv(source=status.source)``.
    Each message is answered with the receiver's running checksum of the order it took
    them in, which the sender keeps: what the senders hold depends on that order, so a
    survivor's view and a replayed order must agree (``consistent``). The last rank
    returns ``(source, i, checksum)`` in the order it took them; the others the
    checksums they got."""

    async def main(self, rounds=6):
        comm, last = self.comm, self.size - 1
        if self.rank != last:
            self.register("got", [])
            async for i in self.iterations(rounds):
                await comm.send((self.rank, i), dest=last, tag=7)
                self.got.append(await comm.recv(source=last, tag=8))
            return self.got
        self.register("taken", [])
        self.register("sum", 0)
        st = ft.Status()
        async for _ in self.iterations(rounds * last):
            await comm.probe(source=ft.ANY_SOURCE, tag=ft.ANY_TAG, status=st)
            src, i = await comm.recv(source=st.Get_source(), tag=st.Get_tag())
            self.sum = (self.sum * 31 + src * 7 + i + 1) % 1000003
            self.taken.append((src, i, self.sum))
            await comm.send(self.sum, dest=src, tag=8)
        return self.taken


class WaitanyOrder(ft.Rank):
    """A server that posts one ``irecv`` per client each round and serves them in the
    order ``waitany`` completes them, handing out a running ticket number; each client
    keeps its tickets. The server returns ``(client, ticket)`` in serving order."""

    async def main(self, rounds=6):
        comm = self.comm
        if self.rank != 0:
            self.register("tickets", [])
            async for i in self.iterations(rounds):
                await comm.send(i, dest=0, tag=1)
                self.tickets.append(await comm.recv(source=0, tag=2))
            return self.tickets
        self.register("served", [])
        clients = list(range(1, self.size))
        async for _ in self.iterations(rounds):
            reqs = [comm.irecv(source=c, tag=1) for c in clients]
            for _ in clients:
                k, _i = await ft.Request.waitany(reqs)
                self.served.append((clients[k], len(self.served)))
                await comm.send(len(self.served) - 1, dest=clients[k], tag=2)
        return self.served


def farm_consistent(results: list, ntasks: int) -> bool:
    """Whether a ``Farm`` run did every task exactly once: the master holds every task's
    right result, and the tasks it credits each worker with are the ones that worker
    did."""
    master = results[0]
    if sorted(master) != list(range(ntasks)):
        return False
    if any(value != work(task) for task, (_, value) in master.items()):
        return False
    credited = {w: sorted(t for t, (src, _) in master.items() if src == w)
                for w in range(1, len(results))}
    return credited == {w: sorted(results[w]) for w in range(1, len(results))}


def consistent(taken: list, got: dict) -> bool:
    """Whether the server's view ``taken`` (``(client, ..., value)`` in serving order)
    agrees with what each client got (``got[client]``: its values in order), every
    message taken exactly once."""
    by_client: dict = {}
    for row in taken:
        by_client.setdefault(row[0], []).append(row[-1])
    return by_client == {c: list(v) for c, v in got.items()}


def farm_check(got: list, reference: list) -> bool:
    """``sim-check --check`` for ``Farm``: the failure-free task results, every task done
    exactly once (which worker did which may differ from run to run)."""
    values = {task: value for task, (_, value) in got[0].items()}
    return (values == {task: value for task, (_, value) in reference[0].items()}
            and farm_consistent(got, len(reference[0])))
