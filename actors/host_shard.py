"""The HostShard actor: one engine over a consistent-hashed slice of hosts.

A thin async shell (model: Ray Serve): all crawl logic is :class:`crawler.engine.ShardEngine`,
which this actor creates, feeds with batches from other shards and polls for status.
Links leave through a :class:`crawler.routing.LinkRouter` whose seen service is the
SeenFilter group and whose delivery is a batched ``accept`` call on the owning shard.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from typing import Any, Sequence

import ray

from actors.services import BudgetClient, ContentClient, SeenGroupClient
from crawler.config import from_dict
from crawler.engine import ShardEngine
from crawler.frontier import UrlItem
from crawler.hashring import HashRing
from crawler.journal import FrontierStore, fetch_snapshot, is_remote
from crawler.routing import LinkRouter


def shard_actor_name(crawl_name: str, shard_id: str) -> str:
    """Named actors let a restarted shard find its peers again."""
    return f"{crawl_name}:{shard_id}"


@ray.remote(num_cpus=0.5, max_concurrency=10_000)
class HostShard:
    """Owns every host that the ring maps to ``shard_id``.

    It is restartable (``max_restarts``): a new incarnation reopens the shard's durable
    store under ``state_dir``, re-queues what was in flight, and starts fetching on the
    first call it receives (the driver polls every shard, so that happens at once).
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
    ) -> None:
        logging.basicConfig(level=logging.WARNING)
        self.cfg = from_dict(cfg_dict)
        self.shard_id = shard_id
        self.crawl_name = crawl_name
        self.ring = HashRing(shard_ids)
        self.peers: dict[str, Any] = {}
        self.incarnation = uuid.uuid4().hex[:8]
        store = None
        if state_dir:
            local = os.path.join(state_dir, f"{shard_id}.sqlite")
            out = self.cfg.output.path
            if is_remote(out):  # restarted on another machine: start from the shipped snapshot
                fetch_snapshot(f"{out.rstrip('/')}/state/{shard_id}.sqlite", local, dict(self.cfg.output.storage_options) or None)
            store = FrontierStore(local)
        self.engine = ShardEngine(
            self.cfg,
            shard_id,
            content=ContentClient(content_actor),
            budget=BudgetClient(budget_actor, self.cfg.limits.max_pages, len(shard_ids)),
            seeds=seeds,
            store=store,
        )
        self.engine.attach_router(
            LinkRouter(
                SeenGroupClient(seen_actors),
                self.ring.node_for,
                self._deliver,
                batch_size=self.cfg.runtime.batch_size,
                flush_interval_s=self.cfg.runtime.flush_interval_s,
                    before_flush=self.engine.commit_claims,
            )
        )
        self._run_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._final: dict[str, Any] = {}

    async def set_peers(self, peers: dict[str, Any]) -> None:
        """Handles of every shard by id (including this one)."""
        self.peers = dict(peers)

    def _ensure_running(self) -> None:
        if self._run_task is None and not self._stopped:
            self._run_task = asyncio.get_running_loop().create_task(self.engine.run())

    async def start(self) -> None:
        self._ensure_running()

    def _peer(self, owner: str) -> Any:
        handle = self.peers.get(owner)
        if handle is None:  # a restarted incarnation: find the peer by name
            handle = self.peers[owner] = ray.get_actor(shard_actor_name(self.crawl_name, owner))
        return handle

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        if owner == self.shard_id:
            self.engine.accept(items)
        else:
            await self._peer(owner).accept.remote(items)

    async def accept(self, items: list[UrlItem]) -> int:
        """A batch of novel URLs owned by this shard (journaled before this returns)."""
        self._ensure_running()
        return self.engine.accept(items)

    async def add_seeds(self, urls: list[str]) -> None:
        self.engine.add_seeds(urls)

    async def set_host_policy(self, host: str, interval_s: float | None, paused: bool | None) -> None:
        self.engine.politeness.set_override(host, interval_s=interval_s, paused=paused)
        self.engine.frontier.reschedule(host)

    async def status(self) -> dict[str, Any]:
        self._ensure_running()
        st = self.engine.status()
        st["incarnation"] = self.incarnation
        st["resumed"] = self.engine.resumed
        if self._run_task is not None and self._run_task.done() and self._run_task.exception() is not None:
            st["error"] = repr(self._run_task.exception())
        return st

    async def flush(self) -> None:
        await self.engine.flush_output(final=True)

    async def stop(self) -> dict[str, Any]:
        """Stop fetching, flush rows and bodies, close the fetcher; returns the final status."""
        if self._stopped:
            return self._final
        self._stopped = True
        self.engine.stop()
        if self._run_task is not None:
            await asyncio.gather(self._run_task, return_exceptions=True)
        await self.engine.close()
        self._final = {**self.engine.status(), "store_counts": self.engine.store_counts()}
        return self._final
