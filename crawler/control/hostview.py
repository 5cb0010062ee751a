"""What one shard knows of a host, rendered for the API (GET /hosts/{host}).

A view over the shard's parts (frontier, politeness, robots cache, page budget,
regions): the scheduler runs the shard and renders nothing. An operator's call, so a
scan of the shard's hosts is fine here (never per URL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.control.hostpolicy import HostTarget, name_of

if TYPE_CHECKING:  # the view reads a shard; the shard does not know the view
    from crawler.engine.scheduler import ShardScheduler


def _max_rps(interval_s: float | None) -> float | None:
    return None if interval_s in (None, 0) else 1.0 / interval_s  # type: ignore[operator]


def host_info(shard: ShardScheduler, target: HostTarget) -> dict[str, Any]:
    """The hostname-wide policy and, for each of the host's keys on ``shard``, the policy
    in force, queue, next allowed time, robots rules and backoff (and, with regions, its
    placement)."""
    politeness, budget, frontier = shard.politeness, shard.host_budget, shard.frontier
    if target.hostname_wide:
        keys = {k for k in (*frontier.keys(), *politeness.keys()) if name_of(k) == target.name}
    else:
        keys = {target.key}
    iv, paused = politeness.overrides.name_override(target.name)
    limits, name_limits = budget.limits()
    out = []
    for key in sorted(keys):
        pace = politeness.describe(key)
        robots = [r for r in (shard.robots.cache.describe(f"{scheme}://{key}") for scheme in ("http", "https")) if r]
        out.append({
            "key": key,
            "shard": shard.shard_id,
            "policy": {
                "max_rps": _max_rps(pace["override_interval_s"]),
                "paused": pace["paused"],
                "max_pages": budget.limit(key),
            },
            "queued": frontier.queued_for(key),
            "in_flight": pace["in_flight"],
            "next_allowed_in_s": pace["next_allowed_in_s"],
            "interval_s": pace["interval_s"],
            "pages_left": budget.remaining(key),
            "robots": robots,
            "backoff": {
                "interval_s": pace["backoff_interval_s"],
                "retry_after_s": pace["retry_after_s"],
                "crawl_delay_s": pace["crawl_delay_s"],
            },
            **({"placement": shard.regions.describe(key)} if shard.regions is not None else {}),
        })
    return {
        "hostname_policy": {
            "max_rps": _max_rps(iv),
            "paused": paused,
            "max_pages": name_limits.get(target.name),
        },
        "keys": out,
    }
