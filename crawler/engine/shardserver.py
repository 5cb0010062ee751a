"""One shard as a server: what a HostShard actor does, as a plain class.

A shard runs in a process of its own (a Ray actor, or a node of the fault simulator,
crawler.testing.sim). Around the shard itself (crawler.engine.assembly.build_shard) that
process does a few things of its own, written once here so that the simulator runs the
same code Ray does (model: Ray Serve's replica wrapper around a plain callable):

* it watches its driver and the output's lease (crawler.recovery.watchdog): the shard
  fetches and accepts work only while the driver is heard from and the lease is its
  run's (docs/invariants.md #9), and a replaced run's shard closes without writing;
* it starts the shard's loop on the first call it receives (the driver polls at once);
* it answers the driver and its peers: :class:`ShardServer` implements
  :class:`~crawler.engine.shardapi.ShardApi` around the shard's own.

``actors/host_shard.py`` is the Ray shell: it builds a :class:`ShardServer` with Ray
clients for the crawl-wide services and passes every call on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config.settings import CrawlConfig
from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.assembly import ContentCall, build_shard
from crawler.engine.partbuilders import build_fence
from crawler.engine.linkrouter import SeenService
from crawler.engine.requests import Fetcher as FetchClient
from crawler.engine.shardapi import HostView, ShardApi
from crawler.services.budget import LeasedBudget
from crawler.engine.status import ShardStatus
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, Peers, HostPlacement, Probe
from crawler.placement.topology import Topology
from crawler.recovery import statefiles as state
from crawler.recovery.watchdog import ShardWatchdog
from crawler.render.renderer import RenderService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardServices:
    """How a shard reaches what lies outside its process.

    ``seen``, ``content`` and ``lease_pages`` are the crawl-wide services (seen group,
    content index, page budget); ``deliver`` hands a batch of URLs to another shard's
    :meth:`ShardServer.accept` and returns once that shard made it durable (a shard
    restarting or refusing for now raises a crawler.errors.retry_later error: the link
    router asks again, crawler.engine.linkrouter); ``peer`` is another shard by id, through
    which a call about a host another shard owns now is passed on (regions).
    """

    seen: SeenService
    content: ContentCall
    lease_pages: Callable[[int], Awaitable[int]]
    deliver: Callable[[str, list[UrlItem]], Awaitable[Any]]
    peer: Callable[[str], ShardApi] | None = None
    render: RenderService | None = None
    peers: Peers | None = None


class ShardServer:
    """One shard in its own process (see the module docstring).

    Args:
        cfg: the crawl's config.
        shard_id, shard_ids: this shard and every shard of the crawl.
        services: the shard's ways out of its process.
        seeds: the crawl's seeds (scope).
        state_dir: where its store lives (a statefiles spec, resolved here), or None.
        epoch: the output lease's epoch of the run this shard belongs to.
        incarnation: an id that differs between restarts of this shard (termination).
        clock: this process's clock.
        fetcher: the shard's HTTP fetcher (default: the real one).
        wrap_fetcher: wraps the fetcher pages are fetched through (metrics).
        on_tick: called once per watchdog interval (metrics).
        on_exit: called once the lease is lost and the shard closed (the actor exits).
        run_blocking: runs the shard's blocking I/O (output and state writes); default a
            worker thread.
        restarted: this process follows one that did not stop cleanly (a restart after a
            crash or a lost machine, or a run that took over a dead run's output): its
            predecessor may still have requests open (crawler.engine.assembly.unclean_hold_s).
        crawl_id: what the crawl's state files are stamped with (crawler.recovery.stamps):
            a store of another crawl or shard is refused.
        restore_sleep: how the restore waits between listings of OUT when it finds a gap
            (crawler.recovery.restore: the constructor blocks, as an actor's may).
    """

    def __init__(
        self,
        cfg: CrawlConfig,
        shard_id: str,
        shard_ids: Sequence[str],
        *,
        services: ShardServices,
        seeds: Sequence[str],
        state_dir: str | None,
        epoch: int | None,
        incarnation: str,
        clock: Clock = SYSTEM_CLOCK,
        fetcher: FetchClient | None = None,
        wrap_fetcher: Callable[[FetchClient], FetchClient] | None = None,
        on_tick: Callable[[], None] | None = None,
        on_exit: Callable[[], Awaitable[None]] | None = None,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
        restarted: bool = False,
        crawl_id: str | None = None,
        restore_sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.shard_id = shard_id
        self.incarnation = incarnation
        self.clock = clock
        self._on_tick = on_tick
        self._on_exit = on_exit
        # state_dir is resolved here, on this process's node (statefiles.here): with a
        # remote output the store lives on this node's disk and is rebuilt from OUT.
        opened = (state.open_shard(cfg, shard_id, state_dir, clock, crawl_id, run_blocking, sleep=restore_sleep)
                  if state_dir else None)
        self.fence = build_fence(cfg, epoch, clock)
        restored = opened.restored if opened else None
        self.watchdog = ShardWatchdog(clock, cfg.runtime.driver_timeout_s, self.fence, self, name=shard_id,
                                      incarnation=restored.incarnation if restored is not None else None)
        self.topology = Topology.of(shard_ids, cfg.runtime.regions, cfg.placement.default_region)
        self.shard = build_shard(
            cfg,
            shard_id,
            seeds=seeds,
            seen=services.seen,
            content=services.content,
            budget=LeasedBudget(services.lease_pages, cfg.limits.max_pages, len(shard_ids), cfg.runtime.budget_lease_max),
            deliver=self._deliver,
            owner_of=self.topology.home_of,
            store=opened.store if opened else None,
            clock=clock,
            fetcher=fetcher,
            fence=self.fence,
            state_log=opened.log if opened else None,
            restored=opened.restored if opened else None,
            render_service=services.render,
            topology=self.topology,
            peers=services.peers,
            gate=self.watchdog.may_work,
            wrap_fetcher=wrap_fetcher,
            run_blocking=run_blocking,
            unclean_start=restarted,
            peer=services.peer,
        )
        self._services = services
        self._run_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._closing: asyncio.Future[ShardStatus] | None = None

    # -- the watchdog's hooks (crawler.recovery.watchdog.WatchdogHooks) ----------------

    async def on_driver_silent(self) -> None:
        await self.shard.flush_rows()

    def on_tick(self) -> None:
        if self._on_tick is not None:
            self._on_tick()

    async def on_lease_lost(self, reason: str | None) -> None:
        await self.shutdown()
        if self._on_exit is not None:
            await self._on_exit()

    # -- calls ----------------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the shard's loop and the watchdog (on the first call received)."""
        if self._run_task is None and not self._stopped:
            self._run_task = asyncio.ensure_future(self.shard.run())
            self._watch_task = asyncio.ensure_future(self.watchdog.run())

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        if owner == self.shard_id:
            await self.shard.accept(items)
        else:
            await self._services.deliver(owner, items)

    async def heartbeat(self) -> None:
        """The driver is alive."""
        self.watchdog.contact()

    async def start(self) -> None:
        self.watchdog.contact()
        self.ensure_running()

    # -- ShardApi: the shard's own answers, its loop started on the first call ----------

    async def accept(self, items: list[UrlItem]) -> int:
        self.ensure_running()
        return await self.shard.accept(items)

    async def adopt(self, state: HostState) -> int:
        self.ensure_running()
        return await self.shard.adopt(state)

    async def place(self, host: str, region: str | None) -> HostPlacement:
        self.ensure_running()
        return await self.shard.place(host, region)

    async def located(self, host: str, region: str) -> None:
        await self.shard.located(host, region)

    async def widen_scope(self, urls: list[str]) -> None:
        await self.shard.widen_scope(urls)

    async def set_host_policy(self, change: PolicyChange) -> None:
        await self.shard.set_host_policy(change)

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return await self.shard.url_status(url, url_hash)

    async def url_for_hash(self, url_hash: str) -> str | None:
        return await self.shard.url_for_hash(url_hash)

    async def host_info(self, target: HostTarget) -> HostView:
        return await self.shard.host_info(target)

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        return await self.shard.vet_seeds(urls)

    async def probe(self, url: str) -> Probe:
        return await self.shard.probe(url)

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        return await self.shard.held_keys(after, limit)

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return await self.shard.held_ids(after, limit)

    async def status(self) -> ShardStatus:
        self.watchdog.contact()
        self.ensure_running()
        error = None
        if self._run_task is not None and self._run_task.done() and not self._run_task.cancelled() \
                and self._run_task.exception() is not None:
            error = repr(self._run_task.exception())
        return self.shard.report().but(incarnation=self.incarnation, error=error)

    async def shutdown(self) -> ShardStatus:
        """Stop fetching, flush and ack rows, close; the final status with store counts
        (a second call, during or after the first, waits for the same status)."""
        if self._closing is None:
            self._stopped = True
            self._closing = asyncio.ensure_future(self._shutdown())
        return await asyncio.shield(self._closing)

    async def _shutdown(self) -> ShardStatus:
        self.watchdog.stop()
        self.shard.stop()
        if self._run_task is not None:
            await asyncio.gather(self._run_task, return_exceptions=True)
        return await self.shard.shutdown()
