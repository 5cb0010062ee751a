"""The shard half of the runtime seam, written once for both runtimes.

A session asks its shards the same things whether they run in this process
(crawler.session.inprocess.LocalRuntime) or as Ray actors (actors.rayruntime.RayRuntime): deliver a
batch, widen the scope, apply an operator's host policy or region rule, look up a URL
or a host, vet seeds. This module holds both ends of those calls:

* :class:`ShardEndpoint` answers them for one shard, in the shard's process (the
  HostShard actor delegates to it; the local runtime holds one per shard). With regions
  a question about a host that lives on another shard is forwarded there.
* :class:`ShardCalls` asks them, over one primitive each runtime supplies: "call method
  M of shard X with these arguments" (a direct call, or a call by actor handle).

So the two runtimes differ only in how they call (and in the services they start).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Awaitable, Mapping, Protocol, Sequence

from crawler.errors import ConfigError
from crawler.frontier.urlitem import UrlItem
from crawler.control.hostpolicy import HostTarget, PolicyChange
from crawler.control.hostview import host_info
from crawler.engine.scheduler import ShardScheduler
from crawler.urls import host_key
from crawler.frontier.store import UrlStatus


class Forward(Protocol):
    """``await forward(shard_id, method, *args)``: the same call on another shard."""

    def __call__(self, shard_id: str, method: str, *args: Any) -> Awaitable[Any]: ...


async def _nowhere(shard_id: str, method: str, *args: Any) -> Any:
    raise ConfigError(f"{method}: {shard_id} is not reachable from here (no regions)")


class ShardEndpoint:
    """One shard's answers to its runtime (see the module docstring)."""

    def __init__(self, shard: ShardScheduler, forward: Forward = _nowhere) -> None:
        self.shard = shard
        self._forward = forward

    def _elsewhere(self, key: str) -> str | None:
        """The shard that owns ``key`` when it is not this one (regions: a moved host)."""
        regions = self.shard.regions
        return None if regions is None else regions.owner_elsewhere(key)

    async def accept(self, items: list[UrlItem]) -> int:
        """A batch of novel URLs owned by this shard, durable before this returns."""
        return await self.shard.accept_durably(items)

    async def add_seeds(self, urls: list[str]) -> None:
        """Seeds added while the crawl runs (scope ``host``/``domain`` grows with them)."""
        self.shard.widen_scope(urls)

    async def set_host_policy(self, change: PolicyChange) -> None:
        """Operator policy (crawler.control.hostpolicy), durable (in OUT too) before this returns."""
        if not change.hostname_wide and (owner := self._elsewhere(change.host)) is not None:
            return await self._forward(owner, "set_host_policy", change)
        self.shard.set_host_policy(change)
        await self.shard.synced()

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        """The store's state of one URL (crawler.frontier.store.FrontierStore.url_status)."""
        if url is not None and (owner := self._elsewhere(host_key(url))) is not None:
            return await self._forward(owner, "url_status", url, url_hash)
        store = self.shard.store
        return store.url_status(url, url_hash=url_hash) if store is not None else None

    async def url_for_hash(self, url_hash: str) -> str | None:
        store = self.shard.store
        return store.url_for_hash(url_hash) if store is not None else None

    async def host_info(self, target: HostTarget) -> dict[str, Any]:
        """What this shard knows of a host (crawler.control.hostview), or its owner's view."""
        if not target.hostname_wide and (owner := self._elsewhere(target.key)) is not None:
            return await self._forward(owner, "host_info", target)
        return host_info(self.shard, target)

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        return self.shard.vet_seeds(urls)

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        """A page of the URL keys this shard's store holds (the URL ledger's audit)."""
        store = self.shard.store
        return store.audit.keys(after, limit) if store is not None else []

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        """A page of (url_hash, state, url) this shard's store holds (the URL ledger's audit)."""
        store = self.shard.store
        return store.audit.ids(after, limit) if store is not None else []

    async def place(self, host: str, region: str | None) -> dict[str, Any]:
        """An operator's region rule for ``host`` (crawler.placement.handover.Regions.place)."""
        if self.shard.regions is None:
            raise ConfigError("region: this runtime has one region (runtime.regions needs the Ray runtime)")
        return await self.shard.regions.place(host, region)

    async def located(self, host: str, region: str) -> None:
        """As ``host``'s home: it now lives in ``region``."""
        if self.shard.regions is None:
            raise ConfigError(f"located: {self.shard.shard_id} has no regions")
        await self.shard.regions.located_at(host, region)


class ShardCalls(ABC):
    """The shard methods of crawler.session.runtime.Runtime, over :meth:`_call`."""

    @abstractmethod
    def _shard_ids(self) -> list[str]:
        """Every shard of the crawl, in plan order."""

    @abstractmethod
    async def _call(self, shard_id: str, method: str, *args: Any, patient: bool = False) -> Any:
        """``ShardEndpoint.<method>(*args)`` of shard ``shard_id``; ``patient``: wait for a
        shard that is restarting (only for calls that may run twice: a durable delivery)."""

    async def _each(self, shard_id: str | None, method: str, *args: Any) -> list[Any]:
        ids = self._shard_ids() if shard_id is None else [shard_id]
        return list(await asyncio.gather(*(self._call(sid, method, *args) for sid in ids)))

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        await self._call(shard_id, "accept", items, patient=True)

    async def widen_scope(self, urls: list[str]) -> None:
        await self._each(None, "add_seeds", urls)

    async def set_host_policy(self, shard_id: str | None, change: PolicyChange) -> None:
        await self._each(shard_id, "set_host_policy", change)

    async def place(self, shard_id: str, host: str, region: str | None) -> dict[str, Any]:
        return await self._call(shard_id, "place", host, region)

    async def url_status(self, shard_id: str | None, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return next((f for f in await self._each(shard_id, "url_status", url, url_hash) if f is not None), None)

    async def url_for_hash(self, url_hash: str) -> str | None:
        return next((u for u in await self._each(None, "url_for_hash", url_hash) if u is not None), None)

    async def host_info(self, shard_id: str | None, target: HostTarget) -> list[dict[str, Any]]:
        return await self._each(shard_id, "host_info", target)

    async def vet_seeds(self, shard_id: str, urls: list[str]) -> list[str | None]:
        return await self._call(shard_id, "vet_seeds", urls)

    async def held_keys(self, shard_id: str, after: int | None, limit: int) -> list[int]:
        return await self._call(shard_id, "held_keys", after, limit)

    async def held_ids(self, shard_id: str, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return await self._call(shard_id, "held_ids", after, limit)


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
