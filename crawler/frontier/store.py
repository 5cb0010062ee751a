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

The ordering that makes the crawl lose nothing (docs/invariants.md #6):

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

And it is the per-URL state that recrawl schedules from and ``url_status`` answers
from (bounded RAM: on disk, with SQLite's page cache hot): when each URL was last
fetched and is next due, its interval, validators (ETag, Last-Modified), content hash
and main-content fingerprint, fetch and change counts, last outcome. :meth:`record`
writes it in the same commit as the ack; :meth:`due` hands out the refreshes coming due.

With a remote output the store is a cache of state kept in OUT (docs/invariants.md #11):
every change a crash of the node must not lose (URLs added or dropped, acked rows' state,
a forced checkpoint) is handed to ``journal`` in the same locked step as its commit, in
commit order, and :meth:`replay` applies such changes to a store restored from a
snapshot (crawler.recovery.statelog).

And it holds the *decisions* that limit what the shard fetches since its last checkpoint
(the ``decisions`` table: what hosts' page budgets became, the robots.txt verdicts that
came in force; crawler.engine.admission makes them). Decisions are written in the same
commit as the URL changes they govern or caused (:meth:`admit`, :meth:`drop`,
:meth:`claim` take them) and journaled in the same locked step, as a ``decide`` record
right after theirs, so they reach OUT in the same log segment: a store rebuilt from OUT
never holds an admission without the budget it spent, or a refusal without the verdict
that made it. The table is a log, one row per commit that made decisions (an append at
the end of a B-tree: cheaper per URL than a row per host); a checkpoint holds all of it,
so writing one empties it (:meth:`set_meta` with ``covers_decisions``).

``synchronous=NORMAL`` with WAL makes every commit durable against a crash of the
process (the log write is in the operating system before commit returns); a power loss
may lose the last commits. ``durable=False`` turns syncing off (benchmarks only).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypedDict

from crawler.errors import DamagedStateError, StorageError
from crawler.frontier.urlitem import UrlItem
from crawler.output import OutcomeRow
from crawler.freshness.recrawl import Previous, Schedule
from crawler.seen import url_hash64
from crawler.recovery.stamps import SHARD_FIX
from crawler.urls import url_hash as _url_hash


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
CREATE TABLE IF NOT EXISTS decisions (seq INTEGER PRIMARY KEY, value TEXT NOT NULL);
"""

# Per-URL state (added to stores of earlier versions in place, see _migrate). Times are
# wall-clock seconds: they survive a restart on another machine.
_STATE_COLUMNS = (
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


#: The columns a host's rows carry to another shard (everything but the local ``id``).
_PORTABLE_COLS = (
    "h", "url", "host", "depth", "referrer", "kind", "state", "replay", *(name for name, _ in _STATE_COLUMNS),
)
_PORTABLE = ", ".join(_PORTABLE_COLS)
_STATE_AT, _REPLAY_AT = _PORTABLE_COLS.index("state"), _PORTABLE_COLS.index("replay")


class UrlStatus(TypedDict):
    """What a shard knows of one URL (``GET /urls/{url}``, ``crawl ctl url``), declared once
    for every layer it crosses: store, shard, runtime seam, session, API. Times are wall
    clock; a field the store does not know is None."""

    url: str
    url_hash: str
    host: str
    depth: int
    referrer: str | None
    status: str  # pending, fetched, not_modified, failed, blocked, dropped
    in_flight: bool
    last_crawled_at: float | None
    next_crawl_at: float | None
    interval_s: float | None
    etag: str | None
    last_modified: str | None
    content_hash: str | None
    fingerprint: int | None
    fetches: int
    changes: int
    change_rate: float | None
    last_outcome: str | None
    last_status: int | None


def _uh(url_hash_hex: str) -> int:
    v = int(url_hash_hex, 16)
    return v - (1 << 64) if v >= 1 << 63 else v

#: ``url_status()["status"]`` by last outcome (pending while queued or in flight).
_STATUS_BY_OUTCOME = {
    "fetched": "fetched", "redirect": "fetched", "not_modified": "not_modified",
    "http_error": "failed", "failed": "failed", "robots_blocked": "blocked",
}


def _wall(value: Any) -> float | None:
    if value is None:
        return None
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)

_CHUNK = 500  # SQLite's default limit on bound parameters is 999 (older builds)


def _chunks(seq: Sequence, n: int = _CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


#: Decisions that limit fetching, made together: ``{kind: {key: value}}``. ``kind`` names
#: who reads them back (``budget``: hosts' page budgets; ``robots``: origins' rules), ``key``
#: the host or origin, ``value`` any JSON value; a later decision on the same key
#: replaces it. Journaled as ``["decide", decisions]``.
Decisions = Mapping[str, Mapping[str, Any]]


class Verdicts(NamedTuple):
    """What :meth:`FrontierStore.admit`'s ``decide`` made of the URLs new to the store:
    URLs claimed at once (refused: their rows follow), URLs dropped by a counted rule,
    and the decisions that made them."""

    claim: Sequence[str] = ()
    drop: Sequence[str] = ()
    decisions: Decisions | None = None


class UrlTable:
    """The SQLite connection under a :class:`FrontierStore`: the schema (created, or
    migrated in place from earlier versions), the lock that serialises its users, the one
    write transaction that may be open, the next row id to hand out (one writer per
    store), and the ``journal`` that committed changes are handed to (remote outputs)."""

    def __init__(
        self, path: str, *, durable: bool, cache_kib: int, journal: Callable[[str, Any], int] | None
    ) -> None:
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
        self.closed = False
        # One writer per store, so ids can be handed out here (no per-row round trip).
        self.next_id = (self.db.execute("SELECT coalesce(max(id), 0) FROM urls").fetchone()[0] or 0) + 1

    def _migrate(self) -> None:
        have = {r[1] for r in self.db.execute("PRAGMA table_info(urls)")}
        for name, decl in _STATE_COLUMNS:
            if name not in have:
                self.db.execute(f"ALTER TABLE urls ADD COLUMN {name} {decl}")
        for index in _INDEXES:
            self.db.execute(index)
        # Rows of a store made before url_hash existed get theirs once (GET /urls/{url_hash}).
        missing = self.db.execute("SELECT id, url FROM urls WHERE uh IS NULL").fetchall()
        if missing:
            self.db.execute("BEGIN")
            self.db.executemany("UPDATE urls SET uh=? WHERE id=?", [(_uh(_url_hash(u)), i) for i, u in missing])
            self.db.execute("COMMIT")

    def begin(self) -> None:
        """Open the write transaction unless one is open (changes group until commit)."""
        if not self.in_tx:
            self.db.execute("BEGIN")
            self.in_tx = True

    def end(self) -> None:
        """Commit the open write transaction."""
        self.db.execute("COMMIT")
        self.in_tx = False

    def rollback(self) -> None:
        """Abandon the open write transaction (nothing of it was journaled)."""
        if self.in_tx:
            self.db.execute("ROLLBACK")
            self.in_tx = False

    def insert_new(self, items: Sequence[UrlItem], keys: Sequence[int]) -> list[UrlItem]:
        """Insert the URLs not in the table yet (``keys``: their :func:`_key`) in the open
        transaction, with ``sid`` set; returns them."""
        existing: set[int] = set()
        for part in _chunks(keys):
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
            rows.append((it.sid, k, it.url, it.host, it.depth, it.referrer, it.boost, _uh(_url_hash(it.url))))
        self.db.executemany(
            "INSERT INTO urls(id, h, url, host, depth, referrer, boost, uh) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
        )
        return fresh


class FrontierStore:
    """One shard's durable URL table (see the module docstring for the states).

    The connection and its write transaction are a :class:`UrlTable`; the rows of a
    host changing shards go through :attr:`hosts` (a :class:`HostRows`), the decisions
    that limit fetching through :attr:`decisions` (a :class:`DecisionLog`).
    """

    def __init__(
        self, path: str, *, durable: bool = True, cache_kib: int = 16_000,
        journal: Callable[[str, Any], int] | None = None,
    ) -> None:
        # journal(kind, payload) -> seq: crawler.recovery.statelog.StateLog.append (remote outputs).
        self.path = path
        self._t = UrlTable(path, durable=durable, cache_kib=cache_kib, journal=journal)
        self._db, self._lock = self._t.db, self._t.lock
        self.table = self._t  # the connection, lock and transaction under it (crawler.frontier.audit)
        self.hosts = HostRows(self._t)
        self.audit = AuditPages(self._t)
        self.decisions = DecisionLog(self._t)

    @property
    def journal(self) -> Callable[[str, Any], int] | None:
        """Where committed changes are journaled (None: not journaled)."""
        return self._t.journal

    @journal.setter
    def journal(self, journal: Callable[[str, Any], int] | None) -> None:
        self._t.journal = journal

    # -- writes -----------------------------------------------------------------------

    def commit(self) -> None:
        """Make every change so far durable (group commit)."""
        with self._lock:
            if self._t.in_tx:
                self._t.end()

    def add(self, items: Sequence[UrlItem]) -> list[UrlItem]:
        """Record a batch of URLs; returns the ones not seen before (with ``sid`` set). Committed."""
        return self.admit(items)

    def admit(
        self, items: Sequence[UrlItem], decide: Callable[[list[UrlItem]], Verdicts] | None = None
    ) -> list[UrlItem]:
        """:meth:`add`, and what ``decide(fresh)`` made of the URLs new to the store (refused,
        dropped, and the decisions that did it: crawler.engine.admission), in one commit
        and one journal batch (``add``, ``drop``, ``decide``): a crash keeps all of it or
        none, so no admission is durable without the budget it spent.

        ``decide`` runs under the store's lock and must only decide (no I/O, no store
        call); if it raises, nothing of the batch is kept."""
        if not items:
            return []
        keys = [_key(i.url) for i in items]
        verdicts = Verdicts()
        with self._lock:
            self._t.begin()
            first_id = self._t.next_id
            try:
                fresh = self._t.insert_new(items, keys)
                if decide is not None and fresh:
                    verdicts = decide(fresh)
                    claimed, dropped = [(_key(u),) for u in verdicts.claim], [(_key(u),) for u in verdicts.drop]
                    self._db.executemany("UPDATE urls SET state=1 WHERE h=? AND state=0", claimed)
                    self._db.executemany("UPDATE urls SET state=3 WHERE h=?", dropped)
                    self.decisions.append(verdicts.decisions)
            except BaseException:
                self._t.rollback()
                self._t.next_id = first_id
                raise
            self._t.end()
            if self.journal is not None and fresh:
                self.journal("add", [[i.url, i.host, i.depth, i.referrer, i.boost] for i in fresh])
                if verdicts.drop:
                    self.journal("drop", list(verdicts.drop))
                if verdicts.decisions:
                    self.journal("decide", verdicts.decisions)
        return fresh

    def claim(self, urls: Sequence[str], decisions: Decisions | None = None) -> None:
        """Mark queued URLs as handed to a fetch, with the ``decisions`` that refused them
        if any (a robots.txt verdict: crawler.engine.admission). Committed.

        Only queued URLs change: a claim recorded late never undoes a ``done``. Claims
        are not journaled (a store rebuilt from OUT queues claimed URLs again anyway);
        the decisions are.
        """
        if not urls and not decisions:
            return
        with self._lock:
            self._t.begin()
            self._db.executemany("UPDATE urls SET state=1 WHERE h=? AND state=0", [(_key(u),) for u in urls])
            self.decisions.append(decisions)
            self._t.end()
            if self.journal is not None and decisions:
                self.journal("decide", decisions)

    def record(self, fetched: Sequence[tuple[OutcomeRow, Schedule | None]]) -> None:
        """Ack rows that are durable: each URL done, with its per-URL state (last fetch,
        next due time, validators, hashes, counts). One commit.

        Validators and hashes a response did not carry (a 304, a failure) keep their
        stored values: they still describe the copy we have.
        """
        if not fetched:
            return
        params = []
        for row, sched in fetched:
            params.append((
                _wall(row.fetched_at), sched.next_crawl_at if sched else None, sched.interval_s if sched else None,
                row.etag, row.last_modified, row.content_sha256, row.simhash, 1 if row.changed else 0,
                row.outcome, row.status, _key(row.url),
            ))
        with self._lock:
            self._t.begin()
            self._record(params)
            self._t.end()
            if self.journal is not None:
                self.journal("done", params)

    def _record(self, params: list) -> None:
        self._db.executemany(
            "UPDATE urls SET state=2, last_crawled_at=?, next_crawl_at=?, interval_s=coalesce(?, interval_s),"
            " etag=coalesce(?, etag), last_modified=coalesce(?, last_modified),"
            " content_sha=coalesce(?, content_sha), fingerprint=coalesce(?, fingerprint),"
            " fetches=fetches+1, changes=changes+?, last_outcome=?, last_status=? WHERE h=?",
            params,
        )

    def due(self, until: float, after: tuple[float, int], limit: int) -> list[tuple[UrlItem, float, tuple[float, int]]]:
        """Fetched URLs due for a refresh by ``until`` (wall), after the cursor ``after``
        ((next_crawl_at, id)), oldest due first: (item, due wall time, cursor) each."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, url, host, depth, next_crawl_at, interval_s, etag, last_modified, content_sha,"
                " fingerprint, fetches FROM urls WHERE next_crawl_at IS NOT NULL AND state=2"
                " AND next_crawl_at <= ? AND (next_crawl_at > ? OR (next_crawl_at = ? AND id > ?))"
                " ORDER BY next_crawl_at, id LIMIT ?",
                (until, after[0], after[0], after[1], limit),
            ).fetchall()
        return [self._due_item(r) for r in rows]

    @staticmethod
    def _due_item(row: Sequence[Any]) -> tuple[UrlItem, float, tuple[float, int]]:
        sid, url, host, depth, due_at, interval, etag, lm, sha, fp, fetches = row
        prev = Previous(fetches, interval, sha, fp, etag, lm)
        item = UrlItem(url, depth, host=host, kind="refresh", fetch_seq=fetches + 1, prev=prev)
        item.sid = sid
        return item, due_at, (due_at, sid)

    def schedule_of(self, url: str) -> tuple[float, float, float] | None:
        """(last_crawled_at, interval_s, next_crawl_at) of a fetched URL with a schedule."""
        with self._lock:
            row = self._db.execute(
                "SELECT last_crawled_at, interval_s, next_crawl_at FROM urls WHERE h=? AND next_crawl_at IS NOT NULL",
                (_key(url),),
            ).fetchone()
        return None if row is None or None in row else (row[0], row[1], row[2])

    def bring_forward(self, url: str, next_crawl_at: float) -> None:
        """Make a URL due earlier (a sitemap's ``<lastmod>``: crawler.freshness.recrawl). Committed."""
        with self._lock:
            self._db.execute(
                "UPDATE urls SET next_crawl_at=? WHERE h=? AND next_crawl_at > ?", (next_crawl_at, _key(url), next_crawl_at)
            )

    def done(self, urls: Sequence[str]) -> None:
        """Mark URLs finished: their outcome rows are durable. Committed."""
        self._set_state(urls, DONE)

    def drop(self, urls: Sequence[str], decisions: Decisions | None = None) -> None:
        """Mark URLs finished without a row (dropped by a counted rule), with the
        ``decisions`` that dropped them (a budget cut, an operator's ``max_pages``). Committed."""
        self._set_state(urls, DROPPED, decisions)

    def _set_state(self, urls: Sequence[str], state: int, decisions: Decisions | None = None) -> None:
        if not urls and not decisions:
            return
        with self._lock:
            self._t.begin()
            if urls:
                self._db.executemany("UPDATE urls SET state=? WHERE h=?", [(state, _key(u)) for u in urls])
            self.decisions.append(decisions)
            self._t.end()
            if self.journal is not None:
                if urls and state == DROPPED:
                    self.journal("drop", list(urls))
                if decisions:
                    self.journal("decide", decisions)

    def due_up_to(self, host: str, cursor: tuple[float, int]) -> list[tuple[UrlItem, float, tuple[float, int]]]:
        """:meth:`due` for one host's refreshes at or before ``cursor`` (the ones a refresh
        scan already past them would never return: rows adopted from another shard)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, url, host, depth, next_crawl_at, interval_s, etag, last_modified, content_sha,"
                " fingerprint, fetches FROM urls WHERE host=? AND next_crawl_at IS NOT NULL AND state=2"
                " AND (next_crawl_at < ? OR (next_crawl_at = ? AND id <= ?)) ORDER BY next_crawl_at, id",
                (host, cursor[0], cursor[0], cursor[1]),
            ).fetchall()
        return [self._due_item(r) for r in rows]

    # -- reads ------------------------------------------------------------------------

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]:
        """The next queued URLs of ``host`` in acceptance order, after ``after_id``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, url, depth, referrer, replay, boost FROM urls WHERE host=? AND state=0 AND id>? ORDER BY id LIMIT ?",
                (host, after_id, limit),
            ).fetchall()
        out = []
        for sid, url, depth, referrer, replay, boost in rows:
            it = UrlItem(url, depth, referrer, host=host, boost=boost)
            it.sid = sid
            it.replay = bool(replay)
            out.append(it)
        return out

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]:
        """Mark up to ``limit`` of the newest queued URLs of ``host`` (ids above ``after_id``,
        i.e. spilled) dropped; returns their URLs. Committed (a budget cut's trim)."""
        with self._lock:
            self._t.begin()
            rows = self._db.execute(
                "SELECT id, url FROM urls WHERE host=? AND state=0 AND id>? ORDER BY id DESC LIMIT ?",
                (host, after_id, limit),
            ).fetchall()
            self._db.executemany("UPDATE urls SET state=3 WHERE id=?", [(r[0],) for r in rows])
            self._t.end()
            if self.journal is not None and rows:
                self.journal("drop", [r[1] for r in rows])
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
        crawler.recovery.statefiles).
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
            self._t.begin()
            changed = 0
            for part in _chunks([(_key(u),) for u in urls]):
                changed += self._db.executemany("UPDATE urls SET state=2 WHERE h=? AND state IN (0, 1)", part).rowcount
            self._t.end()
        return changed

    def url_status(self, url: str | None = None, *, url_hash: str | None = None) -> UrlStatus | None:
        """What the store knows of a URL, by URL or by its public ``url_hash`` (None if it
        was never accepted): status (pending, fetched, not_modified, failed, blocked,
        dropped), last/next crawl times (wall), interval, validators, content hash,
        fingerprint, fetch and change counts."""
        cols = (
            "SELECT url, host, depth, referrer, state, last_crawled_at, next_crawl_at, interval_s, etag,"
            " last_modified, content_sha, fingerprint, fetches, changes, last_outcome, last_status FROM urls"
        )
        with self._lock:
            if url is not None:
                row = self._db.execute(cols + " WHERE h=?", (_key(url),)).fetchone()
            else:
                row = self._db.execute(cols + " WHERE uh=?", (_uh(url_hash or "0"),)).fetchone()
        if row is None or (url is not None and row[0] != url):
            return None
        (found, host, depth, referrer, state, last, nxt, interval, etag, lm, sha, fp, fetches, changes, outcome, status) = row
        if state in (QUEUED, CLAIMED):
            label = "pending"
        elif state == DROPPED:
            label = "dropped"
        else:
            label = _STATUS_BY_OUTCOME.get(outcome or "", "fetched")
        return UrlStatus(
            url=found, url_hash=_url_hash(found), host=host, depth=depth, referrer=referrer,
            status=label, in_flight=state == CLAIMED, last_crawled_at=last, next_crawl_at=nxt,
            interval_s=interval, etag=etag, last_modified=lm, content_hash=sha, fingerprint=fp,
            fetches=fetches, changes=changes, change_rate=(changes / (fetches - 1)) if fetches > 1 else None,
            last_outcome=outcome, last_status=status,
        )

    def url_for_hash(self, url_hash_hex: str) -> str | None:
        """The URL whose :func:`crawler.urls.url_hash` is ``url_hash_hex``, if this store has it."""
        hexdigits = url_hash_hex.lower()
        if len(hexdigits) != 16 or any(c not in "0123456789abcdef" for c in hexdigits):
            return None
        with self._lock:
            row = self._db.execute("SELECT url FROM urls WHERE uh=?", (_uh(hexdigits),)).fetchone()
        return row[0] if row is not None and _url_hash(row[0]) == hexdigits else None

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

    def set_meta(self, key: str, value: str, *, journal: bool = False, covers_decisions: bool = False) -> None:
        """Set a ``meta`` value; with ``journal`` the change is also journaled (an
        operator's setting, which must survive the node: crawler.recovery.checkpoint).
        ``covers_decisions``: the value holds every decision written so far (a
        checkpoint), so the decisions log is emptied in the same commit (and on replay:
        a store rebuilt from OUT holds the decisions after its newest checkpoint only)."""
        with self._lock:
            self._t.begin()
            self._set_meta(key, value)
            if covers_decisions:
                self.decisions.clear()
            self._t.end()
            if journal and self.journal is not None:
                self.journal("meta", [key, value, True] if covers_decisions else [key, value])

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    def backup(self, dest_path: str, mark: Callable[[], int] | None = None) -> int:
        """A consistent copy of the whole store (SQLite's online backup) at ``dest_path``.
        Returns ``mark()`` read in the same locked step: the seq of the last change
        journaled, which the copy contains (crawler.recovery.statelog snapshots)."""
        with self._lock:
            seq = mark() if mark is not None else 0
            dst = sqlite3.connect(dest_path)
            try:
                self._db.backup(dst)
            finally:
                dst.close()
        return seq

    def replay(self, records: Sequence[Sequence[Any]]) -> int:
        """Apply journaled changes (crawler.recovery.statelog.restore) to a store restored from a
        snapshot, in order, without journaling them again. Returns how many were applied.

        Each kind is idempotent where it can be seen twice: an ``add`` skips URLs the
        store has (the snapshot may hold a delivery the log also holds)."""
        journal, self.journal = self.journal, None
        try:
            for kind, payload in records:
                if kind == "add":
                    self.add([UrlItem(u, d, r, host=h, boost=b) for u, h, d, r, b in payload])
                elif kind == "drop":
                    self._set_state(payload, DROPPED)
                elif kind == "done":
                    with self._lock:
                        self._t.begin()
                        self._record([tuple(p) for p in payload])
                        self._t.end()
                elif kind == "meta":
                    self.set_meta(payload[0], payload[1], covers_decisions=len(payload) > 2 and bool(payload[2]))
                elif kind == "decide":
                    self.decisions.write(payload)
                elif kind == "adopt":
                    self.hosts.adopt(payload)
                elif kind == "remove_host":
                    self.hosts.remove_host(payload)
                else:
                    raise StorageError(f"{self.path}: unknown journaled change {kind!r} (a newer version's log?)")
        finally:
            self.journal = journal
        return len(records)

    def close(self) -> None:
        with self._lock:
            if self._t.in_tx:
                self._t.end()
            self._db.close()
            self._t.closed = True


class HostRows:
    """The rows of one host moving between shards (crawler.placement.handover): exported from the
    old owner's store, adopted by the new owner's, then removed from the old one. Works
    on the store's :class:`UrlTable`; each change is committed and journaled."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def export_host(self, host: str) -> list[list[Any]]:
        """Every row of ``host``, all columns but the local id, in acceptance order (a
        handover to another shard). A claimed URL goes as queued for replay: it is handed
        over only when nothing of the host is in flight, so a claim is a retry waiting."""
        with self._t.lock:
            rows = self._t.db.execute(f"SELECT {_PORTABLE} FROM urls WHERE host=? ORDER BY id", (host,)).fetchall()
        out = []
        for row in rows:
            row = list(row)
            if row[_STATE_AT] == CLAIMED:
                row[_STATE_AT], row[_REPLAY_AT] = QUEUED, 1
            out.append(row)
        return out

    def adopt(self, rows: Sequence[Sequence[Any]]) -> int:
        """Insert a host's rows from :meth:`export_host`. A URL already here keeps its row
        (adopting twice after a crash changes nothing). Committed and journaled; returns
        how many of the adopted rows are queued."""
        if not rows:
            return 0
        with self._t.lock:
            self._t.begin()
            queued = 0
            for row in rows:
                cur = self._t.db.execute(
                    f"INSERT OR IGNORE INTO urls(id, {_PORTABLE}) VALUES ({','.join('?' * (len(_PORTABLE_COLS) + 1))})",
                    (self._t.next_id, *row),
                )
                if cur.rowcount:
                    self._t.next_id += 1
                    queued += row[_STATE_AT] == QUEUED
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("adopt", [list(r) for r in rows])
        return queued

    def has_host(self, host: str) -> bool:
        """True if any URL of ``host`` is in the store."""
        with self._t.lock:
            return self._t.db.execute("SELECT 1 FROM urls WHERE host=? LIMIT 1", (host,)).fetchone() is not None

    def remove_host(self, host: str) -> int:
        """Delete every row of ``host`` (handed over to another shard, which holds them
        now). Committed and journaled; returns how many rows went."""
        with self._t.lock:
            self._t.begin()
            n = self._t.db.execute("DELETE FROM urls WHERE host=?", (host,)).rowcount
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("remove_host", host)
        return n


class AuditPages:
    """The store read in key order, page by page, for the URL ledger's audit at the end of
    a run (crawler.session.ledgeraudit): every URL the shard holds, against the seen sets'
    marks and the output's rows. A closed store (a stopped shard) is read through a
    fresh connection to its file."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._t.lock:
            if not self._t.closed:
                yield self._t.db
                return
        try:
            db = sqlite3.connect(self._t.path)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot reopen the frontier store {self._t.path!r}: {exc}") from exc
        try:
            yield db
        finally:
            db.close()

    def _page(self, columns: str, key: str, after: int | None, limit: int) -> list[Any]:
        where = "" if after is None else f" WHERE {key} > ?"
        args = (limit,) if after is None else (after, limit)
        try:
            with self._reading() as db:
                return db.execute(f"SELECT {columns} FROM urls{where} ORDER BY {key} LIMIT ?", args).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"reading the frontier store {self._t.path!r} failed: {exc}") from exc

    def keys(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` URL keys above ``after``, ascending: ``h``, the signed 64-bit
        crawler.seen.url_hash64 (the seen set's key) of every URL held, in any state. An
        index-only scan of the unique index on ``h``."""
        return [r[0] for r in self._page("h", "h", after, limit)]

    def ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        """Up to ``limit`` (public url_hash as a signed integer, state, url) above ``after``,
        ascending by url_hash (the id rows carry): what the output is checked against."""
        return [(r[0], r[1], r[2]) for r in self._page("uh, state, url", "uh", after, limit)]


class DecisionLog:
    """The decisions that limit fetching made since the shard's last checkpoint (the
    module docstring), on the store's :class:`UrlTable`: appended in the transaction of
    the URL changes they go with, read back in order by a restart, emptied by the
    checkpoint that holds them."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def append(self, decisions: Decisions | None) -> None:
        """Add ``decisions`` in the open transaction (the caller holds the lock): one row."""
        if decisions:
            value = json.dumps(decisions, separators=(",", ":"))
            self._t.db.execute("INSERT INTO decisions(value) VALUES (?)", (value,))

    def write(self, decisions: Decisions) -> None:
        """Decisions with no URL change to go with them (a trap cut that left the queue as
        it was). Committed and journaled."""
        if not decisions:
            return
        with self._t.lock:
            self._t.begin()
            self.append(decisions)
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("decide", decisions)

    def clear(self) -> None:
        """Forget every decision, in the open transaction (a checkpoint holds them now)."""
        self._t.db.execute("DELETE FROM decisions")

    def read(self) -> list[tuple[str, str, Any]]:
        """Every decision since the last checkpoint, oldest first, as ``(kind, key, value)``
        (a restart loads them over the checkpoint: crawler.recovery.checkpoint)."""
        with self._t.lock:
            rows = self._t.db.execute("SELECT value FROM decisions ORDER BY seq").fetchall()
        return [(kind, key, value) for (batch,) in rows for kind, values in json.loads(batch).items()
                for key, value in values.items()]
