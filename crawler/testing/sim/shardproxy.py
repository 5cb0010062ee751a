"""A shard of the simulated cluster as a :class:`~crawler.engine.shardapi.ShardApi`.

What actors/shardproxy.py is on Ray: one typed method per call, each a call of the
:class:`~crawler.engine.shardserver.ShardServer` method through the simulated cluster
(its latency, partitions and deaths: crawler.testing.sim.cluster) from the caller's
process. ``patient``: wait while the shard restarts (only for calls that may run twice).
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.shardapi import HostView
from crawler.engine.shardserver import ShardServer
from crawler.engine.status import ShardStatus
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe
from crawler.testing.sim.cluster import Cluster, SimActor
from crawler.testing.sim.nodes import Process

T = TypeVar("T")


class SimShard:
    """One simulated shard actor, called from ``src`` (module docstring)."""

    def __init__(self, cluster: Cluster, src: Process, actor: SimActor, *, patient: bool = False) -> None:
        self._cluster, self._src, self._actor, self._patient = cluster, src, actor, patient

    async def _ask(self, call: Callable[[], Awaitable[T]]) -> T:
        if not self._patient:
            return await call()
        return await self._cluster.patient(self._src.clock, call)

    async def accept(self, items: list[UrlItem]) -> int:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.accept, items))

    async def adopt(self, state: HostState) -> int:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.adopt, state))

    async def widen_scope(self, urls: list[str]) -> None:
        await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.widen_scope, urls))

    async def set_host_policy(self, change: PolicyChange) -> None:
        await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.set_host_policy, change))

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.url_status, url, url_hash))

    async def url_for_hash(self, url_hash: str) -> str | None:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.url_for_hash, url_hash))

    async def host_info(self, target: HostTarget) -> HostView:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.host_info, target))

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.vet_seeds, urls))

    async def place(self, host: str, region: str | None) -> HostPlacement:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.place, host, region))

    async def located(self, host: str, region: str) -> None:
        await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.located, host, region))

    async def probe(self, url: str) -> Probe:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.probe, url))

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.held_keys, after, limit))

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.held_ids, after, limit))

    async def start(self) -> None:
        """Start the shard's loop (the driver's first call, crawler.engine.shardserver)."""
        await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.start))

    async def status(self) -> ShardStatus:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.status))

    async def shutdown(self) -> ShardStatus:
        return await self._ask(lambda: self._cluster.call(self._src, self._actor, ShardServer.shutdown))
