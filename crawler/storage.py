"""Crawl output: the Parquet page dataset and the content-addressed blob store.

This is the public contract indexers read::

    OUT/pages/part-<writer_id>-<seq:06d>.parquet   one row per URL outcome (PAGES_SCHEMA), zstd
    OUT/blobs/<sha[0:2]>/<sha[2:4]>/<sha>.gz       gzip of the decoded body, keyed by its SHA-256

``OUT`` is any fsspec URL: a local folder or ``s3://bucket/prefix`` (through s3fs).

Guarantees (DESIGN.md invariants 5 and 6):

* Nothing half-written is ever visible. Locally a file is written under a temporary name
  starting with ``.`` in the same directory, fsynced, then renamed with ``os.replace``
  (atomic on POSIX). On object storage a file is one single PUT, which is atomic by nature.
  ``pyarrow.dataset`` ignores basenames starting with ``.`` or ``_`` by default, and
  :func:`read_pages` only lists ``part-*.parquet``, so temporary files are never read.
* A row never points at a missing blob: :meth:`ResultWriter.flush` writes the buffered
  bodies first and the rows after, and returns only once both are durable. The engine acks
  URLs after ``flush`` returns.
* Rows are idempotent on ``(url, content_sha256)`` (``(url, outcome, crawl_pass)`` when
  there is no body hash): the writer drops repeats it has seen recently, and
  :func:`read_pages` drops repeats across writers and crashes, keeping the earliest row.
* A blob key is derived only from the hash, never from anything in the page: stored bodies
  are data, never paths.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import math
import numbers
import asyncio
import contextlib
import operator
import os
import posixpath
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash
from fsspec.asyn import AsyncFileSystem
from fsspec.asyn import sync as _fsspec_sync
from fsspec.implementations.local import LocalFileSystem

from crawler.errors import ConfigError, StorageError

__all__ = [
    "PAGES_SCHEMA",
    "OUTCOMES",
    "DUP_KINDS",
    "KINDS",
    "open_fs",
    "simhash_to_signed",
    "simhash_to_unsigned",
    "BlobStore",
    "ResultWriter",
    "read_pages",
    "summarize",
]

PAGES_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("url", pa.string()),
        pa.field("host", pa.string()),
        pa.field("depth", pa.int32()),
        pa.field("status", pa.int32()),
        pa.field("outcome", pa.string()),
        pa.field("error", pa.string()),
        pa.field("attempts", pa.int32()),
        pa.field("fetched_at", pa.timestamp("ms", tz="UTC")),
        pa.field("content_type", pa.string()),
        pa.field("content_length", pa.int64()),
        pa.field("content_sha256", pa.string()),
        pa.field("simhash", pa.int64()),
        pa.field("dup_kind", pa.string()),
        pa.field("dup_of", pa.string()),
        pa.field("blob_key", pa.string()),
        pa.field("etag", pa.string()),
        pa.field("last_modified", pa.string()),
        pa.field("redirect_to", pa.string()),
        pa.field("truncated", pa.bool_()),
        pa.field("shard", pa.string()),
        pa.field("crawl_pass", pa.int32()),
        pa.field("referrer", pa.string()),
        pa.field("kind", pa.string()),
    ]
)
"""Schema of ``OUT/pages``: one row per URL outcome. Every column is nullable."""

OUTCOMES = ("fetched", "redirect", "not_modified", "http_error", "failed", "robots_blocked")
"""Every URL ends as exactly one of these (DESIGN.md invariant 5)."""
DUP_KINDS = ("exact", "near")
KINDS = ("discover", "refresh")

PAGES_DIR = "pages"
BLOBS_DIR = "blobs"
DEFAULT_COMPRESSLEVEL = 5  # measured: level 6+ gains <0.5% size for ~8% more CPU on ~20 KB HTML

_SHA_RE = re.compile(r"[0-9a-f]{64}")
_KEY_RE = re.compile(r"blobs/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})\.gz")
_PART_RE = re.compile(r"part-.+-\d{6,}\.parquet")
_WRITER_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}")

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_U64 = 2**64
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)


class Clock(Protocol):
    """Monotonic time source (seconds); injected so tests never sleep."""

    def now(self) -> float: ...


class _MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


# --------------------------------------------------------------------------- filesystems


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def open_fs(
    path: str, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve an output URL to ``(filesystem, protocol-less root path)``.

    Local paths (plain or ``file://``) are made absolute with ``~`` expanded; a trailing
    ``/`` is dropped. An unknown protocol or a missing filesystem package is the user's
    configuration to fix and raises :class:`ConfigError`.
    """
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"output path must be a non-empty string, got {path!r}")
    try:
        fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ValueError, ImportError, TypeError) as exc:
        raise ConfigError(
            f"cannot open output path {path!r}: {exc} "
            "(use a local folder or a URL such as s3://bucket/prefix, and check storage_options)"
        ) from exc
    if _is_local(fs):
        root = os.path.abspath(root)
    elif len(root) > 1:
        root = root.rstrip("/")
    return fs, root


# --------------------------------------------------------------------------- small helpers


def simhash_to_signed(value: int) -> int:
    """Map an unsigned 64-bit fingerprint onto the int64 stored in ``simhash``."""
    if 0 <= value < _U64:
        return value - _U64 if value > _I64_MAX else value
    if _I64_MIN <= value < 0:
        return value
    raise ValueError(f"simhash {value!r} does not fit in 64 bits")


def simhash_to_unsigned(value: int) -> int:
    """Inverse of :func:`simhash_to_signed`: the unsigned fingerprint readers compare bits on."""
    return value + _U64 if value < 0 else value


class _RecentSet:
    """Membership for the most recent ~``capacity`` keys in O(1) memory per key.

    Two generations: when the current one reaches half the capacity it becomes the old one
    and the previous old one is dropped. Memory stays bounded by configuration
    (DESIGN.md invariant 8) while recent repeats -- the ones a retry or a replay produces --
    are still caught. Older repeats are removed by :func:`read_pages`.
    """

    def __init__(self, capacity: int) -> None:
        self._half = max(1, capacity // 2)
        self._cur: set = set()
        self._old: set = set()

    def __contains__(self, key: object) -> bool:
        return key in self._cur or key in self._old

    def add(self, key: object) -> None:
        self._cur.add(key)
        if len(self._cur) >= self._half:
            self._old, self._cur = self._cur, set()


def _check_sha(sha256_hex: str) -> str:
    if not isinstance(sha256_hex, str) or _SHA_RE.fullmatch(sha256_hex) is None:
        raise ValueError(f"not a lowercase hex SHA-256 digest: {sha256_hex!r}")
    return sha256_hex


def _fsync_path(path: str) -> None:
    """fsync a file or a directory by path (a directory holds renames: fsync it so a new
    name survives a power loss, not only the file's bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_local_atomic(path: str, data: bytes, *, fsync: bool, fsync_parent: bool) -> None:
    """Write ``data`` to ``path`` via a ``.``-prefixed temp file in the same dir + os.replace."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old name or the whole file
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # never created, or already renamed
            os.unlink(tmp)
        raise
    if fsync and fsync_parent:
        _fsync_path(directory)


# --------------------------------------------------------------------------- blobs


class BlobStore:
    """Content-addressed, write-once storage of gzip-compressed page bodies.

    Keys are ``blobs/<sha[0:2]>/<sha[2:4]>/<sha>.gz`` relative to ``root``. Identical bodies
    are stored once: a key known (to this process) or found to exist is not rewritten. The
    methods are synchronous and thread-safe; the crawl calls them from a worker thread.
    """

    def __init__(
        self,
        root: str,
        storage_options: dict | None = None,
        *,
        compresslevel: int = DEFAULT_COMPRESSLEVEL,
        fsync: bool = True,
        known_capacity: int = 200_000,
        concurrency: int = 32,
        _fs: tuple[fsspec.AbstractFileSystem, str] | None = None,
    ) -> None:
        self._fs, self._root = _fs if _fs is not None else open_fs(root, storage_options)
        self._local = _is_local(self._fs)
        if not 0 <= compresslevel <= 9:
            raise ConfigError(f"blob compresslevel must be 0..9, got {compresslevel!r}")
        self._level = compresslevel
        self._fsync = fsync
        self._concurrency = max(1, concurrency)
        self._known = _RecentSet(known_capacity)  # shas known present: skips an exists() probe
        self._lock = threading.Lock()
        self._stats = {"blobs_written": 0, "blob_bytes": 0, "blobs_skipped_existing": 0}

    @staticmethod
    def key_for(sha256_hex: str) -> str:
        """The storage key of a body with this SHA-256 (lowercase hex; ValueError otherwise)."""
        sha = _check_sha(sha256_hex)
        return f"{BLOBS_DIR}/{sha[0:2]}/{sha[2:4]}/{sha}.gz"

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
            self._known.add(int(sha[:32], 16))  # 128 bits suffice and take a third of the memory

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
            keys.append(self.key_for(sha))
            if verify and hashlib.sha256(body).hexdigest() != sha:
                raise ValueError(f"body does not hash to {sha}")
            with self._lock:
                known = int(sha[:32], 16) in self._known
            if known:
                self._note(skipped=1)
            else:
                todo[sha] = body
        if not todo:
            return keys
        paths = {sha: self._path(self.key_for(sha)) for sha in todo}
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
        """Write new blobs as ``.``-prefixed temps, fsync them all, then rename each."""
        temps: list[tuple[str, str, str, int]] = []  # (sha, temp, final path, gzip size)
        done = 0
        try:
            for sha, path in missing.items():
                data = self._compress(bodies[sha])
                directory, name = os.path.split(path)
                os.makedirs(directory, exist_ok=True)
                tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
                temps.append((sha, tmp, path, len(data)))  # before open: cleanup covers it
                with open(tmp, "wb") as f:
                    f.write(data)
            if self._fsync and temps:
                # fsync one file after another waits for one journal commit each (measured
                # 0.3-3.5 ms per blob here); issued concurrently, the filesystem batches them.
                # The renames below are made durable by the directory fsync of the Parquet
                # part written after them (journaled filesystems commit metadata in order).
                if len(temps) == 1:
                    _fsync_path(temps[0][1])
                else:
                    with ThreadPoolExecutor(max_workers=min(16, len(temps))) as pool:
                        list(pool.map(_fsync_path, [t[1] for t in temps]))
            for sha, tmp, path, size in temps:
                os.replace(tmp, path)  # atomic: a reader sees no blob or the whole blob
                done += 1
                self._remember(sha)
                self._note(written=1, nbytes=size)
        finally:
            for _, tmp, _, _ in temps[done:]:  # not renamed: a failure cut the batch short
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _exists_many(self, paths: list[str]) -> list[bool]:
        if self._local:
            return [os.path.exists(p) for p in paths]
        if isinstance(self._fs, AsyncFileSystem):
            return _fsspec_sync(self._fs.loop, self._probe_many, paths)
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
        """Return the decoded body stored under ``key`` (as written by :meth:`key_for`).

        Raises ValueError for a malformed key and StorageError if the blob is missing or
        does not match its hash.
        """
        m = _KEY_RE.fullmatch(key) if isinstance(key, str) else None
        if m is None or m.group(3)[0:2] != m.group(1) or m.group(3)[2:4] != m.group(2):
            raise ValueError(f"not a blob key: {key!r}")
        sha = m.group(3)
        try:
            data = self._fs.cat_file(self._path(key))
        except FileNotFoundError as exc:
            raise StorageError(f"blob {key} is missing under {self._root!r}") from exc
        except Exception as exc:
            raise StorageError(f"reading blob {key} failed: {exc}") from exc
        try:
            body = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise StorageError(f"blob {key} is not valid gzip") from exc
        if hashlib.sha256(body).hexdigest() != sha:
            raise StorageError(f"blob {key} does not match its hash (corrupt storage)")
        return body

    def stats(self) -> dict[str, int]:
        """Counters: blobs_written, blob_bytes (compressed), blobs_skipped_existing."""
        with self._lock:
            return dict(self._stats)


# --------------------------------------------------------------------------- row conversion

_NAMES: tuple[str, ...] = tuple(PAGES_SCHEMA.names)
_INDEX: dict[str, int] = {n: i for i, n in enumerate(_NAMES)}
_I_URL = _INDEX["url"]
_I_OUTCOME = _INDEX["outcome"]
_I_SHA = _INDEX["content_sha256"]
_I_BLOB = _INDEX["blob_key"]
_I_PASS = _INDEX["crawl_pass"]
_I_DUPKIND = _INDEX["dup_kind"]
_I_KIND = _INDEX["kind"]


def _clean_str(v: str) -> str:
    """Make a string encodable as UTF-8 (Arrow requires it).

    Header values and error texts from the web may carry lone surrogates (aiohttp decodes
    with ``surrogateescape``); one such value must not make a whole file unwritable.
    """
    try:
        v.encode("utf-8")
        return v
    except UnicodeEncodeError:
        try:
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")


def _conv_str(name: str, v: Any) -> str:
    if type(v) is not str:
        if not isinstance(v, str):
            raise ValueError(f"column {name!r} takes a str, got {type(v).__name__}")
        v = str(v)
    return v if v.isascii() else _clean_str(v)


def _as_int(name: str, v: Any) -> int:
    if type(v) is int:
        return v
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"column {name!r} takes an int, got a bool")
    try:
        return operator.index(v)  # ints and numpy integers, not floats or strings
    except TypeError as exc:
        raise ValueError(f"column {name!r} takes an int, got {type(v).__name__}") from exc


def _conv_i32(name: str, v: Any) -> int:
    v = _as_int(name, v)
    if not _I32_MIN <= v <= _I32_MAX:
        raise ValueError(f"column {name!r} value {v} does not fit int32")
    return v


def _conv_i64(name: str, v: Any) -> int:
    v = _as_int(name, v)
    if not _I64_MIN <= v <= _I64_MAX:
        raise ValueError(f"column {name!r} value {v} does not fit int64")
    return v


def _conv_simhash(name: str, v: Any) -> int:
    return simhash_to_signed(_as_int(name, v))


def _conv_bool(name: str, v: Any) -> bool:
    if type(v) is bool:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    raise ValueError(f"column {name!r} takes a bool, got {type(v).__name__}")


def _conv_ts(name: str, v: Any) -> int:
    """Timestamps are stored as integer milliseconds since the Unix epoch, UTC."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise ValueError(f"column {name!r} needs a timezone-aware datetime, got {v!r}")
        return (v - _EPOCH) // _MS
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        # Unix seconds, as time.time() returns. Checked here so that a value Arrow cannot
        # hold fails this add() call instead of every later flush.
        if not math.isfinite(v) or not _I64_MIN <= v * 1000 <= _I64_MAX:
            raise ValueError(f"column {name!r} got an out-of-range timestamp {v!r}")
        return int(round(v * 1000))
    raise ValueError(
        f"column {name!r} takes an aware datetime or Unix seconds, got {type(v).__name__}"
    )


_CONVERTERS: dict[pa.DataType, Callable[[str, Any], Any]] = {
    pa.string(): _conv_str,
    pa.int32(): _conv_i32,
    pa.int64(): _conv_i64,
    pa.bool_(): _conv_bool,
    pa.timestamp("ms", tz="UTC"): _conv_ts,
}
_CONV: tuple[Callable[[str, Any], Any], ...] = tuple(
    _conv_simhash if f.name == "simhash" else _CONVERTERS[f.type] for f in PAGES_SCHEMA
)


def _normalize(row: Mapping[str, Any]) -> list[Any]:
    """Validate one row dict and return its values in schema order (programming errors raise)."""
    out: list[Any] = [None] * len(_NAMES)
    index, conv = _INDEX, _CONV
    for k, v in row.items():
        i = index.get(k)
        if i is None:
            raise ValueError(f"unknown column {k!r} in result row (valid: {', '.join(_NAMES)})")
        if v is not None:
            out[i] = conv[i](k, v)
    if not out[_I_URL]:
        raise ValueError(f"result row needs a url: {dict(row)!r}")
    if out[_I_OUTCOME] not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {out[_I_OUTCOME]!r}")
    if out[_I_SHA] is not None:
        _check_sha(out[_I_SHA])
    if out[_I_DUPKIND] is not None and out[_I_DUPKIND] not in DUP_KINDS:
        raise ValueError(f"dup_kind must be one of {DUP_KINDS} or None, got {out[_I_DUPKIND]!r}")
    if out[_I_KIND] is not None and out[_I_KIND] not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None, got {out[_I_KIND]!r}")
    return out


def _row_key(vals: list[Any]) -> int:
    """Idempotence key: (url, sha), or (url, outcome, crawl_pass) when there is no body hash."""
    sha = vals[_I_SHA]
    if sha is not None:
        text = f"{vals[_I_URL]}\x00{sha}"
    else:
        text = f"{vals[_I_URL]}\x00\x01{vals[_I_OUTCOME]}\x00{vals[_I_PASS]}"
    # 128-bit digest: a collision (which would drop a real row) is out of reach in practice.
    return xxhash.xxh3_128_intdigest(text.encode("utf-8"))


def _build_table(cols: list[list[Any]]) -> pa.Table:
    arrays = [pa.array(col, type=field.type) for col, field in zip(cols, PAGES_SCHEMA)]
    return pa.Table.from_arrays(arrays, schema=PAGES_SCHEMA)


def _table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


# --------------------------------------------------------------------------- writer


class ResultWriter:
    """Buffers result rows and writes them as Parquet part files, bodies first.

    ``add`` only validates and buffers (cheap, safe to call from the event loop). ``flush``
    does the I/O and is meant to run in a worker thread; it serializes with other flushes
    but does not block ``add`` while it writes. Any row whose ``add`` returned before
    ``flush`` was called is durable when ``flush`` returns, so the engine acks after it.
    If a flush fails, its rows and bodies go back to the buffer and StorageError is raised;
    the next flush retries them.

    ``writer_id`` must be unique among live writers of one output (one per shard). A writer
    that restarts with the same id continues the sequence after the highest existing part,
    so it never overwrites its earlier output.
    """

    def __init__(
        self,
        out: str,
        writer_id: str,
        *,
        storage_options: dict | None = None,
        rows_per_file: int = 5000,
        flush_interval_s: float = 5.0,
        clock: Clock | None = None,
        store_bodies: bool = True,
        verify_bodies: bool = True,
        compresslevel: int = DEFAULT_COMPRESSLEVEL,
        max_buffer_bytes: int = 64 * 2**20,
        dedupe_capacity: int = 200_000,
        fsync: bool = True,
        on_durable: Callable[[list[str]], None] | None = None,
    ) -> None:
        if not isinstance(writer_id, str) or _WRITER_ID_RE.fullmatch(writer_id) is None:
            raise ValueError(
                f"writer_id must be 1-128 chars of [A-Za-z0-9_.=-] not starting with '.', "
                f"'_' or '-', got {writer_id!r}"
            )
        if rows_per_file < 1:
            raise ConfigError(f"rows_per_file must be >= 1, got {rows_per_file!r}")
        if flush_interval_s <= 0:
            raise ConfigError(f"flush_interval_s must be > 0, got {flush_interval_s!r}")
        self._fs, self._root = open_fs(out, storage_options)
        self._local = _is_local(self._fs)
        self._pages = f"{self._root}/{PAGES_DIR}"
        self.writer_id = writer_id
        self._rows_per_file = rows_per_file
        self._interval = float(flush_interval_s)
        self._clock: Clock = clock if clock is not None else _MonotonicClock()
        self._store_bodies = store_bodies
        self._verify = verify_bodies
        self._max_buffer_bytes = max_buffer_bytes
        self._fsync = fsync
        self._on_durable = on_durable
        self.blobs = BlobStore(
            out, compresslevel=compresslevel, fsync=fsync, _fs=(self._fs, self._root)
        )

        self._lock = threading.Lock()  # buffer, keys, counters
        self._flush_lock = threading.Lock()  # one flush at a time, in file order
        self._cols: list[list[Any]] = [[] for _ in _NAMES]
        self._bodies: dict[str, bytes] = {}
        self._body_bytes = 0
        self._n = 0
        self._inflight = 0
        self._first_at: float | None = None
        self._keys = _RecentSet(dedupe_capacity)
        self._closed = False
        self._stats = {"rows_written": 0, "files_written": 0, "duplicates_dropped": 0}
        self._seq = self._recover()

    # -- startup ---------------------------------------------------------------

    def _recover(self) -> int:
        """Next sequence number after this writer's existing parts; drop its stale temps."""
        own = re.compile(rf"part-{re.escape(self.writer_id)}-(\d{{6,}})\.parquet")
        stale = f".part-{self.writer_id}-"
        try:
            if self._local:
                os.makedirs(self._pages, exist_ok=True)
                names = os.listdir(self._pages)
            else:
                self._fs.invalidate_cache(self._pages)
                names = [posixpath.basename(p) for p in self._fs.ls(self._pages, detail=False)]
        except FileNotFoundError:
            names = []
        except Exception as exc:
            raise StorageError(f"cannot list {self._pages!r}: {exc}") from exc
        top = -1
        for name in names:
            m = own.fullmatch(name)
            if m:
                top = max(top, int(m.group(1)))
            elif self._local and name.startswith(stale) and name.endswith(".tmp"):
                # Left by a crash of this same writer between write and rename; ids are
                # unique per live writer, so nobody else is writing it.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._pages, name))
        return top + 1

    # -- buffering -------------------------------------------------------------

    def add(self, rows: Sequence[Mapping[str, Any]], bodies: Mapping[str, bytes] = {}) -> None:
        """Buffer result rows (dicts keyed by PAGES_SCHEMA names; missing keys are null).

        ``bodies`` maps content SHA-256 -> decoded body; they are written to the blob store
        before any row of the same flush, and a row whose ``content_sha256`` has a body here
        gets ``blob_key`` set to the key derived from that hash. A row may also carry a
        ``blob_key`` for a body stored earlier, but it must be the key of its own hash.
        Repeats of ``(url, content_sha256)`` -- or ``(url, outcome, crawl_pass)`` when the
        hash is null -- are dropped and counted. Unknown keys and wrong types raise
        ValueError before anything of the call is buffered.
        """
        normalized = [_normalize(r) for r in rows]
        checked: dict[str, bytes] = {}
        if self._store_bodies:
            for sha, body in bodies.items():
                _check_sha(sha)
                if not isinstance(body, (bytes, bytearray, memoryview)):
                    raise ValueError(f"body for {sha} must be bytes, got {type(body).__name__}")
                body = bytes(body)
                if self._verify and hashlib.sha256(body).hexdigest() != sha:
                    raise ValueError(f"body given for {sha} does not hash to it")
                checked[sha] = body
        for vals in normalized:
            sha = vals[_I_SHA]
            given = vals[_I_BLOB]
            if sha is not None and sha in checked:
                key = BlobStore.key_for(sha)
                if given is not None and given != key:
                    raise ValueError(f"blob_key {given!r} is not the key of {sha}")
                vals[_I_BLOB] = key
            elif given is not None and (sha is None or given != BlobStore.key_for(sha)):
                # Keys come only from hashes, never from page data (see module docstring).
                raise ValueError(f"blob_key {given!r} is not the key of content_sha256 {sha!r}")
        with self._lock:
            if self._closed:
                raise RuntimeError("ResultWriter is closed")
            for sha, body in checked.items():
                if sha not in self._bodies:
                    self._bodies[sha] = body
                    self._body_bytes += len(body)
            cols, keys = self._cols, self._keys
            for vals in normalized:
                key = _row_key(vals)
                if key in keys:
                    self._stats["duplicates_dropped"] += 1
                    continue
                keys.add(key)
                for col, v in zip(cols, vals):
                    col.append(v)
                self._n += 1
            if self._first_at is None and (self._n or self._bodies):
                self._first_at = self._clock.now()

    def pending_rows(self) -> int:
        """Rows accepted by ``add`` and not yet durable (buffered or being flushed)."""
        with self._lock:
            return self._n + self._inflight

    def maybe_flush(self) -> bool:
        """Flush if ``rows_per_file`` rows are buffered, ``flush_interval_s`` passed since the
        first buffered row, or buffered bodies exceed ``max_buffer_bytes``. True if it flushed."""
        with self._lock:
            due = self._first_at is not None and (
                self._n >= self._rows_per_file
                or self._body_bytes >= self._max_buffer_bytes
                or self._clock.now() - self._first_at >= self._interval
            )
        if due:
            self.flush()
        return due

    # -- writing ---------------------------------------------------------------

    def flush(self) -> int:
        """Write buffered bodies, then the buffered rows as one Parquet file; return the rows
        written. Returns only once they are durable (fsync + rename locally, PUT remotely)."""
        with self._flush_lock:
            with self._lock:
                if not self._n and not self._bodies:
                    self._first_at = None
                    return 0
                cols, bodies, n, nbytes = self._cols, self._bodies, self._n, self._body_bytes
                self._cols = [[] for _ in _NAMES]
                self._bodies, self._n, self._body_bytes = {}, 0, 0
                self._inflight = n
                self._first_at = None
            try:
                if bodies:
                    self.blobs.put_many(bodies, verify=False)  # bodies before rows, always
                if n:
                    self._write_part(_table_bytes(_build_table(cols)))
            except Exception as exc:
                with self._lock:
                    # Put the batch back in front so order and the next retry keep every row.
                    self._cols = [old + new for old, new in zip(cols, self._cols)]
                    for sha, body in self._bodies.items():
                        bodies.setdefault(sha, body)
                    self._bodies = bodies
                    self._n += n
                    self._body_bytes += nbytes
                    self._inflight = 0
                    self._first_at = self._clock.now()
                if isinstance(exc, StorageError):
                    raise
                raise StorageError(f"flushing results to {self._pages!r} failed: {exc}") from exc
            with self._lock:
                self._inflight = 0
                if n:
                    self._seq += 1
                    self._stats["rows_written"] += n
                    self._stats["files_written"] += 1
                if self._first_at is None and (self._n or self._bodies):
                    self._first_at = self._clock.now()
        if n and self._on_durable is not None:
            self._on_durable(list(cols[_I_URL]))
        return n

    def _write_part(self, data: bytes) -> None:
        name = f"part-{self.writer_id}-{self._seq:06d}.parquet"
        path = f"{self._pages}/{name}"
        if self._local:
            _write_local_atomic(path, data, fsync=self._fsync, fsync_parent=True)
        else:
            # One PUT: an object store never exposes a partial object. A retry after an
            # unknown outcome reuses the name with a superset of rows, which is harmless.
            self._fs.pipe_file(path, data)

    def close(self) -> None:
        """Flush what is buffered and refuse further rows. Safe to call twice."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
        self.flush()  # rows added while the first flush ran

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """rows_written, files_written, blobs_written, blob_bytes (gzip bytes written),
        blobs_skipped_existing, duplicates_dropped, pending_rows."""
        with self._lock:
            out = dict(self._stats)
            out["pending_rows"] = self._n + self._inflight
        out.update(self.blobs.stats())
        return out


# Reading, summarizing and compacting the dataset live in crawler.dataset.
from crawler.dataset import compact_pages, read_pages, summarize  # noqa: E402,F401
