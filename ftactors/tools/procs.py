"""The process tree as ``/proc`` lists it (Linux): who started whom, and what each is.

Tools that strike processes from outside the framework need them: a node loss stops
every process its raylet started (``node_loss``), and ``bench deaths`` kills one of a
run's rank actors, found among the driver's descendants by title. Without ``/proc``
the tree is empty.
"""
from __future__ import annotations

import os

PROC = "/proc"


def children() -> dict[int, list[int]]:
    """Every process's children, by parent pid (``/proc/PID/stat``); {} without /proc."""
    kids: dict[int, list[int]] = {}
    try:
        pids = [int(p) for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return kids
    for pid in pids:
        try:
            with open(f"{PROC}/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        kids.setdefault(ppid, []).append(pid)
    return kids


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs, at any depth."""
    kids, found, todo = children(), set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def title(pid: int) -> str | None:
    """The process's title (its command line's first word, as Ray sets it for a
    worker: ``ray::RankActor...``), or None if it ended."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return None


def state(pid: int) -> str | None:
    """The process's state letter (R running, S sleeping, T stopped, Z dead and not
    reaped), or None if it is gone."""
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
