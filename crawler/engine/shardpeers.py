"""The other shards of a crawl with regions, as one shard reaches them.

:class:`ShardPeers` is the ``Peers`` of crawler.placement.handover over each shard's typed
:class:`~crawler.engine.shardapi.ShardApi`: the Ray actor passes a lookup of proxies to
its peers' actors (actors/shardproxy.py) -- and this shard itself for its own id, so that
such a call stays in process -- the fault simulator one of its simulated actors.
"""

from __future__ import annotations

from typing import Callable

from crawler.engine.shardapi import ShardApi
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe
from crawler.placement.topology import Topology


class ShardPeers:
    """Peers by shard id (module docstring).

    Args:
        lookup: a shard by id (a proxy that waits while that shard restarts).
        topology: which shard of a region owns a host (whom to ask for a probe).
    """

    def __init__(self, lookup: Callable[[str], ShardApi], topology: Topology) -> None:
        self._of, self._topology = lookup, topology

    async def accept(self, shard: str, items: list[UrlItem]) -> int:
        return await self._of(shard).accept(items)

    async def adopt(self, shard: str, state: HostState) -> None:
        await self._of(shard).adopt(state)

    async def probe(self, region: str, host: str, url: str) -> Probe:
        return await self._of(self._topology.owner_in(region, host)).probe(url)

    async def place(self, shard: str, host: str, region: str | None) -> HostPlacement:
        return await self._of(shard).place(host, region)

    async def located(self, shard: str, host: str, region: str) -> None:
        await self._of(shard).located(host, region)
