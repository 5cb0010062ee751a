"""The result writer: buffers outcome rows and bodies, writes them durably, bodies first.

Guarantees (docs/invariants.md #5 and #6):

* Nothing half-written is ever visible: a part file is published whole or not at all
  (:func:`crawler.output.fs.publish`).
* A row never points at a missing blob: :meth:`ResultWriter.flush` writes the buffered
  bodies first and the rows after, and returns only once both are durable. The engine acks
  URLs after ``flush`` returns.
* Rows are idempotent on ``(url, content_sha256)`` (``(url, outcome)`` when
  there is no body hash): the writer drops repeats it has seen recently, and
  :func:`crawler.output.read_pages` drops repeats across writers and crashes.
* A shard's writer names its files after the generation its incarnation claimed
  (crawler.recovery.incarnation) and checks, before each write, that no newer incarnation
  has claimed one since (DESIGN invariant 15): two incarnations never write the same name,
  so an old one back from a partition can neither overwrite its successor's parts and
  packs nor be overwritten by them. What it still writes between its last check and its
  PUT is a part or pack under its own name, holding pages it did fetch: rows that read
  as duplicates at worst, never a row or body lost.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.errors import ConfigError, StorageError
from crawler.output.blobs import DEFAULT_COMPRESSLEVEL, BlobStore, RecentKeys
from crawler.output.fs import ensure_dir, is_local, list_names, open_fs, publish, remove_quietly
from crawler.output.layout import (
    PACKS_DIR,
    PAGES_DIR,
    blob_sha,
    check_sha256,
    check_writer_id,
    generation_name,
    pack_name,
    pack_seq,
    part_name,
    part_seq,
    temp_target,
)
from crawler.output.rows import I_BLOB, I_RAW_BLOB, I_RAW_SHA, I_SHA, I_URL, build_table, row_key, to_values
from crawler.output.schema import COLUMNS, OutcomeRow, encode_part

__all__ = ["ResultWriter"]


def _key_sha(key: str) -> str | None:
    try:
        return blob_sha(key)
    except ValueError:
        return None


class ResultWriter:
    """Buffers result rows and writes them as Parquet part files, bodies first.

    ``add`` only validates and buffers (cheap, safe to call from the event loop). ``flush``
    does the I/O and is meant to run in a worker thread; it serializes with other flushes
    but does not block ``add`` while it writes. Any row whose ``add`` returned before
    ``flush`` was called is durable when ``flush`` returns, so the engine acks after it.
    If a flush fails, its rows and bodies go back to the buffer and StorageError is raised;
    the next flush retries them.

    ``writer_id`` must be unique among live writers of one output (one per shard). Without
    a ``generation``, a writer that restarts with the same id continues the sequence after
    the highest existing part, so it never overwrites its earlier output -- unless two
    incarnations list before either writes. With a ``generation`` (claimed once, by
    crawler.recovery.incarnation) its files are ``<writer_id>-g<generation>-<seq>``,
    starting at 0 with no listing, and ``fence()`` is called before each flush writes: it
    raises FencedError once a newer incarnation exists (the rows stay buffered, unacked).
    """

    def __init__(
        self,
        out: str,
        writer_id: str,
        *,
        storage_options: dict[str, Any] | None = None,
        rows_per_file: int = 5000,
        flush_interval_s: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        store_bodies: bool = True,
        verify_bodies: bool = True,
        compresslevel: int = DEFAULT_COMPRESSLEVEL,
        max_buffer_bytes: int = 64 * 2**20,
        dedupe_capacity: int = 200_000,
        fsync: bool = True,
        on_durable: Callable[[list[str]], None] | None = None,
        generation: int | None = None,
        fence: Callable[[], None] | None = None,
    ) -> None:
        check_writer_id(writer_id)
        if rows_per_file < 1:
            raise ConfigError(f"rows_per_file must be >= 1, got {rows_per_file!r}")
        if flush_interval_s <= 0:
            raise ConfigError(f"flush_interval_s must be > 0, got {flush_interval_s!r}")
        self._fs, self._root = open_fs(out, storage_options)
        self._pages = f"{self._root}/{PAGES_DIR}"
        self.writer_id = writer_id
        self.generation = generation
        self._name = generation_name(writer_id, generation)  # what its files are named after
        self._fence = fence
        self._rows_per_file = rows_per_file
        self._interval = float(flush_interval_s)
        self._clock = clock
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
        self._cols: list[list[Any]] = [[] for _ in COLUMNS]
        self._bodies: dict[str, bytes] = {}
        self._body_bytes = 0
        self._n = 0
        self._inflight = 0
        self._first_at: float | None = None
        self._keys = RecentKeys(dedupe_capacity)
        self._closed = False
        self._stats = {"rows_written": 0, "files_written": 0, "duplicates_dropped": 0}
        self._seq = self._recover()

    # -- startup ---------------------------------------------------------------

    def _recover(self) -> int:
        """Next sequence number after this writer's existing parts; drop its stale temps.

        A writer with a generation starts at 0: nobody else ever wrote its names. It lists
        only a local folder, for temps of its own id's older generations."""
        ensure_dir(self._fs, self._pages)
        local = is_local(self._fs)
        if self.generation is not None:
            if local:
                for name in list_names(self._fs, self._pages):
                    target = temp_target(name)
                    if target is not None and self._older_generation(target):
                        # A crashed incarnation's, between write and rename. Should that
                        # incarnation still run, its rename fails: its flush is not acked.
                        remove_quietly(f"{self._pages}/{name}")
            return 0
        top = -1
        for name in list_names(self._fs, self._pages):
            seq = part_seq(name, self.writer_id)
            if seq is not None:
                top = max(top, seq)
            elif local:
                target = temp_target(name)
                if target is not None and part_seq(target, self.writer_id) is not None:
                    # Left by a crash of this same writer between write and rename; ids
                    # are unique per live writer, so nobody else is writing it.
                    remove_quietly(f"{self._pages}/{name}")
        # A pack written by a flush whose part never followed (a crash between the two)
        # is not overwritten either: its name is never reused.
        for name in list_names(self._fs, f"{self._root}/{PACKS_DIR}"):
            seq = pack_seq(name, self.writer_id)
            if seq is not None:
                top = max(top, seq)
        return top + 1

    def _older_generation(self, part: str) -> bool:
        """Whether ``part`` is a part file of this writer's id from an older generation."""
        assert self.generation is not None
        m = re.fullmatch(rf"part-{re.escape(self.writer_id)}-g(\d{{8}})-\d{{6,}}\.parquet", part)
        return m is not None and int(m.group(1)) < self.generation

    # -- buffering -------------------------------------------------------------

    def add(self, rows: Sequence[OutcomeRow], bodies: Mapping[str, bytes] = {}) -> None:
        """Buffer outcome rows (and the bodies they stored, content SHA-256 -> decoded body).

        Bodies are written to the blob store (one pack per flush) before any row of the
        same flush, and a row whose ``content_sha256`` has a body here gets ``blob_key`` set
        to that body's key in the pack. A row may also carry a ``blob_key`` for a body
        stored earlier, but it must be a key of its own hash. Repeats of ``(url, content_sha256)`` -- or
        ``(url, outcome)`` when the hash is null -- are dropped and counted.
        Text is cleaned to valid UTF-8; wrong types and values raise ValueError (TypeError
        for something that is not an OutcomeRow) before anything of the call is buffered.
        """
        normalized = [to_values(r) for r in rows]
        checked: dict[str, bytes] = {}
        if self._store_bodies:
            for sha, body in bodies.items():
                check_sha256(sha)
                if not isinstance(body, (bytes, bytearray, memoryview)):
                    raise ValueError(f"body for {sha} must be bytes, got {type(body).__name__}")
                body = bytes(body)
                if self._verify and hashlib.sha256(body).hexdigest() != sha:
                    raise ValueError(f"body given for {sha} does not hash to it")
                checked[sha] = body
        for vals in normalized:
            sha = vals[I_SHA]
            given = vals[I_BLOB]
            if given is not None and (sha is None or _key_sha(given) != sha):
                # Keys come only from hashes and pack positions, never from page data
                # (crawler.output.layout).
                raise ValueError(f"blob_key {given!r} is not a key of content_sha256 {sha!r}")
            if sha is not None and sha in checked:
                vals[I_BLOB] = None  # the key of this flush's pack, set by flush()
            raw = vals[I_RAW_SHA]
            if vals[I_RAW_BLOB] is not None and (raw is None or _key_sha(vals[I_RAW_BLOB]) != raw):
                raise ValueError(f"raw_blob_key {vals[I_RAW_BLOB]!r} is not a key of raw_sha256 {raw!r}")
            if raw is not None and raw in checked:
                vals[I_RAW_BLOB] = None  # a rendered page's raw response: set by flush() too
        with self._lock:
            if self._closed:
                raise RuntimeError("ResultWriter is closed")
            for sha, body in checked.items():
                if sha not in self._bodies:
                    self._bodies[sha] = body
                    self._body_bytes += len(body)
            cols, keys = self._cols, self._keys
            for vals in normalized:
                key = row_key(vals)
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
                self._cols = [[] for _ in COLUMNS]
                self._bodies, self._n, self._body_bytes = {}, 0, 0
                self._inflight = n
                self._first_at = None
            filled: list[int] = []
            packed = False
            try:
                if self._fence is not None:
                    self._fence()  # before this flush's first write
                if bodies:  # bodies before rows, always
                    keys = self.blobs.write_pack(pack_name(self._name, self._seq), bodies)
                    packed = True
                    blob_col = cols[I_BLOB]
                    for i, sha in enumerate(cols[I_SHA]):
                        if blob_col[i] is None and sha is not None:
                            key = keys.get(sha)
                            if key is not None:
                                blob_col[i] = key
                                filled.append(i)
                    raw_col = cols[I_RAW_BLOB]
                    for i, sha in enumerate(cols[I_RAW_SHA]):
                        if raw_col[i] is None and sha is not None:
                            raw_col[i] = keys.get(sha)
                if n:
                    self._write_part(encode_part(build_table(cols)))
            except Exception as exc:
                for i in filled:  # keys are set again by the retry
                    cols[I_BLOB][i] = None
                cols[I_RAW_BLOB][:] = [None if sha is not None else k for sha, k in zip(cols[I_RAW_SHA], cols[I_RAW_BLOB])]
                with self._lock:
                    if packed:
                        # The pack is durable and its keys are remembered: its name is
                        # burnt, so a retry with more bodies cannot overwrite it.
                        self._seq += 1
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
                if n or packed:
                    self._seq += 1  # a pack's name is never reused: keys point into it
                if n:
                    self._stats["rows_written"] += n
                    self._stats["files_written"] += 1
                if self._first_at is None and (self._n or self._bodies):
                    self._first_at = self._clock.now()
        if n and self._on_durable is not None:
            self._on_durable(list(cols[I_URL]))
        return n

    def _write_part(self, data: bytes) -> None:
        # Remotely a retry after an unknown outcome reuses the name with a superset of
        # rows, which is harmless.
        path = f"{self._pages}/{part_name(self._name, self._seq)}"
        publish(self._fs, path, data, fsync=self._fsync)

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
