"""Checkpoint storage with integrity checks.

Theory of operation
-------------------
A checkpoint is only useful if what comes back is exactly what went in, and unpickling
is code execution: a damaged or substituted blob must be rejected *before* any byte of
it reaches the unpickler. Three layers give that guarantee:

1. **Sealed blobs.** Every stored object is serialized with cloudpickle (protocol 5) and
   *sealed*: prefixed with a magic (``FTCK\\x01``), the payload length and the payload's
   SHA-256. :func:`unseal` checks all three and raises :class:`CheckpointCorrupted`
   otherwise; only then does :func:`loads` unpickle. A flipped bit, a truncated file or a
   file that is not a checkpoint at all is caught here.

2. **Stores.** :class:`Store` is the small key/value interface the rest of ftactors
   uses (``put``/``get`` objects, ``put_bytes``/``get_bytes`` sealed blobs, ``exists``,
   ``delete`` and ``list`` by prefix). Keys are ``/``-separated paths such as
   ``"run-id/ckpt-000003/rank-00002"``; a prefix always matches whole segments, so
   ``"run-1"`` does not cover ``"run-10/..."``. :class:`MemoryStore` keeps blobs in a
   dict (one process only); :class:`FsStore` writes through :mod:`pyarrow.fs`, so a local
   path, ``file://``, ``s3://``, ``gs://`` and ``hdfs://`` all work. FsStore writes each
   blob to a hidden temporary name and moves it into place, so a crash mid-write never
   leaves a half blob under the real key.

3. **Checkpoint sets.** A coordinated checkpoint is many parts (one per rank) under a
   prefix ``<root>/ckpt-NNNNNN``. After every part is stored, :func:`write_manifest`
   reads each part back, verifies it and records its digest in a ``MANIFEST`` written
   *last*: a checkpoint without a manifest was interrupted and is incomplete.
   :func:`latest_complete` picks the newest checkpoint whose manifest exists and whose
   parts all exist, and :func:`load_part` checks a part against the digest in the
   manifest, which catches a part replaced by another, individually valid, blob.
"""
from __future__ import annotations

import abc
import hashlib
import logging
import os
import pickle
import re
import struct
import threading
import uuid
from typing import Any

import cloudpickle
import pyarrow.fs as pafs

from ._errors import CheckpointCorrupted

__all__ = [
    "MAGIC",
    "MANIFEST_NAME",
    "Store",
    "MemoryStore",
    "FsStore",
    "seal",
    "unseal",
    "dumps",
    "loads",
    "open_store",
    "checkpoint_prefix",
    "write_manifest",
    "read_manifest",
    "latest_complete",
    "complete_sets",
    "load_part",
]

_log = logging.getLogger(__name__)

MAGIC = b"FTCK\x01"
"""First bytes of every sealed blob (format name and version)."""

_HEADER = struct.Struct(">5sQ32s")  # magic, payload length, SHA-256 of the payload

MANIFEST_NAME = "MANIFEST"
"""Name of the manifest key inside a checkpoint prefix (``<prefix>/MANIFEST``)."""

_CKPT_NAME = re.compile(r"ckpt-(\d{6,})")
_MANIFEST_VERSION = 1


# --------------------------------------------------------------------------- sealing


def seal(data: bytes) -> bytes:
    """Return ``data`` prefixed with the magic, its length and its SHA-256 digest."""
    return _HEADER.pack(MAGIC, len(data), hashlib.sha256(data).digest()) + data


def unseal(blob: bytes, where: str = "") -> bytes:
    """Verify a sealed blob and return its payload.

    Args:
        blob: bytes produced by :func:`seal`.
        where: the key or path the blob came from, quoted in the error message.

    Raises:
        CheckpointCorrupted: the magic, the length or the digest does not match.
    """
    return bytes(_open_seal(blob, where)[0])


def dumps(obj: Any) -> bytes:
    """Serialize ``obj`` with cloudpickle (protocol 5) and seal it."""
    return seal(cloudpickle.dumps(obj, protocol=5))


def loads(blob: bytes, where: str = "") -> Any:
    """Verify a sealed blob, then unpickle it (never before the check passed).

    Raises:
        CheckpointCorrupted: see :func:`unseal`.
    """
    return pickle.loads(_open_seal(blob, where)[0])


def _open_seal(blob: bytes, where: str) -> tuple[memoryview, bytes]:
    """Check ``blob`` and return (a view of its payload, the payload's digest)."""
    view = memoryview(blob).cast("B")
    _check_header(view, where)
    _, _, digest = _HEADER.unpack_from(view)
    payload = view[_HEADER.size:]
    if hashlib.sha256(payload).digest() != digest:
        raise _corrupted("payload SHA-256 does not match the digest in the header", where)
    return payload, digest


def _check_header(view: memoryview, where: str) -> None:
    """Check the magic and the length field (cheap: no hashing)."""
    if len(view) < _HEADER.size:
        raise _corrupted(
            f"{len(view)} bytes is shorter than the {_HEADER.size}-byte header", where
        )
    magic, length, _ = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise _corrupted(f"bad magic {magic!r} (expected {MAGIC!r})", where)
    if length != len(view) - _HEADER.size:
        raise _corrupted(
            f"header announces {length} payload bytes but {len(view) - _HEADER.size} "
            "are present (truncated or extended)",
            where,
        )


def _corrupted(what: str, where: str) -> CheckpointCorrupted:
    return CheckpointCorrupted(f"corrupted checkpoint{f' at {where}' if where else ''}: {what}")


# --------------------------------------------------------------------------- keys


def _check_key(key: str, *, prefix: bool = False) -> str:
    """Validate a key (or, with ``prefix=True``, a prefix; ``""`` means everything).

    Keys are ``/``-separated, non-empty segments; a segment may not start with ``.``
    (reserved for FsStore's temporary files, and it rules out ``.``/``..`` escapes).
    A trailing ``/`` on a prefix is ignored.

    Raises:
        ValueError: the key is malformed.
    """
    if not isinstance(key, str):
        raise ValueError(f"store keys are str, got {type(key).__name__}: {key!r}")
    if prefix:
        key = key.rstrip("/")
        if key == "":
            return key
    parts = key.split("/")
    if any(p == "" or p.startswith(".") for p in parts):
        raise ValueError(
            f"bad store key {key!r}: segments must be non-empty, not start with '.', "
            "and not begin or end with '/'"
        )
    return key


def _under(key: str, prefix: str) -> bool:
    """True if ``key`` is ``prefix`` itself or lies below it (whole segments)."""
    return prefix == "" or key == prefix or key.startswith(prefix + "/")


# --------------------------------------------------------------------------- stores


class Store(abc.ABC):
    """Key/value storage of sealed blobs.

    Subclasses implement the five byte-level methods; :meth:`put` and :meth:`get` add
    (de)serialization and the integrity check on top of them.
    """

    @abc.abstractmethod
    def put_bytes(self, key: str, blob: bytes) -> int:
        """Store an already-sealed blob under ``key`` (replacing it); return its size.

        Raises:
            CheckpointCorrupted: ``blob`` is not a sealed blob (bad magic or length).
            ValueError: malformed key.
        """

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Return the sealed blob stored under ``key``, unverified.

        Raises:
            KeyError: nothing is stored under ``key``.
        """

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """True if a blob is stored under exactly ``key``."""

    @abc.abstractmethod
    def delete(self, prefix: str) -> None:
        """Remove every key equal to or below ``prefix`` (``""``: everything)."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Return the keys equal to or below ``prefix``, sorted."""

    def put(self, key: str, obj: Any) -> int:
        """Serialize and seal ``obj``, store it under ``key``; return bytes written."""
        return self.put_bytes(key, dumps(obj))

    def get(self, key: str) -> Any:
        """Return the object stored under ``key``, verified before it is unpickled.

        Raises:
            KeyError: nothing is stored under ``key``.
            CheckpointCorrupted: the stored blob failed its integrity check.
        """
        return loads(self.get_bytes(key), self._where(key))

    def _where(self, key: str) -> str:
        """Human-readable location of ``key`` for error messages."""
        return f"key {key!r}"


def _checked_blob(key: str, blob: bytes) -> bytes:
    """Validate key and sealed-blob header before a put; return the blob as bytes."""
    _check_key(key)
    _check_header(memoryview(blob).cast("B"), f"put of key {key!r}")
    return bytes(blob)


class MemoryStore(Store):
    """Sealed blobs in an in-process dict: fast, for tests and single-process runs.

    Not shared between processes: each Ray actor holding a copy has its own contents.
    """

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._blobs)} keys)"

    def put_bytes(self, key: str, blob: bytes) -> int:
        blob = _checked_blob(key, blob)
        with self._lock:
            self._blobs[key] = blob
        return len(blob)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._blobs[_check_key(key)]
        except KeyError:
            raise KeyError(f"no checkpoint blob under key {key!r} in {self!r}") from None

    def exists(self, key: str) -> bool:
        return _check_key(key) in self._blobs

    def delete(self, prefix: str) -> None:
        prefix = _check_key(prefix, prefix=True)
        with self._lock:
            for key in [k for k in self._blobs if _under(k, prefix)]:
                del self._blobs[key]

    def list(self, prefix: str = "") -> list[str]:
        prefix = _check_key(prefix, prefix=True)
        with self._lock:
            return sorted(k for k in self._blobs if _under(k, prefix))


def open_filesystem(uri: str, what: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and root path of ``uri``: a local path (relative paths are
    made absolute, ``~`` is expanded) or a URI pyarrow understands (``file://``,
    ``s3://``, ``gs://``, ``hdfs://``).

    Raises:
        ValueError: pyarrow cannot open ``uri`` (the message names it as ``what``).
    """
    if "://" not in uri:
        uri = os.path.abspath(os.path.expanduser(uri))
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... by scheme
        raise ValueError(f"cannot open {what} {uri!r}: {exc}") from exc
    return fs, root.rstrip("/")


class FsStore(Store):
    """Sealed blobs as files under a root, through :mod:`pyarrow.fs`.

    Each key is a file ``<root>/<key>``. Writes go to a hidden temporary file in the
    same directory which is then moved onto the key: on a local or POSIX-like
    filesystem the rename is atomic, on object stores (S3, GCS) the upload itself is.
    Pickling an FsStore ships only its URI; the filesystem is reopened on the other side.

    Args:
        uri: a local path (relative paths are made absolute, ``~`` is expanded) or a URI
            pyarrow understands (``file://``, ``s3://``, ``gs://``, ``hdfs://``).

    Raises:
        ValueError: pyarrow cannot open ``uri``.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs, self._root = open_filesystem(uri, "checkpoint store")

    def __repr__(self) -> str:
        return f"FsStore({self.uri!r})"

    def __reduce__(self):
        return (FsStore, (self.uri,))

    def _path(self, key: str) -> str:
        return f"{self._root}/{key}" if key else self._root

    def _where(self, key: str) -> str:
        return f"key {key!r} ({self._path(key)} in {self!r})"

    def put_bytes(self, key: str, blob: bytes) -> int:
        blob = _checked_blob(key, blob)
        path = self._path(key)
        parent, _, name = path.rpartition("/")
        self._fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"
        try:
            with self._fs.open_output_stream(tmp) as out:
                out.write(blob)
            self._fs.move(tmp, path)
        except BaseException:
            self._discard(tmp)
            raise
        return len(blob)

    def _discard(self, path: str) -> None:
        """Best-effort removal of a temporary file after a failed write."""
        try:
            self._fs.delete_file(path)
        except OSError:
            pass

    def get_bytes(self, key: str) -> bytes:
        path = self._path(_check_key(key))
        try:
            with self._fs.open_input_file(path) as f:
                return f.read()
        except OSError:  # FileNotFoundError, or a directory (a prefix, not a key)
            if self._info(key).type == pafs.FileType.File:
                # moved into place by another writer between the open and the look (a
                # new job reading a store its lost predecessor was still sealing)
                with self._fs.open_input_file(path) as f:
                    return f.read()
            raise KeyError(f"no checkpoint blob under key {key!r} ({path} in {self!r})") from None

    def exists(self, key: str) -> bool:
        return self._info(_check_key(key)).type == pafs.FileType.File

    def _info(self, key: str) -> pafs.FileInfo:
        return self._fs.get_file_info(self._path(key))

    def delete(self, prefix: str) -> None:
        prefix = _check_key(prefix, prefix=True)
        kind = self._info(prefix).type
        if kind == pafs.FileType.File:
            self._fs.delete_file(self._path(prefix))
        elif kind == pafs.FileType.Directory and prefix == "":
            self._fs.delete_dir_contents(self._root, missing_dir_ok=True)
        elif kind == pafs.FileType.Directory:
            self._fs.delete_dir(self._path(prefix))

    def list(self, prefix: str = "") -> list[str]:
        prefix = _check_key(prefix, prefix=True)
        info = self._info(prefix)
        if info.type == pafs.FileType.File:
            return [prefix]
        if info.type != pafs.FileType.Directory:
            return []
        selector = pafs.FileSelector(self._path(prefix), recursive=True, allow_not_found=True)
        start = len(self._root) + 1
        keys = (
            i.path[start:]
            for i in self._fs.get_file_info(selector)
            if i.type == pafs.FileType.File
        )
        return sorted(k for k in keys if not any(s.startswith(".") for s in k.split("/")))


def open_store(spec: Store | str | os.PathLike | None) -> Store:
    """Turn a user's storage setting into a :class:`Store`.

    Args:
        spec: ``None`` or ``"memory"`` for a :class:`MemoryStore`; a path or URI for an
            :class:`FsStore`; an existing :class:`Store` is returned as is.

    Raises:
        ValueError: ``spec`` is none of these (or an empty string).
    """
    if spec is None or spec == "memory":
        return MemoryStore()
    if isinstance(spec, Store):
        return spec
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str) and spec:
        return FsStore(spec)
    raise ValueError(
        f"checkpoint storage must be None, 'memory', a path or URI (file://, s3://, "
        f"gs://, hdfs://) or a Store instance; got {type(spec).__name__}: {spec!r}"
    )


# --------------------------------------------------------------------------- checkpoints


def checkpoint_prefix(root_prefix: str, index: int) -> str:
    """The prefix of checkpoint number ``index`` under ``root_prefix`` (``<root>/ckpt-000003``)."""
    root = root_prefix.rstrip("/")
    return f"{root}/ckpt-{index:06d}" if root else f"ckpt-{index:06d}"


def _manifest_key(prefix: str) -> str:
    return f"{prefix.rstrip('/')}/{MANIFEST_NAME}"


def write_manifest(store: Store, prefix: str, parts: dict[str, str], meta: dict) -> None:
    """Seal a checkpoint: record every part's digest in ``<prefix>/MANIFEST``.

    Call it after all parts are stored; the manifest's presence is what makes the
    checkpoint complete. Each part is read back and verified (one extra read per part),
    so a part damaged on its way to storage is caught while older checkpoints still exist.

    Args:
        store: where the parts are and the manifest goes.
        prefix: the checkpoint prefix, e.g. ``"run-id/ckpt-000003"``.
        parts: part name (e.g. ``"rank-00002"``) -> the key the part is stored under.
        meta: anything picklable to keep with the checkpoint (step, epoch, world size...).

    Raises:
        KeyError: a part is missing.
        CheckpointCorrupted: a part fails its integrity check.
    """
    entries = {}
    for name, key in parts.items():
        blob = store.get_bytes(key)
        _, digest = _open_seal(blob, f"part {name!r} {store._where(key)}")
        entries[name] = {"key": key, "sha256": digest.hex(), "bytes": len(blob)}
    manifest = {"version": _MANIFEST_VERSION, "prefix": prefix, "parts": entries, "meta": meta}
    store.put(_manifest_key(prefix), manifest)


def read_manifest(store: Store, prefix: str) -> dict:
    """Return the manifest of the checkpoint at ``prefix``.

    The manifest is a dict ``{"version", "prefix", "parts", "meta"}`` where ``parts``
    maps each part name to ``{"key", "sha256", "bytes"}``.

    Raises:
        KeyError: the checkpoint has no manifest (it is incomplete or does not exist).
        CheckpointCorrupted: the manifest is damaged or not a manifest.
    """
    key = _manifest_key(prefix)
    manifest = store.get(key)
    if not (isinstance(manifest, dict) and isinstance(manifest.get("parts"), dict)):
        raise CheckpointCorrupted(f"{store._where(key)} does not hold a checkpoint manifest")
    return manifest


def latest_complete(store: Store, root_prefix: str) -> str | None:
    """Return the newest complete checkpoint prefix under ``root_prefix``, or None.

    Checkpoints are the ``ckpt-NNNNNN`` children of the root. One is complete when its
    manifest is readable and every part it lists exists; incomplete ones (a failure
    during the checkpoint) and ones with a damaged manifest are skipped (the latter
    with a warning in the log). Part contents are verified later, by :func:`load_part`.
    """
    return next(iter(complete_sets(store, root_prefix)), None)


def complete_sets(store: Store, root_prefix: str) -> list[str]:
    """The complete checkpoint prefixes under ``root_prefix``, newest first (see
    :func:`latest_complete`)."""
    root = _check_key(root_prefix, prefix=True)
    prefixes = (checkpoint_prefix(root, i)
                for i in sorted(checkpoint_indices(store, root), reverse=True))
    return [prefix for prefix in prefixes if _is_complete(store, prefix)]


def checkpoint_indices(store: Store, root: str) -> set[int]:
    """Numbers of the ``ckpt-NNNNNN`` directories directly under ``root``."""
    depth = len(root.split("/")) if root else 0
    indices = set()
    for key in store.list(root):
        segments = key.split("/")
        match = _CKPT_NAME.fullmatch(segments[depth]) if len(segments) > depth + 1 else None
        if match:
            indices.add(int(match.group(1)))
    return indices


def _is_complete(store: Store, prefix: str) -> bool:
    try:
        manifest = read_manifest(store, prefix)
    except KeyError:
        return False
    except CheckpointCorrupted as exc:
        _log.warning("skipping checkpoint %s: %s", prefix, exc)
        return False
    return all(store.exists(entry["key"]) for entry in manifest["parts"].values())


def load_part(store: Store, manifest: dict, part: str) -> Any:
    """Load one part of a checkpoint, verified against its manifest (see
    :func:`load_part_blob`)."""
    return loads(load_part_blob(store, manifest, part))


def load_part_blob(store: Store, manifest: dict, part: str) -> bytes:
    """The sealed blob of one part of a checkpoint, verified against its manifest.

    Args:
        store: the store holding the checkpoint.
        manifest: as returned by :func:`read_manifest`.
        part: the part name, e.g. ``"rank-00002"``.

    Raises:
        KeyError: ``part`` is not in the manifest, or its blob is missing.
        CheckpointCorrupted: the blob fails its own check, or it is valid but is not
            the blob the manifest recorded (a part swapped after the checkpoint).
    """
    try:
        entry = manifest["parts"][part]
    except KeyError:
        known = ", ".join(sorted(manifest["parts"])) or "none"
        raise KeyError(
            f"checkpoint {manifest.get('prefix')!r} has no part {part!r} (parts: {known})"
        ) from None
    where = f"part {part!r} {store._where(entry['key'])}"
    blob = store.get_bytes(entry["key"])
    _, digest = _open_seal(blob, where)
    if digest.hex() != entry["sha256"]:
        raise _corrupted(
            f"SHA-256 {digest.hex()} differs from {entry['sha256']} recorded in the manifest "
            "(the part was replaced after the checkpoint was written)",
            where,
        )
    return blob
