"""What a shard's durable frontier (crawler.frontier.store) knows of one URL, and of its
URLs by state: the answers of ``GET /urls/{url}``, ``crawl ctl url`` and the URL ledger.

Read from the per-URL state the store keeps on disk (bounded RAM, with SQLite's page cache
hot), by URL (its key ``h``) or by its public ``url_hash`` (the column ``uh``).
"""

from __future__ import annotations

from typing import TypedDict

from crawler.frontier.urltable import CLAIMED, DONE, DROPPED, QUEUED, UrlTable, hash_key, url_key
from crawler.urls import url_hash as _url_hash

__all__ = ["UrlLookup", "UrlStatus"]


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
    """Reads of the store's per-URL state (the module docstring), on its
    :class:`~crawler.frontier.urltable.UrlTable`."""

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
