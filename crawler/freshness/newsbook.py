"""The bookkeeping of the news sources of one shard: which URLs are sources, their
credits of new URLs, and each host's figures.

crawler.freshness.news.NewsPolicy decides when a source is read again; what it decides
from is kept here: the source table (bounded by ``max_sources``, the least recently
fetched forgotten first), the new URLs admitted per referrer (:meth:`NewsBook.credit`),
each host's pooled rate and upcoming reads (:class:`HostNews`, as many hosts as
sources), and the figures of :meth:`NewsBook.stats`.
"""

from __future__ import annotations

import heapq
import statistics
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler.freshness.newschoice import HostChoice
from crawler.frontier.urlitem import UrlItem
from crawler.urls import host_key

__all__ = [
    "DELAY_SAMPLE",
    "MAX_CREDITS",
    "STATS_EVERY_S",
    "STATS_TOP_HOSTS",
    "HostNews",
    "NewsBook",
    "NewsClock",
    "Source",
    "percentile",
]

#: Publication-to-fetch delays kept per host (the newest), for the median and p95.
DELAY_SAMPLE = 256
#: Hosts listed in :meth:`NewsBook.stats` (the most new URLs first).
STATS_TOP_HOSTS = 50
#: :meth:`NewsBook.stats` is recomputed at most this often (clock seconds).
STATS_EVERY_S = 2.0
#: Credits waiting for their source to ask (a bound: credits of a source that never asks,
#: e.g. links re-sent on resume, must not pile up).
MAX_CREDITS = 100_000
#: New URLs remembered per source fetch for crawler.freshness.newschoice (the newest count).
MAX_NEW_LISTED = 512


class NewsClock(Protocol):
    """What the news sources need of a clock (crawler.clock.Clock has it)."""

    def now(self) -> float:
        """Monotonic seconds (when figures were computed, when a read is due)."""

    def wall(self) -> float:
        """UTC epoch seconds (when a source was fetched, when an article was published)."""


@dataclass(slots=True)
class Source:
    """What the policy remembers of one source (in memory; bounded by ``max_sources``)."""

    kind: str  # "candidate", "hub", "feed" or "sitemap"
    host: str
    interval_s: float
    last_wall: float
    empty: int = 0  # refetches of a candidate that yielded nothing
    ttl_s: float | None = None
    skip_hours: frozenset[int] = frozenset()
    skip_days: frozenset[int] = frozenset()


@dataclass(slots=True)
class HostNews:
    """One host's figures (:meth:`NewsBook.stats`)."""

    feeds: int = 0
    hubs: int = 0
    news_sitemaps: int = 0
    source_fetches: int = 0
    new_urls: int = 0
    delays: deque[float] = field(default_factory=lambda: deque(maxlen=DELAY_SAMPLE))
    delays_n: int = 0
    # The host's rate of new URLs, pooled over its sources (decayed per source fetch).
    new_d: float = 0.0
    seconds_d: float = 0.0
    last_poll: float | None = None
    upcoming: dict[str, float] = field(default_factory=dict)  # source URL -> next due (wall)
    dated: dict[str, float] = field(default_factory=dict)  # source -> rate from the dates it gave
    candidates: int = 0  # pages being probed as hubs now
    dates_future: int = 0  # publication dates past the fetch time (taken as the fetch time)
    dates_ancient: int = 0  # publication dates before crawler.freshness.news.DATE_FLOOR (unknown)
    choice: HostChoice = field(default_factory=HostChoice)  # which source to read (crawler.freshness.newschoice)

    def rate(self) -> float | None:
        """New URLs per second: from publication dates when a source gave enough of them
        (the highest of its sources' rates), else over the host's recent source fetches (None: nothing known yet)."""
        if self.dated:  # the busiest source: one gone stale says nothing of the host
            return max(self.dated.values())
        return self.new_d / self.seconds_d if self.new_d > 1e-9 and self.seconds_d > 0 else None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank method."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[k]


class NewsBook:
    """One shard's source table, credits and host figures (see the module docstring).

    ``counters`` is the policy's Counter of events (crawler.counters names them).
    """

    def __init__(self, max_sources: int, clock: NewsClock, counters: Counter[str]) -> None:
        self.max_sources = max_sources
        self._clock = clock
        self.counters = counters
        self.sources: OrderedDict[str, Source] = OrderedDict()
        self.hosts: OrderedDict[str, HostNews] = OrderedDict()  # bounded by max_sources
        self._credits: Counter[str] = Counter()
        self._new: dict[str, list[str]] = {}  # tracked source -> the new URLs credited to it
        self._totals = HostNews()  # the shard's sums (hosts forgotten included)
        self._delays: deque[float] = deque(maxlen=4 * DELAY_SAMPLE)
        self._stats: tuple[float, dict[str, Any]] | None = None

    # -- credits -------------------------------------------------------------------------

    def credit(self, admitted: Iterable[UrlItem]) -> None:
        """URLs this shard just admitted as new: each counts for its referrer when that is
        a page of the same host (its source takes the count with :meth:`take_credit`)."""
        if len(self._credits) > MAX_CREDITS:
            self.counters["news_credits_dropped"] += len(self._credits)
            self._credits.clear()
            self._new.clear()
        for item in admitted:
            ref = item.referrer
            if ref is not None and host_key(ref) == item.host:
                self._credits[ref] += 1
                if ref in self.sources:  # which URLs, for the choice of source
                    got = self._new.setdefault(ref, [])
                    if len(got) < MAX_NEW_LISTED:
                        got.append(item.url)

    def take_credit(self, url: str) -> int:
        """The new URLs credited to ``url`` since it last asked (and no more)."""
        return self._credits.pop(url, 0)

    def take_new(self, url: str) -> list[str]:
        """Which new URLs were credited to the source ``url`` since it last asked."""
        return self._new.pop(url, [])

    # -- the source table ----------------------------------------------------------------

    def touch(self, url: str) -> Source | None:
        """The source at ``url``, now the most recently fetched; None if not one."""
        src = self.sources.get(url)
        if src is not None:
            self.sources.move_to_end(url)
        return src

    def track(self, url: str, host: str, kind: str, interval_s: float, now: float) -> Source:
        """A new source (the least recently fetched one goes when the table is full)."""
        if len(self.sources) >= self.max_sources:
            old, gone = self.sources.popitem(last=False)
            self._untrack(old, gone)
            self.counters["news_sources_forgotten"] += 1
        src = Source(kind, host, interval_s, now)
        self.sources[url] = src
        h = self.host(host)
        if kind == "candidate":
            h.candidates += 1
        if kind == "feed":
            self.count(h, "feeds")
        elif kind == "sitemap":
            self.count(h, "news_sitemaps")
        elif kind == "hub":
            self.count(h, "hubs")
        return src

    def settle(self, url: str) -> None:
        """``url`` is a source no more (it settled: back to the adaptive schedule)."""
        self._untrack(url, self.sources.pop(url))
        self.counters["news_sources_settled"] += 1

    def _untrack(self, url: str, src: Source) -> None:
        h = self.host(src.host)
        h.upcoming.pop(url, None)
        h.dated.pop(url, None)
        h.choice.forget(url)
        self._new.pop(url, None)
        if src.kind == "candidate":
            h.candidates = max(0, h.candidates - 1)

    def kinds(self) -> dict[str, int]:
        """Sources tracked now, by kind."""
        return dict(Counter(s.kind for s in self.sources.values()))

    # -- hosts and figures ---------------------------------------------------------------

    def host(self, host: str) -> HostNews:
        """The figures of ``host`` (new if unknown: the least recently active one goes)."""
        h = self.hosts.get(host)
        if h is None:
            if len(self.hosts) >= self.max_sources:  # the least recently active host goes
                self.hosts.popitem(last=False)
            h = self.hosts[host] = HostNews()
        else:
            self.hosts.move_to_end(host)
        return h

    def count(self, h: HostNews, name: str, n: int = 1) -> None:
        """Add ``n`` to one of the host's counts (feeds, hubs, news_sitemaps,
        source_fetches, new_urls, dates_future, dates_ancient), and to the shard's total of it."""
        setattr(h, name, getattr(h, name) + n)
        setattr(self._totals, name, getattr(self._totals, name) + n)

    def observe_delay(self, host: str, delay: float) -> None:
        """One URL's publication-to-fetch delay."""
        h = self.host(host)
        h.delays.append(max(0.0, delay))
        h.delays_n += 1
        self._delays.append(max(0.0, delay))
        self._totals.delays_n += 1

    def stats(self, *, fresh: bool = False) -> dict[str, Any]:
        """The figures of crawler.freshness.news.NewsPolicy.stats (cached for
        ``STATS_EVERY_S`` unless ``fresh``)."""
        now = self._clock.now()
        if not fresh and self._stats is not None and now - self._stats[0] < STATS_EVERY_S:
            return self._stats[1]
        t = self._totals
        top = heapq.nlargest(STATS_TOP_HOSTS, self.hosts.items(), key=lambda kv: (kv[1].new_urls, kv[1].delays_n))
        out = {
            **_figures(t, list(self._delays)),
            "hosts": {host: _figures(h, list(h.delays)) for host, h in top},
        }
        self._stats = (now, out)
        return out


def _figures(h: HostNews, delays: list[float]) -> dict[str, Any]:
    return {
        "feeds": h.feeds,
        "hubs": h.hubs,
        "news_sitemaps": h.news_sitemaps,
        "source_fetches": h.source_fetches,
        "new_urls": h.new_urls,
        "new_per_fetch": round(h.new_urls / h.source_fetches, 3) if h.source_fetches else None,
        "delay_median_s": round(statistics.median(delays), 3) if delays else None,
        "delay_p95_s": round(percentile(delays, 0.95), 3) if delays else None,
        "delays": h.delays_n,
        "dates_future": h.dates_future,
        "dates_ancient": h.dates_ancient,
    }
