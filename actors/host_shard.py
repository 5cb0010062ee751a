"""The HostShard actor: one shard (crawler.engine.assembly.build_shard) over a slice of hosts.

A thin async shell (model: Ray Serve): the shard's logic is the same object the
in-process runtime runs; this actor gives it Ray clients for the seen group, the content
index and the budget, delivers links to peer shards by name, and answers the driver.

It shares its driver's fate (docs/invariants.md #9): the driver calls it several times a
second (heartbeat, status); after ``runtime.driver_timeout_s`` of silence the shard
starts no fetch and accepts no work, and once the output's lease is lost (expired, or
taken by a newer run) it closes without writing and the actor exits. The rule is
crawler.recovery.watchdog.ShardWatchdog on the system clock; this actor supplies its hooks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Sequence

import ray

from actors.metrics import ShardMetrics, TimedFetcher
from actors.render import RenderClient
from actors.serviceactors import SeenGroupClient, call_service
from crawler.config.settings import from_dict
from crawler.frontier.urlitem import UrlItem
from crawler.placement.handover import HostState, Probe, timed_get
from crawler.control.hostpolicy import HostTarget, PolicyChange
from crawler.recovery import statefiles as state
from crawler.clock import SYSTEM_CLOCK
from crawler.engine.sharedservices import LeasedBudget
from crawler.engine.assembly import build_fence, build_shard
from crawler.session.shardcalls import ShardEndpoint
from crawler.placement.topology import Topology
from crawler.engine.status import ShardStatus
from crawler.recovery.watchdog import ShardWatchdog
from crawler.frontier.store import UrlStatus

log = logging.getLogger(__name__)

#: How often the shard's numbers are exported as Ray metrics (actors/metrics.py).
METRICS_INTERVAL_S = 1.0


def shard_actor_name(crawl_name: str, shard_id: str) -> str:
    """Named actors let a restarted shard find its peers again."""
    return f"{crawl_name}:{shard_id}"


@ray.remote(num_cpus=0.5, max_concurrency=10_000)
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
        crawl_id: str | None = None,
    ) -> None:
        logging.basicConfig(level=logging.WARNING)
        cfg = from_dict(cfg_dict)
        self.shard_id = shard_id
        self.crawl_name = crawl_name
        self.peers: dict[str, Any] = {}
        self.incarnation = uuid.uuid4().hex[:8]
        # state_dir is resolved here, on this actor's node (crawler.recovery.statefiles.here): with a
        # remote output the store lives on this node's disk and is rebuilt from OUT.
        opened = state.open_shard(cfg, shard_id, state_dir, SYSTEM_CLOCK, crawl_id) if state_dir else None

        async def content(items):
            return await call_service(lambda: content_actor.check_and_add.remote(items), "content index")

        async def lease(n: int) -> int:
            return await call_service(lambda: budget_actor.lease.remote(n), "page budget")

        self.fence = build_fence(cfg, epoch, SYSTEM_CLOCK)
        self.watchdog = ShardWatchdog(SYSTEM_CLOCK, cfg.runtime.driver_timeout_s, self.fence, self, name=shard_id)
        self._metrics_exported = 0.0
        self.metrics = ShardMetrics(shard_id)
        self.topology = Topology.of(shard_ids, cfg.runtime.regions, cfg.placement.default_region)
        self.shard = build_shard(
            cfg,
            shard_id,
            seeds=seeds,
            seen=SeenGroupClient(seen_actors),
            content=content,
            budget=LeasedBudget(lease, cfg.limits.max_pages, len(shard_ids), cfg.runtime.budget_lease_max),
            deliver=self._deliver,
            owner_of=self.topology.home_of,
            store=opened.store if opened else None,
            fence=self.fence,
            state_log=opened.log if opened else None,
            restored=opened.restored if opened else None,
            render_service=RenderClient(render_workers, ray.get_runtime_context().current_actor) if render_workers else None,
            topology=self.topology,
            peers=RayPeers(self) if cfg.runtime.regions else None,
            gate=self._may_work,
            wrap_fetcher=lambda fetcher: TimedFetcher(fetcher, self.metrics.observe_latency),
        )
        self.endpoint = ShardEndpoint(self.shard, self._forward)
        self._run_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._final: ShardStatus | None = None

    async def set_peers(self, peers: dict[str, Any]) -> None:
        """Handles of every shard by id (including this one)."""
        self.peers = dict(peers)

    def _may_work(self) -> bool:
        """Fetch and accept only while the driver is heard from and the lease is ours."""
        return self.watchdog.may_work()

    def _ensure_running(self) -> None:
        if self._run_task is None and not self._stopped:
            self._run_task = asyncio.ensure_future(self.shard.run())
            self._watchdog = asyncio.ensure_future(self.watchdog.run())

    # The watchdog's hooks (crawler.recovery.watchdog.WatchdogHooks).

    async def on_driver_silent(self) -> None:
        await self.shard.outbox.flush(final=True)

    def on_tick(self) -> None:
        if time.monotonic() - self._metrics_exported >= METRICS_INTERVAL_S:
            self._metrics_exported = time.monotonic()
            try:
                self.metrics.record(self.shard)
            except Exception as exc:  # noqa: BLE001 - metrics must never stop a shard
                log.warning("%s: exporting metrics failed: %r", self.shard_id, exc)

    async def on_lease_lost(self, reason: str | None) -> None:
        await self.stop()
        try:
            ray.actor.exit_actor()
        except ray.exceptions.AsyncioActorExit:  # how exit_actor leaves a background task
            return

    async def heartbeat(self) -> None:
        """The driver is alive."""
        self.watchdog.contact()

    async def start(self) -> None:
        self.watchdog.contact()
        self._ensure_running()

    def _peer(self, owner: str) -> Any:
        handle = self.peers.get(owner)
        if handle is None:  # a restarted incarnation: find the peer by name
            handle = self.peers[owner] = ray.get_actor(shard_actor_name(self.crawl_name, owner))
        return handle

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        if owner == self.shard_id:
            await self.shard.accept_durably(items)
        else:
            # A peer lost with its node is restarted by Ray (from OUT): the batch waits for
            # it, and is forgotten only once the peer made it durable.
            await call_service(lambda: self._peer(owner).accept.remote(items), f"shard {owner}")

    async def accept(self, items: list[UrlItem]) -> int:
        """A batch of novel URLs owned by this shard (durable, in OUT for a remote output,
        before this returns)."""
        self._ensure_running()
        return await self.endpoint.accept(items)

    async def adopt(self, state: HostState) -> int:
        """A host handed over by another shard (crawler.placement.handover), durable on return."""
        self._ensure_running()
        return await self.shard.adopt(state)

    async def probe(self, url: str) -> Probe:
        """Time a GET of ``url`` from this shard's node (its region, its source address)
        for another shard, which holds the host's politeness slot meanwhile."""
        _, probe = await timed_get(self.shard.fetcher.fetch, url)
        return probe

    async def _forward(self, owner: str, method: str, *args: Any) -> Any:
        """The same call on the shard that owns the host now (regions: a moved host)."""
        return await call_service(lambda: getattr(self._peer(owner), method).remote(*args), f"shard {owner}")

    # What the runtime asks (crawler.session.shardcalls.ShardEndpoint answers, in this process).

    async def place(self, host: str, region: str | None) -> dict[str, Any]:
        self._ensure_running()
        return await self.endpoint.place(host, region)

    async def located(self, host: str, region: str) -> None:
        await self.endpoint.located(host, region)

    async def add_seeds(self, urls: list[str]) -> None:
        await self.endpoint.add_seeds(urls)

    async def set_host_policy(self, change: PolicyChange) -> None:
        await self.endpoint.set_host_policy(change)

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return await self.endpoint.url_status(url, url_hash)

    async def url_for_hash(self, url_hash: str) -> str | None:
        return await self.endpoint.url_for_hash(url_hash)

    async def host_info(self, target: HostTarget) -> dict[str, Any]:
        return await self.endpoint.host_info(target)

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        return await self.endpoint.vet_seeds(urls)

    async def render_answer(self, req: Any) -> Any:
        """A request a browser made while rendering one of this shard's pages
        (actors/render.py): answered by the shard's gate (crawler.render.gate)."""
        renderer = self.shard.pipeline.renderer
        if renderer is None:
            from crawler.render.jobs import SubResponse

            return SubResponse(refused="closed")
        return await renderer.gate.answer(req)

    async def status(self) -> ShardStatus:
        self.watchdog.contact()
        self._ensure_running()
        error = None
        if self._run_task is not None and self._run_task.done() and self._run_task.exception() is not None:
            error = repr(self._run_task.exception())
        return self.shard.status().but(incarnation=self.incarnation, error=error)

    async def stop(self) -> ShardStatus | None:
        """Stop fetching, flush and ack rows, close; returns the final status with store counts."""
        if self._stopped:
            return self._final
        self._stopped = True
        self.watchdog.stop()
        self.shard.stop()
        if self._run_task is not None:
            await asyncio.gather(self._run_task, return_exceptions=True)
        await self.shard.close()
        self._final = self.shard.status().but(store_counts=self.shard.store_counts())
        try:
            self.metrics.record(self.shard)  # the final numbers, exported before the actor goes
        except Exception as exc:  # noqa: BLE001 - metrics must never fail a stop
            log.warning("%s: exporting metrics failed: %r", self.shard_id, exc)
        return self._final


class RayPeers:
    """The other shards of a crawl with regions, reached by actor handle
    (crawler.placement.handover.Peers); a call to this shard itself stays in process."""

    def __init__(self, actor: HostShard) -> None:
        self._actor = actor

    async def _call(self, shard: str, method: str, *args: Any) -> Any:
        a = self._actor
        if shard == a.shard_id:
            return await getattr(a, method)(*args)
        # A peer lost with its node is restarted by Ray (from OUT): the call waits for it.
        return await call_service(lambda: getattr(a._peer(shard), method).remote(*args), f"shard {shard}")

    async def accept(self, shard: str, items: list[UrlItem]) -> int:
        return await self._call(shard, "accept", items)

    async def adopt(self, shard: str, state: HostState) -> None:
        await self._call(shard, "adopt", state)

    async def probe(self, region: str, host: str, url: str) -> Probe:
        return await self._call(self._actor.topology.owner_in(region, host), "probe", url)

    async def place(self, shard: str, host: str, region: str | None) -> dict[str, Any]:
        return await self._call(shard, "place", host, region)

    async def located(self, shard: str, host: str, region: str) -> None:
        await self._call(shard, "located", host, region)
