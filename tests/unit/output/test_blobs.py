"""The blob store: bodies stored once under their hash, whole or not at all."""

from __future__ import annotations

import gzip
import os

import pytest

from crawler.errors import ConfigError, StorageError
from crawler.output import DEFAULT_COMPRESSLEVEL, BlobStore

from .helpers import dies_before_rename, sha


def blob_files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(os.path.join(root, "blobs")) for f in fs)


def test_identical_bodies_are_stored_once_even_across_instances(tmp_path):
    body = b"<html>same body</html>" * 100
    store = BlobStore(str(tmp_path))
    key = store.put(sha(body), body)
    assert key == BlobStore.key_for(sha(body)) and blob_files(tmp_path) == [key]
    assert store.put(sha(body), body) == key
    assert store.stats()["blobs_written"] == 1 and store.stats()["blobs_skipped_existing"] == 1
    # A fresh store (another process) finds the blob on disk and does not rewrite it.
    again = BlobStore(str(tmp_path))
    mtime = os.stat(tmp_path / key).st_mtime_ns
    assert again.put(sha(body), body) == key
    assert again.stats() == {"blobs_written": 0, "blob_bytes": 0, "blobs_skipped_existing": 1}
    assert os.stat(tmp_path / key).st_mtime_ns == mtime
    assert again.get(key) == body


def test_blobs_are_deterministic_gzip_at_the_default_level(tmp_path):
    body = b"<p>compress me</p>" * 500
    key = BlobStore(str(tmp_path / "a")).put(sha(body), body)
    BlobStore(str(tmp_path / "b")).put(sha(body), body)
    data = (tmp_path / "a" / key).read_bytes()
    assert data == (tmp_path / "b" / key).read_bytes()  # mtime=0: same body, same bytes
    assert DEFAULT_COMPRESSLEVEL == 1
    assert data == gzip.compress(body, compresslevel=1, mtime=0)
    assert gzip.decompress(data) == body
    with pytest.raises(ConfigError):
        BlobStore(str(tmp_path), compresslevel=10)


def test_wrong_hashes_bad_keys_and_tampered_blobs_are_refused(tmp_path):
    store = BlobStore(str(tmp_path))
    with pytest.raises(ValueError):
        store.put(sha(b"a"), b"b")
    for key in ("blobs/../../x.gz", f"blobs/00/00/{sha(b'a')}.gz", "pages/part-w0-000000.parquet"):
        with pytest.raises(ValueError):
            store.get(key)
    with pytest.raises(StorageError):
        store.get(BlobStore.key_for(sha(b"never stored")))
    key = store.put(sha(b"x"), b"x")
    (tmp_path / key).write_bytes(gzip.compress(b"tampered"))
    with pytest.raises(StorageError):
        store.get(key)
    (tmp_path / key).write_bytes(b"not gzip at all")
    with pytest.raises(StorageError):
        store.get(key)


def test_a_failed_blob_batch_leaves_only_whole_blobs(tmp_path, monkeypatch):
    bodies = {sha(b): b for b in (b"first", b"second", b"third")}
    store = BlobStore(str(tmp_path))
    real_replace, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(StorageError):
        store.put_many(bodies)
    monkeypatch.undo()
    files = blob_files(tmp_path)
    assert len(files) == 1 and not os.path.basename(files[0]).startswith(".")
    assert gzip.decompress((tmp_path / files[0]).read_bytes()) in bodies.values()
    store.put_many(bodies)  # the retry completes the batch and rewrites nothing
    assert store.stats()["blobs_written"] == 3
    assert all(store.get(BlobStore.key_for(h)) == b for h, b in bodies.items())

    with dies_before_rename(monkeypatch):
        store.put(sha(b"fourth"), b"fourth")
    leftovers = [os.path.basename(f) for f in blob_files(tmp_path)]
    assert len(leftovers) == 4 and sum(f.startswith(".") for f in leftovers) == 1
    with pytest.raises(StorageError):  # the half-done blob does not exist under its key
        store.get(BlobStore.key_for(sha(b"fourth")))
