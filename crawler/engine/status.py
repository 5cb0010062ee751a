"""One shard's status: the record a shard answers every poll with.

``crawler.engine.shard.Shard.report()`` builds it; the driver reads it to prove termination
(crawler.session.termination), to sum crawl-wide figures (crawler.session.crawlstats.merge_status, which
is the view that turns statuses into the JSON of ``stats.json``, ``GET /stats`` and
``crawl stats --json``), to see a resumed crawl and a failed shard (crawler.session.crawlsession) and
to balance the URL ledger (crawler.session.ledger). Declared once, as a frozen dataclass, so that
a misspelt field is an error rather than a silent zero; it crosses the Ray boundary as is
(actors/host_shard.py).

Every field but ``shard`` has the value of a shard that has done nothing, so a test can
name only what its story needs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from crawler.counters import DropReason, ShardCounters


@dataclass(frozen=True)
class ShardStatus:
    """One shard's numbers at one poll.

    ``idle``: no fetch in flight, no link in transit, and no queued URL that could become
    ready (the page budget is spent, or only paused hosts remain). ``paused_urls``: queued
    URLs of paused hosts: idle, but not done (the crawl waits for them to be unpaused, or
    for a stop that keeps them for the next resume).

    The last three fields are filled in after the report: ``incarnation`` and ``error`` by
    the server around the shard (crawler.engine.shardserver), ``store_counts`` by its
    shutdown: ``incarnation`` (a restarted actor is a new incarnation, so termination
    does not mistake its fresh counters for the old quiet ones), ``error`` (the shard's
    run task failed: the session stops the crawl with it) and ``store_counts`` (rows of
    the shard's durable store by state, in the final status only; crawler.session.ledger).
    """

    shard: str
    idle: bool = False
    paused_hosts: int = 0
    paused_urls: int = 0
    queued: int = 0
    in_flight: int = 0
    in_transit: int = 0
    hosts: int = 0
    batches_received: int = 0
    batches_sent: int = 0
    budget_spent: bool = False
    #: What the shard did (requests, outcomes, bytes, dup_*, render_*...): a copy taken at report time.
    counters: ShardCounters = field(default_factory=ShardCounters)
    #: Links not followed, by reason.
    dropped: Mapping[DropReason, int] = field(default_factory=dict)
    #: The link router's figures (crawler.engine.linkrouter.LinkRouter.stats).
    router: Mapping[str, int] = field(default_factory=dict)
    rows_pending: int = 0
    frontier_recounts: int = 0
    refresh_waiting: int = 0
    refresh_due: int = 0
    #: URLs this shard found queued in its store when it opened (a resumed crawl).
    resumed: int = 0
    #: page.fetched events (crawler.events.emitter.EventEmitter.stats), None without events.
    events: Mapping[str, Any] | None = None
    #: News figures (crawler.freshness.news.NewsPolicy.stats), empty without news.
    news: Mapping[str, Any] = field(default_factory=dict)
    #: The shard's state log (crawler.recovery.statelog), None without one.
    state_log: Mapping[str, int] | None = None
    #: Regions (crawler.placement.handover.Regions.stats), None without runtime.regions.
    regions: Mapping[str, Any] | None = None
    #: Politeness delay put between a host's requests, summed (crawler.policy.politeness).
    politeness_wait_s: float = 0.0
    incarnation: str = ""
    error: str | None = None
    store_counts: Mapping[str, int] | None = None

    def but(self, **changes: Any) -> ShardStatus:
        """A copy with ``changes`` (how the shell adds ``incarnation``, ``error``,
        ``store_counts``)."""
        return dataclasses.replace(self, **changes)
