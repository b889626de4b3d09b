"""Runs in a Python process of its own (``ray_driver_script.py``, first; see
test_ray_driver.py): ft.run on the embedded Ray from a thread that then ends, from a
second thread, from the main thread, and as ``await ft.run_async`` in an event loop that
runs in a thread. Prints one line per run and ``ALL RUNS FINISHED`` at the end; any
failure raises (exit code 1)."""
import asyncio
import os
import sys
import threading
import time

import ftactors as ft


class Ring(ft.Rank):
    async def main(self, rounds):
        token = 0
        for _ in range(rounds):
            if self.rank == 0:
                await self.comm.send(token + 1, dest=(self.rank + 1) % self.size)
                token = await self.comm.recv(source=(self.rank - 1) % self.size)
            else:
                token = await self.comm.recv(source=(self.rank - 1) % self.size)
                await self.comm.send(token + 1, dest=(self.rank + 1) % self.size)
        return token


RUN = dict(ranks=3, args=(5,), timeout_s=90)


def check(label: str, result) -> None:
    assert result.results[0] == 15, result.results
    print(f"{label}: ring of 3 ranks gave {result.results[0]}", flush=True)


def in_thread(label: str, body) -> None:
    """Run ``body`` in a new thread, wait until the thread is gone from the OS (its native
    id no longer lists under /proc/self/task), and re-raise what it raised."""
    failure = []

    def target():
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failure.append(exc)

    t = threading.Thread(target=target, name=label)
    t.start()
    t.join()
    task = f"/proc/self/task/{t.native_id}"
    deadline = time.monotonic() + 30
    while os.path.exists(task):  # the OS thread outlives join() by a little
        if time.monotonic() > deadline:
            raise AssertionError(f"thread {label} still listed in /proc after 30 s")
        time.sleep(0.01)
    if failure:
        raise failure[0]
    print(f"{label}: thread ended", flush=True)


def ray_answers() -> None:
    """The embedded Ray's processes are all alive and its GCS answers."""
    import ray
    node = ray._private.worker._global_node
    assert node.remaining_processes_alive(), "a process of the embedded Ray died"
    assert any(n["Alive"] for n in ray.nodes())


def main() -> int:
    in_thread("first", lambda: check("first (thread)", ft.run(Ring, **RUN)))
    ray_answers()
    in_thread("second", lambda: check("second (thread)", ft.run(Ring, **RUN)))
    check("third (main thread)", ft.run(Ring, **RUN))

    async def in_loop():
        check("fourth (run_async in a thread's event loop)", await ft.run_async(Ring, **RUN))
    in_thread("loop", lambda: asyncio.run(in_loop()))
    ray_answers()
    print("ALL RUNS FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
