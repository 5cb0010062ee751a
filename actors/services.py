"""Shared-service actors: one shard of the seen set, the content index, the page budget.

Each is a thin shell over a plain class (crawler.seen.SeenSet, crawler.services) that is
tested without Ray; this module only moves batches in and out.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import ray

from crawler.clock import SYSTEM_CLOCK
from crawler.seen import SeenSet, shard_of, url_hash64
from crawler.services import BudgetPool, ContentIndexService


@ray.remote(num_cpus=0)
class SeenFilter:
    """One shard of the seen-URL set (Bloom filter in front of an exact store).

    With ``path`` the exact store is a SQLite file there (every call committed before it
    returns), so a restarted actor reopens the same set.
    """

    def __init__(self, capacity: int, error_rate: float, exact: bool, path: str | None = None) -> None:
        self.set = SeenSet(capacity, error_rate, exact=exact, **({"path": path} if path else {}))

    def close(self) -> None:
        self.set.close()

    def check_and_add_hashes(self, hashes: list[int]) -> list[bool]:
        return self.set.check_and_add_hashes(hashes)

    def stats(self) -> dict[str, Any]:
        return self.set.stats()


class SeenGroupClient:
    """Splits a batch of URLs by hash over the SeenFilter shards; one call per shard."""

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)

    async def check_and_add(self, urls: list[str]) -> list[bool]:
        n = len(self.actors)
        hashes = [url_hash64(u) for u in urls]
        parts: dict[int, list[int]] = {}
        for i, h in enumerate(hashes):
            parts.setdefault(shard_of(h, n), []).append(i)
        shard_ids = list(parts)
        answers = await asyncio.gather(
            *(self.actors[s].check_and_add_hashes.remote([hashes[i] for i in parts[s]]) for s in shard_ids)
        )
        out = [False] * len(urls)
        for s, ans in zip(shard_ids, answers):
            for i, novel in zip(parts[s], ans):
                out[i] = novel
        return out


@ray.remote(num_cpus=0)
class ContentIndexActor:
    """The crawl-wide duplicate-content index (crawler.services.ContentIndexService)."""

    def __init__(self, distance: int, tables: int, path: str | None, every_s: float) -> None:
        self.service = ContentIndexService(distance, tables, SYSTEM_CLOCK, path=path, every_s=every_s)

    def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        return self.service.check_and_add(items)

    def save(self) -> None:
        self.service.save()

    def stats(self) -> dict[str, Any]:
        return self.service.stats()


@ray.remote(num_cpus=0)
class Budget:
    """The global ``limits.max_pages`` count (crawler.services.BudgetPool)."""

    def __init__(self, max_pages: int | None, path: str | None) -> None:
        self.pool = BudgetPool(max_pages, path)

    def lease(self, n: int) -> int:
        return self.pool.lease(n)
