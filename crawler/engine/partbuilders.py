"""One part of a shard from a config, each: the builders :func:`crawler.engine.assembly.build_shard`
composes (and ``crawl links``, the sessions and the benchmarks use on their own).

Each takes the config and the collaborators the part needs, and reads only its own slice
of the config.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any, Awaitable, Callable, Sequence

from crawler.engine.checkpoint import Checkpointer
from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config.settings import CrawlConfig
from crawler.fetch.fetcher import Fetcher, source_address
from crawler.placement.handover import HostParts, Peers, RegionBook, Regions
from crawler.frontier.frontier import Frontier
from crawler.frontier.store import FrontierStore
from crawler.recovery.lease import Fence, LeaseStore
from crawler.policy.links import LinkPolicy
from crawler.output import ResultWriter
from crawler.freshness.news import NewsPolicy
from crawler.engine.pipeline import PagePipeline
from crawler.policy.politeness import Politeness
from crawler.frontier.recrawl import RecrawlPolicy
from crawler.placement.regionpolicy import RegionPlacement
from crawler.freshness.sitemapprobe import SitemapProbe
from crawler.freshness.sitemaps import SitemapReader
from crawler.recovery.incarnation import Incarnation
from crawler.recovery.statelog import StateLog
from crawler.engine.requests import Fetcher as FetchClient
from crawler.placement.topology import Topology
from crawler.policy.traprules import TrapRules
from crawler.urls import DEFAULT_TRACKING_PARAMS, Scope, UrlNormalizer


def build_link_policy(cfg: CrawlConfig, seeds: Sequence[str]) -> LinkPolicy:
    """The link policy a config describes (shared by the shards and ``crawl links``)."""
    normalizer = UrlNormalizer(
        cfg.urls.tracking_params if cfg.urls.tracking_params is not None else DEFAULT_TRACKING_PARAMS,
        sort_query=cfg.urls.sort_query,
    )
    lim = cfg.limits
    return LinkPolicy(
        normalizer,
        Scope(cfg.scope, seeds),
        TrapRules(lim.max_depth, lim.max_url_length, lim.max_query_params, lim.max_path_repeats),
        follow_rel_nofollow=cfg.urls.follow_rel_nofollow,
    )


def build_fetcher(cfg: CrawlConfig, clock: Clock = SYSTEM_CLOCK, **kw: Any) -> Fetcher:
    """The HTTP fetcher a config describes, connecting from this node's source address
    (``$RAYCRAWL_SOURCE_ADDRESS``, read here on the node, else ``fetch.source_address``)."""
    f = cfg.fetch
    kw.setdefault("source_address", source_address(cfg, os.environ))
    return Fetcher(
        user_agent=cfg.user_agent,
        timeout_s=f.timeout_s,
        connect_timeout_s=f.connect_timeout_s,
        max_body_bytes=cfg.limits.max_body_bytes,
        resolve=dict(f.resolve),
        dns_ttl_s=f.dns_ttl_s,
        dns_negative_ttl_s=f.dns_negative_ttl_s,
        ssrf_guard=f.ssrf_guard,
        allow_networks=f.allow_networks,
        max_connections=max(16, f.max_in_flight * 2),
        clock=clock,
        **kw,
    )


def build_writer(cfg: CrawlConfig, shard_id: str, clock: Clock, incarnation: Incarnation | None = None) -> ResultWriter:
    """The shard's Parquet/blob writer (its files are named after the shard and, with an
    incarnation, its generation, whose fence it checks before each write)."""
    o = cfg.output
    return ResultWriter(
        o.path,
        shard_id,
        storage_options=dict(o.storage_options) or None,
        rows_per_file=o.rows_per_file,
        flush_interval_s=o.row_flush_interval_s,
        clock=clock,
        store_bodies=o.store_bodies,
        # The pipeline hashed each body itself (the same bytes): hashing it again in the
        # event loop would cost ~15 us per page for nothing.
        verify_bodies=False,
        compresslevel=o.blob_compresslevel,
        generation=incarnation.gen if incarnation is not None else None,
        fence=incarnation.check if incarnation is not None else None,
    )


#: How often a shard re-reads the output's lease before a fetch (a write or ack re-reads it).
FENCE_CHECK_INTERVAL_S = 0.5


def build_fence(cfg: CrawlConfig, epoch: int | None, clock: Clock) -> Fence | None:
    """The shard's check of the output's lease, or None for a crawl without durable state."""
    if epoch is None:
        return None
    store = LeaseStore(cfg.output.path, dict(cfg.output.storage_options) or None)
    return Fence(store, epoch, clock, FENCE_CHECK_INTERVAL_S)


def build_politeness(cfg: CrawlConfig, clock: Clock) -> Politeness:
    """The shard's per-host pacing, as ``politeness`` configures it."""
    pol = cfg.politeness
    return Politeness(
        pol.interval_s, pol.max_interval_s, clock=clock, backoff_factor=pol.backoff_factor,
        recovery_factor=pol.recovery_factor, retry_after_cap_s=pol.retry_after_cap_s,
    )


def build_frontier(cfg: CrawlConfig, politeness: Politeness, clock: Clock, rng: random.Random,
                   store: FrontierStore | None) -> Frontier:
    """The shard's frontier, spilling to ``store`` beyond ``runtime.frontier_window`` per host."""
    return Frontier(
        politeness, clock, rng, backoff_s=cfg.fetch.backoff_s, max_backoff_s=cfg.fetch.max_backoff_s,
        window=cfg.runtime.frontier_window if store is not None else None, spill=store,
        refresh_share=cfg.recrawl.refresh_share,
    )


def build_recrawl(cfg: CrawlConfig) -> RecrawlPolicy:
    """When to fetch a page again, as ``recrawl`` configures it."""
    rc = cfg.recrawl
    return RecrawlPolicy(
        min_interval_s=rc.min_interval_s, max_interval_s=rc.max_interval_s, initial_interval_s=rc.initial_interval_s,
        grow_factor=rc.grow_factor, shrink_factor=rc.shrink_factor, fingerprint_distance=cfg.dedup.simhash_distance,
    )


def build_news(cfg: CrawlConfig, clock: Clock) -> NewsPolicy:
    """Feeds, hubs and news sitemaps, as ``news`` and ``recrawl`` configure them."""
    rc, nc = cfg.recrawl, cfg.news
    return NewsPolicy(
        min_interval_s=rc.min_interval_s, initial_interval_s=rc.initial_interval_s, max_interval_s=rc.max_interval_s,
        probe_interval_s=nc.probe_interval_s if nc.probe_interval_s is not None else 2 * rc.min_interval_s,
        target_new_per_fetch=nc.target_new_per_fetch, hub_min_new=nc.hub_min_new, max_sources=nc.max_sources,
        target_delay_p95_s=nc.target_delay_p95_s, fetch_lag_s=cfg.politeness.interval_s, clock=clock,
        schedule=rc.enabled, hubs=nc.hubs, feeds=nc.feeds, news_sitemaps=nc.news_sitemaps,
    )


def build_placement(cfg: CrawlConfig, clock: Clock, rng: random.Random) -> RegionPlacement:
    """The region policy, as ``runtime.regions`` and ``placement`` configure it."""
    rt, pc = cfg.runtime, cfg.placement
    assert rt.regions
    return RegionPlacement(
        rt.regions, pc.default_region or rt.regions[0], dict(pc.rules), remeasure_s=pc.remeasure_s,
        move_gain=pc.move_gain, move_min_s=pc.move_min_s, clock=clock, rng=rng,
    )


def build_sitemaps(cfg: CrawlConfig, links: LinkPolicy, pipeline: PagePipeline, recrawl: RecrawlPolicy,
                   news: NewsPolicy, store: FrontierStore | None, clock: Clock,
                   run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread) -> SitemapReader:
    """The shard's sitemap reader; a sitemap's ``<lastmod>`` brings a known URL's refresh
    forward (crawler.frontier.recrawl.RecrawlPolicy.nudge). ``run_blocking``: where a read
    sitemap is parsed (DESIGN invariant 16)."""
    sm = cfg.sitemaps

    def nudge(url: str, lastmod: float) -> None:
        if store is None:
            return
        known = store.schedule_of(url)
        if known is not None:
            earlier = recrawl.nudge(*known, lastmod, clock.wall())
            if earlier < known[2]:
                store.bring_forward(url, earlier)

    probe = SitemapProbe(after_pages=sm.probe_after_pages, min_yield=sm.probe_min_yield, counters=pipeline.counters)
    return SitemapReader(
        max_files=sm.max_files_per_host, max_urls=sm.max_urls_per_file, max_bytes=sm.max_bytes_per_file,
        links=links, counters=pipeline.counters, dropped=pipeline.dropped, nudge=nudge, news=news,
        probe=probe, run_blocking=run_blocking,
    )


def build_regions(shard_id: str, topology: Topology, book: RegionBook, parts: HostParts, peers: Peers, clock: Clock,
                  fetcher: FetchClient, checkpointer: Checkpointer, state_log: StateLog | None) -> Regions:
    """The shard's side of regions (crawler.placement.handover): its own region's probes
    go through the bare fetcher, and every change to placement, tombstones and moves is
    saved journaled and, with a remote output, in OUT before the call that made it returns."""
    synced = state_log.synced if state_log is not None else None

    async def save_now() -> None:
        checkpointer.save(journal=True)
        if synced is not None:
            await synced()

    return Regions(shard_id, topology, book, parts, peers, clock, fetch=lambda url: fetcher.fetch(url), save=save_now)
