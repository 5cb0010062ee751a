"""The shard half of the runtime seam, written once for every runtime.

A session asks its shards the same things whether they run in this process
(crawler.session.inprocess.LocalRuntime), as Ray actors (actors.rayruntime.RayRuntime) or
in the fault simulator (crawler.testing.sim.services): deliver a batch, widen the scope,
apply an operator's host policy or region rule, look up a URL or a host, vet seeds.
:class:`ShardCalls` asks them through each shard's typed
:class:`~crawler.engine.shardapi.ShardApi` -- the shard itself in process, a proxy that
calls the actor elsewhere -- so the runtimes differ only in what they hand out.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.shardapi import HostView, ShardApi
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostPlacement

T = TypeVar("T")


class ShardCalls(ABC):
    """The shard methods of crawler.session.runtime.Runtime, over :meth:`_shards`."""

    @abstractmethod
    def _shards(self) -> Mapping[str, ShardApi]:
        """Every shard of the crawl by id, in plan order."""

    def _patient(self, shard_id: str) -> ShardApi:
        """Shard ``shard_id`` for a call that may run twice (a durable delivery): one that
        waits for the shard while it restarts. In process a shard never restarts."""
        return self._shards()[shard_id]

    async def _each(self, shard_id: str | None, call: Callable[[ShardApi], Awaitable[T]]) -> list[T]:
        shards = self._shards()
        asked = list(shards.values()) if shard_id is None else [shards[shard_id]]
        return list(await asyncio.gather(*(call(s) for s in asked)))

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        await self._patient(shard_id).accept(items)

    async def widen_scope(self, urls: list[str]) -> None:
        await self._each(None, lambda s: s.widen_scope(urls))

    async def set_host_policy(self, shard_id: str | None, change: PolicyChange) -> None:
        await self._each(shard_id, lambda s: s.set_host_policy(change))

    async def place(self, shard_id: str, host: str, region: str | None) -> HostPlacement:
        return await self._shards()[shard_id].place(host, region)

    async def url_status(self, shard_id: str | None, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        found = await self._each(shard_id, lambda s: s.url_status(url, url_hash))
        return next((f for f in found if f is not None), None)

    async def url_for_hash(self, url_hash: str) -> str | None:
        return next((u for u in await self._each(None, lambda s: s.url_for_hash(url_hash)) if u is not None), None)

    async def host_info(self, shard_id: str | None, target: HostTarget) -> list[HostView]:
        return await self._each(shard_id, lambda s: s.host_info(target))

    async def vet_seeds(self, shard_id: str, urls: list[str]) -> list[str | None]:
        return await self._shards()[shard_id].vet_seeds(urls)

    async def held_keys(self, shard_id: str, after: int | None, limit: int) -> list[int]:
        return await self._shards()[shard_id].held_keys(after, limit)

    async def held_ids(self, shard_id: str, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return await self._shards()[shard_id].held_ids(after, limit)


def merge_seen_stats(stats: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """The seen shards' stats as one: numbers summed, anything else from the first shard
    that has it; ``extra`` figures of the runtime's own added."""
    seen: dict[str, Any] = {}
    for st in stats:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                seen[k] = seen.get(k, 0) + v
            else:
                seen.setdefault(k, v)
    seen.update(extra)
    return seen
