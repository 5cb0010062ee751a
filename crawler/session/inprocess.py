"""The in-process runtime: every shard and service of a crawl in this event loop, no Ray.

What ``crawl run --local`` uses, and what the tests use to crawl end to end without a
cluster. The shards are the same :func:`crawler.engine.assembly.build_shard` objects the Ray
actors hold, and the session is the same :class:`crawler.session.crawlsession.CrawlSession`, so both
runtimes produce the same rows (tests/integration/test_crawl_ray.py compares them).
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config.settings import CrawlConfig
from crawler.placement.hashring import HashRing
from crawler.recovery import stamps, statefiles as state
from crawler.recovery.copyschedule import CopyGate, CopySchedule
from crawler.engine.requests import Fetcher
from crawler.engine.shard import Shard
from crawler.engine.shardapi import ShardApi
from crawler.seen import SeenGroup, SeenSet
from crawler.session.runtime import Plan
from crawler.services.budget import BudgetPool, LeasedBudget
from crawler.services.contentindex import CONTENT_LOG, ContentIndexService, content_log_names
from crawler.session.crawlsession import CrawlSession
from crawler.engine.assembly import build_shard
from crawler.engine.partbuilders import build_fence
from crawler.session.shardcalls import ShardCalls, merge_seen_stats
from crawler.engine.status import ShardStatus

if TYPE_CHECKING:  # imported when render.mode is on (it needs a browser)
    from crawler.render.browser import BrowserPool


def seen_capacity_per_shard(cfg: CrawlConfig, seen_shards: int) -> int:
    """Each seen shard's initial Bloom capacity (its filter grows past it: crawler.seen.scalable):
    an even share, at least 1 (a small start costs a few more stages, not a wrong answer)."""
    return max(1, cfg.dedup.seen_capacity // max(1, seen_shards))


class LocalRuntime(ShardCalls):
    """Shards, seen sets, the content index and the page budget as plain objects here.

    Args:
        clock: the clock every shard and service uses.
        fetcher_factory: makes each shard's fetcher (tests inject resolvers/transports).
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, fetcher_factory: Callable[[], Fetcher] | None = None) -> None:
        self.clock = clock
        self.fetcher_factory = fetcher_factory
        self.shards: dict[str, Shard] = {}
        self.seen: list[SeenSet] = []
        self._seen_group: SeenGroup | None = None
        self.content: ContentIndexService | None = None
        self.cfg: CrawlConfig | None = None
        self.sdir: str | None = None
        self.seen_restored = 0  # seen sets started from a copy in OUT (crawler.session.ledger)
        self._copies: defaultdict[str, CopyGate] = defaultdict(CopyGate)  # by piece: when to copy it to OUT again
        self._runners: list[asyncio.Task[None]] = []
        self.render_pool: BrowserPool | None = None  # when render.mode is on

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        # One process: one shard and one seen set unless the config says otherwise.
        n = 1 if cfg.runtime.shards == "auto" else int(cfg.runtime.shards)
        n_seen = 1 if cfg.runtime.seen_shards == "auto" else int(cfg.runtime.seen_shards)
        return n, n_seen

    async def start(self, plan: Plan) -> None:
        cfg = plan.cfg
        sdir = state.here(plan.state_dir) if plan.state_dir else None
        self.cfg, self.sdir = cfg, sdir
        d = cfg.dedup
        out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
        if sdir:  # a remote output: this machine's files are a cache, the copies in OUT win
            for i in range(plan.seen_shards):
                name = state.seen_name(i, d.seen_exact)
                self.seen_restored += state.fetch_local(out, opts, name, os.path.join(sdir, name))
            for name in [*content_log_names(cfg), "budget.json"]:
                state.fetch_local(out, opts, name, os.path.join(sdir, name))
        cap = seen_capacity_per_shard(cfg, plan.seen_shards)
        crawl = plan.crawl_id if sdir else None  # each state file is stamped with it (crawler.recovery.stamps)
        self.seen = [
            SeenSet(
                cap, d.seen_error_rate, exact=d.seen_exact, bloom=d.seen_bloom,
                path=os.path.join(sdir, f"seen-{i:03d}.sqlite") if sdir else None,
                identity=stamps.part(crawl, stamps.seen_part(i)),
            )
            for i in range(plan.seen_shards)
        ]
        seen_group = self._seen_group = SeenGroup([self._seen_shard(i, s) for i, s in enumerate(self.seen)],
                                                  [self._seen_forget(i, s) for i, s in enumerate(self.seen)])
        self.content = ContentIndexService(
            d.simhash_distance,
            d.simhash_tables,
            self.clock,
            path=os.path.join(sdir, CONTENT_LOG) if sdir else None,
            every_s=cfg.runtime.content_snapshot_interval_s,
            shards=cfg.runtime.content_shards,
            crawl=crawl,
        )
        pool = BudgetPool(cfg.limits.max_pages, os.path.join(sdir, "budget.json") if sdir else None,
                          identity=stamps.part(crawl, stamps.BUDGET_PART), spent=lambda: state.pages_spent(out, opts))

        async def lease(n: int) -> int:
            return pool.lease(n)

        async def content(items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
            assert self.content is not None
            return await self.content.check_and_add(items)

        ring = HashRing(list(plan.shard_ids))
        if cfg.render.mode != "never":
            from crawler.render.build import build_pool

            self.render_pool = build_pool(cfg, self.clock)  # one pool for every shard here
        for sid in plan.shard_ids:
            opened = state.open_shard(cfg, sid, sdir, self.clock, crawl) if sdir else None
            self.shards[sid] = build_shard(
                cfg,
                sid,
                seeds=plan.seeds,
                seen=seen_group,
                content=content,
                budget=LeasedBudget(lease, cfg.limits.max_pages, len(plan.shard_ids), cfg.runtime.budget_lease_max),
                deliver=self.deliver,
                owner_of=ring.node_for,
                store=opened.store if opened else None,
                clock=self.clock,
                fetcher=self.fetcher_factory() if self.fetcher_factory else None,
                fence=build_fence(cfg, plan.epoch, self.clock),
                state_log=opened.log if opened else None,
                restored=opened.restored if opened else None,
                render_service=self.render_pool,
                unclean_start=plan.after_crash,
            )
        self._runners = [asyncio.ensure_future(s.run()) for s in self.shards.values()]

    async def heartbeat(self) -> None:
        """The shards live in the driver's process: they share its fate already."""

    async def ship_state(self, final: bool = False) -> None:
        """Copy the seen sets and the content index to a remote OUT when enough changed
        (crawler.recovery.copyschedule; at the end whatever changed), and the budget."""
        if not self.sdir or self.content is None or self.cfg is None:
            return
        out, opts, wall = self.cfg.output.path, dict(self.cfg.output.storage_options) or None, self.clock.wall()
        schedule = CopySchedule.of(self.cfg.runtime)
        for i, s in enumerate(self.seen):
            gate = self._copies[f"seen-{i}"]
            if gate.due(schedule, final=final):
                held = len(s)
                gate.copied(await asyncio.to_thread(state.ship, s.backup, out, state.seen_name(i, s.exact), wall, opts), held)
        await self.content.save()
        for name in self.content.log_names():
            path, gate = os.path.join(self.sdir, name), self._copies[name]
            gate.grown_to(state.file_size(path))
            if gate.due(schedule, final=final):
                size = await asyncio.to_thread(state.ship_file, out, opts, name, path, wall)
                gate.copied(size, size)
        await asyncio.to_thread(state.ship_file, out, opts, "budget.json", os.path.join(self.sdir, "budget.json"), wall)

    def _seen_shard(self, index: int, seen: SeenSet) -> Callable[[list[int]], Awaitable[list[bool]]]:
        gate = self._copies[f"seen-{index}"]

        async def call(hashes: list[int]) -> list[bool]:
            out = seen.check_and_add_hashes(hashes)
            gate.note(sum(out))
            return out

        return call

    def _seen_forget(self, index: int, seen: SeenSet) -> Callable[[list[int]], Awaitable[int]]:
        gate = self._copies[f"seen-{index}"]

        async def call(hashes: list[int]) -> int:
            n = seen.forget_hashes(hashes)
            gate.note(n)
            return n

        return call

    async def seen_check(self, urls: list[str]) -> list[bool]:
        assert self._seen_group is not None
        return await self._seen_group.check_and_add(urls)

    async def seen_forget(self, urls: list[str]) -> int:
        assert self._seen_group is not None
        return await self._seen_group.forget(urls)

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]:
        return self.seen[index].key_page(after, limit)

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int:
        return self.seen[index].forget_hashes(keys)

    def _shards(self) -> dict[str, ShardApi]:
        return dict(self.shards)

    async def statuses(self) -> list[ShardStatus] | None:
        """Every shard's status; a shard whose loop died says so in ``error``, as a
        ShardServer does on Ray, and the session fails the run the same way in both."""
        out = []
        for shard, runner in zip(self.shards.values(), self._runners):
            failure = runner.exception() if runner.done() and not runner.cancelled() else None
            status = shard.report()
            out.append(status.but(error=repr(failure)) if failure is not None else status)
        return out

    async def stop(self) -> list[ShardStatus]:
        for s in self.shards.values():
            s.stop()
        await asyncio.gather(*self._runners, return_exceptions=True)
        finals = [await s.shutdown() for s in self.shards.values()]
        if self.render_pool is not None:
            await self.render_pool.close()
        return finals

    async def service_stats(self) -> dict[str, Any]:
        seen = merge_seen_stats([s.stats() for s in self.seen], restored_from_out=self.seen_restored)
        return {"seen": seen, "content": await self.content.stats() if self.content is not None else {}}

    async def close(self) -> None:
        if self.content is not None:
            await self.content.save()
        for s in self.seen:
            s.close()
        self.seen = []


def local_session(cfg: CrawlConfig, *, fetcher_factory: Callable[[], Fetcher] | None = None, **kw: Any) -> CrawlSession:
    """A session whose shards run in this process (``crawl run --local``)."""
    clock = kw.pop("clock", SYSTEM_CLOCK)
    return CrawlSession(cfg, LocalRuntime(clock=clock, fetcher_factory=fetcher_factory), clock=clock, **kw)
