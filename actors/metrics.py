"""Crawler metrics through ``ray.util.metrics``, so they reach Ray's Prometheus endpoint
and dashboard (Ray puts its ``ray_`` namespace in front: ``ray_crawler_pages_total``).

Values come from what the shard already counts (its status and counters, crawler.engine.shard);
this module only turns cumulative counts into counter increments and sets gauges, once a
second from the HostShard actor's watchdog. Label sets stay bounded: a shard id, an outcome,
a duplicate kind, a host state, an API route and status code; never a host or a URL.
"""

from __future__ import annotations

from typing import Callable, Mapping

from ray.util.metrics import Counter, Gauge, Histogram

from crawler.engine.requests import Fetcher
from crawler.engine.status import ShardStatus
from crawler.fetch.fetcher import FetchResult
from crawler.output import OUTCOMES

#: Fetch latency buckets, seconds (a request to a healthy site: 50-500 ms).
LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]


class _Deltas:
    """Cumulative values -> counter increments (a counter only goes up)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, ...], float] = {}

    def inc(self, counter: Counter, key: tuple[str, ...], value: float, tags: dict[str, str]) -> None:
        delta = value - self._last.get(key, 0.0)
        if delta > 0:
            counter.inc(delta, tags=tags)
            self._last[key] = value


class ShardMetrics:
    """The ``crawler_`` families one HostShard exports (README "Operating a crawl")."""

    def __init__(self, shard_id: str) -> None:
        self.tags = {"shard": shard_id}
        self._d = _Deltas()
        self.pages = Counter("crawler_pages", "URLs finished, by outcome (one row each)", ("shard", "outcome"))
        self.bytes = Counter("crawler_bytes", "body bytes fetched", ("shard",))
        self.requests = Counter("crawler_requests", "HTTP requests sent (robots.txt included)", ("shard",))
        self.latency = Histogram(
            "crawler_fetch_latency_seconds", "time from sending a request to its last body byte",
            boundaries=LATENCY_BUCKETS, tag_keys=("shard",),
        )
        self.queued = Gauge("crawler_queued_urls", "URLs waiting in the shard's frontier", ("shard",))
        self.due = Gauge("crawler_due_refreshes", "recrawls due now and not yet fetched", ("shard",))
        self.hosts = Gauge("crawler_hosts", "hosts with work (active), paused by an operator, backed off", ("shard", "state"))
        self.wait = Counter(
            "crawler_politeness_wait_seconds", "politeness delay put between a host's requests, summed", ("shard",)
        )
        self.dups = Counter("crawler_duplicates", "fetched pages that duplicate stored content", ("shard", "kind"))
        self.emitted = Counter("crawler_events_emitted", "page.fetched events the sink took", ("shard",))
        self.pending = Gauge("crawler_events_pending", "page.fetched events waiting for the sink", ("shard",))
        self.sink_failures = Counter("crawler_events_sink_failures", "failed sends to the event sink", ("shard",))
        self.region_moves = Counter("crawler_region_moves", "hosts handed to (out) or taken from (in) another shard",
                                    ("shard", "direction"))
        self.region_forwarded = Counter("crawler_region_forwarded_urls", "URLs passed on to their host's owner", ("shard",))
        self.region_probes = Counter("crawler_region_probes", "robots.txt requests timing a host from one region", ("shard",))
        self.news_sources = Gauge("crawler_news_sources", "feeds, hubs and news sitemaps found (crawler.freshness.news)", ("shard", "kind"))
        self.news_fetches = Counter("crawler_news_source_fetches", "refetches of feeds, hubs and news sitemaps", ("shard",))
        self.news_new = Counter("crawler_news_new_urls", "new URLs those refetches yielded", ("shard",))
        self.news_delay = Gauge(
            "crawler_news_publication_delay_seconds", "publication (feed or news sitemap date) to fetch",
            ("shard", "quantile"),
        )

    def observe_latency(self, seconds: float) -> None:
        self.latency.observe(max(0.0, seconds), tags=self.tags)

    def record(self, st: ShardStatus, backed_off_hosts: int) -> None:
        """Export a shard's numbers: its status now (crawler.engine.shard.Shard.report) and
        its backed-off hosts (a scan, asked only here: Shard.backed_off_hosts)."""
        c = st.counters
        t = self.tags
        for outcome in OUTCOMES:
            self._d.inc(self.pages, ("pages", outcome), c.outcome(outcome), {**t, "outcome": outcome})
        self._d.inc(self.bytes, ("bytes",), c.bytes, t)
        self._d.inc(self.requests, ("requests",), c.requests, t)
        for kind in ("exact", "near"):
            self._d.inc(self.dups, ("dup", kind), c.families[f"dup_{kind}"], {**t, "kind": kind})
        self._d.inc(self.wait, ("wait",), st.politeness_wait_s, t)
        self.queued.set(st.queued, tags=t)
        # The status field is ``refresh_due``: this gauge read "due_refreshes" by string
        # key until the status became a typed record, and so always exported 0.
        self.due.set(st.refresh_due, tags=t)
        self.hosts.set(st.hosts, tags={**t, "state": "active"})
        self.hosts.set(st.paused_hosts, tags={**t, "state": "paused"})
        self.hosts.set(backed_off_hosts, tags={**t, "state": "backed_off"})
        ev = st.events or {}
        self._d.inc(self.emitted, ("emitted",), ev.get("emitted", 0), t)
        self._d.inc(self.sink_failures, ("sink_failures",), ev.get("sink_failures", 0), t)
        self.pending.set(ev.get("pending", 0), tags=t)
        reg = st.regions or {}
        if reg:
            for direction in ("out", "in"):
                self._d.inc(self.region_moves, ("moves", direction), reg.get(f"region_moves_{direction}", 0),
                            {**t, "direction": direction})
            self._d.inc(self.region_forwarded, ("forwarded",), reg.get("region_forwarded", 0), t)
            self._d.inc(self.region_probes, ("probes",), reg.get("region_probes", 0), t)
        news = st.news or {}
        if not news:
            return
        for kind in ("feeds", "hubs", "news_sitemaps"):
            self.news_sources.set(news[kind], tags={**t, "kind": kind})
        self._d.inc(self.news_fetches, ("news_fetches",), news["source_fetches"], t)
        self._d.inc(self.news_new, ("news_new",), news["new_urls"], t)
        for q, key in (("0.5", "delay_median_s"), ("0.95", "delay_p95_s")):
            if news[key] is not None:
                self.news_delay.set(news[key], tags={**t, "quantile": q})


class TimedFetcher:
    """A shard's fetcher that reports each request's latency (``FetchResult`` times)."""

    def __init__(self, inner: Fetcher, observe: Callable[[float], None]) -> None:
        self.inner = inner
        self._observe = observe

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        res = await self.inner.fetch(url, headers, max_body_bytes=max_body_bytes)  # sitemaps set a limit
        if res.started_at is not None and res.finished_at is not None:
            self._observe(res.finished_at - res.started_at)
        return res

    async def close(self) -> None:
        await self.inner.close()


class SeenMetrics:
    """The seen filter's checks and false positives (one SeenFilter actor's share)."""

    def __init__(self, index: int) -> None:
        self.tags = {"seen_shard": str(index)}
        self._d = _Deltas()
        self.checks = Counter("crawler_seen_checks", "URLs checked against the seen filter", ("seen_shard",))
        self.false_positives = Counter(
            "crawler_seen_false_positives", "Bloom positives the exact store refuted", ("seen_shard",)
        )

    def record(self, checks: int, false_positives: int) -> None:
        self._d.inc(self.checks, ("checks",), checks, self.tags)
        self._d.inc(self.false_positives, ("fp",), false_positives, self.tags)


class ApiMetrics:
    """Control API requests by route and status code, counted in the driver."""

    def __init__(self) -> None:
        self._counter: Counter | None = None

    def record(self, route: str, status: int) -> None:
        import ray

        if not ray.is_initialized():  # before the runtime joined Ray (503s while starting)
            return
        if self._counter is None:
            self._counter = Counter("crawler_api_requests", "control API requests", ("route", "code"))
        self._counter.inc(1, tags={"route": route, "code": str(status)})
