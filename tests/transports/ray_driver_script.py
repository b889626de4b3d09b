"""Runs in its own Python process (see test_ray_driver.py): the two driver-side scripts
one after the other in one process, so that the embedded Ray starts once for both (a
start costs a process, its imports and Ray's own processes, and the deaths run takes
the rank processes the thread runs left). First ``ray_threads_script`` (runs from
threads that end, which start the embedded Ray from a thread), then
``ray_deaths_script MARKER`` on that Ray. A part that fails does not stop the other:
each ends with a line ``PART name code`` (0: it passed; else its traceback is on
stderr)."""
import sys
import traceback

import ray_deaths_script
import ray_threads_script


def part(name: str, main, *args) -> None:
    try:
        code = main(*args)
    except BaseException:  # noqa: BLE001 - told to the test, the next part still runs
        traceback.print_exc()
        code = 1
    print(f"PART {name} {code}", flush=True)


if __name__ == "__main__":
    part("threads", ray_threads_script.main)
    part("deaths", ray_deaths_script.main, sys.argv[1])
