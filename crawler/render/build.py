"""Assembling rendering from a config: a shard's renderer, and the local browser pool.

:func:`build_renderer` is what :func:`crawler.engine.assembly.build_shard` calls (both runtimes);
:func:`build_pool` makes the :class:`~crawler.render.browser.BrowserPool` that the
in-process runtime renders on and that each render actor (actors/render.py) owns.
"""

from __future__ import annotations

import random
from typing import Any, TYPE_CHECKING

from crawler.clock import Clock
from crawler.config.settings import CrawlConfig
from crawler.policy.links import LinkPolicy
from crawler.policy.politeness import Politeness
from crawler.render.budget import Budget
from crawler.render.browser import BrowserPool, PoolSettings, find_browser
from crawler.render.decide import RenderDecider
from crawler.render.gate import Fetch, RenderGate
from crawler.render.renderer import Renderer, RenderService
from crawler.render.scriptcache import ScriptCache
from crawler.robots import RobotsCache

if TYPE_CHECKING:
    from crawler.counters import ShardCounters

__all__ = ["build_pool", "build_renderer"]


def build_renderer(
    cfg: CrawlConfig, shard_id: str, service: RenderService, *, fetch: Fetch, politeness: Politeness,
    robots: RobotsCache, links: LinkPolicy, clock: Clock, rng: random.Random, counters: ShardCounters,
) -> Renderer:
    """One shard's renderer: its decider, its gate for the browser's requests, the service."""
    r = cfg.render
    decider = RenderDecider(r.mode, rng, spot_check_share=r.spot_check_share, host_min_renders=r.host_min_renders,
                            host_threshold=r.host_threshold)
    gate = RenderGate(
        fetch=fetch, politeness=politeness, robots=robots, scope=links.scope, normalize=links.normalizer, clock=clock,
        cache=ScriptCache(clock, max_entries=r.script_cache_entries, max_bytes=r.script_cache_bytes,
                          ttl_s=r.script_cache_ttl_s),
        counters=counters, block=r.block, max_requests=r.max_requests, max_bytes=r.max_bytes,
        respect_robots=cfg.politeness.respect_robots,
    )
    return Renderer(shard_id, decider, gate, service, clock, timeout_s=r.timeout_s, counters=counters,
                    user_agent_token=cfg.product_token(), max_links=cfg.urls.max_links_per_page)


def pool_settings(cfg: CrawlConfig) -> PoolSettings:
    """The pool part of ``render`` (the browser found now: ConfigError if none)."""
    r = cfg.render
    return PoolSettings(
        find_browser(r.browser), processes=r.processes, tabs=r.tabs, quiet_s=r.quiet_s, max_wait_s=r.max_wait_s,
        recycle_renders=r.recycle_renders, recycle_s=r.recycle_s, recycle_rss_mb=r.recycle_rss_mb,
        user_agent=cfg.user_agent,
        budget=Budget(cpu_s=r.cpu_budget_s, heap_mb=r.heap_budget_mb, max_nodes=r.max_dom_nodes),
    )


def build_pool(cfg: CrawlConfig, clock: Clock, **kw: Any) -> BrowserPool:
    """The browser pool ``render`` describes (browsers start on the first render)."""
    return BrowserPool(pool_settings(cfg), clock, **kw)
