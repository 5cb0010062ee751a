"""Crawl configuration: typed, frozen dataclasses loaded once from YAML.

One place holds every default (the dataclass fields below; ``configs/default.yaml``
documents each key). Loading is strict: an unknown key, a wrong type or an impossible
value raises :class:`~crawler.errors.ConfigError` naming the key, so a typo in a config
fails the run at once instead of silently using a default.

Overrides use the CLI form ``--set section.key=value``; the value is parsed as YAML
(``--set limits.max_pages=500``, ``--set fetch.resolve='{"*.test": "127.0.0.1"}'``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from crawler.config.typed import apply_overrides, build, positive, to_dict
from crawler.errors import ConfigError, SeedError
from crawler.render.settings import RenderConfig, validate_render

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
    seen_capacity: int = 10_000_000
    seen_error_rate: float = 0.01
    seen_exact: bool = True
    seen_bloom: Literal["pybloom", "rbloom"] = "rbloom"
    novelty_window: int = 20
    novelty_threshold: float = 0.5


@dataclass(frozen=True)
class RecrawlConfig:
    """Continuous crawling: refresh each page as often as it changes (crawler.freshness.recrawl)."""

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


@dataclass(frozen=True)
class NewsConfig:
    """Feeds, news sitemaps and hub pages, read again by the new URLs they yield
    (crawler.freshness.news). Scheduling needs ``recrawl.enabled``; without it they are read once."""

    hubs: bool = True
    feeds: bool = True
    news_sitemaps: bool = True
    hub_min_new: int = 3
    probe_interval_s: float | None = None  # None: twice recrawl.min_interval_s
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


@dataclass(frozen=True)
class CrawlConfig:
    """The whole crawl configuration."""

    seeds: tuple[str, ...] = ()
    seeds_file: str | None = None
    scope: Literal["host", "domain", "any"] = "host"
    user_agent: str = "raycrawl/0.1 (+https://github.com/raycrawl/raycrawl)"
    urls: UrlsConfig = field(default_factory=UrlsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    politeness: PolitenessConfig = field(default_factory=PolitenessConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    recrawl: RecrawlConfig = field(default_factory=RecrawlConfig)
    sitemaps: SitemapsConfig = field(default_factory=SitemapsConfig)
    news: NewsConfig = field(default_factory=NewsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    events: EventsConfig = field(default_factory=EventsConfig)
    render: RenderConfig = field(default_factory=RenderConfig)

    # --- derived values -------------------------------------------------------------

    def all_seeds(self) -> list[str]:
        """Seeds from ``seeds`` and ``seeds_file`` (one URL a line, ``#`` comments), validated.

        Raises :class:`SeedError` for the first malformed seed, quoting it.
        """
        from crawler.urls import validate_seed

        raw = list(self.seeds)
        if self.seeds_file:
            try:
                text = Path(self.seeds_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"seeds_file: cannot read {self.seeds_file!r}: {exc.strerror}") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"seeds_file: {self.seeds_file!r}: {_not_utf8(exc)}") from exc
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    raw.append(line)
        out: list[str] = []
        seen: set[str] = set()
        for s in raw:
            url = validate_seed(s)
            if url not in seen:
                seen.add(url)
                out.append(url)
        return out

    def product_token(self) -> str:
        """The robots.txt product token of ``user_agent`` (RFC 9309 2.2.1): ``raycrawl``."""
        token = self.user_agent.split("/", 1)[0].split()[0] if self.user_agent.strip() else "raycrawl"
        return token.lower()

    def fingerprint(self) -> str:
        """A stable hash of the settings that change what a crawl fetches.

        Output, runtime, placement, recrawl, news, API, event and render settings are left
        out, and so is ``fetch.source_address``: moving the output, changing the shard
        count or the regions, tuning (or starting) recrawl or news sources, turning the API
        or rendering on continues the same crawl.
        """
        d = to_dict(self)
        for section in ("runtime", "placement", "output", "recrawl", "news", "api", "events", "render"):
            d.pop(section, None)
        d["fetch"].pop("source_address", None)  # where a node connects from, not what it fetches
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# loading (the generic part is crawler.config.typed)


def _validate(obj: Any, prefix: str) -> None:
    """Value checks that types cannot express."""
    if isinstance(obj, LimitsConfig):
        positive(obj, prefix, "max_pages", "max_pages_per_host", "max_url_length", "max_body_bytes", "max_path_repeats")
        positive(obj, prefix, "max_depth", "max_query_params", allow_zero=True)
    elif isinstance(obj, PolitenessConfig):
        positive(obj, prefix, "robots_ttl_s", "robots_error_ttl_s", "max_interval_s")
        positive(obj, prefix, "interval_s", allow_zero=True)
        if obj.backoff_factor < 1.0:
            raise ConfigError(f"{prefix}backoff_factor: must be >= 1.0, got {obj.backoff_factor}")
        if not 0.0 < obj.recovery_factor <= 1.0:
            raise ConfigError(f"{prefix}recovery_factor: must be in (0, 1], got {obj.recovery_factor}")
        if obj.max_interval_s < obj.interval_s:
            raise ConfigError(
                f"{prefix}max_interval_s: must be >= interval_s ({obj.interval_s}), got {obj.max_interval_s}"
            )
    elif isinstance(obj, FetchConfig):
        positive(obj, prefix, "timeout_s", "connect_timeout_s", "attempts", "max_in_flight", "max_backoff_s")
        positive(obj, prefix, "backoff_s", "dns_ttl_s", "dns_negative_ttl_s", allow_zero=True)
        import ipaddress

        for name, ip in obj.resolve.items():
            try:
                ipaddress.ip_address(ip)
            except ValueError as exc:
                raise ConfigError(
                    f"{prefix}resolve.{name}: expected an IP address like 127.0.0.1, got {ip!r}"
                ) from exc
        for net in obj.allow_networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ConfigError(f"{prefix}allow_networks: {net!r} is not a network like 10.0.0.0/8") from exc
        if obj.source_address is not None:
            from crawler.fetch.fetcher import check_source_address

            check_source_address(obj.source_address, f"{prefix}source_address")
    elif isinstance(obj, DedupConfig):
        if not 0 <= obj.simhash_distance <= 16:
            raise ConfigError(f"{prefix}simhash_distance: must be in 0..16, got {obj.simhash_distance}")
        if obj.simhash_tables < obj.simhash_distance + 1:
            raise ConfigError(
                f"{prefix}simhash_tables: must be >= simhash_distance + 1 ({obj.simhash_distance + 1}) "
                "so every near-duplicate shares one exact block"
            )
        if not 0.0 < obj.seen_error_rate < 1.0:
            raise ConfigError(f"{prefix}seen_error_rate: must be in (0, 1), got {obj.seen_error_rate}")
        positive(obj, prefix, "seen_capacity", "novelty_window")
    elif isinstance(obj, RecrawlConfig):
        positive(obj, prefix, "min_interval_s", "initial_interval_s", "max_interval_s", "grow_factor", "shrink_factor")
        if not obj.min_interval_s <= obj.initial_interval_s <= obj.max_interval_s:
            raise ConfigError(f"{prefix.rstrip('.')}: need min_interval_s <= initial_interval_s <= max_interval_s")
        if obj.grow_factor < 1.0 or obj.shrink_factor > 1.0:
            raise ConfigError(f"{prefix.rstrip('.')}: grow_factor must be >= 1 and shrink_factor <= 1")
        if not 0.0 <= obj.refresh_share <= 1.0:
            raise ConfigError(f"{prefix}refresh_share: must be between 0 and 1, got {obj.refresh_share}")
        if obj.duration_s is not None:
            positive(obj, prefix, "duration_s")
    elif isinstance(obj, SitemapsConfig):
        positive(obj, prefix, "max_files_per_host", "max_urls_per_file", "max_bytes_per_file")
    elif isinstance(obj, NewsConfig):
        positive(obj, prefix, "hub_min_new", "probe_interval_s", "target_new_per_fetch", "max_sources")
    elif isinstance(obj, RuntimeConfig):
        for n in ("shards", "seen_shards"):
            v = getattr(obj, n)
            if v != "auto" and v < 1:
                raise ConfigError(f"{prefix}{n}: must be 'auto' or >= 1, got {v!r}")
        positive(
            obj, prefix, "batch_size", "link_flush_interval_s", "link_flush_early_s", "content_batch_size", "content_batch_delay_s",
            "budget_lease_max", "progress_interval_s", "frontier_window", "checkpoint_interval_s",
            "state_ship_interval_s", "state_log_interval_s", "content_snapshot_interval_s", "lease_ttl_s", "driver_timeout_s",
            "content_shards",
        )
        positive(obj, prefix, "max_restarts", "link_flush_small", allow_zero=True)
        if obj.regions is not None:
            from crawler.placement.regionpolicy import check_region_names

            check_region_names(obj.regions, f"{prefix}regions")
    elif isinstance(obj, PlacementConfig):
        positive(obj, prefix, "remeasure_s", "move_min_s", allow_zero=True)
        if not 0.0 < obj.move_gain <= 1.0:
            raise ConfigError(f"{prefix}move_gain: must be in (0, 1] (0.7: the new region answers in 70% of the time), "
                              f"got {obj.move_gain}")
        from crawler.placement.regionpolicy import rule_key

        for spec in obj.rules:
            rule_key(spec, f"{prefix}rules")
    elif isinstance(obj, OutputConfig):
        if not obj.path:
            raise ConfigError(f"{prefix}path: must not be empty")
        positive(obj, prefix, "rows_per_file", "row_flush_interval_s", "outbox_interval_s")
        if not 0 <= obj.blob_compresslevel <= 9:
            raise ConfigError(f"{prefix}blob_compresslevel: must be a compression level 0-9, got {obj.blob_compresslevel}")
    elif isinstance(obj, ApiConfig):
        if not 0 <= obj.port <= 65535:
            raise ConfigError(f"{prefix}port: must be 0-65535 (0: any free port), got {obj.port}")
        if not obj.host.strip():
            raise ConfigError(f"{prefix}host: must not be empty (127.0.0.1 serves this machine only)")
        if obj.token is not None and not obj.token.strip():
            raise ConfigError(f"{prefix}token: must not be empty (null: no token, loopback only)")
    elif isinstance(obj, EventsConfig):
        if obj.sink not in EVENT_SINKS and not obj.sink.strip():
            raise ConfigError(f"{prefix}sink: expected one of {', '.join(EVENT_SINKS)}, a module:Class path or an entry point name")
        if obj.sink == "redis" and not obj.redis_url:
            raise ConfigError(f"{prefix}redis_url: required with sink: redis (e.g. redis://127.0.0.1:6379/0)")
        if not obj.stream:
            raise ConfigError(f"{prefix}stream: must not be empty")
        positive(obj, prefix, "maxlen", "max_pending", "batch_size", "rotate_bytes", "drain_timeout_s")
    elif isinstance(obj, RenderConfig):
        validate_render(obj, prefix)
        if obj.mode != "never":
            from crawler.render.browser import find_browser

            find_browser(obj.browser)  # no browser: fail at start, saying how to install one
    elif isinstance(obj, CrawlConfig):
        if not obj.user_agent.strip():
            raise ConfigError("user_agent: must not be empty (servers identify crawlers by it)")
        _check_placement(obj.runtime.regions, obj.placement)


def _check_placement(regions: tuple[str, ...] | None, p: PlacementConfig) -> None:
    """Placement names only regions of ``runtime.regions``, and needs them."""
    if regions is None:
        changed = [f.name for f in fields(PlacementConfig) if getattr(p, f.name) != getattr(PlacementConfig(), f.name)]
        if changed:
            raise ConfigError(f"placement.{changed[0]}: set, but runtime.regions is null (one region: nothing to "
                              "place); list the regions first, e.g. runtime.regions: [eu-west, us-east]")
        return
    known = ", ".join(regions)
    if p.default_region is not None and p.default_region not in regions:
        raise ConfigError(f"placement.default_region: {p.default_region!r} is not one of runtime.regions ({known})")
    for spec, region in p.rules.items():
        if region not in regions:
            raise ConfigError(f"placement.rules.{spec}: {region!r} is not one of runtime.regions ({known})")


def from_dict(data: Mapping[str, Any] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Build a config from a YAML-shaped mapping plus ``--set`` overrides."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping at the top level, got {type(data).__name__}")
    merged = apply_overrides(dict(data), overrides) if overrides else dict(data)
    return build(CrawlConfig, merged, check=_validate)


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """What to say of a file that is not UTF-8: where it stops being so, and the fix."""
    return f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.end]!r}); save it as UTF-8"


def load(path: str | os.PathLike[str] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Load a YAML config file (``None``: defaults only) and apply overrides."""
    data: Any = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"config {str(p)!r}: cannot read it: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config {str(p)!r}: {_not_utf8(exc)}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            # PyYAML's message spans lines (problem, context, a caret): one line here.
            raise ConfigError(f"config {str(p)!r}: not valid YAML: {' '.join(str(exc).split())}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config {str(p)!r}: expected a mapping of settings at the top level, "
                              f"got {type(data).__name__}")
        seeds_file = data.get("seeds_file")
        if isinstance(seeds_file, str) and seeds_file and not os.path.isabs(seeds_file):
            # A seeds file is found next to the config that names it.
            data["seeds_file"] = str(p.parent / data["seeds_file"])
    try:
        return from_dict(data, overrides)
    except SeedError:
        raise


def resolve_shards(value: int | str, cpus: int) -> int:
    """``runtime.shards: auto`` means one per CPU of the cluster, at least 2."""
    if value == "auto":
        return max(2, int(cpus))
    return int(value)
