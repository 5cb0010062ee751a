"""The SQLite table under a shard's durable frontier (crawler.frontier.store): its schema,
the migrations that bring stores of earlier versions up to it in place, the URL states,
and the one write transaction its users share.

A URL is keyed by ``h``, the signed 64-bit crawler.seen.url_hash64 of its text (a small
integer index instead of a second copy of every URL's text, like the seen set's exact
store), and found by its public ``url_hash`` through ``uh`` (the first 8 bytes of SHA-1).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from crawler.errors import DamagedStateError, StorageError
from crawler.frontier.urlitem import UrlItem
from crawler.recovery.stamps import SHARD_FIX
from crawler.seen import url_hash64
from crawler.urls import url_hash

__all__ = [
    "CLAIMED", "DONE", "DROPPED", "Journal", "QUEUED", "STATE_COLUMNS", "STATE_NAMES", "UrlTable",
    "chunks", "hash_key", "url_key",
]

QUEUED, CLAIMED, DONE, DROPPED = 0, 1, 2, 3
STATE_NAMES = {QUEUED: "queued", CLAIMED: "in_flight", DONE: "done", DROPPED: "dropped"}

#: ``journal(kind, payload) -> seq``: where committed changes go (remote outputs:
#: crawler.recovery.statelog.StateLog.append).
Journal = Callable[[str, Any], int]

_T = TypeVar("_T")

#: Pages a store's backup copies per step under the store's lock (1 MB at 4 KiB pages:
#: milliseconds, however big the store; crawler.frontier.urltable.UrlTable.backup).
BACKUP_STEP_PAGES = 256

#: Calls of :meth:`UrlTable.end` per commit inside :meth:`UrlTable.batched` (a replay's
#: logged batches: ~100k URLs a commit at the log's usual batch sizes).
BATCH_ENDS = 512

_CHUNK = 500  # SQLite's default limit on bound parameters is 999 (older builds)


def url_key(url: str) -> int:
    """The row key ``h`` of ``url``: its crawler.seen.url_hash64, signed for SQLite."""
    h = url_hash64(url)
    return h - (1 << 64) if h >= 1 << 63 else h


def hash_key(url_hash_hex: str) -> int:
    """The column ``uh`` of a public ``url_hash`` (16 hex digits), signed for SQLite."""
    v = int(url_hash_hex, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def chunks(seq: Sequence[_T], n: int = _CHUNK) -> Iterable[Sequence[_T]]:
    """``seq`` in slices small enough to bind as the parameters of one statement."""
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    id INTEGER PRIMARY KEY,
    h INTEGER NOT NULL UNIQUE,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    referrer TEXT,
    kind TEXT NOT NULL DEFAULT 'discover',
    state INTEGER NOT NULL DEFAULT 0,
    replay INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS urls_host_state ON urls(host, state, id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (seq INTEGER PRIMARY KEY, value TEXT NOT NULL);
"""

#: Per-URL state (added to stores of earlier versions in place, see UrlTable._migrate).
#: Times are wall-clock seconds: they survive a restart on another machine.
STATE_COLUMNS = (
    ("uh", "INTEGER"),  # the public url_hash (first 8 bytes of SHA-1) as a signed integer
    ("boost", "INTEGER NOT NULL DEFAULT 0"),
    ("last_crawled_at", "REAL"),
    ("next_crawl_at", "REAL"),
    ("interval_s", "REAL"),
    ("etag", "TEXT"),
    ("last_modified", "TEXT"),
    ("content_sha", "TEXT"),
    ("fingerprint", "INTEGER"),
    ("fetches", "INTEGER NOT NULL DEFAULT 0"),
    ("changes", "INTEGER NOT NULL DEFAULT 0"),
    ("last_outcome", "TEXT"),
    ("last_status", "INTEGER"),
)
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS urls_due ON urls(next_crawl_at, id) WHERE next_crawl_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS urls_uh ON urls(uh)",
)


class UrlTable:
    """The SQLite connection under a :class:`crawler.frontier.store.FrontierStore`: the
    schema (created, or migrated in place from earlier versions), the lock that serialises
    its users, the one write transaction that may be open, the next row id to hand out (one
    writer per store), and the ``journal`` that committed changes are handed to (remote
    outputs)."""

    def __init__(self, path: str, *, durable: bool, cache_kib: int, journal: Journal | None) -> None:
        self.path = path
        self.journal = journal
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={'NORMAL' if durable else 'OFF'}")
            # Bounded page cache: memory stays flat however many URLs are queued.
            self.db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
            # Checkpoints (the only fsyncs with synchronous=NORMAL) every ~16 MB of log
            # instead of every 4 MB: they block the shard's loop while they run.
            self.db.execute("PRAGMA wal_autocheckpoint=4000")
            self.db.executescript(_SCHEMA)
            self._migrate()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):  # locked, unreadable: not the file's fault
                raise StorageError(f"cannot open the frontier store {path!r}: {exc}") from exc
            raise DamagedStateError(f"{path} is not a readable frontier store ({exc}): {SHARD_FIX}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the frontier store {path!r}: {exc}") from exc
        self.lock = threading.Lock()
        self.in_tx = False
        self._batch_left: int | None = None  # inside batched(): ends left before a commit
        self.closed = False
        # One writer per store, so ids can be handed out here (no per-row round trip).
        self.next_id: int = (self.db.execute("SELECT coalesce(max(id), 0) FROM urls").fetchone()[0] or 0) + 1

    def _migrate(self) -> None:
        have = {r[1] for r in self.db.execute("PRAGMA table_info(urls)")}
        for name, decl in STATE_COLUMNS:
            if name not in have:
                self.db.execute(f"ALTER TABLE urls ADD COLUMN {name} {decl}")
        for index in _INDEXES:
            self.db.execute(index)
        # Rows of a store made before url_hash existed get theirs once (GET /urls/{url_hash}).
        missing = self.db.execute("SELECT id, url FROM urls WHERE uh IS NULL").fetchall()
        if missing:
            self.db.execute("BEGIN")
            self.db.executemany("UPDATE urls SET uh=? WHERE id=?", [(hash_key(url_hash(u)), i) for i, u in missing])
            self.db.execute("COMMIT")

    def begin(self) -> None:
        """Open the write transaction unless one is open (changes group until commit)."""
        if not self.in_tx:
            self.db.execute("BEGIN")
            self.in_tx = True

    def end(self) -> None:
        """Commit the open write transaction (inside :meth:`batched`, every so many ends)."""
        if self._batch_left is not None:
            self._batch_left -= 1
            if self._batch_left > 0:
                return
            self._batch_left = BATCH_ENDS
        self.db.execute("COMMIT")
        self.in_tx = False

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Group the commits of the calls made inside into one per :data:`BATCH_ENDS` (and
        one at the end): a replay into a store rebuilt from OUT (crawler.frontier.store
        ``replay``), where a commit per logged batch costs a write of every index page it
        touched (a restart's log is thousands of batches), and a crash midway loses
        nothing (the store is rebuilt from OUT again). One thread only."""
        self._batch_left = BATCH_ENDS
        try:
            yield
        finally:
            self._batch_left = None
            if self.in_tx:
                self.db.execute("COMMIT")
                self.in_tx = False

    def rollback(self) -> None:
        """Abandon the open write transaction (nothing of it was journaled)."""
        if self.in_tx:
            self.db.execute("ROLLBACK")
            self.in_tx = False

    def backup(self, dest_path: str, mark: Callable[[], int] | None = None, *, step_pages: int = BACKUP_STEP_PAGES) -> int:
        """A consistent copy of the whole table (SQLite's online backup) at ``dest_path``;
        returns ``mark()`` (0 without one) read in the same locked step as the copy's last pages.

        The copy goes ``step_pages`` pages at a time, holding the lock for one step only:
        the store's other users wait for a step, not for the whole copy (seconds at
        millions of URLs). A change committed between steps goes through this same
        connection, and SQLite then writes it into the copy too (sqlite3_backup_step: "If
        the source database is modified by [...] the same database connection as is used by
        the backup operation, then the backup database is automatically updated at the same
        time"), so the finished copy is the store as of its last step, which is when
        ``mark()`` is read. Every transaction begins and ends under the lock, so no step
        sees one half done."""
        seq = 0

        def between(status: int, remaining: int, total: int) -> None:
            nonlocal seq
            if status == sqlite3.SQLITE_DONE:
                seq = mark() if mark is not None else 0  # still under the lock of the last step
                return
            self.lock.release()
            try:
                time.sleep(0.0005)  # a waiting caller takes the lock here (threading.Lock is not fair)
            finally:
                self.lock.acquire()

        dst = sqlite3.connect(dest_path)
        # A temporary copy (uploaded, then deleted): no journal and no fsync, so the last
        # step's commit of the copy, made under the lock, only writes it out.
        dst.execute("PRAGMA journal_mode=OFF")
        dst.execute("PRAGMA synchronous=OFF")
        try:
            with self.lock:
                self.db.backup(dst, pages=step_pages, progress=between, sleep=0.0)
        finally:
            dst.close()
        return seq

    def insert_new(self, items: Sequence[UrlItem], keys: Sequence[int]) -> list[UrlItem]:
        """Insert the URLs not in the table yet (``keys``: their :func:`url_key`) in the open
        transaction, with ``sid`` set; returns them."""
        existing: set[int] = set()
        for part in chunks(keys):
            q = f"SELECT h FROM urls WHERE h IN ({','.join('?' * len(part))})"
            existing.update(r[0] for r in self.db.execute(q, part))
        fresh: list[UrlItem] = []
        rows = []
        for it, k in zip(items, keys):
            if k in existing:
                continue
            existing.add(k)  # a repeat inside the batch is not new either
            it.sid = self.next_id
            self.next_id += 1
            fresh.append(it)
            rows.append((it.sid, k, it.url, it.host, it.depth, it.referrer, it.boost, hash_key(url_hash(it.url))))
        self.db.executemany(
            "INSERT INTO urls(id, h, url, host, depth, referrer, boost, uh) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
        )
        return fresh
