"""The crawl's processes in the simulated cluster: shards, the services, and the driver's runtime.

:class:`SimRuntime` is the driver's side of the runtime seam (crawler.session.runtime),
as ``actors.rayruntime.RayRuntime`` is on Ray: it starts each shard as a
:class:`~crawler.engine.shardserver.ShardServer` and each crawl-wide service as an actor
of the simulated cluster, and calls them the way RayRuntime calls actors (statuses with
a timeout, heartbeats that wait at most 0.2 s, deliveries that wait for a restarting
shard). The services are the crawler's own plain classes, started the way their actors
start them (actors/serviceactors.py): from their copies in OUT when the output is remote.
"""

from __future__ import annotations

import asyncio
import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from crawler.config.sections import RuntimeConfig
from crawler.config.settings import CrawlConfig
from crawler.services.budget import BudgetPool
from crawler.services.contentindex import ContentIndexService, shard_log
from crawler.engine.shardapi import ShardApi
from crawler.engine.shardserver import ShardServer, ShardServices
from crawler.testing.sim.shardproxy import SimShard
from crawler.engine.status import ShardStatus
from crawler.errors import ServiceUnavailableError, ShardFailedError
from crawler.engine.partbuilders import build_fetcher
from crawler.frontier.urlitem import UrlItem
from crawler.recovery import statefiles as state
from crawler.recovery.copyschedule import CopyGate, CopySchedule
from crawler.seen import SeenGroup, SeenSet
from crawler.session.inprocess import seen_capacity_per_shard
from crawler.session.runtime import Plan
from crawler.session.shardcalls import ShardCalls, merge_seen_stats
from crawler.testing.sim.cluster import ActorUnavailable, Cluster, SimActor
from crawler.testing.sim.nodes import Machine, Process

if TYPE_CHECKING:
    from crawler.testing.sim.web import SimWeb

log = logging.getLogger(__name__)

#: What RayRuntime waits for a status round and for the final stop (actors/rayruntime.py).
STATUS_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 120.0
HEARTBEAT_WAIT_S = 0.2


class SeenReplica:
    """One seen shard, as actors/serviceactors.SeenFilter runs it."""

    def __init__(self, cfg: CrawlConfig, index: int, capacity: int, folder: str, restarted: bool) -> None:
        d = cfg.dedup
        out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
        self.name = state.seen_name(index, d.seen_exact)
        self.remote = (out, opts) if state.is_remote(out) else None
        self.copies = CopyGate()
        path = os.path.join(folder, f"seen-{index:03d}.sqlite")
        self.restored = 0
        if self.remote is not None:
            fetched = state.fetch_local(out, opts, self.name, os.path.join(folder, self.name))
            self.restored = int(fetched or restarted)
        self.set = SeenSet(capacity, d.seen_error_rate, exact=d.seen_exact, bloom=d.seen_bloom, path=path)

    async def check_and_add_hashes(self, hashes: list[int]) -> list[bool]:
        out = self.set.check_and_add_hashes(hashes)
        self.copies.note(sum(out))
        return out

    async def forget_hashes(self, hashes: list[int]) -> int:
        n = self.set.forget_hashes(hashes)
        self.copies.note(n)
        return n

    async def key_page(self, after: int | None, limit: int) -> list[int]:
        return self.set.key_page(after, limit)

    async def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        if self.remote is not None and self.copies.due(schedule, final=final):
            held = len(self.set)
            self.copies.copied(state.ship(self.set.backup, self.remote[0], self.name, wall, self.remote[1]), held)

    async def stats(self) -> dict[str, Any]:
        return {**self.set.stats(), "restored_from_out": self.restored}

    async def close(self) -> None:
        self.set.close()


class ContentReplica:
    """The duplicate-content index, as actors/serviceactors.ContentIndexActor runs it (one shard)."""

    def __init__(self, cfg: CrawlConfig, folder: str, process: Process) -> None:
        d, rt = cfg.dedup, cfg.runtime
        out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
        self.path = os.path.join(folder, "content")
        self.remote = (out, opts) if state.is_remote(out) else None
        self.copies = CopyGate()
        if self.remote is not None:
            state.fetch_local(out, opts, os.path.basename(shard_log(self.path, 0)), shard_log(self.path, 0))
        self.service = ContentIndexService(d.simhash_distance, d.simhash_tables, process.clock, path=self.path,
                                           every_s=rt.content_snapshot_interval_s)

    async def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        return await self.service.check_and_add(items)

    async def save(self) -> None:
        await self.service.save()

    async def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        if self.remote is not None:
            await self.service.save()
            log_path = shard_log(self.path, 0)
            self.copies.grown_to(state.file_size(log_path))
            if self.copies.due(schedule, final=final):
                size = state.ship_file(self.remote[0], self.remote[1], os.path.basename(log_path), log_path, wall)
                self.copies.copied(size, size)

    async def stats(self) -> dict[str, Any]:
        return await self.service.stats()


class BudgetReplica:
    """The page budget, as actors/serviceactors.Budget runs it."""

    def __init__(self, cfg: CrawlConfig, folder: str, process: Process) -> None:
        out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
        self.path = os.path.join(folder, "budget.json")
        self.remote = (out, opts) if state.is_remote(out) else None
        self.clock = process.clock
        if self.remote is not None:
            state.fetch_local(out, opts, "budget.json", self.path)
        self.pool = BudgetPool(cfg.limits.max_pages, self.path)

    async def lease(self, n: int) -> int:
        granted = self.pool.lease(n)
        if granted and self.remote is not None:
            state.ship_file(self.remote[0], self.remote[1], "budget.json", self.path, self.clock.wall())
        return granted

    async def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        if self.remote is not None:  # a few bytes: every time
            state.ship_file(self.remote[0], self.remote[1], "budget.json", self.path, wall)


class SimRuntime(ShardCalls):
    """The runtime seam of a session whose shards and services live in a simulated cluster.

    Args:
        cluster: the simulated cluster.
        driver: the driver's process (every call the session makes leaves from it).
        web: the simulated web the shards fetch from.
        shard_machines: where shards are placed, in turn; services go on ``service_machine``.
        shards, seen_shards: how many of each a new crawl gets.
    """

    def __init__(self, cluster: Cluster, driver: Process, web: "SimWeb", *, shard_machines: list[Machine],
                 service_machine: Machine, shards: int, seen_shards: int, run: int) -> None:
        self.cluster = cluster
        self.driver = driver
        self.web = web
        self.shard_machines = shard_machines
        self.service_machine = service_machine
        self.shards_wanted = shards
        self.seen_wanted = seen_shards
        self.run = run
        self.shards: dict[str, SimActor] = {}
        self.seen_actors: list[SimActor] = []
        self.content: SimActor | None = None
        self.budget: SimActor | None = None
        self.copies = CopySchedule.of(RuntimeConfig())  # the crawl's, once started
        self._seen: SeenGroup | None = None

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        return self.shards_wanted, self.seen_wanted

    def actors(self) -> list[SimActor]:
        return [*self.shards.values(), *self.seen_actors, *(a for a in (self.content, self.budget) if a is not None)]

    async def start(self, plan: Plan) -> None:
        cfg, c = plan.cfg, self.cluster
        rt = cfg.runtime
        self.copies = CopySchedule.of(rt)
        cap = seen_capacity_per_shard(cfg, plan.seen_shards)
        svc = self.service_machine

        def folder(process: Process) -> str:
            path = os.path.join(process.machine.disk, "state")
            os.makedirs(path, exist_ok=True)
            return path

        def seen_replica(i: int, p: Process, n: int) -> SeenReplica:
            return SeenReplica(cfg, i, cap, folder(p), restarted=n > 1)

        def shard_server(sid: str, p: Process, n: int) -> ShardServer:
            return self._build_shard(plan, sid, p, n, folder(p))

        self.seen_actors = [
            c.spawn(f"r{self.run}/seen-{i}", svc, partial(seen_replica, i), max_restarts=rt.max_restarts)
            for i in range(plan.seen_shards)
        ]
        self.content = c.spawn(f"r{self.run}/content", svc, lambda p, n: ContentReplica(cfg, folder(p), p),
                               max_restarts=rt.max_restarts)
        self.budget = c.spawn(f"r{self.run}/budget", svc, lambda p, n: BudgetReplica(cfg, folder(p), p),
                              max_restarts=rt.max_restarts)
        self._seen = self._seen_group(self.driver)
        for k, sid in enumerate(plan.shard_ids):
            machine = self.shard_machines[k % len(self.shard_machines)]
            self.shards[sid] = c.spawn(f"r{self.run}/{sid}", machine, partial(shard_server, sid),
                                       max_restarts=rt.max_restarts)
        await asyncio.gather(*(SimShard(c, self.driver, a, patient=True).start() for a in self.shards.values()))

    def _seen_group(self, src: Process) -> SeenGroup:
        def check(actor: SimActor) -> Callable[[list[int]], Awaitable[list[bool]]]:
            async def call(hashes: list[int]) -> list[bool]:
                return await self.cluster.call(src, actor, SeenReplica.check_and_add_hashes, hashes)

            return call

        def forget(actor: SimActor) -> Callable[[list[int]], Awaitable[int]]:
            async def call(hashes: list[int]) -> int:
                return await self.cluster.call(src, actor, SeenReplica.forget_hashes, hashes)

            return call

        return SeenGroup([check(a) for a in self.seen_actors], [forget(a) for a in self.seen_actors])

    def _build_shard(self, plan: Plan, sid: str, process: Process, number: int, folder: str) -> ShardServer:
        cfg, c = plan.cfg, self.cluster
        assert self.content is not None and self.budget is not None
        content, budget = self.content, self.budget

        async def content_call(items: list[tuple[str, str, int | None]]) -> Any:
            return await c.patient(process.clock, lambda: c.call(process, content, ContentReplica.check_and_add, items))

        async def lease(n: int) -> int:
            return await c.patient(process.clock, lambda: c.call(process, budget, BudgetReplica.lease, n))

        async def deliver(owner: str, items: list[UrlItem]) -> Any:
            return await SimShard(c, process, self.shards[owner], patient=True).accept(items)

        services = ShardServices(seen=self._seen_group(process), content=content_call, lease_pages=lease, deliver=deliver)
        return ShardServer(
            cfg, sid, plan.shard_ids, services=services, seeds=plan.seeds, state_dir=folder if plan.state_dir else None,
            epoch=plan.epoch, incarnation=f"{self.run}.{number}", clock=process.clock,
            fetcher=build_fetcher(cfg, process.clock, transport=self.web.transport(process)),
            run_blocking=process.run_blocking,
            restarted=number > 1 or plan.after_crash, crawl_id=plan.crawl_id,
            # The restore's waits between listings would block the whole simulation: it
            # lists again at once, and a gap that does not fill fails the start, which the
            # cluster retries a moment later (as Ray restarts a failed actor).
            restore_sleep=lambda _s: None,
        )

    async def heartbeat(self) -> None:
        calls = [asyncio.ensure_future(self.cluster.call(self.driver, a, ShardServer.heartbeat)) for a in self.shards.values()]
        for fut in calls:
            fut.add_done_callback(_retrieve)
        if calls:
            await asyncio.wait(calls, timeout=HEARTBEAT_WAIT_S)

    async def ship_state(self, final: bool = False) -> None:
        wall = self.driver.clock.wall()
        c, clock = self.cluster, self.driver.clock
        sched = self.copies
        ships: list[Awaitable[None]] = [c.patient(clock, partial(c.call, self.driver, a, SeenReplica.ship, wall, sched, final))
                                        for a in self.seen_actors]
        if self.content is not None:
            ships.append(c.patient(clock, partial(c.call, self.driver, self.content, ContentReplica.ship, wall, sched, final)))
        if self.budget is not None:
            ships.append(c.patient(clock, partial(c.call, self.driver, self.budget, BudgetReplica.ship, wall, sched, final)))
        await asyncio.gather(*ships)

    async def seen_check(self, urls: list[str]) -> list[bool]:
        assert self._seen is not None
        return await self._seen.check_and_add(urls)

    async def seen_forget(self, urls: list[str]) -> int:
        assert self._seen is not None
        return await self._seen.forget(urls)

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]:
        c, actor = self.cluster, self.seen_actors[index]
        return await c.patient(self.driver.clock, lambda: c.call(self.driver, actor, SeenReplica.key_page, after, limit))

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int:
        c, actor = self.cluster, self.seen_actors[index]
        return await c.patient(self.driver.clock, lambda: c.call(self.driver, actor, SeenReplica.forget_hashes, keys))

    def _shards(self) -> dict[str, ShardApi]:
        return {sid: SimShard(self.cluster, self.driver, a) for sid, a in self.shards.items()}

    def _patient(self, shard_id: str) -> ShardApi:
        return SimShard(self.cluster, self.driver, self.shards[shard_id], patient=True)

    async def statuses(self) -> list[ShardStatus] | None:
        try:
            return list(await asyncio.wait_for(
                asyncio.gather(*(s.status() for s in self._shards().values())),
                STATUS_TIMEOUT_S))
        except (ActorUnavailable, asyncio.TimeoutError) as exc:
            for sid, actor in self.shards.items():
                if actor.dead:  # as RayRuntime._check_alive finds it: the actor's name is gone
                    raise ShardFailedError(f"{sid} is dead for good (out of restarts)") from exc
            log.info("a shard did not answer (restarting?): %s", type(exc).__name__)
            return None

    async def stop(self) -> list[ShardStatus]:
        finals = await asyncio.wait_for(
            asyncio.gather(*(s.shutdown() for s in self._shards().values())), STOP_TIMEOUT_S)
        if self.content is not None:
            await self.cluster.call(self.driver, self.content, ContentReplica.save)
        return list(finals)

    async def service_stats(self) -> dict[str, Any]:
        seen = merge_seen_stats(await asyncio.gather(*(self.cluster.call(self.driver, a, SeenReplica.stats) for a in self.seen_actors)))
        content = await self.cluster.call(self.driver, self.content, ContentReplica.stats) if self.content is not None else {}
        return {"seen": seen, "content": content}

    async def close(self) -> None:
        for a in self.seen_actors:
            try:
                await self.cluster.call(self.driver, a, SeenReplica.close)
            except (ActorUnavailable, ServiceUnavailableError) as exc:
                log.info("closing %s: %r", a.name, exc)
        for a in self.actors():
            self.cluster.kill_actor(a)


def _retrieve(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled():
        fut.exception()
