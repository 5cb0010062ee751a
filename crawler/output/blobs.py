"""The blob store: page bodies, written in one pack per flush, read back by key.

The crawl writes each flush's new bodies as one **pack** (``OUT/blobs/packs/<name>-<seq>.pack``,
``<name>`` a writer and its generation, never reused: crawler.output.layout):
the zstd frames of the bodies back to back, published whole or not at all (a rename
locally, one PUT on object storage) with one fsync, where a file per body cost a create,
an fsync and a rename per page (the largest output cost in the profile:
benchmarks/RESULTS.md). A body's key names its pack, offset, length and SHA-256
(:func:`~crawler.output.layout.pack_key`): nothing in it comes from the page. Each frame
decompresses alone, so a reader fetches only its byte range.

Older outputs hold one gzip file per body, content-addressed
(``OUT/blobs/ab/cd/<sha>.gz``, :meth:`BlobStore.put_many`); :meth:`BlobStore.get` reads
both. The result writer stores a flush's bodies before its rows, so a row never points
at a missing blob (docs/invariants.md #6).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
import threading
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.asyn import sync as _fsspec_sync
import zstandard

from crawler.errors import ConfigError, StorageError
from crawler.output.fs import ensure_dir, fsync_path, is_local, open_fs, publish, remove_quietly
from crawler.output.layout import PACKS_DIR, blob_key, blob_sha, pack_key, parse_pack_key, temp_name

__all__ = ["DEFAULT_COMPRESSLEVEL", "BlobStore", "RecentKeys", "RecentMap"]

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_COMPRESSLEVEL = 1
"""Compression level of stored bodies (zstd in packs, gzip in per-body files). Measured on
bench pages (benchmarks/stages.py): zstd level 1 costs 0.08 ms per 25 KB page and is 5%
smaller than gzip level 1 at 0.27 ms (gzip level 5: 0.67 ms)."""


class RecentKeys:
    """Membership for the most recent ~``capacity`` keys in O(1) memory per key.

    Two generations: when the current one reaches half the capacity it becomes the old one
    and the previous old one is dropped. Memory stays bounded by configuration
    (docs/invariants.md #8) while recent repeats -- the ones a retry or a replay produces --
    are still caught. Older repeats are removed by the readers' de-duplication.
    """

    def __init__(self, capacity: int) -> None:
        self._half = max(1, capacity // 2)
        self._cur: set[object] = set()
        self._old: set[object] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._cur or key in self._old

    def add(self, key: object) -> None:
        """Remember ``key`` (it may push out the oldest generation)."""
        self._cur.add(key)
        if len(self._cur) >= self._half:
            self._old, self._cur = self._cur, set()


class RecentMap(Generic[K, V]):
    """A mapping that keeps only the most recent ~``capacity`` keys (two generations, as
    :class:`RecentKeys`): memory bounded by configuration, recent repeats still found."""

    def __init__(self, capacity: int) -> None:
        self._half = max(1, capacity // 2)
        self._cur: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """The value stored under ``key``, or None if it is unknown or was pushed out."""
        v = self._cur.get(key)
        return v if v is not None else self._old.get(key)

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` under ``key`` (it may push out the oldest generation)."""
        self._cur[key] = value
        if len(self._cur) >= self._half:
            self._old, self._cur = self._cur, {}


def _short(sha: str) -> int:
    return int(sha[:32], 16)  # 128 bits suffice and take a third of the memory of the str


class BlobStore:
    """Content-addressed, write-once storage of gzip-compressed page bodies.

    Keys are ``blobs/<sha[0:2]>/<sha[2:4]>/<sha>.gz`` relative to ``root``. Identical bodies
    are stored once: a key known (to this process) or found to exist is not rewritten. The
    methods are synchronous and thread-safe; the crawl calls them from a worker thread.
    """

    def __init__(
        self,
        root: str,
        storage_options: dict[str, Any] | None = None,
        *,
        compresslevel: int = DEFAULT_COMPRESSLEVEL,
        fsync: bool = True,
        known_capacity: int = 200_000,
        concurrency: int = 32,
        _fs: tuple[fsspec.AbstractFileSystem, str] | None = None,
    ) -> None:
        self._fs, self._root = _fs if _fs is not None else open_fs(root, storage_options)
        self._local = is_local(self._fs)
        if not 0 <= compresslevel <= 9:
            raise ConfigError(f"blob compresslevel must be 0..9, got {compresslevel!r}")
        self._level = compresslevel
        self._fsync = fsync
        self._concurrency = max(1, concurrency)
        self._known = RecentKeys(known_capacity)  # shas known present: skips an exists() probe
        self._packed: RecentMap[int, str] = RecentMap(known_capacity)  # sha -> key of a body already in a pack
        self._zstd = zstandard.ZstdCompressor(level=max(1, compresslevel), write_content_size=True)
        self._lock = threading.Lock()
        self._stats = {"blobs_written": 0, "blob_bytes": 0, "blobs_skipped_existing": 0}

    @staticmethod
    def key_for(sha256_hex: str) -> str:
        """The storage key of a body with this SHA-256 (lowercase hex; ValueError otherwise)."""
        return blob_key(sha256_hex)

    def _path(self, key: str) -> str:
        return f"{self._root}/{key}"

    def _compress(self, body: bytes) -> bytes:
        # mtime=0: the same body always compresses to the same bytes.
        return gzip.compress(body, compresslevel=self._level, mtime=0)

    def _note(self, *, written: int = 0, nbytes: int = 0, skipped: int = 0) -> None:
        with self._lock:
            self._stats["blobs_written"] += written
            self._stats["blob_bytes"] += nbytes
            self._stats["blobs_skipped_existing"] += skipped

    def _remember(self, sha: str) -> None:
        with self._lock:
            self._known.add(_short(sha))

    def put(self, sha256_hex: str, body: bytes, *, verify: bool = True) -> str:
        """Store ``body`` under its hash and return the key; a no-op if it is already stored.

        ``verify`` recomputes the SHA-256 (about 1.2 us/KB) so a caller bug cannot file a
        body under the wrong name; the writer verifies once in ``add`` and skips it here.
        """
        return self.put_many({sha256_hex: body}, verify=verify)[0]

    def put_many(self, items: Mapping[str, bytes], *, verify: bool = True) -> list[str]:
        """Store several bodies (sha -> decoded body); return their keys in input order.

        Existence checks and uploads on object storage run concurrently (``fs.pipe`` with a
        dict); each object is still a single PUT.
        """
        keys: list[str] = []
        todo: dict[str, bytes] = {}
        for sha, body in items.items():
            keys.append(blob_key(sha))
            if verify and hashlib.sha256(body).hexdigest() != sha:
                raise ValueError(f"body does not hash to {sha}")
            with self._lock:
                known = _short(sha) in self._known
            if known:
                self._note(skipped=1)
            else:
                todo[sha] = body
        if not todo:
            return keys
        paths = {sha: self._path(blob_key(sha)) for sha in todo}
        try:
            present = self._exists_many(list(paths.values()))
            missing = {}
            for (sha, path), exists in zip(paths.items(), present):
                if exists:
                    self._remember(sha)
                    self._note(skipped=1)
                else:
                    missing[sha] = path
            if self._local:
                self._put_local(missing, todo)
            elif missing:
                payload = {path: self._compress(todo[sha]) for sha, path in missing.items()}
                self._fs.pipe(payload)  # one PUT per object, batched concurrently
                for sha in missing:
                    self._remember(sha)
                self._note(written=len(payload), nbytes=sum(map(len, payload.values())))
        except Exception as exc:  # botocore/aiohttp/OS errors alike: the caller retries the flush
            raise StorageError(f"writing blobs under {self._root!r} failed: {exc}") from exc
        return keys

    def _put_local(self, missing: Mapping[str, str], bodies: Mapping[str, bytes]) -> None:
        """Write new blobs as hidden temps, fsync them all, then rename each."""
        temps: list[tuple[str, str, str, int]] = []  # (sha, temp, final path, gzip size)
        done = 0
        try:
            for sha, path in missing.items():
                data = self._compress(bodies[sha])
                directory, name = os.path.split(path)
                os.makedirs(directory, exist_ok=True)
                tmp = os.path.join(directory, temp_name(name))
                temps.append((sha, tmp, path, len(data)))  # before open: cleanup covers it
                with open(tmp, "wb") as f:
                    f.write(data)
            if self._fsync and temps:
                # fsync one file after another waits for one journal commit each (measured
                # 0.3-3.5 ms per blob here); issued concurrently, the filesystem batches them.
                # The renames below are made durable by the directory fsync of the Parquet
                # part written after them (journaled filesystems commit metadata in order).
                if len(temps) == 1:
                    fsync_path(temps[0][1])
                else:
                    with ThreadPoolExecutor(max_workers=min(16, len(temps))) as pool:
                        list(pool.map(fsync_path, [t[1] for t in temps]))
            for sha, tmp, path, size in temps:
                os.replace(tmp, path)  # atomic: a reader sees no blob or the whole blob
                done += 1
                self._remember(sha)
                self._note(written=1, nbytes=size)
        finally:
            for _, tmp, _, _ in temps[done:]:  # not renamed: a failure cut the batch short
                remove_quietly(tmp)

    def write_pack(self, name: str, bodies: Mapping[str, bytes]) -> dict[str, str]:
        """Store new bodies (sha -> decoded body) as the pack ``name``; return every sha's key.

        A body this store packed recently is not written again: its earlier key is
        returned. The pack is durable when this returns (fsync + rename locally, one PUT
        remotely), and nothing of it is remembered until then, so a failed call can be
        retried under the same name. Not thread-safe: the writer calls it under its flush lock.
        """
        keys: dict[str, str] = {}
        frames: list[bytes] = []
        new: dict[str, str] = {}
        offset = 0
        compress = self._zstd.compress
        for sha, body in bodies.items():
            short = _short(sha)
            with self._lock:
                known = self._packed.get(short)
            if known is not None:
                keys[sha] = known
                self._note(skipped=1)
                continue
            frame = compress(body)
            frames.append(frame)
            keys[sha] = new[sha] = pack_key(name, offset, len(frame), sha)
            offset += len(frame)
        if frames:
            try:
                ensure_dir(self._fs, f"{self._root}/{PACKS_DIR}")
                publish(self._fs, f"{self._root}/{PACKS_DIR}/{name}", b"".join(frames), fsync=self._fsync)
            except Exception as exc:  # botocore/aiohttp/OS errors alike: the caller retries the flush
                raise StorageError(f"writing blob pack {name} under {self._root!r} failed: {exc}") from exc
            self._note(written=len(frames), nbytes=offset)
        with self._lock:
            for sha, key in new.items():
                self._packed.put(_short(sha), key)
        return keys

    def _exists_many(self, paths: list[str]) -> list[bool]:
        if self._local:
            return [os.path.exists(p) for p in paths]
        if isinstance(self._fs, AsyncFileSystem):
            found: list[bool] = _fsspec_sync(self._fs.loop, self._probe_many, paths)  # fsspec has no types
            return found
        return [self._probe_sync(p) for p in paths]

    # Existence is probed with a 1-byte ranged GET, not fs.exists(): on s3fs a missing key
    # costs exists() a HEAD *and* a LIST (it checks for a "directory"), and most blobs are
    # new, so that would add a LIST -- priced like a PUT -- to nearly every page.
    def _probe_sync(self, path: str) -> bool:
        try:
            self._fs.cat_file(path, start=0, end=1)
        except FileNotFoundError:
            return False
        return True

    async def _probe_many(self, paths: list[str]) -> list[bool]:
        sem = asyncio.Semaphore(self._concurrency)

        async def one(path: str) -> bool:
            async with sem:
                try:
                    await self._fs._cat_file(path, start=0, end=1)
                except FileNotFoundError:
                    return False
                return True

        return list(await asyncio.gather(*(one(p) for p in paths)))

    def get(self, key: str) -> bytes:
        """Return the decoded body stored under ``key`` (a pack key or a :meth:`key_for` key).

        Raises ValueError for a malformed key and StorageError if the blob is missing or
        does not match its hash.
        """
        sha = blob_sha(key)
        packed = parse_pack_key(key)
        try:
            if packed is None:
                data = self._fs.cat_file(self._path(key))
            else:
                path, offset, length, _ = packed
                data = self._fs.cat_file(self._path(path), start=offset, end=offset + length)
                if len(data) != length:
                    raise StorageError(f"blob {key} is cut short ({len(data)} of {length} bytes)")
        except FileNotFoundError as exc:
            raise StorageError(f"blob {key} is missing under {self._root!r}") from exc
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"reading blob {key} failed: {exc}") from exc
        try:
            body = gzip.decompress(data) if packed is None else zstandard.ZstdDecompressor().decompress(data)
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
            raise StorageError(f"blob {key} is not valid {'gzip' if packed is None else 'zstd'}") from exc
        if hashlib.sha256(body).hexdigest() != sha:
            raise StorageError(f"blob {key} does not match its hash (corrupt storage)")
        return body

    def stats(self) -> dict[str, int]:
        """Counters: blobs_written, blob_bytes (compressed), blobs_skipped_existing."""
        with self._lock:
            return dict(self._stats)
