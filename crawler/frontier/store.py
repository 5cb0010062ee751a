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

The parts are collaborators :class:`FrontierStore` holds, in modules named for them: the
table, its schema and transaction (crawler.frontier.urltable), the acks
(crawler.frontier.acks), the spill area (crawler.frontier.spillrows), the refresh schedule
(crawler.frontier.refreshrows), the decisions (crawler.frontier.decisions), a host's rows
changing shards (crawler.frontier.hostrows), the ledger audit's pages
(crawler.frontier.auditpages); the per-URL answers (:class:`UrlLookup`, with the
:class:`UrlStatus` record they return) are here. The store keeps the state changes and
their journal.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypedDict

from crawler.errors import StorageError
from crawler.frontier.recrawl import Schedule
from crawler.frontier.acks import Acks
from crawler.frontier.auditpages import AuditPages
from crawler.frontier.decisions import DecisionLog, Decisions, Verdicts
from crawler.frontier.hostrows import HostRows
from crawler.frontier.refreshrows import Cursor, DueRefresh, RefreshRows
from crawler.frontier.spillrows import SpillRows
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.urltable import (
    CLAIMED, DONE, DROPPED, QUEUED, STATE_NAMES, Journal, UrlTable, hash_key, url_key,
)
from crawler.output import OutcomeRow
from crawler.urls import url_hash as _url_hash

__all__ = [
    "AuditPages", "CLAIMED", "DONE", "DROPPED", "DecisionLog", "Decisions", "FrontierStore", "HostRows",
    "QUEUED", "STATE_NAMES", "UrlLookup", "UrlStatus", "UrlTable", "Verdicts",
]


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


#: ``url_status()["status"]`` by last outcome (pending while queued or in flight).
_STATUS_BY_OUTCOME = {
    "fetched": "fetched", "redirect": "fetched", "not_modified": "not_modified",
    "http_error": "failed", "failed": "failed", "robots_blocked": "blocked",
}

_COLUMNS = (
    "SELECT url, host, depth, referrer, state, last_crawled_at, next_crawl_at, interval_s, etag,"
    " last_modified, content_sha, fingerprint, fetches, changes, last_outcome, last_status FROM urls"
)


class UrlLookup:
    """Reads of the store's per-URL state, what ``GET /urls/{url}``, ``crawl ctl url`` and
    the URL ledger answer from (on disk: bounded RAM, with SQLite's page cache hot): by URL
    (its key ``h``) or by its public ``url_hash`` (the column ``uh``), and URLs by state."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def url_status(self, url: str | None = None, *, url_hash: str | None = None) -> UrlStatus | None:
        """What the store knows of a URL, by URL or by its public ``url_hash`` (None if it
        was never accepted): status (pending, fetched, not_modified, failed, blocked,
        dropped), last/next crawl times (wall), interval, validators, content hash,
        fingerprint, fetch and change counts."""
        with self._t.lock:
            if url is not None:
                row = self._t.db.execute(_COLUMNS + " WHERE h=?", (url_key(url),)).fetchone()
            else:
                row = self._t.db.execute(_COLUMNS + " WHERE uh=?", (hash_key(url_hash or "0"),)).fetchone()
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
        with self._t.lock:
            row = self._t.db.execute("SELECT url FROM urls WHERE uh=?", (hash_key(hexdigits),)).fetchone()
        return str(row[0]) if row is not None and _url_hash(row[0]) == hexdigits else None

    def counts(self) -> dict[str, int]:
        """URLs per state: queued, claimed, done (row durable), dropped (no row, counted rule)."""
        with self._t.lock:
            rows = dict(self._t.db.execute("SELECT state, count(*) FROM urls GROUP BY state").fetchall())
        return {
            "queued": rows.get(QUEUED, 0),
            "claimed": rows.get(CLAIMED, 0),
            "done": rows.get(DONE, 0),
            "dropped": rows.get(DROPPED, 0),
        }


class FrontierStore:
    """One shard's durable URL table (see the module docstring for the states).

    The connection and its write transaction are a :class:`UrlTable` (:attr:`table`); the
    rows of a host changing shards go through :attr:`hosts` (a :class:`HostRows`), the
    decisions that limit fetching through :attr:`decisions` (a :class:`DecisionLog`), the
    ledger audit's reads through :attr:`audit` (an :class:`AuditPages`). The acks
    (:attr:`acks`), the spill area (:attr:`spill`), the refresh schedule
    (:attr:`refresh_rows`) and the per-URL answers (:attr:`lookup`) are collaborators
    too; their methods are this class's as well, so that callers see one store.
    """

    def __init__(
        self, path: str, *, durable: bool = True, cache_kib: int = 16_000, journal: Journal | None = None,
    ) -> None:
        # journal(kind, payload) -> seq: crawler.recovery.statelog.StateLog.append (remote outputs).
        self.path = path
        self._t = UrlTable(path, durable=durable, cache_kib=cache_kib, journal=journal)
        self._db, self._lock = self._t.db, self._t.lock
        self.table = self._t  # the connection, lock and transaction under it (crawler.frontier.audit)
        self.hosts = HostRows(self._t)
        self.audit = AuditPages(self._t)
        self.decisions = DecisionLog(self._t)
        self.spill = SpillRows(self._t)
        self.refresh_rows = RefreshRows(self._t)
        self.lookup = UrlLookup(self._t)
        self.acks = Acks(self._t)

    @property
    def journal(self) -> Journal | None:
        """Where committed changes are journaled (None: not journaled)."""
        return self._t.journal

    @journal.setter
    def journal(self, journal: Journal | None) -> None:
        self._t.journal = journal

    # -- state changes ----------------------------------------------------------------

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
        keys = [url_key(i.url) for i in items]
        verdicts = Verdicts()
        with self._lock:
            self._t.begin()
            first_id = self._t.next_id
            try:
                fresh = self._t.insert_new(items, keys)
                if decide is not None and fresh:
                    verdicts = decide(fresh)
                    claimed, dropped = [(url_key(u),) for u in verdicts.claim], [(url_key(u),) for u in verdicts.drop]
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
            self._db.executemany("UPDATE urls SET state=1 WHERE h=? AND state=0", [(url_key(u),) for u in urls])
            self.decisions.append(decisions)
            self._t.end()
            if self.journal is not None and decisions:
                self.journal("decide", decisions)

    def record(self, fetched: Sequence[tuple[OutcomeRow, Schedule | None]]) -> None:
        """Ack rows that are durable, with each URL's per-URL state: :meth:`Acks.record`."""
        self.acks.record(fetched)

    def done(self, urls: Sequence[str]) -> None:
        """Mark URLs finished: their outcome rows are durable. Committed."""
        self.acks.done(urls)

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
                self._db.executemany("UPDATE urls SET state=? WHERE h=?", [(state, url_key(u)) for u in urls])
            self.decisions.append(decisions)
            self._t.end()
            if self.journal is not None:
                if urls and state == DROPPED:
                    self.journal("drop", list(urls))
                if decisions:
                    self.journal("decide", decisions)

    def recover(self, *, replay_all: bool = False) -> int:
        """After a crash: claimed URLs back to the queue, for replay: :meth:`Acks.recover`."""
        return self.acks.recover(replay_all=replay_all)

    def finish_from_output(self, urls: Sequence[str]) -> int:
        """URLs done because their rows are in the output: :meth:`Acks.finish_from_output`."""
        return self.acks.finish_from_output(urls)

    # -- the spill area, the refresh schedule, per-URL answers (collaborators) --------

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]:
        """The next queued URLs of ``host`` after ``after_id``: :meth:`SpillRows.load`."""
        return self.spill.load(host, after_id, limit)

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]:
        """Drop the newest spilled URLs of ``host``: :meth:`SpillRows.drop_newest`."""
        return self.spill.drop_newest(host, after_id, limit)

    def count_queued(self, host: str, after_id: int) -> int:
        """Queued URLs of ``host`` after ``after_id``: :meth:`SpillRows.count_queued`."""
        return self.spill.count_queued(host, after_id)

    def pending_hosts(self) -> list[tuple[str, int]]:
        """(host, queued URLs) for every host with queued work: :meth:`SpillRows.pending_hosts`."""
        return self.spill.pending_hosts()

    def due(self, until: float, after: Cursor, limit: int) -> list[DueRefresh]:
        """Refreshes due by ``until`` after the cursor ``after``: :meth:`RefreshRows.due`."""
        return self.refresh_rows.due(until, after, limit)

    def due_up_to(self, host: str, cursor: Cursor) -> list[DueRefresh]:
        """A host's refreshes at or before ``cursor``: :meth:`RefreshRows.due_up_to`."""
        return self.refresh_rows.due_up_to(host, cursor)

    def schedule_of(self, url: str) -> tuple[float, float, float] | None:
        """(last_crawled_at, interval_s, next_crawl_at): :meth:`RefreshRows.schedule_of`."""
        return self.refresh_rows.schedule_of(url)

    def bring_forward(self, url: str, next_crawl_at: float) -> None:
        """Make a URL due earlier: :meth:`RefreshRows.bring_forward`. Committed."""
        self.refresh_rows.bring_forward(url, next_crawl_at)

    def url_status(self, url: str | None = None, *, url_hash: str | None = None) -> UrlStatus | None:
        """What the store knows of a URL, or of a ``url_hash``: :meth:`UrlLookup.url_status`."""
        return self.lookup.url_status(url, url_hash=url_hash)

    def url_for_hash(self, url_hash_hex: str) -> str | None:
        """The URL whose public url_hash is ``url_hash_hex``: :meth:`UrlLookup.url_for_hash`."""
        return self.lookup.url_for_hash(url_hash_hex)

    def counts(self) -> dict[str, int]:
        """URLs per state (queued, claimed, done, dropped): :meth:`UrlLookup.counts`."""
        return self.lookup.counts()

    # -- settings, copies, the journal ------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A ``meta`` value (None: not set)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str, *, journal: bool = False, covers_decisions: bool = False) -> None:
        """Set a ``meta`` value; with ``journal`` the change is also journaled (an
        operator's setting, which must survive the node: crawler.engine.checkpoint).
        ``covers_decisions``: the value holds every decision written so far (a
        checkpoint), so the decisions log is emptied in the same commit (and on replay:
        a store rebuilt from OUT holds the decisions after its newest checkpoint only)."""
        with self._lock:
            self._t.begin()
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )
            if covers_decisions:
                self.decisions.clear()
            self._t.end()
            if journal and self.journal is not None:
                self.journal("meta", [key, value, True] if covers_decisions else [key, value])

    def backup(self, dest_path: str, mark: Callable[[], int] | None = None) -> int:
        """A consistent copy of the whole store (SQLite's online backup) at ``dest_path``.
        Returns ``mark()`` read in the same locked step: the seq of the last change
        journaled, which the copy contains (crawler.recovery.statelog snapshots)."""
        return self._t.backup(dest_path, mark)

    def replay(self, records: Sequence[Sequence[Any]]) -> int:
        """Apply journaled changes (crawler.recovery.statelog.restore) to a store restored from a
        snapshot, in order, without journaling them again. Returns how many were applied.

        Each kind is idempotent where it can be seen twice: an ``add`` skips URLs the
        store has (the snapshot may hold a delivery the log also holds)."""
        journal, self.journal = self.journal, None
        try:
            with self._t.batched():
                self._apply(records)
        finally:
            self.journal = journal
        return len(records)

    def _apply(self, records: Sequence[Sequence[Any]]) -> None:
        """:meth:`replay`'s changes, kind by kind."""
        for kind, payload in records:
            if kind == "add":
                self.add([UrlItem(u, d, r, host=h, boost=b) for u, h, d, r, b in payload])
            elif kind == "drop":
                self._set_state(payload, DROPPED)
            elif kind == "done":
                self.acks.apply([tuple(p) for p in payload])
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

    def close(self) -> None:
        """Commit what is open and close the connection (the audit may still read the file)."""
        with self._lock:
            if self._t.in_tx:
                self._t.end()
            self._db.close()
            self._t.closed = True
