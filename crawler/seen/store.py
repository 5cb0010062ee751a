"""The exact stores behind the seen set's Bloom filter, and the hot cache in front of disk.

A Bloom "maybe seen" is settled here, so in exact mode a false positive never drops a
page. Three stores of unsigned 64-bit URL hashes:

* :class:`ExactStore`: a Python set (memory mode; ~82 bytes per URL);
* :class:`DiskStore`: a SQLite table, one transaction per call (the crash-safe crawl;
  ~14 bytes per URL on disk, RAM bounded by SQLite's page cache);
* :class:`HotSet`: a bounded two-generation cache of recently seen hashes that answers
  repeats of popular links before SQLite is asked.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator

import numpy as np

from crawler.errors import ConfigError, DamagedStateError, StorageError
from crawler.recovery.stamps import FIX, STAMP_KEY, check, read_sqlite_stamp
from crawler.seen.hashing import MASK64

__all__ = ["PAGE_CACHE_KIB", "DiskStore", "ExactStore", "HotSet"]


class ExactStore:
    """The exact set of URL hashes behind the Bloom filter, in memory (a Python set).

    The SeenSet talks to it only through ``add_many`` / ``contains_many`` in batches, so
    a disk-backed store (:class:`DiskStore`) can replace it without touching the Bloom
    logic.
    """

    def __init__(self, hashes: Iterable[int] = ()) -> None:
        self._set: set[int] = set(hashes)

    def __len__(self) -> int:
        return len(self._set)

    def add_many(self, hashes: Iterable[int]) -> None:
        """Add hashes (repeats are harmless)."""
        self._set.update(hashes)

    def discard_many(self, hashes: Iterable[int]) -> int:
        """Remove hashes (absent ones are ignored); returns how many were removed."""
        before = len(self._set)
        self._set.difference_update(hashes)
        return before - len(self._set)

    def contains_many(self, hashes: list[int]) -> list[bool]:
        """For each hash, whether the store holds it."""
        s = self._set
        return [h in s for h in hashes]

    def to_array(self) -> np.ndarray:
        """Every hash as a uint64 array (the snapshot blob's payload)."""
        return np.fromiter(self._set, dtype=np.uint64, count=len(self._set))

    def memory_bytes(self) -> int:
        """Estimated resident bytes of the set and its int objects."""
        # The set's table (sys.getsizeof) plus one int object per hash: a 64-bit value is
        # a 36-byte int, 40 with allocator rounding. Measured: ~82 bytes per URL in all.
        return sys.getsizeof(self._set) + 40 * len(self._set)


class HotSet:
    """A bounded set of recently seen hashes: two generations of at most size/2 each.

    A link to a popular page (a site's home or navigation pages) is a Bloom positive every
    time; answering it here saves a SQLite lookup. Two plain sets rotated when the young
    one fills approximate an LRU at set speed: a hash hit in the old generation is copied
    to the young one, so a hash used at least once per generation stays, a one-off ages
    out after two rotations. Resident cost: ~70 bytes per entry (an int object and a set
    slot), so the default 100k entries cost ~7 MB.
    """

    def __init__(self, size: int) -> None:
        self._half = size // 2
        self._young: set[int] = set()
        self._old: set[int] = set()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def hit(self, h: int) -> bool:
        """True if h is cached (a hit in the old generation promotes it)."""
        if h in self._young:
            return True
        if h in self._old:
            self._young.add(h)
            if len(self._young) >= self._half:
                self._rotate()
            return True
        return False

    def add_many(self, hashes: Iterable[int]) -> None:
        """Cache hashes in the young generation, rotating as it fills."""
        half = self._half
        if half <= 0:
            return
        items = list(hashes)
        # Filled in slices so neither generation ever exceeds size/2, whatever the batch.
        while items:
            room = half - len(self._young)
            self._young.update(items[:room])
            items = items[room:]
            if len(self._young) >= half:
                self._rotate()

    def discard_many(self, hashes: Iterable[int]) -> None:
        """Forget hashes from both generations."""
        for h in hashes:
            self._young.discard(h)
            self._old.discard(h)

    def _rotate(self) -> None:
        self._old = self._young
        self._young = set()

    def memory_bytes(self) -> int:
        """Estimated resident bytes of both generations."""
        return sys.getsizeof(self._young) + sys.getsizeof(self._old) + 40 * len(self)


#: The fix a refusal of a seen store names: a seen set that starts over loses no URL, the
#: shards' stores still refuse every URL they hold (a duplicate delivery each, no fetch).
SEEN_FIX = f"remove it and its .bloom file to start the seen set over, or {FIX}"

_I64_MAX = (1 << 63) - 1
_TWO64 = 1 << 64
_APP_ID = 0x5EE75E7  # PRAGMA application_id: marks a file as a seen-set store
_SCHEMA_VERSION = 1
_IN_CHUNK = 500  # bound parameters per SELECT ... IN (...) (SQLite's old limit was 999)
# IN-list sizes actually prepared: a chunk is padded (with its last hash repeated) up to
# the next size, so a handful of statements are reused instead of one per list length.
_IN_SIZES = (8, 32, 128, _IN_CHUNK)
# SQLite page cache bound. Random 8-byte keys make leaf hits rare whatever the size (a
# 10M-URL table is ~140 MB), so the cache mostly serves the interior pages (~1 MB at 10M);
# measured at 10M URLs: 4, 8 and 16 MB cost the same CPU per check within noise.
PAGE_CACHE_KIB = 8_000


def _signed(h: int) -> int:
    """Unsigned 64-bit hash -> the signed 64-bit integer SQLite stores (two's complement)."""
    return h - _TWO64 if h > _I64_MAX else h


class DiskStore:
    """The exact store as a SQLite table of 8-byte URL hashes (INTEGER PRIMARY KEY).

    ``WITHOUT ROWID`` stores the hash as the B-tree key itself (no second rowid index):
    ~10-15 bytes per URL on disk. SQLite integers are signed 64-bit, so hashes are stored
    in two's complement (``_signed``); reading them back masks with 2^64 - 1.

    Durability: WAL journal. Each :meth:`insert` is one transaction; when COMMIT returns,
    the transaction's WAL frames have been written to the WAL file with write(2), i.e.
    they are in the OS and survive the crash of this process (``synchronous=NORMAL`` skips
    only the per-commit fsync; an OS crash or power loss may roll back the last commits,
    never corrupt the database, since the WAL is fsynced before each checkpoint).
    ``durable=False`` (benchmarks) uses ``synchronous=OFF``: still process-crash safe, but
    an OS crash may corrupt the file.

    ``locking_mode=EXCLUSIVE``: one process owns a shard's store; a second opener fails
    at once instead of interleaving writes, and the WAL index lives in heap memory (no
    ``-shm`` file).
    """

    def __init__(self, path: str, *, cache_kib: int, durable: bool) -> None:
        self.path = path
        self.cache_kib = cache_kib
        try:
            conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {path}: cannot open: {exc}") from exc
        self._conn: sqlite3.Connection | None = conn
        try:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # before WAL: heap WAL index
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"seen store {path}: SQLite refused WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={'NORMAL' if durable else 'OFF'}")
            conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")  # negative = KiB: bounded RAM
            conn.execute("PRAGMA temp_store=MEMORY")  # IN lists are tiny ephemeral tables
            # Checkpoint every ~16 MB of WAL instead of 4 MB: a random insert dirties a
            # page of its own, so a call of 300 new URLs writes ~1.2 MB of WAL; this keeps
            # checkpoints (two fsyncs each) to one per ~13 calls. The size limit truncates
            # the WAL file after an unusually large transaction.
            conn.execute("PRAGMA wal_autocheckpoint=4000")
            conn.execute("PRAGMA journal_size_limit=33554432")
            self._init_schema()
            row = conn.execute("SELECT db_id, rows, counters FROM state WHERE id = 0").fetchone()
        except sqlite3.OperationalError as exc:
            conn.close()
            self._conn = None
            if "locked" in str(exc):
                raise StorageError(f"seen store {path} is open in another SeenSet or process") from exc
            raise StorageError(f"seen store {path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            self._conn = None
            raise DamagedStateError(f"{path} is not a readable seen store ({exc}): {SEEN_FIX}") from exc
        except BaseException:
            conn.close()
            self._conn = None
            raise
        self.db_id: int = int(row[0])
        self.rows: int = int(row[1])
        self.counters: dict[str, float] = json.loads(row[2])
        self._in_sql = {n: f"SELECT h FROM seen WHERE h IN ({','.join('?' * n)})" for n in _IN_SIZES}

    def _init_schema(self) -> None:
        conn = self._conn
        assert conn is not None
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == _APP_ID:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != _SCHEMA_VERSION:
                raise StorageError(f"seen store {self.path}: schema version {version} is not supported")
            return
        tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        if app_id != 0 or tables:
            raise ConfigError(f"seen path {self.path}: the file is not a seen-set store; choose another path")
        # db_id tells this database from another one with the same row count when a Bloom
        # snapshot is matched to it.
        db_id = int.from_bytes(os.urandom(8), "little") >> 1
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE seen (h INTEGER PRIMARY KEY) WITHOUT ROWID")
        conn.execute(
            "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 0), db_id INTEGER NOT NULL,"
            " rows INTEGER NOT NULL, counters TEXT NOT NULL)"
        )
        conn.execute("INSERT INTO state VALUES (0, ?, 0, '{}')", (db_id,))
        conn.execute(f"PRAGMA application_id={_APP_ID}")
        conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        conn.execute("COMMIT")

    def claim_identity(self, identity: str | None) -> None:
        """Check the store's stamp (crawler.recovery.stamps); stamp a store that has none."""
        if identity is None:
            return
        try:
            self.conn.execute("CREATE TABLE IF NOT EXISTS stamp (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = self.conn.execute("SELECT value FROM stamp WHERE key = ?", (STAMP_KEY,)).fetchone()
            if check(self.path, None if row is None else row[0], identity, SEEN_FIX):
                self.conn.execute("INSERT OR REPLACE INTO stamp VALUES (?, ?)", (STAMP_KEY, identity))
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: {exc}") from exc

    @staticmethod
    def read_stamp(path: str) -> str | None:
        """The stamp of the seen store at ``path`` (None: none yet), read without writing."""
        return read_sqlite_stamp(path, "stamp", "seen store", SEEN_FIX)

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection; StorageError once closed."""
        if self._conn is None:
            raise StorageError(f"seen store {self.path} is closed")
        return self._conn

    def __len__(self) -> int:
        return self.rows

    def lookup(self, hashes: Iterable[int]) -> set[int]:
        """The subset of ``hashes`` (unsigned) that the table holds."""
        conn = self.conn
        signed = [_signed(h) for h in hashes]
        found: set[int] = set()
        try:
            for start in range(0, len(signed), _IN_CHUNK):
                chunk = signed[start : start + _IN_CHUNK]
                size = next(n for n in _IN_SIZES if n >= len(chunk))
                chunk += [chunk[-1]] * (size - len(chunk))
                found.update(s & MASK64 for (s,) in conn.execute(self._in_sql[size], chunk))
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: lookup failed: {exc}") from exc
        return found

    def insert(self, hashes: list[int], counters: dict[str, float]) -> None:
        """Add ``hashes`` (unsigned, distinct) and the new counters in one transaction."""
        conn = self.conn
        # Sorted keys walk the B-tree left to right: neighbouring inserts share pages.
        rows = [(s,) for s in sorted(_signed(h) for h in hashes)]
        blob = json.dumps(counters)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                added = conn.executemany("INSERT OR IGNORE INTO seen (h) VALUES (?)", rows).rowcount
                conn.execute(
                    "UPDATE state SET rows = rows + ?, counters = ? WHERE id = 0", (added, blob)
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # a failed COMMIT may have rolled back already
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: write failed: {exc}") from exc
        self.rows += added
        self.counters = counters

    def delete(self, hashes: list[int], counters: dict[str, float]) -> int:
        """Remove ``hashes`` (unsigned) and save the counters in one transaction; returns
        how many rows went. The database gets a new ``db_id``: a Bloom snapshot taken
        before still has the removed hashes' bits but, after later inserts, could match
        the row count again while missing theirs, so every older snapshot is invalidated
        (the next open rebuilds the filter from the table)."""
        conn = self.conn
        rows = [(_signed(h),) for h in hashes]
        db_id = int.from_bytes(os.urandom(8), "little") >> 1
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                removed = conn.executemany("DELETE FROM seen WHERE h = ?", rows).rowcount
                conn.execute(
                    "UPDATE state SET rows = rows - ?, counters = ?, db_id = ? WHERE id = 0",
                    (removed, json.dumps(counters), db_id),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: delete failed: {exc}") from exc
        self.rows -= removed
        self.db_id = db_id
        self.counters = counters
        return removed

    def save_counters(self, counters: dict[str, float]) -> None:
        """Persist the counters alone (calls that found nothing new do not write)."""
        try:
            self.conn.execute("UPDATE state SET counters = ? WHERE id = 0", (json.dumps(counters),))
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: write failed: {exc}") from exc
        self.counters = counters

    def iter_hashes(self, chunk: int = 65536) -> Iterator[list[int]]:
        """Every stored hash (unsigned), streamed in lists of ``chunk``."""
        try:
            cur = self.conn.execute("SELECT h FROM seen")
            while rows := cur.fetchmany(chunk):
                yield [s & MASK64 for (s,) in rows]
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: read failed: {exc}") from exc

    def key_page(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` stored hashes above ``after``, ascending, as SQLite stores them
        (signed: crawler.frontier.store keys URLs the same way), for the URL ledger's audit
        (crawler.session.ledgeraudit). The table is its own B-tree: a scan in key order."""
        sql = "SELECT h FROM seen" + ("" if after is None else " WHERE h > ?") + " ORDER BY h LIMIT ?"
        try:
            return [s for (s,) in self.conn.execute(sql, (limit,) if after is None else (after, limit))]
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: read failed: {exc}") from exc

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (fsynced unless synchronous=OFF)."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"seen store {self.path}: checkpoint failed: {exc}") from exc

    def to_array(self) -> np.ndarray:
        """Every stored hash as a uint64 array (streams the whole table)."""
        parts = [np.array(c, dtype=np.uint64) for c in self.iter_hashes()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def disk_bytes(self) -> int:
        """Database + WAL file sizes."""
        total = 0
        for p in (self.path, self.path + "-wal"):
            try:
                total += os.path.getsize(p)
            except OSError:
                pass  # no WAL right after a TRUNCATE checkpoint: nothing to count
        return total

    def memory_bytes(self) -> int:
        """SQLite's page cache: its bound, or the database size while that is smaller."""
        try:
            pages, size = (self.conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
        except sqlite3.Error:
            return self.cache_kib * 1024
        return min(self.cache_kib * 1024, int(pages) * int(size))

    def close(self) -> None:
        """Close the connection (releases the exclusive lock). Idempotent."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
