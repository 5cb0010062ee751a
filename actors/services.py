"""Shared-service actors: the sharded seen-URL group, the content index and the budget.

Each actor is a thin shell over a plain class from ``crawler/`` (tested there without
Ray); this module only moves batches in and out. The client classes give engines the
same async interfaces the in-process services have (crawler.runner), so an engine
cannot tell whether it runs in one process or on a cluster.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Sequence

import ray

from crawler.dedup import ContentIndex
from crawler.runner import save_snapshot
from crawler.seen import SeenGroup, SeenSet, ShardCall


@ray.remote(num_cpus=0)
class SeenFilter:
    """One shard of the seen-URL set (Bloom filter in front of an exact store).

    With ``path`` the exact store is a SQLite file there (every call committed before it
    returns) and the Bloom filter is snapshotted beside it, so a restarted actor reopens
    the same set (rebuilding the filter from the store if the snapshot is stale).
    """

    def __init__(self, capacity: int, error_rate: float, exact: bool, path: str | None = None) -> None:
        self.set = SeenSet(capacity, error_rate, exact=exact, path=path)

    def close(self) -> None:
        self.set.close()

    def check_and_add_hashes(self, hashes: list[int]) -> list[bool]:
        return self.set.check_and_add_hashes(hashes)

    def stats(self) -> dict[str, Any]:
        return self.set.stats()


class SeenGroupClient:
    """The engines' seen service on a cluster: :class:`SeenGroup` over the SeenFilter actors.

    The splitting by hash, one call per shard and the merge live in
    ``crawler.seen.group`` (tested without Ray); this only turns each actor into a shard
    callable (a Ray ``ObjectRef`` is awaitable).
    """

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)
        self._group = SeenGroup([self._shard(a) for a in self.actors])

    @staticmethod
    def _shard(actor: Any) -> ShardCall:
        # A function per actor binds that actor now (a lambda in a loop would bind the last).
        return lambda hashes: actor.check_and_add_hashes.remote(hashes)

    async def check_and_add(self, urls: list[str]) -> list[bool]:
        """For each URL, True if its seen shard had not seen it (it is now marked seen)."""
        return await self._group.check_and_add(urls)


@ray.remote(num_cpus=0)
class ContentIndexActor:
    """The crawl-wide duplicate-content index (mirrors live on other hosts, so it is global).

    With ``path`` it restores from a snapshot there and saves one every ``save_every_s``
    and on :meth:`save`; after a restart, duplicates of pages indexed since the last
    snapshot are missed (they are stored as originals), nothing else is lost.
    """

    def __init__(self, distance: int, tables: int, path: str | None = None, save_every_s: float = 30.0) -> None:
        self.path = path
        self.save_every_s = save_every_s
        self._last_save = time.monotonic()
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                self.index = ContentIndex.restore(f.read())
        else:
            self.index = ContentIndex(distance, tables)

    def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        out = self.index.check_and_add(items)
        if self.path and time.monotonic() - self._last_save > self.save_every_s:
            self.save()
        return out

    def save(self) -> None:
        if self.path:
            save_snapshot(self.path, self.index.snapshot())
            self._last_save = time.monotonic()

    def stats(self) -> dict[str, Any]:
        return self.index.stats()


class ContentClient:
    """Async facade over the content actor (engines micro-batch their calls to it)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def check_and_add(self, items):
        return await self.actor.check_and_add.remote(items)


@ray.remote(num_cpus=0)
class Budget:
    """Hands out ``limits.max_pages`` in leases so shards rarely have to ask."""

    def __init__(self, max_pages: int | None) -> None:
        self.max_pages = max_pages
        self.granted = 0

    def lease(self, n: int) -> int:
        if self.max_pages is None:
            return n
        give = max(0, min(n, self.max_pages - self.granted))
        self.granted += give
        return give

    def remaining(self) -> int | None:
        return None if self.max_pages is None else self.max_pages - self.granted


class BudgetClient:
    """A shard's view of the global page budget: local leases, refilled on demand.

    Leases shrink as the budget runs low so no shard sits on pages another shard needs.
    """

    def __init__(self, actor: Any, max_pages: int | None, shards: int) -> None:
        self.actor = actor
        self.max_pages = max_pages
        self.shards = max(1, shards)
        self.local = 0
        self.spent = False
        self._lock = asyncio.Lock()

    async def acquire(self) -> bool:
        if self.max_pages is None:
            return True
        if self.local == 0 and not self.spent:
            async with self._lock:
                if self.local == 0 and not self.spent:
                    size = max(1, min(16, self.max_pages // (8 * self.shards)))
                    got = await self.actor.lease.remote(size)
                    self.local += got
                    if got == 0:
                        self.spent = True
        if self.local > 0:
            self.local -= 1
            return True
        return False
