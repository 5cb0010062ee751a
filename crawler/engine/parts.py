"""The parts one shard is made of, as the assembly (crawler.engine.assembly) built them.

A record, not a collaborator: :class:`~crawler.engine.shard.Shard` takes it once and
hands each of its own pieces (the dispatcher, the handler, the gates) the parts that
piece needs. Nothing outside the shard reads it; tests may, to look inside one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from crawler.clock import Clock
from crawler.engine.admission import Admission
from crawler.engine.dispatcher import Claims, DispatchSettings, Gate, Hold
from crawler.engine.gates import PageBudget
from crawler.engine.linkrouter import LinkRouter
from crawler.engine.optional import CheckpointPart, EventsPart, FeedPart, JournalPart, NewsPart, RegionsPart
from crawler.engine.outbox import Outbox
from crawler.engine.pipeline import PagePipeline
from crawler.engine.requests import Fetcher
from crawler.freshness.sitemaps import SitemapReader
from crawler.frontier.frontier import Frontier
from crawler.frontier.store import FrontierStore
from crawler.policy.hostbudget import HostBudget
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsClient
from crawler.counters import DropReason, ShardCounters


@dataclass(frozen=True)
class ShardParts:
    """Everything per host a shard owns, and its ways out (module docstring).

    The optional features are never None: a crawl without one gets its null object
    (crawler.engine.optional). ``store`` is None for a crawl without durable state, and
    ``sitemaps`` with ``sitemaps.enabled`` off.
    """

    shard_id: str
    settings: DispatchSettings
    clock: Clock
    frontier: Frontier
    politeness: Politeness
    robots: RobotsClient
    pipeline: PagePipeline
    host_budget: HostBudget
    admission: Admission
    budget: PageBudget
    fetcher: Fetcher
    outbox: Outbox
    router: LinkRouter
    store: FrontierStore | None
    checkpointer: CheckpointPart
    feed: FeedPart
    sitemaps: SitemapReader | None
    news: NewsPart
    state_log: JournalPart
    regions: RegionsPart
    events: EventsPart
    gate: Gate
    hold: Hold
    claims: Claims
    #: Steps run once before the first dispatch (resuming from a remote copy:
    #: crawler.recovery.statefiles; moves a crash interrupted).
    on_start: Sequence[Callable[[], Awaitable[None]]] = ()
    #: URLs re-queued from the store at start (crawler.engine.checkpoint).
    resumed: int = 0

    @property
    def counters(self) -> ShardCounters:
        """The shard's counters (shared by the pipeline, the dispatcher and their parts)."""
        return self.pipeline.counters

    @property
    def dropped(self) -> Counter[DropReason]:
        """URLs that leave with no fetch and no row, by reason."""
        return self.pipeline.dropped
