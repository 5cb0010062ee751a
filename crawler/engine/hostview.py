"""What one shard knows of a host, as a :class:`~crawler.engine.shardapi.HostView`.

Read from the shard's parts (frontier, politeness, robots cache, page budget, regions)
by the shard itself (crawler.engine.shard.Shard.host_info): an operator's call, so a scan
of the shard's hosts is fine here (never per URL).
"""

from __future__ import annotations

from crawler.policy.hostpolicy import HostTarget, name_of
from crawler.engine.parts import ShardParts
from crawler.engine.shardapi import BackoffView, HostKeyView, HostPolicyView, HostView


def _max_rps(interval_s: float | None) -> float | None:
    return None if interval_s is None or interval_s == 0 else 1.0 / interval_s


def host_view(parts: ShardParts, target: HostTarget) -> HostView:
    """The hostname-wide policy and, for each of the host's keys on this shard, the policy
    in force, queue, next allowed time, robots rules and backoff (and, with regions, its
    placement)."""
    politeness, budget, frontier = parts.politeness, parts.host_budget, parts.frontier
    if target.hostname_wide:
        keys = {k for k in (*frontier.keys(), *politeness.keys()) if name_of(k) == target.name}
    else:
        keys = {target.key}
    iv, paused = politeness.overrides.name_override(target.name)
    _, name_limits = budget.limits()
    out = []
    for key in sorted(keys):
        pace = politeness.describe(key)
        robots = tuple(r for r in (parts.robots.cache.describe(f"{scheme}://{key}") for scheme in ("http", "https")) if r)
        out.append(HostKeyView(
            key=key,
            shard=parts.shard_id,
            policy=HostPolicyView(_max_rps(pace["override_interval_s"]), pace["paused"], budget.limit(key)),
            queued=frontier.queued_for(key),
            in_flight=pace["in_flight"],
            next_allowed_in_s=pace["next_allowed_in_s"],
            interval_s=pace["interval_s"],
            pages_left=budget.remaining(key),
            robots=robots,
            backoff=BackoffView(pace["backoff_interval_s"], pace["retry_after_s"], pace["crawl_delay_s"]),
            placement=parts.regions.describe(key),
        ))
    return HostView(HostPolicyView(_max_rps(iv), paused, name_limits.get(target.name)), tuple(out))
