"""User-shaped programs whose receives are nondeterministic (beside ``shapes.Farm``, the
task farm): mpi4py's ex-2.29 (``Probe(ANY_SOURCE)`` then a named ``recv``) and a server
that serves whichever of its ``irecv`` requests ``waitany`` completes first.

Both are ported from mpi4py with the smallest honest change (``async def main``,
``await``, ``register``, ``iterations()``). Their answers depend on the order messages
arrive in, so a run is checked for consistency, not against a failure-free run: what
the receiver says it took, in which order, must be what each sender holds
(``consistent``); a restarted receiver that took another order than its first life
disagrees with the senders that survived.
"""
import ftactors as ft


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


def consistent(taken: list, got: dict) -> bool:
    """Whether the server's view ``taken`` (``(client, ..., value)`` in serving order)
    agrees with what each client got (``got[client]``: its values in order), every
    message taken exactly once."""
    by_client: dict = {}
    for row in taken:
        by_client.setdefault(row[0], []).append(row[-1])
    return by_client == {c: list(v) for c, v in got.items()}


def farm_check(got: list, reference: list) -> bool:
    """``sim-check --check`` for ``shapes.Farm``: the failure-free task results, and every
    task done exactly once (the workers' counts add up; which worker did which may differ
    from run to run)."""
    return got[0] == reference[0] and sum(got[1:]) == len(reference[0])
