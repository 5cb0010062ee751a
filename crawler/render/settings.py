"""The ``render`` section of the crawl config: when to render JavaScript, and the pool.

Kept beside the render code (crawler.config.settings includes it as ``CrawlConfig.render``);
``configs/default.yaml`` documents every key and a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from crawler.config.typed import positive
from crawler.errors import ConfigError

__all__ = ["MIN_ACTOR_CPUS", "RenderConfig", "RESOURCE_TYPES", "validate_render"]

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


def validate_render(obj: RenderConfig, prefix: str) -> None:
    """Value checks of the section (types are checked by crawler.config.typed)."""
    positive(obj, prefix, "processes", "tabs", "timeout_s", "max_wait_s", "max_requests",
             "max_bytes", "host_min_renders", "script_cache_entries", "script_cache_bytes", "recycle_renders",
             "recycle_s", "recycle_rss_mb")
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
