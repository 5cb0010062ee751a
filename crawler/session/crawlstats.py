"""Crawl-wide statistics: per-shard statuses summed, and ``OUT/stats.json``.

``stats.json`` is the run's account: outcomes, requests, duplicates, what was dropped
and why, refresh figures, the URL ledger (crawler.session.ledger, added by the session) and the
config that ran. It is written through fsspec, so a crawl into ``s3://`` has one too.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from crawler.output.fs import retried
from crawler.config.settings import CrawlConfig
from crawler.config.typed import to_dict
from crawler.output import OUTCOMES, open_fs
from crawler.counters import ShardCounters
from crawler.engine.status import ShardStatus


@dataclass(frozen=True)
class CrawlTotals:
    """Every shard's status summed: what the progress line and ``stats`` show while a crawl
    runs (:func:`merge_totals`). Typed for the code that reads it; :meth:`as_json` is the
    ``GET /stats`` / ``stats.json`` shape."""

    queued: int = 0
    in_flight: int = 0
    in_transit: int = 0
    hosts: int = 0
    paused_hosts: int = 0
    paused_urls: int = 0
    refresh_waiting: int = 0
    refresh_due: int = 0
    counters: ShardCounters = field(default_factory=ShardCounters)
    #: Dropped URLs by reason (crawler.counters.DropReason).
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: page.fetched events (crawler.events.emitter): counts summed, flags or-ed.
    events: Mapping[str, Any] = field(default_factory=dict)
    news: Mapping[str, Any] = field(default_factory=dict)
    shards: int = 0

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["counters"] = self.counters.as_dict()
        out["dropped"], out["events"], out["news"] = dict(self.dropped), dict(self.events), dict(self.news)
        return out


def merge_totals(statuses: Sequence[ShardStatus]) -> CrawlTotals:
    """Sum per-shard statuses into crawl-wide totals (for progress and stats.json)."""
    dropped: dict[str, int] = {}
    events: dict[str, Any] = {}
    for s in statuses:
        for reason, v in s.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + v
        for k, v in (s.events or {}).items():  # page.fetched events (crawler.events.emitter)
            if isinstance(v, bool):
                events[k] = events.get(k, False) or v
            else:
                events[k] = events.get(k, 0) + v
    return CrawlTotals(
        queued=sum(s.queued for s in statuses),
        in_flight=sum(s.in_flight for s in statuses),
        in_transit=sum(s.in_transit for s in statuses),
        hosts=sum(s.hosts for s in statuses),
        paused_hosts=sum(s.paused_hosts for s in statuses),
        paused_urls=sum(s.paused_urls for s in statuses),
        refresh_waiting=sum(s.refresh_waiting for s in statuses),
        refresh_due=sum(s.refresh_due for s in statuses),
        counters=ShardCounters.merged(s.counters for s in statuses),
        dropped=dropped,
        events=events,
        news=merge_news([s.news for s in statuses if s.news]),
        shards=len(statuses),
    )


def merge_status(statuses: Sequence[ShardStatus]) -> dict[str, Any]:
    """:func:`merge_totals` as JSON (``GET /stats`` while running, the base of stats.json)."""
    return merge_totals(statuses).as_json()

def render_summary(c: ShardCounters, pool: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``render`` part of stats.json from the shards' ``render_*`` counters
    (crawler.render): decisions by reason, renders, fallbacks by reason, what the gate
    refused by reason, the browser's requests and bytes, script cache hits; and on Ray
    the render pool (``pool``: actors, CPUs each, or why there was none)."""

    def group(prefix: str) -> dict[str, int]:
        return {k[len(prefix):]: v for k, v in sorted(c.families.items()) if k.startswith(prefix) and v}

    return {
        "decisions": group("render_decision_"),
        "started": c.render_started,
        "rendered": c.rendered,
        "gained": c.render_gained,
        "fallbacks": group("render_fallback_"),
        "retried_after_crash": c.render_retried_crash,
        "requests": c.render_requests,
        "bytes": c.render_bytes,
        "refused": group("render_refused_"),
        "served": c.families["render_served"],  # a note of the render page (crawler.render.page)
        "script_cache_hits": c.render_script_cache_hits,
        "script_cache_revalidated": c.render_script_cache_revalidated,
        "waits": group("render_wait_"),
        "navigations": group("render_navigation_"),  # crawler.render.navigation
        "budget": group("render_budget_"),  # renders stopped at their budget, by which (crawler.render.budget)
        "pool": pool,
    }


NEWS_COUNTS = ("feeds", "hubs", "news_sitemaps", "source_fetches", "new_urls", "delays", "dates_future", "dates_ancient")


def merge_news(shards: Sequence[Mapping[str, Any]], top: int = 50) -> dict[str, Any]:
    """Crawl-wide news figures (crawler.freshness.news) from the shards' ``NewsPolicy.stats()``:
    counts summed, publication-to-fetch median and p95 weighted by how many delays each
    shard saw, and the ``top`` hosts by new URLs (a host is one shard's: docs/invariants.md #1)."""
    out: dict[str, Any] = {k: sum(s.get(k, 0) for s in shards) for k in NEWS_COUNTS}
    out["new_per_fetch"] = round(out["new_urls"] / out["source_fetches"], 3) if out["source_fetches"] else None
    timed = [s for s in shards if s.get("delays") and s.get("delay_median_s") is not None]
    n = sum(s["delays"] for s in timed)
    for key in ("delay_median_s", "delay_p95_s"):
        out[key] = round(sum(s[key] * s["delays"] for s in timed) / n, 3) if n else None
    hosts = [kv for s in shards for kv in (s.get("hosts") or {}).items()]
    out["hosts"] = dict(sorted(hosts, key=lambda kv: -kv[1]["new_urls"])[:top])
    return out


def write_stats(cfg: CrawlConfig, stats: dict[str, Any]) -> str:
    """Write ``OUT/stats.json`` (through fsspec, so s3:// works); returns its path."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    path = f"{root.rstrip('/')}/stats.json"
    fs.makedirs(root, exist_ok=True)
    data = json.dumps(stats, indent=2, sort_keys=True, default=str)

    def write() -> None:
        with fs.open(path, "w") as f:
            f.write(data)

    retried(write, f"writing {path}")
    return path


def read_stats(cfg: CrawlConfig) -> dict[str, Any]:
    """``OUT/stats.json`` (local or remote), or an empty dict."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    try:
        with fs.open(f"{root.rstrip('/')}/stats.json", "r") as f:
            stats: dict[str, Any] = json.load(f)
            return stats
    except (OSError, ValueError):
        return {}


def crawl_stats(
    cfg: CrawlConfig,
    finals: Sequence[ShardStatus],
    services: dict[str, Any],
    elapsed: float,
    *,
    finished: bool,
    ended: str,
    seen_shards: int | None,
    resumed: int,
    mode: str,
) -> dict[str, Any]:
    """The body of ``stats.json`` from the shards' final statuses and the services' stats."""
    total = merge_status(finals)
    c = ShardCounters.merged(s.counters for s in finals)
    refresh = c.refresh_fetches
    return {
        "finished": finished,
        "ended": "finished" if finished else ended,
        "elapsed_s": round(elapsed, 3),
        "pages_per_s": round(c.fetched / elapsed, 2) if elapsed > 0 else None,
        "outcomes": {k: c.outcome(k) for k in OUTCOMES},
        "requests": c.requests,
        "robots_requests": c.robots_requests,
        "retries": c.retries,
        # a bug that cost one URL (logged with its traceback): should stay 0
        "internal_errors": c.internal_errors,
        "bytes": c.bytes,
        "duplicates": {"exact": c.families["dup_exact"], "near": c.families["dup_near"]},
        "events": total["events"],
        "dropped": total["dropped"],
        "queued_unfetched": total["queued"],
        "paused": {"hosts": total["paused_hosts"], "urls": total["paused_urls"]},
        "refresh": {
            "fetches": refresh,
            "not_modified": c.not_modified,
            "not_modified_share": round(c.not_modified / refresh, 4) if refresh else None,
            "changes_found": c.changes_found,
            "due_now": total["refresh_due"],
            "waiting": total["refresh_waiting"],
        },
        "news": total["news"],
        "shards": total["shards"],
        "seen_shards": seen_shards,
        "seen": services.get("seen", {}),
        "content": services.get("content", {}),
        "resumed_urls": resumed,
        "render": render_summary(c, services.get("render_pool")) if cfg.render.mode != "never" else None,
        "regions": regions_summary(finals) if cfg.runtime.regions else None,
        "mode": mode,
        "config_fingerprint": cfg.fingerprint(),
        "config": to_dict(cfg),
    }


def regions_summary(statuses: Sequence[ShardStatus]) -> dict[str, Any]:
    """Crawl-wide region figures (crawler.placement.handover): hosts measured, moves, URLs passed on
    to a host's owner, timing probes, and per region its shards and the hosts moved in."""
    total: dict[str, int] = {}
    per_region: dict[str, dict[str, int]] = {}
    for st in statuses:
        r = st.regions or {}
        for key in ("region_measurements", "region_moves_out", "region_forwarded", "region_probes", "region_move_failures"):
            total[key] = total.get(key, 0) + int(r.get(key, 0))
        region = per_region.setdefault(str(r.get("region", "")), {"shards": 0, "hosts_moved_in": 0})
        region["shards"] += 1
        region["hosts_moved_in"] += int(r.get("region_moves_in", 0))
    return {
        "measured": total.get("region_measurements", 0),
        "moves": total.get("region_moves_out", 0),
        "move_failures": total.get("region_move_failures", 0),
        "forwarded": total.get("region_forwarded", 0),
        "probes": total.get("region_probes", 0),
        "by_region": per_region,
    }
