"""A HostShard actor as a :class:`~crawler.engine.shardapi.ShardApi`: one typed method per
call, each a ``.remote()`` on the actor handle (model: Ray Serve's ``ActorReplicaWrapper``).

Whoever asks a shard on Ray -- the driver's runtime (actors.rayruntime), a peer shard
delivering links or moving a host (actors.host_shard) -- holds one of these, not a
handle, so no call is made by method-name string and every reply has its declared type.

``give_up_s``: how long a call waits for a shard that is restarting (its node was lost:
Ray restarts it from OUT) or refuses for now (actors.serviceactors.call_service); None
asks once. Only for calls that may run twice (a durable delivery, a read).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar

from actors.serviceactors import call_service
from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.shardapi import HostView
from crawler.engine.status import ShardStatus
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe

T = TypeVar("T")


class RayShard:
    """One HostShard actor, called through its handle (module docstring)."""

    def __init__(self, handle: Any, name: str, *, give_up_s: float | None = None) -> None:
        self._h = handle  # a ray.actor.ActorHandle: untyped (Ray's remote methods are dynamic)
        self._name = name
        self._give_up_s = give_up_s

    async def _ask(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._give_up_s is None:
            return await call()
        return await call_service(call, f"shard {self._name}", give_up_s=self._give_up_s)

    async def accept(self, items: list[UrlItem]) -> int:
        result: int = await self._ask(lambda: self._h.accept.remote(items))
        return result

    async def adopt(self, state: HostState) -> int:
        result: int = await self._ask(lambda: self._h.adopt.remote(state))
        return result

    async def widen_scope(self, urls: list[str]) -> None:
        await self._ask(lambda: self._h.widen_scope.remote(urls))

    async def set_host_policy(self, change: PolicyChange) -> None:
        await self._ask(lambda: self._h.set_host_policy.remote(change))

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        result: UrlStatus | None = await self._ask(lambda: self._h.url_status.remote(url, url_hash))
        return result

    async def url_for_hash(self, url_hash: str) -> str | None:
        result: str | None = await self._ask(lambda: self._h.url_for_hash.remote(url_hash))
        return result

    async def host_info(self, target: HostTarget) -> HostView:
        result: HostView = await self._ask(lambda: self._h.host_info.remote(target))
        return result

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        result: list[str | None] = await self._ask(lambda: self._h.vet_seeds.remote(urls))
        return result

    async def place(self, host: str, region: str | None) -> HostPlacement:
        result: HostPlacement = await self._ask(lambda: self._h.place.remote(host, region))
        return result

    async def located(self, host: str, region: str) -> None:
        await self._ask(lambda: self._h.located.remote(host, region))

    async def probe(self, url: str) -> Probe:
        result: Probe = await self._ask(lambda: self._h.probe.remote(url))
        return result

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        result: list[int] = await self._ask(lambda: self._h.held_keys.remote(after, limit))
        return result

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        result: list[tuple[int, int, str]] = await self._ask(lambda: self._h.held_ids.remote(after, limit))
        return result

    async def status(self) -> ShardStatus:
        result: ShardStatus = await self._ask(lambda: self._h.status.remote())
        return result

    async def shutdown(self) -> ShardStatus:
        result: ShardStatus = await self._ask(lambda: self._h.shutdown.remote())
        return result
