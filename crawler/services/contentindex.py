"""The crawl-wide duplicate-content index as a service: :class:`ContentIndexService` over
one in-process index or several shards of it (crawler.content.index), its log on disk, and
the names of its files in OUT.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Awaitable, Protocol, Sequence

from crawler.clock import Clock
from crawler.config.settings import CrawlConfig
from crawler.content.index import ContentIndexGroup, ContentShard, ShardReply, ShardRequest
from crawler.recovery import stamps

log = logging.getLogger(__name__)


class ShardHandle(Protocol):
    """How the content index reaches one of its shards (in process, or a Ray actor)."""

    def call(self, req: ShardRequest) -> Awaitable[ShardReply]: ...

    def save(self) -> Awaitable[None]: ...

    def stats(self) -> Awaitable[dict[str, int]]: ...


class LocalShard:
    """A :class:`ContentShard` in this process, behind the :class:`ShardHandle` interface."""

    def __init__(self, shard: ContentShard) -> None:
        self.shard = shard

    async def call(self, req: ShardRequest) -> ShardReply:
        return self.shard.call(req)

    async def save(self) -> None:
        self.shard.save()

    async def stats(self) -> dict[str, int]:
        return self.shard.stats()


class ContentIndexService:
    """The crawl-wide duplicate-content index (mirrors live on other hosts, so it is
    global): a :class:`~crawler.content.index.ContentIndexGroup` over ``shards`` in-process
    :class:`~crawler.content.index.ContentShard` objects logging to ``<path>-<i>.log``, or
    over the given ``handles`` (the Ray content actor passes shard actors).

    One batch at a time (verdicts depend on every earlier batch); a batch is one call per
    shard, carrying the previous batch's additions. Shards save every ``every_s`` of
    ``clock`` and on :meth:`save`; after a restart, duplicates of pages indexed since the
    last save are missed (stored as originals); nothing else is lost. ``crawl``: the
    crawl's identity, each log stamped with it (crawler.recovery.stamps).
    """

    def __init__(self, distance: int, tables: int, clock: Clock, *, path: str | None = None, every_s: float = 30.0,
                 shards: int = 1, handles: Sequence[ShardHandle] | None = None, crawl: str | None = None) -> None:
        self.path = path
        self._clock = clock
        self._every_s = every_s
        self._last_save = clock.now()
        if handles is None:
            handles = [LocalShard(ContentShard(distance, tables, shard_log(path, i) if path else None,
                                               stamps.part(crawl, stamps.content_part(i))))
                       for i in range(shards)]
        self.handles = list(handles)
        self.group = ContentIndexGroup(distance, tables, len(self.handles))
        self._lock = asyncio.Lock()

    async def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        """``(dup_kind, original's url_hash)`` per ``(url, sha256, simhash|None)``, in order."""
        async with self._lock:
            plan, reqs = self.group.plan(items)
            replies = await asyncio.gather(*(h.call(r) for h, r in zip(self.handles, reqs)))
            out = self.group.resolve(plan, replies)
            if self._clock.now() - self._last_save >= self._every_s:
                await self._save()
            return out

    async def _flush(self) -> None:
        await asyncio.gather(*(h.call(r) for h, r in zip(self.handles, self.group.pending_requests()) if r is not None))

    async def _save(self) -> None:
        await self._flush()
        await asyncio.gather(*(h.save() for h in self.handles))
        self._last_save = self._clock.now()

    async def save(self) -> None:
        """Index what is queued and append every shard's new entries to its log."""
        async with self._lock:
            await self._save()

    def log_names(self) -> list[str]:
        """Basenames of the shards' logs (what a remote OUT keeps a copy of)."""
        return [os.path.basename(shard_log(self.path, i)) for i in range(len(self.handles))] if self.path else []

    async def stats(self) -> dict[str, Any]:
        """Totals: duplicates found, entries and bytes held, candidates checked per lookup."""
        async with self._lock:
            await self._flush()
            return self.group.stats(await asyncio.gather(*(h.stats() for h in self.handles)))


#: Path prefix of the content index's shard logs in a state folder.
CONTENT_LOG = "content"


def content_log_names(cfg: CrawlConfig) -> list[str]:
    """Basenames of the content shards' logs of a crawl (``content-000.log``...)."""
    return [os.path.basename(shard_log(CONTENT_LOG, i)) for i in range(cfg.runtime.content_shards)]


def shard_log(path: str, i: int) -> str:
    """The log file of content shard ``i`` for the index at ``path`` (a path prefix)."""
    return f"{path}-{i:03d}.log"
