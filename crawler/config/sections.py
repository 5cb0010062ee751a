"""The sections of the crawl config: one typed, frozen dataclass each.

Every default lives here (``configs/default.yaml`` documents each key and a test keeps the
two equal). :class:`crawler.config.settings.CrawlConfig` holds one of each; their value
checks are :mod:`crawler.config.checks`, and what only a component can check (a browser
on disk, region names, seeds) is the component's (:mod:`crawler.configcheck`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "EVENT_SINKS", "MIN_ACTOR_CPUS", "RESOURCE_TYPES", "ApiConfig", "Auto", "DedupConfig", "EventsConfig",
    "FetchConfig", "LimitsConfig", "NewsConfig", "OutputConfig", "PlacementConfig", "PolitenessConfig",
    "RecrawlConfig", "RenderConfig", "RuntimeConfig", "SitemapsConfig", "UrlsConfig",
]

Auto = Literal["auto"]


@dataclass(frozen=True)
class UrlsConfig:
    """How discovered links are canonicalized and which are followed."""

    tracking_params: tuple[str, ...] | None = None  # None: crawler.urls.DEFAULT_TRACKING_PARAMS
    sort_query: bool = False
    follow_rel_nofollow: bool = False
    max_links_per_page: int = 5000


@dataclass(frozen=True)
class LimitsConfig:
    """Crawl budgets and spider-trap caps (None disables a cap)."""

    max_pages: int | None = None
    max_depth: int | None = 16
    max_pages_per_host: int | None = 100_000
    max_url_length: int | None = 2048
    max_query_params: int | None = 12
    max_path_repeats: int | None = 3
    max_body_bytes: int = 10_000_000


@dataclass(frozen=True)
class PolitenessConfig:
    """Per-host pacing and robots.txt (RFC 9309)."""

    interval_s: float = 1.0
    respect_robots: bool = True
    robots_ttl_s: float = 86_400.0
    robots_error_ttl_s: float = 600.0
    max_interval_s: float = 60.0
    backoff_factor: float = 2.0
    recovery_factor: float = 0.8
    retry_after_cap_s: float = 3600.0


@dataclass(frozen=True)
class FetchConfig:
    """HTTP client behaviour."""

    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    attempts: int = 3
    backoff_s: float = 2.0
    max_backoff_s: float = 600.0
    resolve: Mapping[str, str] = field(default_factory=dict)
    dns_ttl_s: float = 300.0
    dns_negative_ttl_s: float = 60.0
    max_in_flight: int = 256
    ssrf_guard: bool = True
    allow_networks: tuple[str, ...] = ()
    source_address: str | None = None  # RAYCRAWL_SOURCE_ADDRESS wins (crawler.fetch.fetcher.source_address)


@dataclass(frozen=True)
class DedupConfig:
    """Seen-URL set and duplicate-content detection."""

    simhash_distance: int = 3
    simhash_tables: int = 4
    min_text_tokens: int = 20
    # The seen filter's initial size, split across the seen shards; it grows past it
    # (crawler.seen.scalable), so this only sets where memory starts.
    seen_capacity: int = 1_000_000
    seen_error_rate: float = 0.01
    seen_exact: bool = True
    seen_bloom: Literal["pybloom", "rbloom"] = "rbloom"
    novelty_window: int = 20
    novelty_threshold: float = 0.5


@dataclass(frozen=True)
class RecrawlConfig:
    """Continuous crawling: refresh each page as often as it changes (crawler.frontier.recrawl)."""

    enabled: bool = False
    min_interval_s: float = 3600.0
    max_interval_s: float = 2_592_000.0
    initial_interval_s: float = 86_400.0
    grow_factor: float = 1.5
    shrink_factor: float = 0.5
    refresh_share: float = 0.2
    duration_s: float | None = None


@dataclass(frozen=True)
class SitemapsConfig:
    """Sitemap discovery (crawler.freshness.sitemaps): from robots.txt ``Sitemap:`` lines and /sitemap.xml."""

    enabled: bool = True
    max_files_per_host: int = 20
    max_urls_per_file: int = 50_000
    max_bytes_per_file: int = 52_428_800
    probe_after_pages: int = 10
    probe_min_yield: float = 0.25


@dataclass(frozen=True)
class NewsConfig:
    """Feeds, news sitemaps and hub pages, read again by the new URLs they yield
    (crawler.freshness.news). Scheduling needs ``recrawl.enabled``; without it they are read once."""

    hubs: bool = True
    feeds: bool = True
    news_sitemaps: bool = True
    hub_min_new: int = 3
    probe_interval_s: float | None = None  # None: twice recrawl.min_interval_s
    target_delay_p95_s: float = 11.0
    target_new_per_fetch: float = 0.6
    max_sources: int = 100_000


@dataclass(frozen=True)
class RuntimeConfig:
    """How the crawl is spread over processes (Ray) and how batches move."""

    shards: int | Auto = "auto"
    seen_shards: int | Auto = "auto"
    address: str | None = None
    batch_size: int = 4000
    link_flush_interval_s: float = 0.25
    link_flush_early_s: float = 0.05
    link_flush_small: int = 128
    content_batch_size: int = 256
    content_batch_delay_s: float = 0.05
    budget_lease_max: int = 256
    progress_interval_s: float = 1.0
    frontier_window: int = 4
    state_dir: str | None = None
    checkpoint_interval_s: float = 10.0
    state_ship_interval_s: float = 60.0
    state_log_interval_s: float = 0.5
    state_snapshot_log_ratio: float = 0.1
    state_snapshot_floor_mb: float = 16.0
    content_snapshot_interval_s: float = 30.0
    content_shards: int = 1
    lease_ttl_s: float = 15.0
    driver_timeout_s: float = 1.0
    max_restarts: int = 5
    regions: tuple[str, ...] | None = None  # None: one region (no placement)


@dataclass(frozen=True)
class PlacementConfig:
    """Which region fetches each host (crawler.placement.regionpolicy); needs ``runtime.regions``."""

    default_region: str | None = None  # None: the first of runtime.regions
    rules: Mapping[str, str] = field(default_factory=dict)  # host or *.suffix -> region
    remeasure_s: float = 86_400.0
    move_gain: float = 0.7
    move_min_s: float = 0.05


@dataclass(frozen=True)
class OutputConfig:
    """Where results go (a local folder or any fsspec URL such as s3://bucket/prefix)."""

    path: str = "./crawl-out"
    rows_per_file: int = 5000
    row_flush_interval_s: float = 1.0
    outbox_interval_s: float = 0.25
    blob_compresslevel: int = 1
    store_bodies: bool = True
    storage_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApiConfig:
    """The HTTP control API the driver serves (crawler.control.api)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 8077
    token: str | None = None  # else the CRAWL_API_TOKEN environment variable


#: ``events.sink`` values with a built-in sink (anything else is a plug-in: crawler.events.emitter).
EVENT_SINKS = ("none", "file", "redis")


@dataclass(frozen=True)
class EventsConfig:
    """``page.fetched`` events for the indexer (crawler.events.emitter). The first five keys are a
    public contract."""

    sink: str = "none"  # none | file | redis | module:Class | an entry point name
    path: str | None = None  # file sink: default OUT/events
    redis_url: str | None = None
    stream: str = "crawler:page.fetched"
    maxlen: int = 1_000_000
    max_pending: int = 100_000
    batch_size: int = 500
    rotate_bytes: int = 64_000_000
    drain_timeout_s: float = 30.0
    options: Mapping[str, Any] = field(default_factory=dict)


#: The least a render actor reserves (``cores_per_actor``, and what crawler.render.sizing
#: gives an actor when less than ``cores_per_actor`` is left).
MIN_ACTOR_CPUS = 0.25

#: CDP resource types a ``render.block`` list may name (lower-cased).
RESOURCE_TYPES = ("image", "font", "media", "stylesheet", "script", "xhr", "fetch", "texttrack", "eventsource",
                  "websocket", "manifest", "ping", "cspviolationreport", "preflight", "signedexchange", "other")


@dataclass(frozen=True)
class RenderConfig:
    """Rendering JavaScript pages in headless Chromium (crawler.render)."""

    mode: Literal["never", "auto", "always"] = "never"
    browser: str | None = None  # None: chromium (or chromium-headless-shell...) on PATH
    actors: int | Literal["auto"] = "auto"  # render actors on Ray; auto: sized by crawler.render.sizing
    cores_per_actor: float = 2.0  # CPUs a render actor reserves, at most (less when less is left)
    processes: int = 1  # browsers per render actor (or per local crawl)
    tabs: int = 4  # renders at a time per browser
    timeout_s: float = 20.0  # the whole render, from hand-over to DOM
    quiet_s: float = 0.3  # wait rule: no open request and no DOM change for this long
    max_wait_s: float = 5.0  # wait rule: after DOMContentLoaded, never longer than this
    max_requests: int = 50  # browser requests per render (past it: the render fails, "cap")
    max_bytes: int = 5_000_000  # response bytes per render
    block: tuple[str, ...] = ("image", "font", "media", "stylesheet")
    spot_check_share: float = 0.05  # auto: share of pages without signals rendered anyway
    host_min_renders: int = 3  # auto: renders of a host before its estimate counts
    host_threshold: float = 0.5  # auto: render a host's pages when this share of its renders gained
    script_cache_entries: int = 1000  # per shard, by URL
    script_cache_bytes: int = 50_000_000
    script_cache_ttl_s: float = 600.0  # then revalidated (If-None-Match / If-Modified-Since)
    recycle_renders: int = 500
    recycle_s: float = 1800.0
    recycle_rss_mb: int = 1024
    cpu_budget_s: float = 3.0  # per render: main-thread CPU seconds; past it the render fails "cap"
    heap_budget_mb: int = 256  # per render: JS heap; V8 capped at twice it, the renderer killed past 2x + 512 MB resident
    max_dom_nodes: int = 200_000  # per render: DOM nodes
