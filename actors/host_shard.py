"""The HostShard actor: one shard (crawler.engine.shardserver.ShardServer) over a slice of hosts.

A thin async shell (model: Ray Serve): the shard's process logic -- the watch on its
driver and lease, its loop, its answers -- is :class:`~crawler.engine.shardserver.ShardServer`,
the same object the fault simulator runs. This actor gives it Ray clients for the seen
group, the content index and the budget, delivers links to peer shards by name, exports
metrics, and exits once its run's lease is lost (docs/invariants.md #9).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Sequence

import ray

from actors.metrics import ShardMetrics, TimedFetcher
from actors.render import render_service
from actors.serviceactors import SERVICE_RETRY_S, SeenGroupClient, call_service
from actors.shardproxy import RayShard
from crawler.config.settings import from_dict
from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.shardapi import HostView, ShardApi
from crawler.engine.shardpeers import ShardPeers
from crawler.engine.shardserver import ShardServer, ShardServices
from crawler.engine.status import ShardStatus
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe
from crawler.placement.topology import Topology
from crawler.render.jobs import SubRequest, SubResponse

log = logging.getLogger(__name__)

#: How often the shard's numbers are exported as Ray metrics (actors/metrics.py).
METRICS_INTERVAL_S = 1.0


def shard_actor_name(crawl_name: str, shard_id: str) -> str:
    """Named actors let a restarted shard find its peers again."""
    return f"{crawl_name}:{shard_id}"


#: CPUs a shard reserves; the render pool is sized from what the shards leave (crawler.render.sizing).
SHARD_CPUS = 0.5


@ray.remote(num_cpus=SHARD_CPUS, max_concurrency=10_000)
class HostShard:
    """Owns every host that the ring maps to ``shard_id``.

    Restartable (``max_restarts``): a new incarnation reopens the shard's durable store
    under ``state_dir`` on its own node (rebuilt from OUT for a remote output),
    re-queues what was in flight, and starts fetching on the first call it receives (the
    driver polls every shard, so that happens at once).
    """

    def __init__(
        self,
        cfg_dict: dict[str, Any],
        shard_id: str,
        shard_ids: Sequence[str],
        seen_actors: Sequence[Any],
        content_actor: Any,
        budget_actor: Any,
        seeds: Sequence[str],
        crawl_name: str,
        state_dir: str | None,
        epoch: int | None = None,
        render_workers: Sequence[Any] = (),
        after_crash: bool = False,
        crawl_id: str | None = None,
    ) -> None:
        logging.basicConfig(level=logging.WARNING)
        cfg = from_dict(cfg_dict)
        self.shard_id = shard_id
        self.crawl_name = crawl_name
        self.peers: dict[str, Any] = {}
        self._metrics_exported = 0.0
        self.metrics = ShardMetrics(shard_id)

        async def content(items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
            return await call_service(lambda: content_actor.check_and_add.remote(items), "content index")

        async def lease(n: int) -> int:
            return await call_service(lambda: budget_actor.lease.remote(n), "page budget")

        services = ShardServices(
            seen=SeenGroupClient(seen_actors),
            content=content,
            lease_pages=lease,
            deliver=self._deliver,
            peer=self._peer,
            render=render_service(render_workers, ray.get_runtime_context().current_actor),
            peers=ShardPeers(self._peer, Topology.of(shard_ids, cfg.runtime.regions, cfg.placement.default_region))
            if cfg.runtime.regions else None,
        )
        self.server = ShardServer(
            cfg, shard_id, shard_ids, services=services, seeds=seeds, state_dir=state_dir, epoch=epoch,
            incarnation=uuid.uuid4().hex[:8],
            wrap_fetcher=lambda fetcher: TimedFetcher(fetcher, self.metrics.observe_latency),
            on_tick=self._tick, on_exit=self._exit, crawl_id=crawl_id,
            # Restarted by Ray (its process died), or started by a run that took over a
            # dead run's output: a predecessor may still have requests open.
            restarted=after_crash or ray.get_runtime_context().was_current_actor_reconstructed,
        )

    async def set_peers(self, peers: dict[str, Any]) -> None:
        """Handles of every shard by id (including this one)."""
        self.peers = dict(peers)

    def _tick(self) -> None:
        if time.monotonic() - self._metrics_exported >= METRICS_INTERVAL_S:
            self._export_metrics(self.server.shard.report())

    def _export_metrics(self, status: ShardStatus) -> None:
        self._metrics_exported = time.monotonic()
        try:
            self.metrics.record(status, self.server.shard.backed_off_hosts())
        except Exception as exc:  # noqa: BLE001 - metrics must never stop (or fail the stop of) a shard
            log.warning("%s: exporting metrics failed: %r", self.shard_id, exc)

    async def _exit(self) -> None:
        try:
            ray.actor.exit_actor()
        except ray.exceptions.AsyncioActorExit:  # how exit_actor leaves a background task
            return

    def _handle(self, owner: str) -> Any:
        handle = self.peers.get(owner)
        if handle is None:  # a restarted incarnation: find the peer by name
            handle = self.peers[owner] = ray.get_actor(shard_actor_name(self.crawl_name, owner))
        return handle

    def _peer(self, owner: str) -> ShardApi:
        """Another shard (this one, in process, for its own id). A peer lost with its node
        is restarted by Ray (from OUT): a call waits for it."""
        if owner == self.shard_id:
            return self.server
        return RayShard(self._handle(owner), owner, give_up_s=SERVICE_RETRY_S)

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        # A peer restarting (lost with its node, restarted by Ray from OUT) or refusing
        # for now (fenced: its driver silent) fails this one call as "not now"; the
        # router waits and asks again for as long as this shard runs, and forgets the
        # batch only once the peer made it durable (crawler.engine.linkrouter).
        await RayShard(self._handle(owner), owner, give_up_s=0.0).accept(items)

    # What the driver and the peers ask (crawler.engine.shardapi.ShardApi): the
    # ShardServer answers. Ray calls these by name on the handle (actors/shardproxy.py).

    async def heartbeat(self) -> None:
        await self.server.heartbeat()

    async def start(self) -> None:
        await self.server.start()

    async def accept(self, items: list[UrlItem]) -> int:
        return await self.server.accept(items)

    async def adopt(self, state: HostState) -> int:
        return await self.server.adopt(state)

    async def probe(self, url: str) -> Probe:
        return await self.server.probe(url)

    async def place(self, host: str, region: str | None) -> HostPlacement:
        return await self.server.place(host, region)

    async def located(self, host: str, region: str) -> None:
        await self.server.located(host, region)

    async def widen_scope(self, urls: list[str]) -> None:
        await self.server.widen_scope(urls)

    async def set_host_policy(self, change: PolicyChange) -> None:
        await self.server.set_host_policy(change)

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return await self.server.url_status(url, url_hash)

    async def url_for_hash(self, url_hash: str) -> str | None:
        return await self.server.url_for_hash(url_hash)

    async def host_info(self, target: HostTarget) -> HostView:
        return await self.server.host_info(target)

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        return await self.server.vet_seeds(urls)

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        return await self.server.held_keys(after, limit)

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return await self.server.held_ids(after, limit)

    async def render_answer(self, req: SubRequest) -> SubResponse:
        """A request a browser made while rendering one of this shard's pages
        (actors/render.py): answered by the shard's gate (crawler.render.gate)."""
        return await self.server.shard.render_answer(req)

    async def status(self) -> ShardStatus:
        return await self.server.status()

    async def shutdown(self) -> ShardStatus:
        """Stop fetching, flush and ack rows, close; returns the final status with store counts."""
        final = await self.server.shutdown()
        self._export_metrics(final)  # the final numbers, exported before the actor goes
        return final
