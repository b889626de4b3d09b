"""Checkpoint sets on stable storage: one snapshot per rank, a manifest written last.

A protocol that saves a global checkpoint stores every rank's snapshot blob as a part of
checkpoint number ``index`` under a root; once all parts are stored, one rank writes the
manifest, which is what makes the set complete (``_storage``): a failure in the middle
of a checkpoint leaves the previous complete one as the latest. ``ft.run(restart_from=)``
starts a whole new job from the latest complete set (the "global restart" after the job
was lost, and the baseline the online protocols are measured against).
"""
from __future__ import annotations

from typing import Any

from ..base import _storage
from ..base._errors import ConfigError


def position_index(position: tuple[int, int]) -> int:
    """Checkpoint-set number of a safe-point position ``(loop, iteration)``: later
    positions get larger numbers, so the newest set is the latest position."""
    loop, iteration = position
    return loop * 1_000_000 + iteration + 1


def part_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def store_part(store: _storage.Store, root: str, index: int, rank: int, blob: bytes) -> str:
    """Store rank ``rank``'s snapshot in checkpoint ``index``; returns its key."""
    key = f"{_storage.checkpoint_prefix(root, index)}/{part_name(rank)}"
    store.put_bytes(key, blob)
    return key


def seal_set(store: _storage.Store, root: str, index: int, ranks: int, meta: dict) -> str:
    """Write the manifest of checkpoint ``index`` (every rank's part must be stored)."""
    prefix = _storage.checkpoint_prefix(root, index)
    parts = {part_name(r): f"{prefix}/{part_name(r)}" for r in range(ranks)}
    _storage.write_manifest(store, prefix, parts, dict(meta, ranks=ranks))
    return prefix


def load_latest(spec: Any, ranks: int, root: str = "") -> tuple[str, list[bytes], dict]:
    """The newest complete checkpoint set: ``(prefix, blob per rank, meta)``.

    Raises:
        ConfigError: there is none, or it was taken with another number of ranks.
        CheckpointCorrupted: a part fails its integrity check (it is never unpickled).
    """
    store = _storage.open_store(spec)
    prefix = _storage.latest_complete(store, root)
    if prefix is None:
        raise ConfigError(f"no complete checkpoint in {spec!r}")
    manifest = _storage.read_manifest(store, prefix)
    meta = manifest["meta"]
    if meta.get("ranks") != ranks:
        raise ConfigError(f"checkpoint {prefix!r} in {spec!r} was taken with "
                          f"{meta.get('ranks')} ranks, not {ranks}")
    blobs = [_storage.load_part_blob(store, manifest, part_name(r)) for r in range(ranks)]
    return prefix, blobs, meta


def prune_sets(store: _storage.Store, root: str, keep: int) -> list[str]:
    """Delete every checkpoint set older than the ``keep`` newest complete ones (complete
    or not: an older incomplete set is a failed attempt); returns the deleted prefixes.
    Newer incomplete sets (a checkpoint being written) are left alone."""
    indices = sorted(_storage._checkpoint_indices(store, root), reverse=True)
    complete = [i for i in indices
                if _storage._is_complete(store, _storage.checkpoint_prefix(root, i))]
    if len(complete) <= keep:
        return []
    oldest_kept = complete[keep - 1]
    gone = [_storage.checkpoint_prefix(root, i) for i in indices if i < oldest_kept]
    for prefix in gone:
        store.delete(prefix)
    return gone
