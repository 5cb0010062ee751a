"""``page.fetched`` events for the indexer: emitted once a page's row is durable, at least once.

Every fetched or refreshed page (outcome ``fetched`` or ``not_modified``) becomes one
event (:func:`page_event`). The order that keeps the promise "after its row and blob are
durable, and at least once" (crawler.engine.outbox):

1. the shard's outbox makes the rows durable in OUT (Parquet and blobs);
2. it hands them to :meth:`EventEmitter.on_durable`, which commits their events to the
   shard's event log (a SQLite file beside the shard's store: events survive a crash);
3. only then are the rows' URLs acked. A crash before 3 re-fetches the page and logs its
   event again; a crash after 2 sends the logged event after the restart;
4. the emitter sends logged events to the sink in batches and deletes them from the log
   only once the sink took them. A send that fails is retried with backoff, forever: a
   slow or down sink loses nothing. Consumers de-duplicate on ``(url, fetch_seq)``.

The log is bounded by ``events.max_pending``: above it the shard starts no new fetch
(:meth:`crawler.engine.dispatcher.Hold.hold`, renewed while the log is full), so a lasting outage stops
fetching instead of growing memory or disk without bound, and is counted and surfaced
(``sink_failures``, ``sink_down_s`` in the shard's status, stats.json and metrics).

Sinks (crawler.events.sinks) are chosen by ``events.sink``: ``file`` (JSON lines through
fsspec), ``redis`` (a Redis Stream), a ``module:Class`` path, or the name of an entry point
in the ``raycrawl.event_sinks`` group. Every wait is on the injected clock.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import json
import logging
import os
import random
import sqlite3
import threading
import zlib
from typing import Any, Callable, Iterable, Sequence

from crawler.clock import Clock, wait_event
from crawler.config.settings import EventsConfig
from crawler.errors import DamagedStateError, StorageError
from crawler.output import OutcomeRow
from crawler.recovery import stamps
from crawler.events.sinks import EventSink, build_sink, dumps

log = logging.getLogger(__name__)

PAGE_FETCHED = "page.fetched"
#: Outcomes that are a page fetched or refreshed (a 304 refresh says "unchanged").
EVENT_OUTCOMES = frozenset({"fetched", "not_modified"})
#: The fields of a page.fetched event, in order (a public contract: README).
EVENT_FIELDS = (
    "event", "url", "url_hash", "fetched_at", "status", "outcome", "blob_key",
    "content_sha256", "simhash", "dup_kind", "changed", "fetch_seq", "rendered", "raw_blob_key",
)
#: While the log is full, the shard's dispatch is held this long, renewed until it is not.
HOLD_S = 0.5
#: The fix a refusal of an event log names (its events would be sent under another crawl's name).
EVENTS_FIX = f"remove it (events it held that were not sent are then not sent), or {stamps.FIX}"


def _iso(value: dt.datetime | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        value = dt.datetime.fromtimestamp(value, dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def page_event(row: OutcomeRow) -> dict[str, Any]:
    """The ``page.fetched`` event of a row (:data:`EVENT_FIELDS`; ``simhash`` as stored in
    the row, a signed 64-bit integer; ``fetched_at`` ISO 8601 UTC)."""
    return {
        "event": PAGE_FETCHED,
        "url": row.url,
        "url_hash": row.url_hash,
        "fetched_at": _iso(row.fetched_at),
        "status": row.status,
        "outcome": row.outcome,
        "blob_key": row.blob_key,
        "content_sha256": row.content_sha256,
        "simhash": row.simhash,
        "dup_kind": row.dup_kind,
        "changed": row.changed,
        "fetch_seq": row.fetch_seq,
        # Which body blob_key holds: the rendered DOM (then raw_blob_key is the response
        # as fetched) or the response itself.
        "rendered": row.rendered,
        "raw_blob_key": row.raw_blob_key,
    }


# -- the log of events not yet sent ---------------------------------------------------


class MemoryEventLog:
    """Events waiting for the sink, in memory (a crawl without durable state)."""

    def __init__(self) -> None:
        self._items: collections.deque[tuple[int, str]] = collections.deque()
        self._next = 1

    def add(self, events: Iterable[dict[str, Any]]) -> None:
        for e in events:
            self._items.append((self._next, dumps(e)))
            self._next += 1

    def peek(self, n: int) -> list[tuple[int, str]]:
        return [self._items[i] for i in range(min(n, len(self._items)))]

    def remove(self, upto_id: int) -> None:
        while self._items and self._items[0][0] <= upto_id:
            self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        return None


class EventLog:
    """Events waiting for the sink, in a SQLite file (committed before the URLs are acked,
    so they survive a crash; WAL, ``synchronous=NORMAL`` like the shard's store). With
    ``identity`` the file's stamp is checked, or set (crawler.recovery.stamps)."""

    def __init__(self, path: str, identity: str | None = None) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the event log {path!r}: {exc}") from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
            self._count: int = self._db.execute("SELECT count(*) FROM events").fetchone()[0]
            if identity is not None:
                self._claim(identity)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if isinstance(exc, sqlite3.OperationalError):
                raise StorageError(f"cannot open the event log {path!r}: {exc}") from exc
            raise DamagedStateError(f"{path} is not a readable event log ({exc}): {EVENTS_FIX}") from exc
        except BaseException:
            self._db.close()
            raise
        self._lock = threading.Lock()

    def _claim(self, identity: str) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS stamp (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = self._db.execute("SELECT value FROM stamp WHERE key=?", (stamps.STAMP_KEY,)).fetchone()
        if stamps.check(self.path, None if row is None else row[0], identity, EVENTS_FIX):
            self._db.execute("INSERT OR REPLACE INTO stamp VALUES (?, ?)", (stamps.STAMP_KEY, identity))

    @staticmethod
    def read_stamp(path: str) -> str | None:
        """The stamp of the event log at ``path`` (None: none yet), read without writing."""
        return stamps.read_sqlite_stamp(path, "stamp", "event log", EVENTS_FIX)

    def add(self, events: Iterable[dict[str, Any]]) -> None:
        rows = [(dumps(e),) for e in events]
        if not rows:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO events(data) VALUES (?)", rows)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StorageError(f"event log {self.path!r}: {exc}") from exc
            self._count += len(rows)

    def peek(self, n: int) -> list[tuple[int, str]]:
        with self._lock:
            return self._db.execute("SELECT id, data FROM events ORDER BY id LIMIT ?", (n,)).fetchall()

    def remove(self, upto_id: int) -> None:
        with self._lock:
            gone = self._db.execute("DELETE FROM events WHERE id <= ?", (upto_id,)).rowcount
            self._count -= gone

    def __len__(self) -> int:
        return self._count

    def backup(self, dest_path: str) -> None:
        """A consistent copy of the pending events at ``dest_path`` (crawler.recovery.statelog ships
        it with each snapshot of the shard's store, so a lost node loses none of them)."""
        with self._lock:
            dst = sqlite3.connect(dest_path)
            try:
                self._db.backup(dst)
            finally:
                dst.close()

    def close(self) -> None:
        with self._lock:
            self._db.close()


# -- the emitter ----------------------------------------------------------------------


class EventEmitter:
    """Logs the events of durable rows and sends them to the sink (module docstring).

    Args:
        sink: where events go.
        log: :class:`EventLog` (durable) or :class:`MemoryEventLog`.
        clock: backoff timers.
        batch_size: events per send.
        max_pending: above this many logged events, ``hold(HOLD_S)`` is called (renewed
            while it stays full): the shard starts no new fetch.
        hold: the shard's :meth:`~crawler.engine.dispatcher.Hold.hold`.
        backoff_s, max_backoff_s: retry delays after a failed send (doubling, jittered).
        drain_timeout_s: how long the final flush keeps trying to send what is logged.
    """

    def __init__(
        self,
        sink: EventSink,
        log: EventLog | MemoryEventLog,
        clock: Clock,
        *,
        batch_size: int = 500,
        max_pending: int = 100_000,
        hold: Callable[[float], None] | None = None,
        backoff_s: float = 0.2,
        max_backoff_s: float = 10.0,
        drain_timeout_s: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.sink = sink
        self.log = log
        self._clock = clock
        self.batch_size = batch_size
        self.max_pending = max_pending
        self._hold = hold
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.drain_timeout_s = drain_timeout_s
        self._rng = rng or random.Random(0)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._progress = asyncio.Event()  # set after every successful send (close() waits on it)
        self._task: asyncio.Future[None] | None = None
        self.emitted = 0
        self.failures = 0
        self.held = 0
        self.down_since: float | None = None
        self.down_total_s = 0.0
        self.last_error: str | None = None
        self.closed = False

    # -- input (in the outbox's flush) --------------------------------------------------

    def on_durable(self, rows: Sequence[OutcomeRow]) -> None:
        """Log the events of rows that are durable now (before their URLs are acked)."""
        events = [page_event(r) for r in rows if r.outcome in EVENT_OUTCOMES]
        if events:
            self.log.add(events)
            self._wake.set()
        self._start()
        self._press()

    async def on_flush(self, final: bool) -> None:
        """The outbox's per-round hook: start sending (events logged by an earlier run are
        sent at once), and on the final flush, drain and close."""
        self._start()
        if final:
            await self.close()

    def full(self) -> bool:
        return len(self.log) >= self.max_pending

    def _press(self) -> None:
        if self._hold is not None and self.full():
            self.held += 1
            self._hold(HOLD_S)

    def _start(self) -> None:
        if self._task is None and not self.closed:
            self._task = asyncio.ensure_future(self.run())

    # -- sending --------------------------------------------------------------------------

    async def run(self) -> None:
        """Send logged events until :meth:`close`; a failed send is retried, never dropped."""
        delay = 0.0
        while not self._stop.is_set():
            batch = self.log.peek(self.batch_size)
            if not batch:
                self._wake.clear()
                await wait_event(self._clock, self._wake, HOLD_S)
                continue
            if not await self._send(batch):
                delay = min(self.max_backoff_s, max(self.backoff_s, delay * 2))
                await self._wait(delay / 2 + self._rng.uniform(0, delay / 2))
            else:
                delay = 0.0
            self._press()

    async def _send(self, batch: list[tuple[int, str]]) -> bool:
        try:
            await self.sink.send([json.loads(data) for _, data in batch])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any sink failure: counted, retried
            self.failures += 1
            self.last_error = repr(exc)
            now = self._clock.now()
            if self.down_since is None:
                self.down_since = now
                log.warning("event sink failed, retrying (events are kept): %r", exc)
            return False
        self.log.remove(batch[-1][0])
        self.emitted += len(batch)
        self._progress.set()
        if self.down_since is not None:
            down = self._clock.now() - self.down_since
            self.down_total_s += down
            log.warning("event sink is back after %.1f s of failures", down)
            self.down_since = None
        return True

    async def _wait(self, seconds: float) -> None:
        """Back off in slices, renewing the hold on the shard while the log is full."""
        end = self._clock.now() + seconds
        while not self._stop.is_set() and (left := end - self._clock.now()) > 0:
            self._press()
            await wait_event(self._clock, self._stop, min(left, HOLD_S))

    async def close(self) -> None:
        """Keep sending for up to ``drain_timeout_s``; then stop and close the sink. What is
        not sent stays in the log (a durable log sends it in the next run)."""
        if self.closed:
            return
        self.closed = True
        deadline = self._clock.now() + self.drain_timeout_s
        if self._task is None and len(self.log):
            self._task = asyncio.ensure_future(self.run())
        while len(self.log) and self._task is not None and not self._task.done():
            left = deadline - self._clock.now()
            if left <= 0:
                break
            self._progress.clear()
            await wait_event(self._clock, self._progress, min(left, HOLD_S))
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if len(self.log):
            log.error("%d events could not be sent (last error: %s); they stay in %s for the next run",
                      len(self.log), self.last_error, getattr(self.log, "path", "memory"))
        try:
            await self.sink.close()
        except Exception as exc:  # noqa: BLE001 - closing a broken connection at the end
            log.debug("closing the event sink: %r", exc)
        self.log.close()

    def stats(self) -> dict[str, Any]:
        """``emitted``, ``pending``, ``sink_failures``, ``sink_down_s`` (now), ``held``."""
        down = self.down_total_s + (self._clock.now() - self.down_since if self.down_since is not None else 0.0)
        return {
            "emitted": self.emitted,
            "pending": len(self.log),
            "sink_failures": self.failures,
            "sink_down": self.down_since is not None,
            "sink_down_s": round(down, 3),
            "held": self.held,
        }


def build_emitter(
    cfg: EventsConfig, shard_id: str, out: str, storage_options: dict[str, Any] | None, clock: Clock,
    *, log_path: str | None, hold: Callable[[float], None] | None,
) -> EventEmitter | None:
    """The shard's emitter (None with ``sink: none``); its log at ``log_path`` (None: in memory)."""
    sink = build_sink(cfg, shard_id, out, storage_options)
    if sink is None:
        return None
    event_log: EventLog | MemoryEventLog = EventLog(log_path) if log_path else MemoryEventLog()
    return EventEmitter(
        sink, event_log, clock, batch_size=cfg.batch_size, max_pending=cfg.max_pending, hold=hold,
        drain_timeout_s=cfg.drain_timeout_s, rng=random.Random(zlib.crc32(shard_id.encode())),
    )
