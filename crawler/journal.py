"""The durable frontier of one shard: every URL it accepted, and how far each got.

A SQLite database per HostShard (WAL mode) holds one row per URL the shard ever
accepted, in acceptance order, with its state:

* ``0`` queued: accepted, not yet handed to a fetch;
* ``1`` claimed: handed to a fetch (its links may already be on their way);
* ``2`` done: its outcome row and body are durable in the output;
* ``3`` dropped: finished with no row, by a counted rule (the per-host page budget).

State ``0`` means exactly "waiting in the frontier": the frontier's spill loader hands out
every queued row of a host past its cursor, so a URL that gets a row without being
fetched (refused by cached robots rules at accept) is claimed at once, never left queued.

The ordering that makes the crawl lose nothing (DESIGN.md invariant 6):

1. :meth:`FrontierStore.add` commits a batch before the sender is told it was
   delivered, so an accepted URL survives a crash of the receiver.
2. :meth:`claim` commits before a fetched page's links are seen-checked (the engine
   group-commits its pending claims when the router flushes), so after a crash we know
   which URLs may have sent links. Those links may have been marked seen without
   reaching their owner, so when the page is fetched again its links bypass the seen
   filter (``replay``) and the owner's own table de-duplicates them (``add`` is
   idempotent on URL).
3. :meth:`done` runs only after the output writer flushed the URL's row (ack after store).

The table is also the spill area of the in-memory frontier: only the heads of each host's
queue live in memory, the rest is read back with :meth:`load` in acceptance order.

``synchronous=NORMAL`` with WAL makes every commit durable against a crash of the
process (the log write is in the operating system before commit returns); a power loss
may lose the last commits. ``durable=False`` turns syncing off (benchmarks only).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Iterable, Sequence

from crawler.errors import StorageError
from crawler.frontier import UrlItem
from crawler.seen import url_hash64
from crawler.urls import url_hash


def _key(url: str) -> int:
    h = url_hash64(url)
    return h - (1 << 64) if h >= 1 << 63 else h

QUEUED, CLAIMED, DONE, DROPPED = 0, 1, 2, 3
STATE_NAMES = {QUEUED: "queued", CLAIMED: "in_flight", DONE: "done", DROPPED: "dropped"}

# ``h`` is the URL's 64-bit hash (signed for SQLite): a small integer index instead of a
# second copy of every URL's text, like the seen set's exact store (same 8-byte keys).
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
"""

# The public id of each URL (crawler.urls.url_hash, 64 bits of SHA-1) -> its row, so the
# control API finds a URL by the id that rows and events carry (GET /urls/{url_hash}).
# A table of its own, the id as its rowid: one small B-tree, no second copy of the URL.
_URL_HASH_SCHEMA = """
CREATE TABLE IF NOT EXISTS url_hashes (uh INTEGER PRIMARY KEY, h INTEGER NOT NULL);
"""


def _uh(url: str) -> int:
    """:func:`crawler.urls.url_hash` as a signed 64-bit integer (SQLite's integer)."""
    v = int(url_hash(url), 16)
    return v - (1 << 64) if v >= 1 << 63 else v


_CHUNK = 500  # SQLite's default limit on bound parameters is 999 (older builds)


def _chunks(seq: Sequence, n: int = _CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


class FrontierStore:
    """One shard's durable URL table (see the module docstring for the states)."""

    def __init__(self, path: str, *, durable: bool = True, cache_kib: int = 16_000) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'NORMAL' if durable else 'OFF'}")
            # Bounded page cache: memory stays flat however many URLs are queued.
            self._db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
            # Checkpoints (the only fsyncs with synchronous=NORMAL) every ~16 MB of log
            # instead of every 4 MB: they block the shard's loop while they run.
            self._db.execute("PRAGMA wal_autocheckpoint=4000")
            self._db.executescript(_SCHEMA)
            self._db.executescript(_URL_HASH_SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the frontier store {path!r}: {exc}") from exc
        self._lock = threading.Lock()
        self._in_tx = False
        # One writer per store, so ids can be handed out here (no per-row round trip).
        self._next_id = (self._db.execute("SELECT coalesce(max(id), 0) FROM urls").fetchone()[0] or 0) + 1
        self._index_url_hashes()

    def _index_url_hashes(self) -> None:
        """A store made before the url_hash index existed: index its URLs once."""
        if self.get_meta("url_hash_index") == "1":
            return
        with self._lock:
            self._db.execute("BEGIN")
            cur = self._db.execute("SELECT url, h FROM urls")
            while rows := cur.fetchmany(_CHUNK * 20):
                self._db.executemany("INSERT OR IGNORE INTO url_hashes(uh, h) VALUES (?, ?)", [(_uh(u), h) for u, h in rows])
            self._db.execute("INSERT INTO meta(key, value) VALUES ('url_hash_index', '1') ON CONFLICT(key) DO UPDATE SET value='1'")
            self._db.execute("COMMIT")

    # -- writes -----------------------------------------------------------------------

    def _begin(self) -> None:
        if not self._in_tx:
            self._db.execute("BEGIN")
            self._in_tx = True

    def commit(self) -> None:
        """Make every change so far durable (group commit)."""
        with self._lock:
            if self._in_tx:
                self._db.execute("COMMIT")
                self._in_tx = False

    def add(self, items: Sequence[UrlItem]) -> list[UrlItem]:
        """Record a batch of URLs; returns the ones not seen before (with ``sid`` set). Committed."""
        if not items:
            return []
        keys = [_key(i.url) for i in items]
        with self._lock:
            self._begin()
            existing: set[int] = set()
            for part in _chunks(keys):
                q = f"SELECT h FROM urls WHERE h IN ({','.join('?' * len(part))})"
                existing.update(r[0] for r in self._db.execute(q, part))
            fresh: list[UrlItem] = []
            rows = []
            for it, k in zip(items, keys):
                if k in existing:
                    continue
                existing.add(k)  # a repeat inside the batch is not new either
                it.sid = self._next_id
                self._next_id += 1
                fresh.append(it)
                rows.append((it.sid, k, it.url, it.host, it.depth, it.referrer))
            self._db.executemany("INSERT INTO urls(id, h, url, host, depth, referrer) VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.executemany("INSERT OR IGNORE INTO url_hashes(uh, h) VALUES (?, ?)", [(_uh(r[2]), r[1]) for r in rows])
            self._db.execute("COMMIT")
            self._in_tx = False
        return fresh

    def claim(self, urls: Sequence[str]) -> None:
        """Mark queued URLs as handed to a fetch. Committed.

        Only queued URLs change: a claim recorded late never undoes a ``done``.
        """
        if not urls:
            return
        with self._lock:
            self._begin()
            self._db.executemany("UPDATE urls SET state=1 WHERE h=? AND state=0", [(_key(u),) for u in urls])
            self._db.execute("COMMIT")
            self._in_tx = False

    def done(self, urls: Sequence[str]) -> None:
        """Mark URLs finished: their outcome rows are durable. Committed."""
        self._set_state(urls, DONE)

    def drop(self, urls: Sequence[str]) -> None:
        """Mark URLs finished without a row (dropped by a counted rule). Committed."""
        self._set_state(urls, DROPPED)

    def _set_state(self, urls: Sequence[str], state: int) -> None:
        if not urls:
            return
        with self._lock:
            self._begin()
            self._db.executemany("UPDATE urls SET state=? WHERE h=?", [(state, _key(u)) for u in urls])
            self._db.execute("COMMIT")
            self._in_tx = False

    # -- reads ------------------------------------------------------------------------

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]:
        """The next queued URLs of ``host`` in acceptance order, after ``after_id``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, url, depth, referrer, replay FROM urls WHERE host=? AND state=0 AND id>? ORDER BY id LIMIT ?",
                (host, after_id, limit),
            ).fetchall()
        out = []
        for sid, url, depth, referrer, replay in rows:
            it = UrlItem(url, depth, referrer, host=host)
            it.sid = sid
            it.replay = bool(replay)
            out.append(it)
        return out

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]:
        """Mark up to ``limit`` of the newest queued URLs of ``host`` (ids above ``after_id``,
        i.e. spilled) dropped; returns their URLs. Committed (a budget cut's trim)."""
        with self._lock:
            self._begin()
            rows = self._db.execute(
                "SELECT id, url FROM urls WHERE host=? AND state=0 AND id>? ORDER BY id DESC LIMIT ?",
                (host, after_id, limit),
            ).fetchall()
            self._db.executemany("UPDATE urls SET state=3 WHERE id=?", [(r[0],) for r in rows])
            self._db.execute("COMMIT")
            self._in_tx = False
        return [r[1] for r in rows]

    def count_queued(self, host: str, after_id: int) -> int:
        """How many queued URLs of ``host`` come after ``after_id`` (the spill recount)."""
        with self._lock:
            return self._db.execute(
                "SELECT count(*) FROM urls WHERE host=? AND state=0 AND id>?", (host, after_id)
            ).fetchone()[0]

    def recover(self, *, replay_all: bool = False) -> int:
        """After a crash: claimed URLs go back to the queue, flagged for replay. Returns how many.

        ``replay_all`` flags every queued URL too (a store restored from an older copy:
        crawler.state).
        """
        with self._lock:
            cur = self._db.execute("UPDATE urls SET state=0, replay=1 WHERE state=1")
            n = cur.rowcount
            if replay_all:
                self._db.execute("UPDATE urls SET replay=1 WHERE state=0")
            return n

    def finish_from_output(self, urls: Sequence[str]) -> int:
        """Mark queued or claimed URLs done because their rows are already in the output
        (a store restored from an older copy). Returns how many changed. Committed."""
        if not urls:
            return 0
        with self._lock:
            self._begin()
            changed = 0
            for part in _chunks([(_key(u),) for u in urls]):
                changed += self._db.executemany("UPDATE urls SET state=2 WHERE h=? AND state IN (0, 1)", part).rowcount
            self._db.execute("COMMIT")
            self._in_tx = False
        return changed

    def url_status(self, url: str) -> dict[str, object] | None:
        """What the store knows of ``url``: its state, depth and referrer; None if never accepted."""
        with self._lock:
            row = self._db.execute("SELECT url, host, depth, referrer, state FROM urls WHERE h=?", (_key(url),)).fetchone()
        if row is None or row[0] != url:
            return None
        return {
            "url": row[0], "url_hash": url_hash(row[0]), "host": row[1], "depth": row[2], "referrer": row[3],
            "status": STATE_NAMES[row[4]],
        }

    def url_for_hash(self, url_hash_hex: str) -> str | None:
        """The URL whose :func:`crawler.urls.url_hash` is ``url_hash_hex``, if this store has it."""
        try:
            v = int(url_hash_hex, 16)
        except ValueError:
            return None
        if len(url_hash_hex) != 16 or v >= 1 << 64:
            return None
        uh = v - (1 << 64) if v >= 1 << 63 else v
        with self._lock:
            row = self._db.execute("SELECT u.url FROM url_hashes x JOIN urls u ON u.h = x.h WHERE x.uh=?", (uh,)).fetchone()
        return row[0] if row is not None and url_hash(row[0]) == url_hash_hex.lower() else None

    def pending_hosts(self) -> list[tuple[str, int]]:
        """(host, queued URLs) for every host with queued work."""
        with self._lock:
            return self._db.execute("SELECT host, count(*) FROM urls WHERE state=0 GROUP BY host").fetchall()

    def counts(self) -> dict[str, int]:
        """URLs per state: queued, claimed, done (row durable), dropped (no row, counted rule)."""
        with self._lock:
            rows = dict(self._db.execute("SELECT state, count(*) FROM urls GROUP BY state").fetchall())
        return {
            "queued": rows.get(QUEUED, 0),
            "claimed": rows.get(CLAIMED, 0),
            "done": rows.get(DONE, 0),
            "dropped": rows.get(DROPPED, 0),
        }

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    def backup(self, dest_path: str) -> None:
        """A consistent copy of the whole store (SQLite's online backup) at ``dest_path``."""
        with self._lock:
            dst = sqlite3.connect(dest_path)
            try:
                self._db.backup(dst)
            finally:
                dst.close()

    def close(self) -> None:
        with self._lock:
            if self._in_tx:
                self._db.execute("COMMIT")
                self._in_tx = False
            self._db.close()
