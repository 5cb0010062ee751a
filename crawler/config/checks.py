"""Value checks of each config section that types cannot express.

:func:`crawler.config.typed.build` checks types and keys; it calls :func:`check_section`
on each section it builds, which runs that section's checks below (one function a
section, found by its class). Each raises :class:`~crawler.errors.ConfigError` naming
the key. Only what the values themselves say is checked here: what needs a component
(a browser on disk, region names, placement rules, a source address, seeds) is checked
by that component, through :func:`crawler.configcheck.check_components`, so this
package imports none of them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from crawler.config.sections import (
    EVENT_SINKS,
    MIN_ACTOR_CPUS,
    RESOURCE_TYPES,
    ApiConfig,
    DedupConfig,
    EventsConfig,
    FetchConfig,
    LimitsConfig,
    NewsConfig,
    OutputConfig,
    PlacementConfig,
    PolitenessConfig,
    RecrawlConfig,
    RenderConfig,
    RuntimeConfig,
    SitemapsConfig,
)
from crawler.config.typed import positive
from crawler.errors import ConfigError

__all__ = ["check_section", "validate_render"]


def _limits(obj: LimitsConfig, prefix: str) -> None:
    positive(obj, prefix, "max_pages", "max_pages_per_host", "max_url_length", "max_body_bytes", "max_path_repeats")
    positive(obj, prefix, "max_depth", "max_query_params", allow_zero=True)


def _politeness(obj: PolitenessConfig, prefix: str) -> None:
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


def _fetch(obj: FetchConfig, prefix: str) -> None:
    """``source_address`` is the fetcher's to check (crawler.fetch.fetcher.check_fetch)."""
    positive(obj, prefix, "timeout_s", "connect_timeout_s", "attempts", "max_in_flight", "max_backoff_s")
    positive(obj, prefix, "backoff_s", "dns_ttl_s", "dns_negative_ttl_s", allow_zero=True)
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


def _dedup(obj: DedupConfig, prefix: str) -> None:
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


def _recrawl(obj: RecrawlConfig, prefix: str) -> None:
    positive(obj, prefix, "min_interval_s", "initial_interval_s", "max_interval_s", "grow_factor", "shrink_factor")
    if not obj.min_interval_s <= obj.initial_interval_s <= obj.max_interval_s:
        raise ConfigError(f"{prefix.rstrip('.')}: need min_interval_s <= initial_interval_s <= max_interval_s")
    if obj.grow_factor < 1.0 or obj.shrink_factor > 1.0:
        raise ConfigError(f"{prefix.rstrip('.')}: grow_factor must be >= 1 and shrink_factor <= 1")
    if not 0.0 <= obj.refresh_share <= 1.0:
        raise ConfigError(f"{prefix}refresh_share: must be between 0 and 1, got {obj.refresh_share}")
    if obj.duration_s is not None:
        positive(obj, prefix, "duration_s")


def _sitemaps(obj: SitemapsConfig, prefix: str) -> None:
    positive(obj, prefix, "max_files_per_host", "max_urls_per_file", "max_bytes_per_file")
    positive(obj, prefix, "probe_after_pages", allow_zero=True)  # 0: every host's /sitemap.xml at once
    if not 0.0 <= obj.probe_min_yield <= 1.0:
        raise ConfigError(f"{prefix}probe_min_yield: must be between 0 and 1, got {obj.probe_min_yield}")


def _news(obj: NewsConfig, prefix: str) -> None:
    positive(obj, prefix, "hub_min_new", "probe_interval_s", "target_delay_p95_s", "target_new_per_fetch", "max_sources")


def _runtime(obj: RuntimeConfig, prefix: str) -> None:
    """``regions`` is placement's to check (crawler.placement.regionpolicy.check_placement)."""
    for n, v in (("shards", obj.shards), ("seen_shards", obj.seen_shards)):
        if v != "auto" and v < 1:
            raise ConfigError(f"{prefix}{n}: must be 'auto' or >= 1, got {v!r}")
    positive(
        obj, prefix, "batch_size", "link_flush_interval_s", "link_flush_early_s", "content_batch_size",
        "content_batch_delay_s", "budget_lease_max", "progress_interval_s", "frontier_window", "checkpoint_interval_s",
        "state_ship_interval_s", "state_log_interval_s", "content_snapshot_interval_s", "lease_ttl_s",
        "driver_timeout_s", "content_shards",
    )
    positive(obj, prefix, "max_restarts", "link_flush_small", "state_snapshot_floor_mb", allow_zero=True)
    if not 0.0 < obj.state_snapshot_log_ratio <= 10.0:
        raise ConfigError(f"{prefix}state_snapshot_log_ratio: must be in (0, 10] (0.1: a snapshot once the log "
                          f"since the last one is a tenth of its size), got {obj.state_snapshot_log_ratio}")


def _placement(obj: PlacementConfig, prefix: str) -> None:
    """The rules and the regions they name are placement's to check (crawler.placement.regionpolicy)."""
    positive(obj, prefix, "remeasure_s", "move_min_s", allow_zero=True)
    if not 0.0 < obj.move_gain <= 1.0:
        raise ConfigError(f"{prefix}move_gain: must be in (0, 1] (0.7: the new region answers in 70% of the time), "
                          f"got {obj.move_gain}")


def _output(obj: OutputConfig, prefix: str) -> None:
    if not obj.path:
        raise ConfigError(f"{prefix}path: must not be empty")
    positive(obj, prefix, "rows_per_file", "row_flush_interval_s", "outbox_interval_s")
    if not 0 <= obj.blob_compresslevel <= 9:
        raise ConfigError(f"{prefix}blob_compresslevel: must be a compression level 0-9, got {obj.blob_compresslevel}")


def _api(obj: ApiConfig, prefix: str) -> None:
    if not 0 <= obj.port <= 65535:
        raise ConfigError(f"{prefix}port: must be 0-65535 (0: any free port), got {obj.port}")
    if not obj.host.strip():
        raise ConfigError(f"{prefix}host: must not be empty (127.0.0.1 serves this machine only)")
    if obj.token is not None and not obj.token.strip():
        raise ConfigError(f"{prefix}token: must not be empty (null: no token, loopback only)")


def _events(obj: EventsConfig, prefix: str) -> None:
    if obj.sink not in EVENT_SINKS and not obj.sink.strip():
        raise ConfigError(f"{prefix}sink: expected one of {', '.join(EVENT_SINKS)}, a module:Class path or an entry point name")
    if obj.sink == "redis" and not obj.redis_url:
        raise ConfigError(f"{prefix}redis_url: required with sink: redis (e.g. redis://127.0.0.1:6379/0)")
    if not obj.stream:
        raise ConfigError(f"{prefix}stream: must not be empty")
    positive(obj, prefix, "maxlen", "max_pending", "batch_size", "rotate_bytes", "drain_timeout_s")


def validate_render(obj: RenderConfig, prefix: str) -> None:
    """The ``render`` section's values; whether a browser is there to run is
    crawler.render.settings.check_render's question."""
    positive(obj, prefix, "processes", "tabs", "timeout_s", "max_wait_s", "max_requests",
             "max_bytes", "host_min_renders", "script_cache_entries", "script_cache_bytes", "recycle_renders",
             "recycle_s", "recycle_rss_mb", "cpu_budget_s", "heap_budget_mb", "max_dom_nodes")
    positive(obj, prefix, "quiet_s", "script_cache_ttl_s", allow_zero=True)
    if obj.cores_per_actor < MIN_ACTOR_CPUS:
        raise ConfigError(f"{prefix}cores_per_actor: must be at least {MIN_ACTOR_CPUS}, got {obj.cores_per_actor}")
    if obj.actors != "auto" and obj.actors < 1:
        raise ConfigError(f"{prefix}actors: must be 'auto' or >= 1, got {obj.actors!r}")
    if not 0.0 <= obj.spot_check_share <= 1.0:
        raise ConfigError(f"{prefix}spot_check_share: must be between 0 and 1, got {obj.spot_check_share}")
    if not 0.0 <= obj.host_threshold <= 1.0:
        raise ConfigError(f"{prefix}host_threshold: must be between 0 and 1, got {obj.host_threshold}")
    if obj.max_wait_s >= obj.timeout_s:
        raise ConfigError(f"{prefix}max_wait_s: must be below timeout_s ({obj.timeout_s}), got {obj.max_wait_s}")
    for t in obj.block:
        if t.lower() not in RESOURCE_TYPES:
            raise ConfigError(f"{prefix}block: unknown resource type {t!r} (known: {', '.join(RESOURCE_TYPES)})")


#: Each section's checks, by its class. ``Any``: each function takes its own section, and
#: :func:`check_section` passes the object only to the function keyed by its type.
_CHECKS: dict[type, Callable[[Any, str], None]] = {
    LimitsConfig: _limits,
    PolitenessConfig: _politeness,
    FetchConfig: _fetch,
    DedupConfig: _dedup,
    RecrawlConfig: _recrawl,
    SitemapsConfig: _sitemaps,
    NewsConfig: _news,
    RuntimeConfig: _runtime,
    PlacementConfig: _placement,
    OutputConfig: _output,
    ApiConfig: _api,
    EventsConfig: _events,
    RenderConfig: validate_render,
}


def check_section(obj: object, prefix: str) -> None:
    """The checks of ``obj``'s section (none for a section without any, such as ``urls``)."""
    check = _CHECKS.get(type(obj))
    if check is not None:
        check(obj, prefix)
