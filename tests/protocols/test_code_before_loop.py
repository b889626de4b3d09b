"""Code before the ``iterations()`` loop after a restore (issue 24, item 3).

A restored rank runs ``main()`` again from the top. Its code before the loop gets the
messages it received in its first life again; whatever it does to the registered
attributes, the resumed loop starts from the checkpoint's values; and if it does not make
the receives it made in its first life (skipped when ``self.restored``, or one more), the
rank raises a ProtocolError naming the messages instead of handing them to the wrong
receive. Checked for every protocol's restore path (a spare and survivors rolled back in
place, a restarted group or cluster, a decoded rank), with the issue's program, a
numpy halo exchange that stops on convergence on odd rank counts, several loops, state
registered inside the loop, and code before the loop that legitimately reads again.
"""
import asyncio
from pathlib import Path

import numpy as np
import pytest

import ftactors as ft
from ftactors.protocols import (DDVPiggyback, GroupCoordination, ReadyMessageFlush,
                                RSBackup, StandbyReplacement)

# each protocol with settings that checkpoint every 2 iterations (DDVPiggyback: every
# 2.5 virtual seconds, one iteration a second), so a kill at iteration 5 restores a rank
# inside its loop, past the code before it; ranks: how many the protocol needs at least
SETUPS = {
    "standby": (StandbyReplacement, {"spares": 1, "backup_interval": 2}),
    "ready-flush": (ReadyMessageFlush, {"checkpoint_interval": 2}),
    "groups": (GroupCoordination, {"groups": "fixed:1", "group_checkpoint_interval": 2}),
    "hc3i": (DDVPiggyback, {"clusters": "one", "clc_interval_s": 2.5}),
    "rs": (RSBackup, {"rs_group_size": 2, "rs_ranks_per_node": 1, "rs_interval": 2}),
}
MIN_RANKS = {"rs": 4}
PAUSE_S = {"hc3i": 1.0}  # virtual seconds per iteration, for the CLC timer


def stacked(name: str, program: type) -> type:
    return type(f"{SETUPS[name][0].__name__}{program.__name__}", (SETUPS[name][0], program), {})


def run(name: str, program: type, ranks: int, transport: str, kills, **kwargs):
    options = dict(SETUPS[name][1])
    return ft.run(stacked(name, program), ranks, transport=transport, timeout_s=120,
                  kwargs=kwargs, chaos=ft.Chaos(kill=kills), **options)


def resumed_in_loop(result) -> list:
    """The restored ranks' positions; a test of code before the loop needs them inside
    a loop (a restore to the start has nothing to protect)."""
    positions = [e.detail["position"] for e in result.events_of("restored")]
    assert positions and all(p is not None for p in positions), positions
    return positions


NOT_AGAIN = (r"restored at iteration \d+ of its iterations\(\) loop: the code before that "
             r"loop did not receive again what it received there in its first life: "
             r"1 message from rank \d \(tag 0, communicator 'w'\)")

# ----------------------------------------------------------------- the issue's program


class Halo(ft.Rank):
    """The issue's reproduction: ``halo`` is registered, set by a ``sendrecv`` before the
    loop and by one in every iteration; ``skip`` skips the code before the loop when
    ``self.restored`` (what a user tries once re-running it gave a wrong answer)."""

    async def main(self, skip=False, iterations=10, pause_s=0.0, setup_s=0.0):
        comm, r, n = self.comm, self.rank, self.size
        self.register("halo", None)
        self.register("acc", 0)
        if not (skip and self.restored):
            self.halo = await comm.sendrecv(100 + r, dest=(r + 1) % n, source=(r - 1) % n)
            await asyncio.sleep(setup_s)  # more set-up work (virtual seconds on sim)
        async for i in self.iterations(iterations):
            if pause_s:
                await asyncio.sleep(pause_s)
            self.acc = self.acc * 3 + self.halo  # the halo it has: restored, or received
            self.halo = await comm.sendrecv(self.halo + i, dest=(r + 1) % n,
                                            source=(r - 1) % n)
        return self.acc


_REFERENCES = {}


def reference(program: type, ranks: int, **kwargs) -> list:
    key = (program, ranks, tuple(sorted(kwargs.items())))
    if key not in _REFERENCES:
        _REFERENCES[key] = ft.run(program, ranks, transport="local", kwargs=kwargs).results
    return _REFERENCES[key]


ISSUE_CASES = ([("standby", t) for t in ("local", "sim", "ray")]
               + [(p, t) for p in ("ready-flush", "groups", "rs") for t in ("local", "sim")]
               + [("hc3i", "sim")])


@pytest.mark.parametrize("name, transport", ISSUE_CASES)
def test_code_before_the_loop_run_again_leaves_the_restored_state_alone(name, transport,
                                                                          request):
    """Run again as documented, the ``sendrecv`` before the loop gets its old message
    back; before the fix ``self.halo = ...`` then overwrote the restored halo and the
    answer was wrong. Now the loop resumes with the checkpoint's halo."""
    if transport == "ray":
        request.getfixturevalue("ray_session")
    ranks, pause_s = MIN_RANKS.get(name, 2), PAUSE_S.get(name, 0.0)
    r = run(name, Halo, ranks, transport, [(0, 5)], pause_s=pause_s)
    resumed_in_loop(r)
    assert r.results == reference(Halo, ranks)


@pytest.mark.parametrize("name, transport", ISSUE_CASES)
def test_code_before_the_loop_skipped_is_an_error_naming_the_messages(name, transport,
                                                                       request):
    """Skipped when ``self.restored``, the logged message of the code before the loop was
    handed to the loop's first receive and every later one was off by one (a wrong
    answer). Now the rank raises at the loop, naming the message it did not take."""
    if transport == "ray":
        request.getfixturevalue("ray_session")
    ranks, pause_s = MIN_RANKS.get(name, 2), PAUSE_S.get(name, 0.0)
    with pytest.raises(ft.RankError, match=NOT_AGAIN):
        run(name, Halo, ranks, transport, [(0, 5)], skip=True, pause_s=pause_s)


class OneMore(ft.Rank):
    """After a restore the code before the loop makes one receive more than the first
    time (a user who "re-reads the halo" when ``self.restored``)."""

    async def main(self, iterations=10):
        comm, r, n = self.comm, self.rank, self.size
        self.register("acc", 0)
        halo = await comm.sendrecv(r, dest=(r + 1) % n, source=(r - 1) % n)
        if self.restored:
            halo = await comm.recv(source=(r - 1) % n)
        async for i in self.iterations(iterations):
            halo = await comm.sendrecv(halo + i, dest=(r + 1) % n, source=(r - 1) % n)
            self.acc = self.acc * 3 + halo
        return self.acc


@pytest.mark.parametrize("name, transport", [("standby", "local"), ("ready-flush", "sim"),
                                             ("groups", "sim")])
def test_a_receive_the_first_life_did_not_make_before_the_loop_is_an_error(name, transport):
    """Before the fix the extra receive took the loop's first message (or waited for one
    never sent again): the answer was wrong or the run hung. Now it raises at once."""
    with pytest.raises(ft.RankError, match=r"makes a receive \(source 1, tag any\) that it "
                                           r"did not make there in its first life"):
        run(name, OneMore, 2, transport, [(0, 5)])

# ------------------------------------------------- a user's program: numpy, break, 5 ranks


class Jacobi(ft.Rank):
    """1-D Jacobi on blocks with one ghost cell each side: set-up and a first halo
    exchange (numpy arrays, written into the registered array in place) before the
    loop; each iteration a sweep with the ghosts it has, the global change, then the
    halo exchange for the next sweep; a ``break`` once the change is below ``tol``."""

    async def main(self, n_local=3, max_iterations=80, tol=0.05, skip=False):
        r, n = self.rank, self.size
        self.register("u", None if self.restored else self._initial(n_local))
        self.register("changes", [])
        if not (skip and self.restored):
            await self._exchange()
        async for _ in self.iterations(max_iterations):
            u = self.u
            new = u.copy()
            new[1:-1] = 0.5 * (u[:-2] + u[2:])
            change = await self.comm.allreduce(float(np.abs(new - u).max()))
            self.u = new
            await self._exchange()
            self.changes.append(change)
            if change < tol:
                break
        return {"u": self.u, "changes": list(self.changes)}

    def _initial(self, n_local):
        u = np.zeros(n_local + 2)
        if self.rank == 0:
            u[0] = 1.0  # the fixed boundary; the other ghosts come from the neighbours
        return u

    async def _exchange(self):
        comm, r, u = self.comm, self.rank, self.u
        reqs = []
        if r > 0:
            reqs.append(comm.isend(u[1:2].copy(), dest=r - 1, tag=1))
        if r < self.size - 1:
            reqs.append(comm.isend(u[-2:-1].copy(), dest=r + 1, tag=2))
        if r > 0:
            u[0:1] = await comm.recv(source=r - 1, tag=2)
        if r < self.size - 1:
            u[-1:] = await comm.recv(source=r + 1, tag=1)
        await ft.waitall(reqs)


JACOBI_CASES = [("standby", 5, "local"), ("standby", 5, "sim"),
                ("ready-flush", 3, "local"), ("ready-flush", 5, "sim"),
                ("groups", 5, "local"), ("groups", 3, "sim")]


@pytest.mark.parametrize("name, ranks, transport", JACOBI_CASES)
def test_a_numpy_halo_exchange_before_the_loop_that_stops_on_convergence(name, ranks,
                                                                         transport, request):
    """The exchange before the loop writes old ghost values into the restored array in
    place; the sweep that resumes uses them. Before the fix the run converged to other
    bits (or at another iteration); now it equals the failure-free run."""
    if transport == "ray":
        request.getfixturevalue("ray_session")
    want = reference(Jacobi, ranks)
    assert len(want[0]["changes"]) < 80  # the loop ends with the break
    r = run(name, Jacobi, ranks, transport, [(ranks // 2, 9)])
    resumed_in_loop(r)
    for got, expected in zip(r.results, want):
        assert got["changes"] == expected["changes"]
        assert np.array_equal(got["u"], expected["u"])


def test_the_numpy_exchange_skipped_is_an_error_too():
    with pytest.raises(ft.RankError, match=r"did not receive again what it received there "
                                           r"in its first life: 1 message from rank \d "
                                           r"\(tag [12], communicator 'w'\)"):
        run("standby", Jacobi, 5, "sim", [(2, 9)], skip=True)


def docs_example() -> type:
    """The site's example of code before the loop (docs/writing.md), as it is written
    there."""
    text = (Path(__file__).resolve().parents[2] / "docs/writing.md").read_text()
    code = text.split("## Code before the loop")[1].split("```python")[1].split("```")[0]
    namespace = {"ft": ft}
    exec(code, namespace)
    return namespace["Jacobi"]


@pytest.mark.parametrize("name", ["standby", "ready-flush"])
def test_the_docs_example_recovers_bit_for_bit(name):
    program = docs_example()
    want = ft.run(program, 5, transport="sim").results
    r = run(name, program, 5, "sim", [(2, 9)])
    resumed_in_loop(r)
    assert all(np.array_equal(got, u) for got, u in zip(r.results, want))

# ----------------------------------------- several loops, state registered inside a loop


class TwoPhases(ft.Rank):
    """Two loops, an exchange before each that writes registered state, and a second
    phase that registers ``scale`` again with a fresh value (``register`` returns it:
    what the first life did)."""

    async def main(self, first=8, second=8):
        comm, r, n = self.comm, self.rank, self.size
        right, left = (r + 1) % n, (r - 1) % n
        self.register("scale", 1)
        self.register("acc", 0)
        self.register("halo", None)
        self.halo = await comm.sendrecv(r, dest=right, source=left)
        async for i in self.iterations(first):
            self.acc = self.acc * 3 + self.scale * self.halo
            self.halo = await comm.sendrecv(self.halo * 2 + i, dest=right, source=left)
            self.scale += 1
        self.register("scale", 7)
        self.halo = await comm.sendrecv(-r, dest=right, source=left)
        async for i in self.iterations(second):
            self.acc = self.acc * 3 + self.scale * self.halo
            self.halo = await comm.sendrecv(self.halo + i, dest=right, source=left)
            self.scale += 2
        return self.acc


@pytest.mark.parametrize("name, transport", [("standby", "local"), ("ready-flush", "sim"),
                                             ("groups", "local")])
@pytest.mark.parametrize("first, kill, loop", [(8, (0, 5), 0), (4, (1, 7), 1)],
                         ids=["first-loop", "second-loop"])
def test_several_loops(name, transport, first, kill, loop):
    """Killed in the first loop, the rank resumes there and registers ``scale`` afresh
    after it (before the fix: the checkpoint's value, stale by then); killed in the
    second (a kill at an iteration the first loop does not have), the first loop is
    skipped and the exchanges before both loops run again."""
    r = run(name, TwoPhases, 3, transport, [kill], first=first)
    assert {p[0] for p in resumed_in_loop(r)} == {loop}
    assert r.results == reference(TwoPhases, 3, first=first)


class LateRegister(ft.Rank):
    """Registers ``seen`` inside the loop, at its first iteration only: a rank restored
    later in the loop never runs that line again."""

    async def main(self, iterations=10):
        comm, r, n = self.comm, self.rank, self.size
        self.register("acc", 0)
        async for i in self.iterations(iterations):
            if i == 0:
                self.register("seen", [])
            got = await comm.sendrecv((r, i), dest=(r + 1) % n, source=(r - 1) % n)
            self.seen.append(got)
            self.acc = self.acc * 3 + got[1]
        return self.acc, self.seen


@pytest.mark.parametrize("name, transport", [("standby", "local"), ("standby", "sim"),
                                             ("ready-flush", "local")])
def test_state_registered_inside_the_loop_is_restored(name, transport):
    """Before the fix a spare had no ``seen`` (AttributeError) and a survivor rolled back
    in place kept the one of the life it abandoned; now ``seen`` is the checkpoint's."""
    r = run(name, LateRegister, 2, transport, [(0, 5)])
    resumed_in_loop(r)
    assert r.results == reference(LateRegister, 2)


class Aliased(ft.Rank):
    """Works on what ``register`` returned, held in locals (in its first life they are
    the registered objects), and writes one of them in place before the loop."""

    async def main(self, iterations=10):
        comm, r, n = self.comm, self.rank, self.size
        acc = self.register("acc", np.zeros(3))
        hist = self.register("hist", [])
        acc[0] = await comm.sendrecv(float(r + 1), dest=(r + 1) % n, source=(r - 1) % n)
        async for i in self.iterations(iterations):
            got = await comm.sendrecv(acc.copy(), dest=(r + 1) % n, source=(r - 1) % n)
            acc += 0.5 * got + i
            hist.append(float(acc.sum()))
        return self.acc.tolist(), list(self.hist)


@pytest.mark.parametrize("name, transport", [("standby", "local"), ("ready-flush", "sim"),
                                             ("groups", "local")])
def test_what_register_returned_stays_the_registered_state(name, transport):
    """The arrays and lists ``register`` handed the code before the loop are the ones
    the resumed loop works on, with the checkpoint's contents back in them (before the
    fix the in-place write before the loop stayed; bound to fresh copies instead, the
    locals would drift from ``self.acc`` and ``self.hist``)."""
    r = run(name, Aliased, 3, transport, [(1, 5)])
    resumed_in_loop(r)
    assert r.results == reference(Aliased, 3)

# ---------------------------------------------- code before the loop that reads again


class Setup(ft.Rank):
    """Reads its parameters before the loop (a broadcast, a split; none of it
    registered) and uses them in the loop: after a restore it must read them again."""

    async def main(self, iterations=10):
        comm, r = self.comm, self.rank
        self.register("acc", 0)
        params = await comm.bcast({"step": 3, "base": 11} if r == 0 else None)
        pairs = await comm.split(r // 2)
        async for i in self.iterations(iterations):
            total = await pairs.allreduce(self.acc + r + i)
            self.acc = (self.acc * params["step"] + total) % 1_000_003 + params["base"]
        return self.acc


@pytest.mark.parametrize("name, transport", [("standby", "local"), ("ready-flush", "sim"),
                                             ("groups", "sim"), ("rs", "local")])
def test_code_before_the_loop_that_reads_its_parameters_again(name, transport):
    """Not a fix: re-reading before the loop was right before and must stay right (the
    receives of the bcast and the split are served from the first life's messages)."""
    r = run(name, Setup, 4, transport, [(1, 5)])
    resumed_in_loop(r)
    assert r.results == reference(Setup, 4)


@pytest.mark.parametrize("skip", [False, True])
def test_a_cluster_checkpoint_cut_before_the_first_loop(skip):
    """Not a fix: DDVPiggyback's parts taken during set-up after the exchange (at 2.5
    and 5 virtual seconds; the loop starts at 6, the next CLC would be in iteration 1)
    are the start of the run plus the messages received so far. Restored there, the rank
    is not ``restored`` (no registered state, no position): it runs the code before the
    loop again, receives the logged message again, and goes on."""
    r = run("hc3i", Halo, 2, "sim", [(0, 1)], skip=skip, pause_s=1.0, setup_s=6.0)
    assert [e.detail["position"] for e in r.events_of("restored")] == [None, None]
    assert r.results == reference(Halo, 2)
