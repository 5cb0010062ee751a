"""The crawl-wide services shards share, as plain classes: the page budget and the
duplicate-content index (the seen-URL group is crawler.seen.group).

The in-process runtime (crawler.local) calls them directly; the Ray runtime wraps each
in a thin actor (actors/services.py). Either way a shard sees the same async interfaces,
so it cannot tell where it runs, and the logic is tested here without Ray.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Awaitable, Callable

from crawler.clock import Clock
from crawler.dedup import ContentIndex


def save_snapshot(path: str, data: bytes) -> None:
    """Write a snapshot atomically (temp file, fsync, rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class BudgetPool:
    """The global ``limits.max_pages`` count, handed out in leases.

    With ``path`` the pages granted so far are saved before a lease returns, so a
    restarted pool does not hand out again what it already gave (``max_pages`` holds
    across a restart of the pool; pages leased to a shard that then crashed are spent).
    """

    def __init__(self, max_pages: int | None, path: str | None = None) -> None:
        self.max_pages = max_pages
        self.path = path
        self.granted = 0
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self.granted = int(json.load(f)["granted"])

    def lease(self, n: int) -> int:
        """Take up to ``n`` pages; 0 once the budget is spent."""
        if self.max_pages is None:
            return n
        give = max(0, min(n, self.max_pages - self.granted))
        if give:
            self.granted += give
            if self.path:
                save_snapshot(self.path, json.dumps({"granted": self.granted}).encode())
        return give

    def remaining(self) -> int | None:
        return None if self.max_pages is None else self.max_pages - self.granted


def lease_size(max_pages: int, shards: int, cap: int) -> int:
    """Pages a shard asks for at a time: at most ``cap``, and small enough (1/8 of an even
    share) that no shard sits on pages another shard could use as the budget runs out."""
    return max(1, min(cap, max_pages // (8 * max(1, shards))))


class LeasedBudget:
    """A shard's view of the page budget: spends local leases, refills them on demand.

    Args:
        lease: ``await lease(n)`` -> pages granted by the pool (0 when spent).
        max_pages: ``limits.max_pages`` (None: unlimited, no calls at all).
        shards: how many shards share the pool.
        cap: ``runtime.budget_lease_max``.
    """

    def __init__(self, lease: Callable[[int], Awaitable[int]], max_pages: int | None, shards: int, cap: int) -> None:
        self._lease = lease
        self.max_pages = max_pages
        self._size = lease_size(max_pages, shards, cap) if max_pages is not None else 0
        self.local = 0
        self.spent = False
        self._lock = asyncio.Lock()

    async def acquire(self) -> bool:
        """Take one page; False once the budget is spent."""
        if self.max_pages is None:
            return True
        if self.local == 0 and not self.spent:
            async with self._lock:
                if self.local == 0 and not self.spent:
                    got = await self._lease(self._size)
                    self.local += got
                    self.spent = got == 0
        if self.local > 0:
            self.local -= 1
            return True
        return False


class ContentIndexService:
    """The crawl-wide duplicate-content index (mirrors live on other hosts, so it is
    global), snapshotted to ``path`` every ``every_s`` of ``clock`` and on :meth:`save`.

    After a restart, duplicates of pages indexed since the last snapshot are missed
    (stored as originals); nothing else is lost.
    """

    def __init__(self, distance: int, tables: int, clock: Clock, *, path: str | None = None, every_s: float = 30.0) -> None:
        self.path = path
        self._clock = clock
        self._every_s = every_s
        self._last_save = clock.now()
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                self.index = ContentIndex.restore(f.read())
        else:
            self.index = ContentIndex(distance, tables)

    def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        out = self.index.check_and_add(items)
        if self.path and self._clock.now() - self._last_save >= self._every_s:
            self.save()
        return out

    def save(self) -> None:
        if self.path:
            save_snapshot(self.path, self.index.snapshot())
            self._last_save = self._clock.now()

    def stats(self) -> dict[str, Any]:
        return self.index.stats()
