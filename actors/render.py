"""Render actors: a thin Ray shell over crawler.render's browser pool.

How many and where: crawler.render.sizing sizes the pool from what the shards leave of
the cluster (``render.actors: auto``: at most half its CPUs, one actor per
``render.cores_per_actor`` of it, a fraction of a CPU when less is left), and
actors/placement.py reserves their CPUs in a placement group (spread over the nodes)
before any is created: a pool that cannot be placed within a few seconds is reported in
one line and the crawl runs without rendering (:class:`~crawler.render.renderer.NoRenderService`).
Why reserve CPUs at all: a Chromium render is CPU-bound work in the browser's own
processes, outside the actor; reserving them keeps Ray from packing shards onto CPUs the
browsers already saturate. Each worker owns ``render.processes`` browsers with
``render.tabs`` renders at a time (crawler.render.browser.BrowserPool): browsers are
started on demand and recycled by renders, age and memory.

A worker holds no crawl state. Each job arrives with the handle of the shard that owns
the page, and every request the browser makes goes back to that shard
(:meth:`HostShard.render_answer`), where the host's politeness gate, robots rules,
scope and User-Agent apply (docs/invariants.md #12). A worker that dies (its process,
or its browsers) costs the renders in flight: the shards see an error, try once more on
a worker (Ray restarts the dead one, in its reserved bundle), then store the raw page
(crawler.render.renderer). Browsers are started with a parent-death signal, so they die
with the worker.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Awaitable, Callable, Sequence

import ray

from crawler.clock import SYSTEM_CLOCK
from crawler.config.settings import from_dict
from crawler.render.build import build_pool
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.render.renderer import NoRenderService, RenderService

log = logging.getLogger(__name__)


def render_actor_name(crawl_name: str, i: int) -> str:
    return f"{crawl_name}:render-{i:03d}"


def render_service(workers: Sequence[Any], shard_handle: Any) -> RenderService:
    """A shard's render service: the render workers, or (none placed) one that says so."""
    if workers:
        return RenderClient(workers, shard_handle)
    return NoRenderService("no render actor was placed (the driver's log says why)")


@ray.remote(max_concurrency=1000)
class RenderWorker:
    """Owns a browser pool; renders jobs for any shard (see the module docstring)."""

    def __init__(self, cfg_dict: dict[str, Any]) -> None:
        logging.basicConfig(level=logging.WARNING)
        self.pool = build_pool(from_dict(cfg_dict), SYSTEM_CLOCK)

    async def render(self, job: RenderJob, shard: Any) -> RenderReply:
        """Render ``job``; the browser's requests are answered by ``shard``."""

        async def subfetch(req: SubRequest) -> SubResponse:
            answer: SubResponse = await shard.render_answer.remote(req)
            return answer

        return await self.pool.render(job, subfetch)

    async def status(self) -> dict[str, Any]:
        return {**self.pool.status(), "pids": self.pool.pids(), "rss_samples": self.pool.rss_samples[-20:]}

    async def close(self) -> None:
        """Kill the browsers (before the actor itself is killed)."""
        await self.pool.close()


class RenderClient:
    """A shard's :class:`~crawler.render.renderer.RenderService` on Ray: spreads jobs over
    the render workers (the least busy first, from this shard's view) and passes its own
    actor handle along for the browser's requests."""

    def __init__(self, workers: Sequence[Any], shard_handle: Any) -> None:
        self.workers = list(workers)
        self.shard_handle = shard_handle
        self._busy = [0] * len(self.workers)
        self._rr = itertools.count()

    async def render(self, job: RenderJob, subfetch: Callable[[SubRequest], Awaitable[SubResponse]]) -> RenderReply:
        # ``subfetch`` is the gate in this process; the worker reaches it through the
        # shard's actor handle (HostShard.render_answer calls the same gate).
        start = next(self._rr)
        i = min(range(len(self.workers)), key=lambda k: (self._busy[k], (k - start) % len(self.workers)))
        self._busy[i] += 1
        try:
            reply: RenderReply = await self.workers[i].render.remote(job, self.shard_handle)
            return reply
        finally:
            self._busy[i] -= 1
