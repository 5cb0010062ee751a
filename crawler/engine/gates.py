"""The checks a URL passes between the frontier and its fetch, one small policy each.

The dispatcher (crawler.engine.dispatcher) asks each gate of its chain in turn; the
first that does not say :attr:`Verdict.GO` decides what happens to the URL instead of a
fetch (model: StormCrawler's one-class-per-decision filters, Scrapy's downloader
middlewares). The chain, in order (crawler.engine.assembly builds it):

1. :class:`RegionGate` (with ``runtime.regions``): the host is being timed from every
   region, or is on its way to another shard: the URL waits;
2. :class:`RobotsGate` (unless ``politeness.respect_robots`` is off): unknown rules for
   the URL's origin -> robots.txt is fetched first, in the host's slot, and the URL
   waits; refused -> a ``robots_blocked`` row;
3. :class:`BudgetGate`: the crawl-wide ``limits.max_pages``, taken when a URL is first
   fetched; spent -> the URL stays queued (a stop keeps it for a later run).

An operator's pause is not a gate: a paused host's URLs are parked by the frontier and
never handed out (crawler.frontier.frontier).
"""

from __future__ import annotations

import enum
from typing import Protocol

from crawler.engine.admission import Admission
from crawler.engine.optional import RegionsPart
from crawler.engine.recorder import Recorder
from crawler.engine.requests import RequestLane
from crawler.freshness.sitemaps import SitemapReader
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsClient
from crawler.urls import origin
from crawler.counters import ShardCounters


class Verdict(enum.Enum):
    """What a gate decided for one URL."""

    GO = "go"  #: on to the next gate, and to the fetch
    WAIT = "wait"  #: back to its host's queue, for the host's next allowed time
    DONE = "done"  #: the gate ended the URL itself (its row is recorded)
    SPENT = "spent"  #: the page budget is spent: back to the queue, and nothing more starts


class FetchGate(Protocol):
    """One check before a fetch."""

    async def check(self, item: UrlItem) -> Verdict: ...


class PageBudget(Protocol):
    """The crawl-wide ``limits.max_pages`` budget (crawler.services.budget.LeasedBudget)."""

    async def acquire(self) -> bool: ...


class RegionGate:
    """Regions: a host being timed, or moving away, is not fetched here now."""

    def __init__(self, regions: RegionsPart) -> None:
        self._regions = regions

    async def check(self, item: UrlItem) -> Verdict:
        # Timed from every region (the probes took the host's slot), or on its way to
        # another region: the URL waits for the host's next allowed time, here or on the
        # shard the host moves to (held here from now on).
        return Verdict.WAIT if await self._regions.before_fetch(item.host, origin(item.url)) else Verdict.GO


class BudgetGate:
    """``limits.max_pages``: one page of the crawl-wide budget per URL's first fetch."""

    def __init__(self, budget: PageBudget) -> None:
        self._budget = budget

    async def check(self, item: UrlItem) -> Verdict:
        if item.attempts == 0 and not await self._budget.acquire():
            return Verdict.SPENT
        return Verdict.GO


class RobotsGate:
    """robots.txt (RFC 9309): known rules allow or refuse; unknown ones are fetched first.

    Args:
        robots: the robots client (its cache, and how to fetch and parse robots.txt).
        lane: the shard's requests (robots.txt takes the host's politeness slot).
        frontier: where a host's queued URLs are refused once the rules are known.
        politeness: gets the rules' Crawl-delay.
        admission: makes the refusals durable with the rules (a restart refuses without
            asking robots.txt again).
        recorder: the rows of refused URLs.
        sitemaps: plans the sitemaps robots.txt lists (None: sitemaps off).
        attempts: tries of robots.txt that fails (timeout, reset, 5xx) before its host
            counts as unreachable (``fetch.attempts``).
        counters: the shard's counters.
    """

    def __init__(self, robots: RobotsClient, lane: RequestLane, frontier: Frontier, politeness: Politeness,
                 admission: Admission, recorder: Recorder, sitemaps: SitemapReader | None, *, attempts: int,
                 counters: ShardCounters) -> None:
        self._robots, self._lane, self._frontier, self._politeness = robots, lane, frontier, politeness
        self._admission, self._recorder, self._sitemaps = admission, recorder, sitemaps
        self._attempts = attempts
        self._counters = counters
        self._misses: dict[str, int] = {}  # origins whose robots.txt failed, in a row

    async def check(self, item: UrlItem) -> Verdict:
        org = origin(item.url)
        allowed = self._robots.cache.allowed(item.url, org)
        if allowed is None:
            # First URL of this origin (or expired rules): robots.txt takes the host's
            # slot; the URL waits for the next allowed time.
            await self._refresh(org, item.host)
            return Verdict.WAIT
        if not allowed:
            self._recorder.refused(item)
            return Verdict.DONE
        if self._sitemaps is not None:  # a host that shows enough pages earns its /sitemap.xml probe
            due = self._sitemaps.probes_due(item.host, self._allows)
            if due:
                self._frontier.push(due)
        return Verdict.GO

    def _allows(self, url: str) -> bool:
        """robots.txt allows ``url`` by the rules cached now (unknown rules: not yet)."""
        return bool(self._robots.cache.allowed(url, origin(url)))

    async def _refresh(self, org: str, host: str) -> None:
        rules, requests = await self._robots.refresh(org, host, self._lane.fetch)
        self._counters.robots_requests += requests
        misses = self._misses.get(org, 0) + 1
        if rules.unreachable is not None and misses < self._attempts:
            # robots.txt could not be had (a timeout, a reset, a 5xx): like a page that
            # fails that way, it is asked again after the host's (widened) interval before
            # the host counts as unreachable and its URLs are refused. Nothing of the host
            # is fetched meanwhile: complete disallow while it is unreachable (RFC 9309
            # 2.3.1.4). A lost robots.txt response -- a slow server, or this shard's own
            # loop stalled past the deadline -- so costs a retry, not a whole host.
            self._misses[org] = misses
            self._counters.robots_retries += 1
            self._robots.cache.drop([org])
            return
        self._misses.pop(org, None)
        self._politeness.set_crawl_delay(host, rules.crawl_delay)
        if self._sitemaps is not None:
            self._frontier.push(self._sitemaps.plan(org, host, rules.sitemaps, rules.allowed))
        # URLs queued before the rules were known: refuse the disallowed ones now, the
        # verdict durable with them (a restart refuses without asking robots.txt again).
        blocked = self._frontier.remove_where(host, lambda it: not rules.allowed(it.url))
        self._admission.robots_verdict(org, [it.url for it in blocked])
        for item in blocked:
            self._recorder.refused(item)
