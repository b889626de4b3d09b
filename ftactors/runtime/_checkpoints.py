"""Checkpoint sets on stable storage: one snapshot per rank, a manifest written last, in
the folder of the run that wrote them.

A protocol that saves a global checkpoint stores every rank's snapshot blob as a part of
checkpoint number ``index``; once all parts are stored, one writer seals the set with a
manifest, which is what makes it complete (``_storage``): a failure in the middle of a
checkpoint leaves the previous complete one as the latest.

A store is often shared by many runs (``_identity``), so every set lives under its run's
folder (``run-<id>/ckpt-NNNNNN``) and its manifest carries the run id and the run's
fingerprint. A run's recovery reads only its own sets (``load_own``): a set of another
run in the same store is never a candidate, and two runs never write, seal or prune each
other's sets. ``ft.run(restart_from=)`` starts a whole new job from the newest complete
set of any run whose fingerprint matches (``find_resumable``): the "global restart" after
the job was lost, and the baseline the online protocols are measured against. Sets of
older versions (``ckpt-NNNNNN`` at the store's root, no identity) are found too, and taken
only with ``restart_from_any``.
"""
from __future__ import annotations

import math
import re
import time
from typing import Any

from ..base import storage
from ..base import ConfigError
from ._identity import RunIdentity, differences

_RUN_FOLDER = re.compile(r"run-[0-9a-f]+")
_SET_FOLDER = re.compile(r"ckpt-\d{6,}")


def position_index(position: tuple[int, int]) -> int:
    """Checkpoint-set number of a safe-point position ``(loop, iteration)``: later
    positions get larger numbers, so the newest set is the latest position."""
    loop, iteration = position
    return loop * 1_000_000 + iteration + 1


def part_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def set_prefix(run: RunIdentity, index: int) -> str:
    """Where run ``run`` keeps checkpoint ``index`` (``run-<id>/ckpt-NNNNNN``)."""
    return storage.checkpoint_prefix(run.root, index)


def store_part(store: storage.Store, run: RunIdentity, index: int, rank: int,
               blob: bytes) -> str:
    """Store rank ``rank``'s snapshot in run ``run``'s checkpoint ``index``; returns its key."""
    key = f"{set_prefix(run, index)}/{part_name(rank)}"
    store.put_bytes(key, blob)
    return key


def seal_set(store: storage.Store, run: RunIdentity, index: int, ranks: int,
             meta: dict) -> str:
    """Write the manifest of run ``run``'s checkpoint ``index`` (every rank's part must be
    stored), with the run's id and fingerprint and the time it was sealed."""
    prefix = set_prefix(run, index)
    parts = {part_name(r): f"{prefix}/{part_name(r)}" for r in range(ranks)}
    storage.write_manifest(store, prefix, parts, dict(
        meta, ranks=ranks, run_id=run.run_id, fingerprint=run.fingerprint,
        sealed_at=time.time()))
    return prefix


def load_own(store: storage.Store, run: RunIdentity,
             ranks: int) -> tuple[str, list[bytes], dict] | None:
    """Run ``run``'s newest complete set: ``(prefix, blob per rank, meta)``; None: none.
    Only the run's own folder is read, and only a manifest naming the run counts.

    Raises:
        CheckpointCorrupted: a part fails its integrity check (it is never unpickled).
    """
    for prefix in storage.complete_sets(store, run.root):
        manifest = storage.read_manifest(store, prefix)
        if manifest["meta"].get("run_id") == run.run_id:
            return prefix, _blobs(store, manifest, ranks), manifest["meta"]
    return None


def find_resumable(spec: Any, run: RunIdentity,
                   any_fingerprint: bool = False) -> tuple[str, list[bytes], dict]:
    """The set a new job ``run`` resumes from: the newest complete set in ``spec`` (by the
    time it was sealed; sets without identity count as the oldest) whose fingerprint is
    ``run``'s, or with ``any_fingerprint`` whose rank count is. Returns
    ``(prefix, blob per rank, meta)``.

    Raises:
        ConfigError: the store holds no complete set, or none that matches: the message
            names the newest set and what differs.
        CheckpointCorrupted: a part fails its integrity check (it is never unpickled).
    """
    store = storage.open_store(spec)
    prefixes = [p for root in _roots(store) for p in storage.complete_sets(store, root)]
    manifests = sorted((storage.read_manifest(store, p) for p in prefixes), key=_age,
                       reverse=True)
    if not manifests:
        raise ConfigError(f"no complete checkpoint in {spec!r}")
    wanted = run.fingerprint
    for manifest in manifests:
        stored = manifest["meta"].get("fingerprint")
        if any_fingerprint and manifest["meta"].get("ranks") == wanted["ranks"]:
            break
        if stored is not None and not differences(stored, wanted):
            break
    else:
        raise ConfigError(_refusal(spec, manifests[0], wanted, any_fingerprint))
    return manifest["prefix"], _blobs(store, manifest, wanted["ranks"]), manifest["meta"]


def _refusal(spec, newest: dict, wanted: dict, any_fingerprint: bool) -> str:
    """Why no set of ``spec`` is resumed, told by the newest one's differences."""
    meta = newest["meta"]
    ranks = f"ranks {meta.get('ranks')} vs {wanted['ranks']}"
    diffs = [ranks] if any_fingerprint else differences(meta.get("fingerprint"), wanted)
    if ranks not in diffs and meta.get("ranks") != wanted["ranks"]:
        diffs.append(ranks)
    position = meta.get("position")
    text = (f"no checkpoint set in {spec!r} is a state of this job; the newest, "
            f"{newest['prefix']!r} (position {position and tuple(position)}, run "
            f"{meta.get('run_id', 'unknown')}), differs: {'; '.join(diffs)}")
    if ranks in diffs:
        return (f"{text} (the set was taken with {meta.get('ranks')} ranks, not "
                f"{wanted['ranks']}: no override restores it; restart_from_any waives "
                f"every other difference)")
    return (f"{text}. Resume from it anyway with restart_from_any=True (a deliberate "
            f"change), or give restart_from the store of this job")


def _roots(store: storage.Store) -> list[str]:
    """The folders that hold sets: the store's root (sets of older versions) and every
    run's folder."""
    roots = {""}
    for key in store.list(""):
        first, _, rest = key.partition("/")
        if _RUN_FOLDER.fullmatch(first) and _SET_FOLDER.match(rest):
            roots.add(first)
    return sorted(roots)


def _age(manifest: dict) -> tuple:
    return manifest["meta"].get("sealed_at", -math.inf), _index(manifest["prefix"])


def _blobs(store: storage.Store, manifest: dict, ranks: int) -> list[bytes]:
    return [storage.load_part_blob(store, manifest, part_name(r)) for r in range(ranks)]


def prune_sets(store: storage.Store, run: RunIdentity, keep: int) -> list[str]:
    """Delete every set of run ``run`` older than its ``keep`` newest complete ones
    (complete or not: an older incomplete set is a failed attempt); returns the deleted
    prefixes. Newer incomplete sets (a checkpoint being written) are left alone, and so
    is every other run's folder."""
    complete = storage.complete_sets(store, run.root)
    if len(complete) <= keep:
        return []
    oldest_kept = _index(complete[keep - 1])
    gone = [set_prefix(run, i) for i in sorted(storage.checkpoint_indices(store, run.root),
                                               reverse=True) if i < oldest_kept]
    for prefix in gone:
        store.delete(prefix)
    return gone


def _index(prefix: str) -> int:
    """The number of the set at ``prefix`` (``.../ckpt-000013`` -> 13)."""
    return int(prefix.rpartition("ckpt-")[2])
