"""The spill area of a shard's in-memory frontier (crawler.frontier.frontier), in its durable
frontier (crawler.frontier.store): only the heads of each host's queue live in memory, the
rest stay queued on disk and are read back in acceptance order.

State ``0`` (queued) means exactly "waiting in the frontier": a host's queued rows with
ids above the frontier's cursor for that host are its spilled URLs.
"""

from __future__ import annotations

from crawler.frontier.urlitem import UrlItem
from crawler.frontier.urltable import UrlTable

__all__ = ["SpillRows"]


class SpillRows:
    """A host's queued rows read back, counted, or trimmed (the module docstring), on the
    store's :class:`~crawler.frontier.urltable.UrlTable`."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]:
        """The next queued URLs of ``host`` in acceptance order, after ``after_id``."""
        with self._t.lock:
            rows = self._t.db.execute(
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
        with self._t.lock:
            self._t.begin()
            rows = self._t.db.execute(
                "SELECT id, url FROM urls WHERE host=? AND state=0 AND id>? ORDER BY id DESC LIMIT ?",
                (host, after_id, limit),
            ).fetchall()
            self._t.db.executemany("UPDATE urls SET state=3 WHERE id=?", [(r[0],) for r in rows])
            self._t.end()
            if self._t.journal is not None and rows:
                self._t.journal("drop", [r[1] for r in rows])
        return [r[1] for r in rows]

    def count_queued(self, host: str, after_id: int) -> int:
        """How many queued URLs of ``host`` come after ``after_id`` (the spill recount)."""
        with self._t.lock:
            n: int = self._t.db.execute(
                "SELECT count(*) FROM urls WHERE host=? AND state=0 AND id>?", (host, after_id)
            ).fetchone()[0]
        return n

    def pending_hosts(self) -> list[tuple[str, int]]:
        """(host, queued URLs) for every host with queued work (a restart's spill counts)."""
        with self._t.lock:
            rows: list[tuple[str, int]] = self._t.db.execute(
                "SELECT host, count(*) FROM urls WHERE state=0 GROUP BY host"
            ).fetchall()
        return rows
