"""Refreshes coming due: from a shard's durable store into its frontier (crawler.frontier.recrawl
decides when; this moves the work)."""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from crawler.clock import Clock
from crawler.frontier.recrawl import Previous, Schedule
from crawler.frontier.refreshrows import Cursor, DueRefresh
from crawler.frontier.urlitem import UrlItem
from crawler.output import OutcomeRow

__all__ = ["DueRows", "RefreshFeed", "RefreshTarget"]


class DueRows(Protocol):
    """Where the refresh schedule is kept (crawler.frontier.store.FrontierStore)."""

    def due(self, until: float, after: Cursor, limit: int) -> list[DueRefresh]: ...

    def due_up_to(self, host: str, cursor: Cursor) -> list[DueRefresh]: ...


class RefreshTarget(Protocol):
    """Where refreshes go (crawler.frontier.frontier.Frontier)."""

    def refreshes(self) -> tuple[int, int]: ...

    def push(self, items: Iterable[UrlItem], *, in_memory: bool = False) -> int: ...


class RefreshFeed:
    """Moves refreshes coming due from a shard's durable store into its frontier.

    The store holds every URL's next due time (on disk); only those due within
    ``horizon_s`` are brought into memory, at most ``max_in_memory`` at a time, in due
    order, through a cursor on (next_crawl_at, id). A restart starts the cursor again from
    the beginning: what was due and not yet fetched is due still.

    A fetch's next refresh reaches the frontier exactly once. The store scan returns
    only due times after the cursor, so:

    1. :meth:`after_record`: a due time at or before the cursor is one the scan will
       never return: it goes to the frontier at once. A later one is parked in memory
       while the fetch's row is not yet durable (the store still holds the URL's
       previous due time).
    2. :meth:`acked` runs right after the store recorded the row, in the same loop step
       as the store write (no await between, so no :meth:`tick` in between): if a tick
       moved the cursor past the parked due time meanwhile, the refresh goes to the
       frontier here; otherwise the store scan returns it when it comes due.

    Without step 2 a refresh was lost: a tick between the fetch and the durable write
    moved the cursor past the new due time while the store held the old one.
    """

    def __init__(
        self, store: DueRows, frontier: RefreshTarget, clock: Clock, *,
        horizon_s: float = 60.0, max_in_memory: int = 20_000, batch: int = 2_000,
    ) -> None:
        self._store = store
        self._frontier = frontier
        self._clock = clock
        self._horizon = horizon_s
        self._max = max_in_memory
        self._batch = batch
        self._cursor: Cursor = (float("-inf"), 0)
        self._next_tick = float("-inf")
        self._parked: dict[str, UrlItem] = {}  # URL -> its next refresh, until its row is durable
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

    def after_record(self, item: UrlItem, row: OutcomeRow, schedule: Schedule | None) -> None:
        """Step 1: the next refresh of a URL just fetched, to the frontier or parked."""
        if schedule is None:
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
        if self._behind_cursor(schedule.next_crawl_at, item.sid):
            nxt.due_at = self._clock.now() + (schedule.next_crawl_at - self._clock.wall())
            self._frontier.push([nxt])
        else:
            nxt.due_at = schedule.next_crawl_at  # a wall time while parked
            self._parked[item.url] = nxt

    def acked(self, fetched: Sequence[tuple[OutcomeRow, Schedule | None]]) -> int:
        """Step 2, called with the rows the store just recorded; returns how many went to
        the frontier (the rest the store scan returns when they come due)."""
        ready = []
        now, wall = self._clock.now(), self._clock.wall()
        for row, _ in fetched:
            nxt = self._parked.pop(row.url, None)
            if nxt is None or not self._behind_cursor(nxt.due_at, nxt.sid):
                continue
            nxt.due_at = now + (nxt.due_at - wall)
            ready.append(nxt)
        return self._frontier.push(ready) if ready else 0

    def adopted(self, host: str) -> int:
        """A host handed over from another shard (crawler.placement.handover): its refreshes that
        the store scan has passed go to the frontier now; returns how many."""
        rows = self._store.due_up_to(host, self._cursor)
        now, wall = self._clock.now(), self._clock.wall()
        items = []
        for item, due_wall, _ in rows:
            item.due_at = now + (due_wall - wall)
            items.append(item)
        return self._frontier.push(items) if items else 0

    def _behind_cursor(self, due_wall: float, sid: int | None) -> bool:
        """Whether the store scan has passed (due_wall, sid) and so will never return it."""
        if sid is None:  # no id to break a tie with: only a strictly earlier time is safe
            return due_wall < self._cursor[0]
        return (due_wall, sid) <= self._cursor
