"""The HostShard actor: one engine over a consistent-hashed slice of hosts.

A thin async shell (model: Ray Serve): all crawl logic is :class:`crawler.engine.ShardEngine`,
which this actor creates, feeds with batches from other shards and polls for status.
Links leave through a :class:`crawler.routing.LinkRouter` whose seen service is the
SeenFilter group and whose delivery is a batched ``accept`` call on the owning shard.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

import ray

from actors.services import BudgetClient, ContentClient, SeenGroupClient
from crawler.config import from_dict
from crawler.engine import ShardEngine
from crawler.frontier import UrlItem
from crawler.hashring import HashRing
from crawler.routing import LinkRouter


@ray.remote(num_cpus=0.5, max_concurrency=10_000)
class HostShard:
    """Owns every host that the ring maps to ``shard_id``."""

    def __init__(
        self,
        cfg_dict: dict[str, Any],
        shard_id: str,
        shard_ids: Sequence[str],
        seen_actors: Sequence[Any],
        content_actor: Any,
        budget_actor: Any,
        seeds: Sequence[str],
    ) -> None:
        logging.basicConfig(level=logging.WARNING)
        self.cfg = from_dict(cfg_dict)
        self.shard_id = shard_id
        self.ring = HashRing(shard_ids)
        self.peers: dict[str, Any] = {}
        self.engine = ShardEngine(
            self.cfg,
            shard_id,
            content=ContentClient(content_actor),
            budget=BudgetClient(budget_actor, self.cfg.limits.max_pages, len(shard_ids)),
            seeds=seeds,
        )
        self.engine.attach_router(
            LinkRouter(
                SeenGroupClient(seen_actors),
                self.ring.node_for,
                self._deliver,
                batch_size=self.cfg.runtime.batch_size,
                flush_interval_s=self.cfg.runtime.flush_interval_s,
            )
        )
        self._run_task: asyncio.Task[None] | None = None

    async def set_peers(self, peers: dict[str, Any]) -> None:
        """Handles of every shard by id (including this one)."""
        self.peers = dict(peers)

    async def start(self) -> None:
        if self._run_task is None:
            self._run_task = asyncio.get_running_loop().create_task(self.engine.run())

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        if owner == self.shard_id:
            self.engine.accept(items)
        else:
            await self.peers[owner].accept.remote(items)

    async def accept(self, items: list[UrlItem]) -> int:
        """A batch of novel URLs owned by this shard."""
        return self.engine.accept(items)

    async def add_seeds(self, urls: list[str]) -> None:
        self.engine.add_seeds(urls)

    async def set_host_policy(self, host: str, interval_s: float | None, paused: bool | None) -> None:
        self.engine.politeness.set_override(host, interval_s=interval_s, paused=paused)
        self.engine.frontier.reschedule(host)

    async def status(self) -> dict[str, Any]:
        st = self.engine.status()
        if self._run_task is not None and self._run_task.done() and self._run_task.exception() is not None:
            st["error"] = repr(self._run_task.exception())
        return st

    async def flush(self) -> None:
        await self.engine.flush_output(final=True)

    async def stop(self) -> dict[str, Any]:
        """Stop fetching, flush rows and bodies, close the fetcher; returns the final status."""
        self.engine.stop()
        if self._run_task is not None:
            await asyncio.gather(self._run_task, return_exceptions=True)
        await self.engine.close()
        return self.engine.status()
