"""Why a run stalled, from what its ranks waited for when it stopped (``ft.Deadlock``).

A stalled run ends with ``ft.Deadlock``, whose ``details`` say, for every rank, what it
waited for (a receive's source, tag and communicator; a protocol's round and the ranks it
had not heard from) and where (its loop and iteration), or that it had finished. The
causes are read from those facts, never from the program's text:

* ranks that wait for each other in a ring (each receives from the next first): the
  program's own deadlock, named with each rank's receive;
* a rank that waits for a message from a rank that has finished: that rank returned
  without sending it (its loop was shorter, or it left it early);
* a rank in a protocol's round that has not heard from ranks that finished or that wait
  in a receive: the round needs them at a safe point they never reach (and when they
  wait for the very rank in the round, the round and the program wait for each other);
* a receive from any source that no rank is left to serve.
"""
from __future__ import annotations

from ..engine import ANY_SOURCE, ANY_TAG

PROGRAM_KINDS = ("recv", "probe", "ssend")
"""Waits on one named peer's message (a request's is the same once named)."""


def _where(d: dict) -> str:
    pos = d.get("position")
    return "" if pos is None else f" (loop {pos[0]}, iteration {pos[1]})"


def _wait(d: dict) -> str:
    """A rank's wait in words (as ``Wait.describe``, from the plain fields)."""
    kind = d["kind"]
    if kind == "round":
        text = f"a round ({d.get('what')})"
        if d.get("ranks"):
            text += f", not heard from rank(s) {', '.join(map(str, d['ranks']))}"
        return text
    if kind in ("recv", "probe"):
        src = d.get("source")
        text = ("a receive" if kind == "recv" else "a probe") + (
            " from any source" if src == ANY_SOURCE else f" from rank {src}")
    elif kind == "ssend":
        text = f"a synchronous send to rank {d.get('source')}"
    else:
        text = d.get("what") or kind
    tag = d.get("tag")
    if tag is not None:
        text += ", any tag" if tag == ANY_TAG else f", tag {tag}"
    if d.get("comm"):
        text += f", communicator {d['comm']}"
    if d.get("what") and kind in ("recv", "probe"):
        text += f" (in {d['what']})"
    return text


def _state(rank: int, details: dict) -> str:
    d = details.get(rank)
    if d is None:
        return f"rank {rank} (not heard from)"
    if d["kind"] == "finished":
        return f"rank {rank} has finished"
    return f"rank {rank}{_where(d)} waits in {_wait(d)}"


def _peer(d: dict) -> int | None:
    """The one rank whose message ends a wait, if one is named."""
    if d["kind"] in PROGRAM_KINDS and d.get("source") not in (None, ANY_SOURCE):
        return d["source"]
    return None


def _cycles(details: dict) -> list[list[int]]:
    """Rings of ranks each waiting for the next one's message (named sources only)."""
    found, seen = [], set()
    for start in sorted(details):
        path, rank = [], start
        while rank is not None and rank not in path and rank not in seen:
            path.append(rank)
            d = details.get(rank)
            rank = None if d is None else _peer(d)
        if rank is not None and rank in path:
            ring = path[path.index(rank):]
            found.append(ring)
        seen.update(path)
    return found


def stall_causes(details: dict) -> list[str]:
    """The causes of a stall, one line each, from ``Deadlock.details``."""
    details = {int(r): d for r, d in details.items()}
    lines, explained = [], set()
    for ring in _cycles(details):
        explained.update(ring)
        waits = "; ".join(f"rank {r}{_where(details[r])} in {_wait(details[r])}"
                          for r in ring)
        lines.append(f"ranks {', '.join(map(str, ring))} each wait for the next one's "
                     f"message first ({waits}): the program's own deadlock; one of them "
                     f"must send before it receives (or use isend / sendrecv)")
    for rank, d in details.items():  # ranks that wait for a rank in a round: said there
        if d["kind"] == "round":
            explained.update(r for r in d.get("ranks") or ()
                             if _peer(details.get(r, {"kind": "busy"})) == rank)
    for rank, d in sorted(details.items()):
        if rank in explained and d["kind"] != "round" or d["kind"] in ("finished", "busy"):
            continue
        head = f"rank {rank}{_where(d)} waits in {_wait(d)}"
        peer = _peer(d)
        if peer is not None:
            them = details.get(peer, {}).get("kind")
            why = (f"; rank {peer} finished without sending it (its loop is shorter, or it "
                   f"left the loop early)" if them == "finished" else "")
            lines.append(f"{head}: {_state(peer, details)}{why}")
        elif d["kind"] == "round":
            who = [r for r in d.get("ranks") or () if r != rank]
            states = "; ".join(_state(r, details) for r in who)
            back = [r for r in who if _peer(details.get(r, {"kind": "busy"})) == rank]
            why = (f": the round needs every rank at a safe point that these never reach"
                   + (f"; rank(s) {', '.join(map(str, back))} wait for rank {rank}'s message, "
                      f"which it sends only once the round is over: the protocol's round "
                      f"and the program wait for each other" if back else ""))
            lines.append(f"{head}" + (f": {states}{why}" if who else ""))
        elif d["kind"] in ("recv", "probe") and d.get("source") == ANY_SOURCE:
            others = "; ".join(_state(r, details) for r in sorted(details) if r != rank)
            lines.append(f"{head}: no rank is left to send it ({others})")
        else:
            lines.append(head)
    return lines
