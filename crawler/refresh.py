"""Refreshes coming due: from a shard's durable store into its frontier (crawler.recrawl
decides when; this moves the work)."""

from __future__ import annotations

from crawler.backqueue import UrlItem
from crawler.recrawl import Previous, Schedule


class RefreshFeed:
    """Moves refreshes coming due from a shard's durable store into its frontier.

    The store holds every URL's next due time (on disk); only those due within
    ``horizon_s`` are brought into memory, at most ``max_in_memory`` at a time, in due
    order, through a cursor on (next_crawl_at, id). A fetch that schedules its URL before
    the cursor (an interval shorter than the horizon) hands the refresh over directly
    (:meth:`after_record`). A restart starts the cursor again from the beginning: what was
    due and not yet fetched is due still.
    """

    def __init__(self, store, frontier, clock, *, horizon_s: float = 60.0, max_in_memory: int = 20_000, batch: int = 2_000) -> None:
        self._store = store
        self._frontier = frontier
        self._clock = clock
        self._horizon = horizon_s
        self._max = max_in_memory
        self._batch = batch
        self._cursor: tuple[float, int] = (float("-inf"), 0)
        self._next_tick = float("-inf")
        self.loaded = 0

    def tick(self) -> int:
        """Load what is coming due (at most once a second); returns how many."""
        now = self._clock.now()
        if now < self._next_tick:
            return 0
        self._next_tick = now + 1.0
        room = self._max - self._frontier.refreshes()[0]
        if room <= 0:
            return 0
        wall = self._clock.wall()
        rows = self._store.due(wall + self._horizon, self._cursor, min(room, self._batch))
        if not rows:
            return 0
        items = []
        for item, due_wall, cursor in rows:
            item.due_at = now + (due_wall - wall)
            items.append(item)
            self._cursor = cursor
        self.loaded += len(items)
        return self._frontier.push(items)

    def after_record(self, item, row, schedule: Schedule | None) -> None:
        """A URL just fetched is due again before the cursor: queue its refresh now."""
        if schedule is None or schedule.next_crawl_at > self._cursor[0]:
            return
        prev = Previous(
            item.fetch_seq,
            schedule.interval_s,
            row.content_sha256 or (item.prev.content_sha256 if item.prev else None),
            row.simhash if row.simhash is not None else (item.prev.fingerprint if item.prev else None),
            row.etag or (item.prev.etag if item.prev else None),
            row.last_modified or (item.prev.last_modified if item.prev else None),
        )
        nxt = UrlItem(item.url, item.depth, host=item.host, kind="refresh", fetch_seq=item.fetch_seq + 1, prev=prev)
        nxt.sid = item.sid
        nxt.due_at = self._clock.now() + (schedule.next_crawl_at - self._clock.wall())
        self._frontier.push([nxt])
