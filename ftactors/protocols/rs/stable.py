"""RSBackup's parity blocks on stable storage (``rs_stable_parity``, section IV.E): written
beside a checkpoint set (``store_parity``) and read back to decode a part lost on disk
(``rebuild_part``)."""
from __future__ import annotations

import numpy as np

from ftactors.runtime import part_name, set_prefix

from .erasure import RSCode
from .placement import Placement


def store_parity(store, run, index: int, g: int, j: int, lengths: dict, blob: bytes) -> str:
    """Write parity block ``j`` of group ``g`` beside run ``run``'s checkpoint set ``index``."""
    key = f"{set_prefix(run, index)}/parity-g{g:04d}-j{j:03d}"
    store.put(key, {"lengths": lengths, "block": blob})
    return key


def rebuild_part(store, prefix: str, placement: Placement, rank: int) -> bytes:
    """Decode rank ``rank``'s part of the checkpoint set at ``prefix`` from the other parts
    of its group and the parity blocks written with ``rs_stable_parity`` (a part lost on
    stable storage, IV.E). Raises ValueError when fewer than ``k`` blocks are there."""
    g, i = placement.group_of(rank)
    k, m = placement.k(g), placement.m(g)
    blocks, lengths = {}, None
    for idx, member in enumerate(placement.groups[g]):
        key = f"{prefix}/{part_name(member)}"
        if member != rank and store.exists(key):
            blocks[idx] = store.get_bytes(key)
    for j in range(m):
        key = f"{prefix}/parity-g{g:04d}-j{j:03d}"
        if store.exists(key):
            entry = store.get(key)
            blocks[k + j], lengths = entry["block"], entry["lengths"]
    if lengths is None:
        raise ValueError(f"no parity block of group {g} in set {prefix!r}")
    size = max(lengths.values())
    padded = {idx: np.frombuffer(b, np.uint8) for idx, b in blocks.items()}
    padded = {idx: b if b.size == size else np.concatenate([b, np.zeros(size - b.size, np.uint8)])
              for idx, b in padded.items()}
    return RSCode(k, m).decode(padded, size)[i][:lengths[i]].tobytes()
