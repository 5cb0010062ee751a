"""The in-memory window of a shard's frontier (crawler.frontier.frontier): each host keeps at
most ``window`` discovery URLs in memory, the rest wait in the durable store
(crawler.frontier.spillrows, where admission already put them) and are loaded back in
acceptance order as the host's queue drains.

A host's spilled URLs are exactly its queued rows with ids above its cursor (the id of
the last URL of it brought into memory). The frontier keeps a count of them; when the
store disagrees, the store is the truth: the count is corrected, and each correction is
logged and counted (:attr:`SpillWindow.recounts`), since each one is a bug.
"""

from __future__ import annotations

import logging
from typing import Protocol

from crawler.frontier.backqueue import HostQueue, Priority
from crawler.frontier.urlitem import UrlItem

log = logging.getLogger("crawler.frontier.frontier")  # the frontier's log, as before the split

__all__ = ["SpillStore", "SpillWindow"]


class SpillStore(Protocol):
    """Where a host's discovery URLs beyond the in-memory window wait (crawler.frontier.store).

    Its queued rows of a host with ids above the frontier's cursor are exactly that
    host's spilled URLs; :meth:`count_queued` lets the frontier recount them.
    """

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]: ...

    def count_queued(self, host: str, after_id: int) -> int: ...

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]: ...


class SpillWindow:
    """A host's discovery URLs split between memory and ``store`` (the module docstring)."""

    def __init__(self, window: int, store: SpillStore) -> None:
        self._window = window
        self._store = store
        self.recounts = 0  # spill counts corrected from the store (each one is a bug: logged)

    def spills(self, q: HostQueue, item: UrlItem) -> bool:
        """Whether ``item`` (a discovery URL due now) stays in the store: its host's window
        is full, or URLs of the host wait there already (acceptance order). If not, the
        host's cursor moves past it."""
        if q.spilled or len(q.ready) >= self._window:
            q.spilled += 1
            return True
        q.cursor = max(q.cursor, item.sid)
        return False

    def load(self, host: str, q: HostQueue, now: float, priority: Priority) -> int:
        """Bring spilled discovery URLs into memory when the host's ready queue is empty.
        Returns the correction to the frontier's count of queued URLs (0 unless the store
        disagreed with the host's count)."""
        if q.ready or not q.spilled:
            return 0
        loaded = self._store.load(host, q.cursor, self._window or 1)
        for item in loaded:
            q.cursor = max(q.cursor, item.sid)
            q.add(item, priority, now)
        q.spilled -= len(loaded)
        if q.spilled >= 0 and loaded:
            return 0
        # The store disagrees with our count: it is the truth. Recount rather than guess
        # (guessing zero once lost the host's last URLs), and say so.
        actual = self._store.count_queued(host, q.cursor)
        log.error("frontier: %s had %d URLs left to load by count, the store has %d", host, q.spilled, actual)
        correction = actual - q.spilled
        q.spilled = actual
        self.recounts += 1
        return correction

    def trim(self, host: str, q: HostQueue, drop: int) -> list[str]:
        """Drop up to ``drop`` of the host's spilled URLs, the newest first (a budget cut);
        returns them (marked dropped in the store)."""
        if not q.spilled:
            return []
        urls = self._store.drop_newest(host, q.cursor, min(drop, q.spilled))
        q.spilled -= len(urls)
        return urls
