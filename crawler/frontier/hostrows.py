"""The rows of one host moving between shards (crawler.placement.handover), as the durable
frontiers (crawler.frontier.store) of the old and the new owner see them.

A row travels with every column but the local ``id`` (the new owner hands out its own, in
its acceptance order); a URL the new owner already holds keeps its row, so adopting twice
after a crash changes nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

from crawler.frontier.urltable import CLAIMED, QUEUED, STATE_COLUMNS, UrlTable

__all__ = ["HostRows"]

#: The columns a host's rows carry to another shard (everything but the local ``id``).
_PORTABLE_COLS = (
    "h", "url", "host", "depth", "referrer", "kind", "state", "replay", *(name for name, _ in STATE_COLUMNS),
)
_PORTABLE = ", ".join(_PORTABLE_COLS)
_STATE_AT, _REPLAY_AT = _PORTABLE_COLS.index("state"), _PORTABLE_COLS.index("replay")


class HostRows:
    """The rows of one host moving between shards: exported from the old owner's store,
    adopted by the new owner's, then removed from the old one. Works on the store's
    :class:`~crawler.frontier.urltable.UrlTable`; each change is committed and journaled."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def export_host(self, host: str) -> list[list[Any]]:
        """Every row of ``host``, all columns but the local id, in acceptance order (a
        handover to another shard). A claimed URL goes as queued for replay: it is handed
        over only when nothing of the host is in flight, so a claim is a retry waiting."""
        with self._t.lock:
            rows = self._t.db.execute(f"SELECT {_PORTABLE} FROM urls WHERE host=? ORDER BY id", (host,)).fetchall()
        out = []
        for found in rows:
            row = list(found)
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
            n: int = self._t.db.execute("DELETE FROM urls WHERE host=?", (host,)).rowcount
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("remove_host", host)
        return n
