"""News by the minute: feeds, news sitemaps and hub pages, read at the pace of their
host's news, one source per host.

A *source* is a URL whose refetches are worth making for the links they bring, not for
its own content: a feed (crawler.parse.feeds), a news sitemap (crawler.freshness.sitemaps, ``news:``),
or a *hub*, a page whose refetches keep yielding new in-scope URLs (a front page, a
section page). Everything else keeps the adaptive schedule of crawler.frontier.recrawl.

*New* means new to the crawl: a link the seen set had not met, admitted by the shard
that owns it (:meth:`NewsPolicy.credit`, called from admission). A link of a hub points
to a page of the same host, so that shard is this one: the count is exact and needs no
round trip. The shard asks for the source's next interval only after the source's
links were delivered (:meth:`NewsPolicy.after_fetch`), so the count is complete.

The schedule of a source, after each fetch:

1. *first fetch*: a feed or news sitemap is a source at once; a page is a *candidate*
   when its first fetch admitted at least ``hub_min_new`` new URLs (at most
   ``MAX_CANDIDATES_PER_HOST`` at a time). Either is read again after ``probe_interval_s``.
2. *refetch*: the host's arrival rate (a Poisson rate) is read from the publication dates
   its feeds and news sitemaps give (:func:`dated_rate`, the busiest source's), else from the new URLs its
   sources yielded per second (decayed sums, each source fetch weighing ``HOST_DECAY`` of
   the one after it). The host is read once per *period* ``T``: with arrivals at rate r
   and a read every T, an article waits uniformly up to T to be seen, then a politeness
   interval ``lag`` (and one more per article seen with it) to be fetched, so the p95
   delay is about 0.95 T + lag (1 + r T); T is the largest that keeps it within
   ``target_delay_p95_s``, but at least ``target_new_per_fetch`` / r (a host that rarely
   publishes is not read every few seconds for it). T grows by at most
   ``ACTIVE_GROW_CAP`` a read (a lull in a Poisson stream is not yet a stop).
   Which source takes the reads is crawler.freshness.newschoice's: the one that lists the
   host's new articles completely and first, with one read in ``CHECK_EVERY`` going to the
   others in turn, so that a chosen source that stops carrying everything is noticed (and
   replaced) at no extra cost. A hub that lists too few of them (a section page) settles.
3. *settling*: a candidate whose first ``PROBES`` refetches yield nothing, and a hub
   whose period grows past ``recrawl.initial_interval_s``, go back to the adaptive
   schedule at ``initial_interval_s``. A page whose refetch yields new URLs again becomes
   a source again (so a hub's state rebuilds itself after a restart: only the interval
   is durable).
4. floors: ``recrawl.min_interval_s``; a feed's ``<ttl>``; its ``<skipHours>`` and
   ``<skipDays>`` push the due time out of the skipped hours.

Every refetch is an ordinary refresh of the host's back queue (crawler.frontier.backqueue), so
politeness and ``refresh_share`` apply to sources as to any page. New URLs from a
source are marked ``fresh``: they go ahead of the host's backlog of older discovery,
and across hosts the most recently published first (crawler.frontier.backqueue.default_priority).

Publication dates are checked (:func:`sane_published`): one past the fetch time (beyond
``DATE_SKEW_S``) is taken as the fetch time, one before ``DATE_FLOOR`` (1990) is unknown;
either is counted (``dates_future``, ``dates_ancient``) and neither puts its URL ahead of
real news nor skews the host's rate.

Per host it counts sources found, fetches of sources, new URLs they yielded, and for
URLs whose publication time a feed or news sitemap gave, the delay from publication to
fetch (:meth:`NewsPolicy.stats`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from crawler.errors import ConfigError
from crawler.parse.feeds import Feed, next_allowed
from crawler.freshness.newsbook import (
    DELAY_SAMPLE,
    MAX_CREDITS,
    STATS_EVERY_S,
    STATS_TOP_HOSTS,
    HostNews,
    NewsBook,
    NewsClock,
    Source,
    percentile,
)
from crawler.freshness.newschoice import INCOMPLETE
from crawler.frontier.recrawl import Schedule
from crawler.frontier.urlitem import UrlItem
from crawler.urls import host_key

# The source table and the figures are crawler.freshness.newsbook's; their names stay
# importable from here.
__all__ = [
    "ACTIVE_GROW_CAP",
    "DATE_FLOOR",
    "DATE_SKEW_S",
    "DELAY_SAMPLE",
    "GROW_CAP",
    "P95_OF_PERIOD",
    "HOST_DECAY",
    "MAX_CANDIDATES_PER_HOST",
    "MAX_CREDITS",
    "MIN_DATES",
    "PROBES",
    "STATS_EVERY_S",
    "STATS_TOP_HOSTS",
    "HostNews",
    "NewsPolicy",
    "Source",
    "dated_rate",
    "percentile",
    "read_period",
    "sane_published",
]

#: Weight of a host's past source fetches in its rate of new URLs, per fetch.
HOST_DECAY = 0.95
#: Publication dates before this (1990-01-01 UTC: before the web) are unknown: a
#: ``1970-01-01`` or ``0001-01-01`` is a placeholder, not a date.
DATE_FLOOR = 631_152_000.0
#: A publication date up to this far past the fetch time is a clock off, kept as given;
#: further (``2100-01-01``, ``9999-12-31``) it is taken as the fetch time.
DATE_SKEW_S = 600.0
#: Publication dates a source must give for the host's rate to be read from them.
MIN_DATES = 4
#: A source's interval grows by at most this factor per fetch that yields nothing.
GROW_CAP = 2.0
#: A host's read period grows by at most this factor per read: a lull in a Poisson
#: stream of articles is not yet a host that stopped.
ACTIVE_GROW_CAP = 1.25
#: The p95 of a uniform wait over one period, in periods.
P95_OF_PERIOD = 0.95
#: Pages of one host probed as hubs at a time: in a continuous crawl of an ordinary site
#: most pages admit new URLs on their first fetch, and probing each would multiply the
#: refresh load; a news site's hubs are among its first pages (front page, sections).
MAX_CANDIDATES_PER_HOST = 8
#: Refetches a candidate gets to yield something before it settles: the first two
#: ``probe_interval_s`` apart (a front page found before its host's feed is its only
#: source: its articles wait for it), then each twice as far (80 s at the default 10 s).
PROBES = 4

#: The link policy's scope and trap checks, as the pipeline hands them to
#: :meth:`NewsPolicy.feed_links`: ``follow(urls, depth)`` -> (kept URL, the URL it came from).
Follow = Callable[[list[str], int], Iterable[tuple[str, str]]]


def read_period(rate: float, target_p95_s: float, lag_s: float, min_new: float) -> float:
    """The read period T of a host whose articles arrive at ``rate`` a second (step 2 of
    the module docstring): 0.95 T + lag (1 + rate T) = the p95 target, but at least
    ``min_new`` / rate."""
    return max((target_p95_s - lag_s) / (P95_OF_PERIOD + rate * lag_s), min_new / rate)


def _entry_urls(feed: Feed | None) -> list[str] | None:
    return [u for u, _, _ in feed.entries] if feed is not None else None


def _hints(src: Source, feed: Feed) -> None:
    src.ttl_s, src.skip_hours, src.skip_days = feed.ttl_s, feed.skip_hours, feed.skip_days


def sane_published(when: float | None, now: float) -> tuple[float | None, str | None]:
    """A publication date as the policy uses it, and what was wrong with it: ("future"),
    taken as ``now`` (the fetch time); ("ancient"), before ``DATE_FLOOR`` or not a
    number, unknown (None)."""
    if when is None:
        return None, None
    if not math.isfinite(when) or when < DATE_FLOOR:
        return None, "ancient"
    if when > now + DATE_SKEW_S:
        return now, "future"
    return when, None


def dated_rate(published: Sequence[float | None], now: float, most: int = 50) -> float | None:
    """Articles per second from the newest ``most`` publication dates of a feed or news
    sitemap: with k of them, the oldest at t, (k - 1) / (now - t), so a source that stopped
    publishing a while ago counts its silence. None with fewer than ``MIN_DATES`` dates."""
    dates = sorted((p for p in published if p is not None and p <= now + 60.0), reverse=True)[:most]
    if len(dates) < MIN_DATES or now - dates[-1] <= 0:
        return None
    return (len(dates) - 1) / (now - dates[-1])


class NewsPolicy:
    """The source schedule of the module docstring, for one shard.

    Args:
        min_interval_s, initial_interval_s, max_interval_s: the ``recrawl:`` bounds.
        probe_interval_s: the first refetch of a new source or candidate.
        target_delay_p95_s: the publication-to-fetch p95 the host's period aims at.
        target_new_per_fetch: the fewest new articles a read aims at on average (a host's
            period is at least this / its rate).
        fetch_lag_s: the politeness interval: from a read to the fetch of what it found.
        hub_min_new: new URLs a page's first fetch must admit to be a candidate hub.
        max_sources: sources remembered (least recently fetched forgotten first;
            the table is crawler.freshness.newsbook.NewsBook).
        schedule: False when recrawl is off: sources are read once, as links sources.
        hubs, feeds, news_sitemaps: which kinds of source are used.
        clock: ``wall()`` stamps fetches.
    """

    def __init__(
        self,
        *,
        min_interval_s: float,
        initial_interval_s: float,
        max_interval_s: float,
        probe_interval_s: float,
        target_new_per_fetch: float,
        hub_min_new: int,
        max_sources: int,
        clock: NewsClock,
        target_delay_p95_s: float = 11.0,
        fetch_lag_s: float = 1.0,
        schedule: bool = True,
        hubs: bool = True,
        feeds: bool = True,
        news_sitemaps: bool = True,
    ) -> None:
        if not 0 < min_interval_s <= initial_interval_s <= max_interval_s:
            raise ConfigError("news: need 0 < recrawl.min_interval_s <= initial_interval_s <= max_interval_s")
        if probe_interval_s <= 0 or target_new_per_fetch <= 0 or hub_min_new < 1 or max_sources < 1:
            raise ConfigError("news: probe_interval_s and target_new_per_fetch must be > 0, hub_min_new and max_sources >= 1")
        if target_delay_p95_s <= 0 or fetch_lag_s < 0:
            raise ConfigError("news: target_delay_p95_s must be > 0")
        self.target_p95 = float(target_delay_p95_s)
        self.fetch_lag_s = float(fetch_lag_s)
        self.min_interval_s = float(min_interval_s)
        self.initial_interval_s = float(initial_interval_s)
        self.max_interval_s = float(max_interval_s)
        self.probe_interval_s = min(max(float(probe_interval_s), self.min_interval_s), self.initial_interval_s)
        self.target = float(target_new_per_fetch)
        self.hub_min_new = int(hub_min_new)
        self.max_sources = int(max_sources)
        self.scheduling = schedule
        self.hubs, self.feeds, self.news_sitemaps = hubs, feeds, news_sitemaps
        self._clock = clock
        self.counters: Counter[str] = Counter()
        self._book = NewsBook(self.max_sources, clock, self.counters)
        self._sources = self._book.sources  # the table itself (read here, kept there)
        self._listed: dict[str, list[str]] = {}  # source -> the URLs its fetch just listed

    # -- what the shard tells us -------------------------------------------------------

    def credit(self, admitted: Iterable[UrlItem]) -> None:
        """URLs this shard just admitted as new: each counts for its referrer when that is
        a page of the same host (a source asks for its count in :meth:`after_fetch`)."""
        self._book.credit(admitted)

    def is_source(self, url: str) -> bool:
        return url in self._sources

    def mark(self, item: UrlItem, links: list[UrlItem]) -> None:
        """Links of a source are news: ahead of the host's older discovery."""
        if item.url in self._sources:
            for link in links:
                link.fresh = True
            self._listed[item.url] = [link.url for link in links if link.host == item.host]

    def feed_links(self, item: UrlItem, feed: Feed, follow: Follow) -> list[UrlItem]:
        """A feed's entries as fresh links (``follow(urls, depth)``: the link policy's
        scope and trap checks), with their publication times."""
        depth = item.depth + 1
        now = self._clock.wall()
        published: dict[str, float | None] = {}
        for url, when, _title in feed.entries:
            if url not in published:
                published[url] = self.check_date(item.host, when, now)
        links: list[UrlItem] = []
        for url, original in follow([u for u, _, _ in feed.entries], depth):
            links.append(UrlItem(url, depth, item.url, fresh=True, published=published.get(original)))
        return links

    def check_date(self, host: str, when: float | None, now: float) -> float | None:
        """:func:`sane_published`, counted for ``host``."""
        sane, wrong = sane_published(when, now)
        if wrong is not None:
            self._book.count(self._book.host(host), f"dates_{wrong}")
        return sane

    def check_dates(self, host: str, links: Iterable[UrlItem]) -> None:
        """The publication dates of a news sitemap's links, checked in place."""
        now = self._clock.wall()
        for link in links:
            if link.published is not None:
                link.published = self.check_date(host, link.published, now)

    # -- the schedule --------------------------------------------------------------------

    def after_fetch(self, item: UrlItem, status: int | None, schedule: Schedule | None, feed: Feed | None = None) -> Schedule | None:
        """A fetched URL's next schedule: ``schedule`` (crawler.frontier.recrawl's) unless the URL is
        or becomes a source (module docstring); also records the publication delay."""
        now = self._clock.wall()
        new = self._book.take_credit(item.url)
        if item.published is not None and item.fetch_seq == 1 and status is not None and status < 400:
            self._book.observe_delay(item.host, now - item.published)
        if schedule is None:
            self._listed.pop(item.url, None)
            return None
        if feed is not None and self.scheduling:
            self._dates(item.url, item.host, [p for _, p, _ in feed.entries], now)
        src = self._book.touch(item.url)
        if src is None:
            kind = self._new_kind(item, new, feed)
            if kind is None or kind == "candidate" and not self.scheduling:
                return schedule  # without recrawl a page is fetched once: nothing to probe
            src = self._book.track(item.url, item.host, kind, self.probe_interval_s, now)
            self._observe(item.url, src, now, self._listed.pop(item.url, None) or _entry_urls(feed))
            if feed is not None:
                _hints(src, feed)
            interval: float | None = src.interval_s
            if kind == "hub":  # a refetch that yielded: its rate is known from its interval
                last = item.prev.interval_s if item.prev is not None and item.prev.interval_s else self.initial_interval_s
                src.interval_s, src.last_wall = last, now - last
                interval = self._next_interval(item.url, src, new, now)
        else:
            if feed is not None:
                _hints(src, feed)
            failed = status is None or status >= 400
            listed = self._listed.pop(item.url, None) or _entry_urls(feed)
            self._observe(item.url, src, now, None if failed else listed, status == 304)
            interval = self._next_interval(item.url, src, 0 if failed else new, now)
        if not self.scheduling:
            return schedule
        if interval is None:
            return Schedule(schedule.changed, self.initial_interval_s, now + self.initial_interval_s)
        due = self._due(item.url, src, interval, now)
        return Schedule(schedule.changed, src.interval_s, due)

    def sitemap_again(
        self, item: UrlItem, news: bool, feed: Feed | None = None, published: Sequence[float | None] = (),
        listed: Sequence[str] | None = None,
    ) -> UrlItem | None:
        """After reading a sitemap (or a feed named as one) whose news entries gave the
        ``published`` dates (checked) and ``listed`` these URLs (None: unknown): its next
        read, as a sitemap item due later, if it is a news source; None otherwise."""
        now = self._clock.wall()
        new = self._book.take_credit(item.url)
        if feed is not None:
            published = [self.check_date(item.host, p, now) for _, p, _ in feed.entries]
            listed = _entry_urls(feed) if listed is None else listed
        if news and self.scheduling:
            self._dates(item.url, item.host, published, now)
        src = self._book.touch(item.url)
        if src is None:
            if not news:
                return None
            src = self._book.track(item.url, item.host, "feed" if feed is not None else "sitemap", self.probe_interval_s, now)
            self._observe(item.url, src, now, [u for u in listed or () if host_key(u) == item.host])
            interval: float | None = src.interval_s
        else:
            self._observe(item.url, src, now, None if listed is None else [u for u in listed if host_key(u) == item.host])
            interval = self._next_interval(item.url, src, new, now)
        if feed is not None:
            _hints(src, feed)
        if interval is None or not self.scheduling:
            return None  # it stopped yielding: read again with the host's robots.txt
        due_wall = self._due(item.url, src, interval, now)
        # A due read of a news source goes ahead of the articles it found before (ranked
        # as news published at its due time).
        nxt = UrlItem(item.url, 0, host=item.host, kind="sitemap", fresh=True, published=due_wall)
        nxt.due_at = self._clock.now() + (due_wall - now)
        return nxt

    def _observe(self, url: str, src: Source, now: float, listed: list[str] | None, unchanged: bool = False) -> None:
        """What this read of a source showed (crawler.freshness.newschoice.HostChoice)."""
        choice = self._book.host(src.host).choice
        new = self._book.take_new(url)
        if unchanged and not new:
            choice.unchanged(url, now)
        else:
            choice.observe(url, now, new, listed)

    def _dates(self, source: str, host: str, published: Sequence[float | None], now: float) -> None:
        published = [sane_published(p, now)[0] for p in published]
        rate = dated_rate(published, now)
        if rate is not None:
            self._book.host(host).dated[source] = rate

    def _new_kind(self, item: UrlItem, new: int, feed: Feed | None) -> str | None:
        if feed is not None:
            return "feed" if self.feeds else None
        if not self.hubs:
            return None
        if item.fetch_seq == 1:
            if new < self.hub_min_new:
                return None
            if self._book.host(item.host).candidates >= MAX_CANDIDATES_PER_HOST:
                self.counters["news_candidates_skipped"] += 1
                return None
            return "candidate"
        # A refetch of a page we do not track (settled, forgotten, or before a restart)
        # that yields new URLs is a hub (again): one new URL is enough for a page that was
        # read faster than the adaptive schedule starts (a source before a restart).
        fast = item.prev is not None and item.prev.interval_s is not None and item.prev.interval_s < self.initial_interval_s
        return "hub" if new >= (1 if fast else self.hub_min_new) else None

    def _next_interval(self, url: str, src: Source, new: int, now: float) -> float | None:
        """Steps 2 and 3 of the module docstring; None: the source settles."""
        h = self._book.host(src.host)
        elapsed = now - (h.last_poll if h.last_poll is not None else src.last_wall)
        h.last_poll = now
        h.new_d = HOST_DECAY * h.new_d + new
        h.seconds_d = HOST_DECAY * h.seconds_d + max(0.0, elapsed)
        src.last_wall = now
        self._book.count(h, "source_fetches")
        self._book.count(h, "new_urls", new)
        if src.kind == "candidate":
            if new == 0:
                src.empty += 1
                if src.empty >= PROBES:
                    self._book.settle(url)
                    return None
                return min(src.interval_s * (GROW_CAP if src.empty > 1 else 1.0), self.initial_interval_s)
            src.kind = "hub"
            h.candidates = max(0, h.candidates - 1)
            self._book.count(h, "hubs")
        period = self._period(h, now)
        if src.kind == "hub":
            cov = h.choice.reach[url].coverage() if url in h.choice.reach else None
            if period >= self.initial_interval_s or cov is not None and cov < INCOMPLETE and h.choice.chosen != url:
                self._book.settle(url)
                return None
        return min(period, self.max_interval_s)

    def _period(self, h: HostNews, now: float) -> float:
        """The host's read period T (step 2 of the module docstring)."""
        rate = h.rate()
        period = self.probe_interval_s if rate is None or rate <= 0 else read_period(
            rate, self.target_p95, self.fetch_lag_s, self.target)
        period = max(period, self.min_interval_s)
        if h.choice.period > 0:
            period = min(period, h.choice.period * ACTIVE_GROW_CAP)
        h.choice.set_period(period, now)
        return period

    def _due(self, url: str, src: Source, interval: float, now: float) -> float:
        """Step 4, and the source's turn among the host's sources (crawler.freshness.newschoice)."""
        floor = max(self.min_interval_s, src.ttl_s or 0.0)
        h = self._book.host(src.host)
        due = now + max(interval, floor)
        if src.kind != "candidate" and interval < self.max_interval_s:
            choice = h.choice
            members = {u: self._sources[u].kind for u in h.upcoming if u in self._sources}
            members[url] = src.kind
            members = {u: k for u, k in members.items() if k != "candidate"}
            before = choice.switches
            chosen = choice.choose(members)
            self.counters["news_source_switches"] += choice.switches - before
            if choice.period <= 0:
                choice.set_period(interval, now)
            due = choice.slot(url, list(members), now + floor, h.upcoming.get(chosen) if chosen else None)
        src.interval_s = max(floor, due - now)
        due = next_allowed(due, src.skip_hours, src.skip_days)
        h.upcoming[url] = due
        return due

    # -- figures: crawler.freshness.newsbook ----------------------------------------------

    @property
    def _hosts(self) -> dict[str, HostNews]:
        """The hosts remembered (tests/unit/test_news.py checks the bound)."""
        return self._book.hosts

    def stats(self, *, fresh: bool = False) -> dict[str, Any]:
        """This shard's figures: feeds, hubs and news sitemaps found, refetches of them and
        the new URLs they yielded (and per fetch), publication-to-fetch delay (median and
        p95 of the latest ``DELAY_SAMPLE`` * 4, how many in all), and the same per host for
        the ``STATS_TOP_HOSTS`` hosts with the most new URLs. Recomputed at most every
        ``STATS_EVERY_S`` (progress asks several times a second; a shard may follow many
        hosts; ``fresh``: now, e.g. for the final figures). The shape
        :func:`crawler.session.crawlstats.merge_news` merges across shards."""
        return self._book.stats(fresh=fresh)

    def sources(self) -> dict[str, int]:
        """Sources tracked now, by kind."""
        return self._book.kinds()
