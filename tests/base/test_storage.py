"""Checkpoint storage: sealed blobs, stores, manifests and corruption detection."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from ftactors.base._errors import CheckpointCorrupted
from ftactors.base._storage import (
    MAGIC,
    FsStore,
    MemoryStore,
    Store,
    checkpoint_prefix,
    dumps,
    latest_complete,
    load_part,
    loads,
    open_store,
    read_manifest,
    seal,
    unseal,
    write_manifest,
)

# Header layout: 5 magic bytes, 8 length bytes, 32 digest bytes, then the payload.
HEADER = 45
FLIP_POSITIONS = {
    "magic": 0,
    "magic-version": 4,
    "length-high": 5,
    "length-low": 12,
    "digest-first": 13,
    "digest-last": HEADER - 1,
    "payload-first": HEADER,
    "payload-last": -1,
}

EXPLODED = False
"""Set by unpickling an :class:`Exploder`; a corrupted blob must never get that far."""


def _explode():
    global EXPLODED
    EXPLODED = True
    return "exploded"


class Exploder:
    def __reduce__(self):
        return (_explode, ())


@pytest.fixture(params=["memory", "fs", "file-uri"])
def store(request, tmp_path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "fs":
        return FsStore(str(tmp_path / "store"))
    return FsStore((tmp_path / "store").as_uri())


@pytest.fixture(autouse=True)
def _reset_flag():
    global EXPLODED
    EXPLODED = False
    yield
    EXPLODED = False


def _flip(blob: bytes, pos: int) -> bytes:
    b = bytearray(blob)
    b[pos] ^= 0x01
    return bytes(b)


def _corrupt_stored(store: Store, key: str, pos: int) -> None:
    """Flip one byte of the blob stored under ``key``, bypassing every check."""
    bad = _flip(store.get_bytes(key), pos)
    if isinstance(store, MemoryStore):
        store._blobs[key] = bad
    else:
        with open(store._path(key), "wb") as f:
            f.write(bad)


# ----------------------------------------------------------------------- sealing


def test_seal_layout_and_round_trip():
    blob = seal(b"hello")
    assert blob.startswith(MAGIC)
    assert len(blob) == HEADER + 5
    assert unseal(blob) == b"hello"
    assert unseal(seal(b"")) == b""


@pytest.mark.parametrize("name,pos", FLIP_POSITIONS.items())
def test_unseal_detects_any_flipped_byte(name, pos):
    with pytest.raises(CheckpointCorrupted):
        unseal(_flip(seal(b"some payload bytes"), pos))


def test_every_single_byte_flip_is_detected():
    blob = dumps({"x": np.arange(3)})
    for pos in range(len(blob)):
        with pytest.raises(CheckpointCorrupted):
            loads(_flip(blob, pos))


def test_unseal_names_what_failed_and_where():
    blob = seal(b"payload")
    with pytest.raises(CheckpointCorrupted, match="magic") as exc:
        unseal(_flip(blob, 0), "run/ckpt-000001/rank-00000")
    assert "run/ckpt-000001/rank-00000" in str(exc.value)
    with pytest.raises(CheckpointCorrupted, match="SHA-256"):
        unseal(_flip(blob, -1))
    with pytest.raises(CheckpointCorrupted, match="truncated"):
        unseal(blob[:-1])
    with pytest.raises(CheckpointCorrupted, match="header"):
        unseal(blob[:10])


def test_dumps_loads_objects_with_numpy_and_closures():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    offset = 7
    obj = {"step": 3, "weights": arr, "fn": lambda x: x + offset}
    back = loads(dumps(obj))
    assert back["step"] == 3
    np.testing.assert_array_equal(back["weights"], arr)
    assert back["weights"].dtype == np.float32
    assert back["fn"](1) == 8


@pytest.mark.parametrize("name,pos", FLIP_POSITIONS.items())
def test_corrupted_malicious_pickle_never_runs(name, pos):
    blob = dumps(Exploder())
    assert pickle.loads(unseal(blob)) == "exploded"  # the payload really is armed
    global EXPLODED
    EXPLODED = False
    with pytest.raises(CheckpointCorrupted):
        loads(_flip(blob, pos))
    assert EXPLODED is False


# ----------------------------------------------------------------------- stores


def test_store_round_trip(store):
    arr = np.random.default_rng(0).standard_normal((5, 7))
    n = store.put("run/ckpt-000001/rank-00000", {"a": arr, "b": [1, "two"]})
    assert n > HEADER
    back = store.get("run/ckpt-000001/rank-00000")
    np.testing.assert_array_equal(back["a"], arr)
    assert back["b"] == [1, "two"]
    assert store.exists("run/ckpt-000001/rank-00000")
    assert not store.exists("run/ckpt-000001")
    assert not store.exists("run/ckpt-000001/rank-00001")


def test_store_overwrite(store):
    store.put("k/x", 1)
    store.put("k/x", 2)
    assert store.get("k/x") == 2
    assert store.list("k") == ["k/x"]


def test_store_bytes_round_trip(store):
    blob = seal(b"raw")
    assert store.put_bytes("a/b", blob) == len(blob)
    assert store.get_bytes("a/b") == blob


def test_put_bytes_refuses_unsealed_data(store):
    with pytest.raises(CheckpointCorrupted):
        store.put_bytes("a/b", b"not sealed at all, definitely not")
    assert not store.exists("a/b")


def test_missing_key_raises_keyerror_naming_key(store):
    with pytest.raises(KeyError, match="run/ckpt-000009/rank-00003"):
        store.get("run/ckpt-000009/rank-00003")
    store.put("run/ckpt-000001/rank-00000", 0)
    with pytest.raises(KeyError, match="run/ckpt-000001"):
        store.get_bytes("run/ckpt-000001")  # a prefix, not a key


def test_list_and_delete_by_whole_segments(store):
    for key in ["run-1/ckpt-000001/rank-00000", "run-1/ckpt-000001/rank-00001",
                "run-1/ckpt-000002/rank-00000", "run-10/ckpt-000001/rank-00000"]:
        store.put(key, key)
    assert store.list("run-1") == [
        "run-1/ckpt-000001/rank-00000",
        "run-1/ckpt-000001/rank-00001",
        "run-1/ckpt-000002/rank-00000",
    ]
    assert store.list("run-1/") == store.list("run-1")
    assert store.list("run-1/ckpt-000002/rank-00000") == ["run-1/ckpt-000002/rank-00000"]
    assert store.list("nothing-here") == []
    assert len(store.list("")) == 4
    store.delete("run-1/ckpt-000001")
    assert store.list("run-1") == ["run-1/ckpt-000002/rank-00000"]
    store.delete("run-1")
    assert store.list("") == ["run-10/ckpt-000001/rank-00000"]
    store.delete("does/not/exist")
    store.delete("")
    assert store.list("") == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/", "../x", "a/./b", ".hidden"])
def test_bad_keys_rejected(store, key):
    with pytest.raises(ValueError, match="bad store key"):
        store.put(key, 1)


@pytest.mark.parametrize("name,pos", FLIP_POSITIONS.items())
def test_stored_blob_with_flipped_byte(store, name, pos):
    store.put("run/x", Exploder())
    _corrupt_stored(store, "run/x", pos)
    with pytest.raises(CheckpointCorrupted, match="run/x"):
        store.get("run/x")
    assert EXPLODED is False


def test_truncated_file_raises(tmp_path):
    store = FsStore(str(tmp_path))
    store.put("run/x", np.zeros(1000))
    path = tmp_path / "run" / "x"
    for size in (path.stat().st_size - 1, HEADER + 3, HEADER, 7, 0):
        with open(path, "r+b") as f:
            f.truncate(size)
        with pytest.raises(CheckpointCorrupted, match=str(path)):
            store.get("run/x")


def test_fs_store_atomic_write_leaves_no_temporaries(tmp_path):
    store = FsStore(str(tmp_path))
    store.put("a/b/c", list(range(100)))
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["c"]


def test_fs_store_failed_write_keeps_old_blob(tmp_path, monkeypatch):
    store = FsStore(str(tmp_path))
    store.put("a/x", "old")

    class CrashingMove:
        def __init__(self, fs):
            self._fs = fs

        def __getattr__(self, name):
            return getattr(self._fs, name)

        def move(self, src, dest):
            raise OSError("simulated crash before the move")

    monkeypatch.setattr(store, "_fs", CrashingMove(store._fs))
    with pytest.raises(OSError, match="simulated"):
        store.put("a/x", "new")
    assert store.get("a/x") == "old"
    assert os.listdir(tmp_path / "a") == ["x"]


def test_fs_store_ignores_foreign_hidden_files(tmp_path):
    store = FsStore(str(tmp_path))
    store.put("a/x", 1)
    (tmp_path / "a" / ".x.tmp-leftover").write_bytes(b"half")
    assert store.list("") == ["a/x"]


def test_fs_store_relative_path_and_pickling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = FsStore("rel/store")
    store.put("k/v", 5)
    assert (tmp_path / "rel" / "store" / "k" / "v").is_file()
    clone = pickle.loads(pickle.dumps(store))
    assert clone.get("k/v") == 5


def test_file_uri_and_path_see_the_same_data(tmp_path):
    FsStore(str(tmp_path)).put("k/v", "shared")
    assert FsStore(tmp_path.as_uri()).get("k/v") == "shared"


# ----------------------------------------------------------------------- open_store


def test_open_store_specs(tmp_path):
    assert isinstance(open_store(None), MemoryStore)
    assert isinstance(open_store("memory"), MemoryStore)
    fs = open_store(str(tmp_path))
    assert isinstance(fs, FsStore)
    assert isinstance(open_store(tmp_path), FsStore)
    assert isinstance(open_store(tmp_path.as_uri()), FsStore)
    assert open_store(fs) is fs


@pytest.mark.parametrize("spec", [42, "", b"/tmp/x", ["memory"], object()])
def test_open_store_rejects_other_specs(spec):
    with pytest.raises(ValueError, match="checkpoint storage must be"):
        open_store(spec)


def test_open_store_unknown_scheme():
    with pytest.raises(ValueError, match="cannot open checkpoint store"):
        open_store("nosuchscheme://bucket/x")


# ----------------------------------------------------------------------- manifests


def _write_checkpoint(store, root, index, nranks, *, manifest=True, value=None):
    prefix = checkpoint_prefix(root, index)
    parts = {}
    for rank in range(nranks):
        key = f"{prefix}/rank-{rank:05d}"
        store.put(key, {"rank": rank, "ckpt": index, "value": value})
        parts[f"rank-{rank:05d}"] = key
    if manifest:
        write_manifest(store, prefix, parts, {"step": index * 10})
    return prefix


def test_checkpoint_prefix():
    assert checkpoint_prefix("run-id", 3) == "run-id/ckpt-000003"
    assert checkpoint_prefix("run-id/", 12) == "run-id/ckpt-000012"
    assert checkpoint_prefix("", 1) == "ckpt-000001"


def test_manifest_round_trip(store):
    prefix = _write_checkpoint(store, "run", 1, 3, value=np.ones(4))
    manifest = read_manifest(store, prefix)
    assert manifest["meta"] == {"step": 10}
    assert sorted(manifest["parts"]) == ["rank-00000", "rank-00001", "rank-00002"]
    part = load_part(store, manifest, "rank-00002")
    assert part["rank"] == 2
    np.testing.assert_array_equal(part["value"], np.ones(4))
    with pytest.raises(KeyError, match="rank-00007"):
        load_part(store, manifest, "rank-00007")


def test_write_manifest_requires_every_part(store):
    store.put("run/ckpt-000001/rank-00000", 0)
    with pytest.raises(KeyError, match="rank-00001"):
        write_manifest(store, "run/ckpt-000001", {
            "rank-00000": "run/ckpt-000001/rank-00000",
            "rank-00001": "run/ckpt-000001/rank-00001",
        }, {})
    assert latest_complete(store, "run") is None


def test_latest_complete_skips_incomplete(store):
    assert latest_complete(store, "run") is None
    _write_checkpoint(store, "run", 1, 4)
    second = _write_checkpoint(store, "run", 2, 4)
    _write_checkpoint(store, "run", 3, 4, manifest=False)  # failed mid-checkpoint
    _write_checkpoint(store, "other-run", 9, 1)
    assert latest_complete(store, "run") == second
    assert latest_complete(store, "run/") == second
    assert latest_complete(store, "other-run") == "other-run/ckpt-000009"


def test_latest_complete_skips_checkpoint_with_missing_part(store):
    first = _write_checkpoint(store, "run", 1, 2)
    _write_checkpoint(store, "run", 2, 2)
    store.delete("run/ckpt-000002/rank-00001")
    assert latest_complete(store, "run") == first


def test_latest_complete_skips_corrupted_manifest(store, caplog):
    first = _write_checkpoint(store, "run", 1, 2)
    _write_checkpoint(store, "run", 2, 2)
    _corrupt_stored(store, "run/ckpt-000002/MANIFEST", -1)
    assert latest_complete(store, "run") == first
    assert "ckpt-000002" in caplog.text


def test_latest_complete_orders_numerically(store):
    _write_checkpoint(store, "run", 9, 1)
    newest = _write_checkpoint(store, "run", 1_000_000, 1)
    assert latest_complete(store, "run") == newest


def test_swapped_part_caught_by_manifest_digest(store):
    prefix = _write_checkpoint(store, "run", 1, 2)
    manifest = read_manifest(store, prefix)
    # Replace rank 1's part with another, individually valid, blob.
    store.put_bytes(f"{prefix}/rank-00001", store.get_bytes(f"{prefix}/rank-00000"))
    assert load_part(store, manifest, "rank-00000")["rank"] == 0
    with pytest.raises(CheckpointCorrupted, match="manifest") as exc:
        load_part(store, manifest, "rank-00001")
    assert "rank-00001" in str(exc.value)


def test_swapped_malicious_part_never_runs(store):
    prefix = _write_checkpoint(store, "run", 1, 1)
    manifest = read_manifest(store, prefix)
    store.put(f"{prefix}/rank-00000", Exploder())
    with pytest.raises(CheckpointCorrupted):
        load_part(store, manifest, "rank-00000")
    assert EXPLODED is False


def test_corrupted_part_caught_by_load_part(store):
    prefix = _write_checkpoint(store, "run", 1, 1)
    manifest = read_manifest(store, prefix)
    _corrupt_stored(store, f"{prefix}/rank-00000", HEADER + 2)
    with pytest.raises(CheckpointCorrupted, match="rank-00000"):
        load_part(store, manifest, "rank-00000")


def test_read_manifest_missing_and_not_a_manifest(store):
    with pytest.raises(KeyError, match="MANIFEST"):
        read_manifest(store, "run/ckpt-000001")
    store.put("run/ckpt-000001/MANIFEST", ["not", "a", "manifest"])
    with pytest.raises(CheckpointCorrupted, match="manifest"):
        read_manifest(store, "run/ckpt-000001")


def test_prune_sets_keeps_the_newest_complete_ones_and_newer_attempts():
    from ftactors.base import _storage as ft_storage
    from ftactors.runtime._checkpoints import prune_sets, seal_set, store_part
    from ftactors.runtime._identity import RunIdentity
    store = ft_storage.MemoryStore()
    run, other = RunIdentity("abc", {}), RunIdentity("def", {})
    store_part(store, other, 1, 0, ft_storage.dumps({"i": 0}))  # another run's set
    seal_set(store, other, 1, 1, {})
    for index in (1, 2, 3, 4):
        store_part(store, run, index, 0, ft_storage.dumps({"i": index}))
        if index != 2:
            seal_set(store, run, index, 1, {})
    store_part(store, run, 5, 0, ft_storage.dumps({"i": 5}))  # being written
    gone = prune_sets(store, run, keep=2)
    assert gone == ["run-abc/ckpt-000002", "run-abc/ckpt-000001"]
    assert ft_storage.latest_complete(store, "run-abc") == "run-abc/ckpt-000004"
    assert (store.exists("run-abc/ckpt-000003/rank-00000")
            and store.exists("run-abc/ckpt-000005/rank-00000"))
    assert ft_storage.latest_complete(store, "run-def") == "run-def/ckpt-000001"
