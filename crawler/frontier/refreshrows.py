"""The refresh schedule in a shard's durable frontier (crawler.frontier.store): when each
fetched URL is next due (wall seconds, ``next_crawl_at``), read in due order through a
cursor on ``(next_crawl_at, id)`` by crawler.frontier.refreshfeed, and moved earlier by a
sitemap's ``<lastmod>`` (crawler.frontier.recrawl decides when; the ack writes it).
"""

from __future__ import annotations

from typing import Any, Sequence

from crawler.frontier.recrawl import Previous
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.urltable import UrlTable, url_key

__all__ = ["Cursor", "DueRefresh", "RefreshRows"]

#: A position in the due order: ``(next_crawl_at, id)``.
Cursor = tuple[float, int]
#: A refresh coming due: (its item, its due wall time, the cursor just past it).
DueRefresh = tuple[UrlItem, float, Cursor]

_DUE_COLUMNS = (
    "SELECT id, url, host, depth, next_crawl_at, interval_s, etag, last_modified, content_sha,"
    " fingerprint, fetches FROM urls"
)


class RefreshRows:
    """The refresh schedule's reads and its one write outside an ack (the module
    docstring), on the store's :class:`~crawler.frontier.urltable.UrlTable`."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def due(self, until: float, after: Cursor, limit: int) -> list[DueRefresh]:
        """Fetched URLs due for a refresh by ``until`` (wall), after the cursor ``after``
        ((next_crawl_at, id)), oldest due first: (item, due wall time, cursor) each."""
        with self._t.lock:
            rows = self._t.db.execute(
                _DUE_COLUMNS + " WHERE next_crawl_at IS NOT NULL AND state=2"
                " AND next_crawl_at <= ? AND (next_crawl_at > ? OR (next_crawl_at = ? AND id > ?))"
                " ORDER BY next_crawl_at, id LIMIT ?",
                (until, after[0], after[0], after[1], limit),
            ).fetchall()
        return [self._due_item(r) for r in rows]

    def due_up_to(self, host: str, cursor: Cursor) -> list[DueRefresh]:
        """:meth:`due` for one host's refreshes at or before ``cursor`` (the ones a refresh
        scan already past them would never return: rows adopted from another shard)."""
        with self._t.lock:
            rows = self._t.db.execute(
                _DUE_COLUMNS + " WHERE host=? AND next_crawl_at IS NOT NULL AND state=2"
                " AND (next_crawl_at < ? OR (next_crawl_at = ? AND id <= ?)) ORDER BY next_crawl_at, id",
                (host, cursor[0], cursor[0], cursor[1]),
            ).fetchall()
        return [self._due_item(r) for r in rows]

    @staticmethod
    def _due_item(row: Sequence[Any]) -> DueRefresh:
        sid, url, host, depth, due_at, interval, etag, lm, sha, fp, fetches = row
        prev = Previous(fetches, interval, sha, fp, etag, lm)
        item = UrlItem(url, depth, host=host, kind="refresh", fetch_seq=fetches + 1, prev=prev)
        item.sid = sid
        return item, due_at, (due_at, sid)

    def schedule_of(self, url: str) -> tuple[float, float, float] | None:
        """(last_crawled_at, interval_s, next_crawl_at) of a fetched URL with a schedule."""
        with self._t.lock:
            row = self._t.db.execute(
                "SELECT last_crawled_at, interval_s, next_crawl_at FROM urls WHERE h=? AND next_crawl_at IS NOT NULL",
                (url_key(url),),
            ).fetchone()
        return None if row is None or None in row else (row[0], row[1], row[2])

    def bring_forward(self, url: str, next_crawl_at: float) -> None:
        """Make a URL due earlier (a sitemap's ``<lastmod>``: crawler.frontier.recrawl). Committed."""
        with self._t.lock:
            self._t.db.execute(
                "UPDATE urls SET next_crawl_at=? WHERE h=? AND next_crawl_at > ?",
                (next_crawl_at, url_key(url), next_crawl_at),
            )
