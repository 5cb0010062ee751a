"""A web of news hosts whose articles appear at random times, for testing and measuring
news freshness (crawler.freshness.news).

Each host publishes articles as a Poisson process (one per ``mean_interval_s`` on
average), drawn once from a seeded ``random.Random`` on the server's clock (monotonic
seconds since :meth:`NewsWeb.bind`); ``backlog`` articles were published before the
start. An article does not exist (404) before its time. Each host serves:

* ``/``: the front page, listing the newest ``front_size`` articles, linking its
  sections and its archive, and naming its feed with ``<link rel="alternate">``;
* ``/section/<k>``: the newest ``section_size`` articles of section k (an article is in
  section ``i % sections``);
* ``/feed.xml``: RSS 2.0, the newest ``feed_size`` articles with their ``pubDate``,
  with Last-Modified and ETag (a conditional GET that finds nothing new gets a 304);
* ``/news-sitemap.xml`` (named in robots.txt): a news sitemap of the articles of the
  last two days (at most ``feed_size`` * 2), with ``<news:publication_date>``;
* ``/a/<i>``: article i; ``/archive/<p>``: archive lists of ``archive_page_size`` old
  articles; ``/old/<j>``: the old articles. Archive pages never change (Last-Modified).

:func:`news_report` judges a crawl from the server's own log (see its docstring).
"""

from __future__ import annotations

import email.utils
import math
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from crawler.testing.webtypes import HTML_TYPE, Reply, SmallWeb

_ARCHIVE_EPOCH = 1_600_000_000.0  # Last-Modified of the archive pages


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


class NewsWeb(SmallWeb):
    """News hosts ``news-0.test``... (see the module docstring)."""

    def __init__(
        self,
        hosts: int = 2,
        *,
        mean_interval_s: float = 15.0,
        seed: int = 0,
        horizon_s: float = 3600.0,
        backlog: int = 12,
        sections: int = 4,
        front_size: int = 10,
        section_size: int = 8,
        feed_size: int = 20,
        archive_pages: int = 120,
        archive_page_size: int = 40,
    ) -> None:
        super().__init__()
        self.hosts = tuple(f"news-{k}.test" for k in range(hosts))
        self.mean_interval_s = mean_interval_s
        self.sections = sections
        self.front_size, self.section_size, self.feed_size = front_size, section_size, feed_size
        self.archive_pages, self.archive_page_size = archive_pages, archive_page_size
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        # Publication times per host, seconds from t0 (negative: before the start), sorted.
        self.published: dict[str, list[float]] = {}
        for k, host in enumerate(self.hosts):
            rng = random.Random(f"{seed}/{k}")
            times = sorted(-rng.uniform(0, backlog * mean_interval_s) for _ in range(backlog))
            t = 0.0
            while True:
                t += rng.expovariate(1.0 / mean_interval_s)
                if t > horizon_s:
                    break
                times.append(t)
            self.published[host] = times

    def bind(self, port: int) -> None:
        super().bind(port)
        self.t0 = time.monotonic()
        self.wall0 = time.time()

    def seeds(self) -> list[str]:
        return [self.url(h) for h in self.hosts]

    def robots_delay_hosts(self) -> dict[str, float]:
        """Hosts whose robots.txt sets a Crawl-delay (none here; tests.integration.checks)."""
        return {}

    # -- what exists when ----------------------------------------------------------------

    def clock(self) -> float:
        """Seconds since the start, on the server's clock."""
        return time.monotonic() - self.t0

    def out_now(self, host: str, at: float | None = None) -> int:
        """How many articles of ``host`` are published at ``at`` (default: now)."""
        at = self.clock() if at is None else at
        times = self.published[host]
        lo, hi = 0, len(times)
        while lo < hi:
            mid = (lo + hi) // 2
            if times[mid] <= at:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def publication_wall(self, host: str, i: int) -> float:
        return self.wall0 + self.published[host][i]

    def archive_size(self) -> int:
        return self.archive_pages

    def archive_lists(self) -> int:
        return math.ceil(self.archive_pages / self.archive_page_size)

    # -- serving -------------------------------------------------------------------------

    def reply(
        self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False, headers: dict[str, str] | None = None,
    ) -> Reply:
        headers = headers or {}
        if host not in self.published:
            return Reply(404, (("Content-Type", HTML_TYPE),), b"no such host")
        n = self.out_now(host)
        base = self.url(host)
        if path_qs == "/robots.txt":
            body = f"User-agent: *\nAllow: /\nSitemap: {base}news-sitemap.xml\n"
            return Reply(200, (("Content-Type", "text/plain"),), body.encode())
        if path_qs == "/":
            items = self._list(host, range(n - 1, max(-1, n - 1 - self.front_size), -1))
            nav = "".join(f'<a href="/section/{k}">Section {k}</a> ' for k in range(self.sections))
            nav += "".join(f'<a href="/archive/{p}">Archive {p}</a> ' for p in range(1, self.archive_lists() + 1))
            head = '<link rel="alternate" type="application/rss+xml" title="News" href="/feed.xml">'
            return self._html(f"{host} front page", f"<nav>{nav}</nav><main><h1>Latest</h1><ul>{items}</ul></main>", head)
        if path_qs.startswith("/section/"):
            k = self._int(path_qs[len("/section/"):])
            if k is None or k >= self.sections:
                return self._404()
            ids = [i for i in range(n - 1, -1, -1) if i % self.sections == k][: self.section_size]
            return self._html(f"Section {k}", f"<nav><a href='/'>home</a></nav><main><ul>{self._list(host, ids)}</ul></main>")
        if path_qs == "/feed.xml":
            return self._feed(host, n, headers)
        if path_qs == "/news-sitemap.xml":
            return self._news_sitemap(host, n)
        if path_qs.startswith("/a/"):
            i = self._int(path_qs[3:])
            if i is None or i >= n:
                return self._404()
            text = " ".join(f"{host}a{i}w{w}" for w in range(80))
            return self._html(f"Article {i}", f"<nav><a href='/'>home</a> <a href='/section/{i % self.sections}'>section</a></nav>"
                              f"<main><article><h1>Article {i}</h1><p>{text}</p></article></main>")
        if path_qs.startswith("/archive/"):
            p = self._int(path_qs[len("/archive/"):])
            if p is None or not 1 <= p <= self.archive_lists():
                return self._404()
            first = (p - 1) * self.archive_page_size
            archived = range(first, min(self.archive_pages, first + self.archive_page_size))
            links = "".join(f'<li><a href="/old/{j}">Old story {j}</a></li>' for j in archived)
            return self._static(f"Archive {p}", f"<nav><a href='/'>home</a></nav><main><ul>{links}</ul></main>", headers)
        if path_qs.startswith("/old/"):
            j = self._int(path_qs[len("/old/"):])
            if j is None or j >= self.archive_pages:
                return self._404()
            text = " ".join(f"{host}old{j}w{w}" for w in range(80))
            return self._static(f"Old story {j}", f"<nav><a href='/'>home</a></nav><main><article><p>{text}</p></article></main>", headers)
        return self._404()

    @staticmethod
    def _int(text: str) -> int | None:
        return int(text) if text.isdigit() and len(text) < 9 else None

    def _list(self, host: str, ids: Iterable[int]) -> str:
        return "".join(f'<li><a href="/a/{i}">Article {i}</a></li>' for i in ids)

    def _html(self, title: str, body: str, head: str = "") -> Reply:
        page = f"<html><head><title>{title}</title>{head}</head><body>{body}</body></html>"
        return Reply(200, (("Content-Type", HTML_TYPE),), page.encode())

    def _static(self, title: str, body: str, headers: dict[str, str]) -> Reply:
        stamp = email.utils.formatdate(_ARCHIVE_EPOCH, usegmt=True)
        if "If-Modified-Since" in headers:
            return Reply(304, (("Last-Modified", stamp),), b"")
        reply = self._html(title, body)
        return Reply(200, (*reply.headers, ("Last-Modified", stamp)), reply.body)

    @staticmethod
    def _404() -> Reply:
        return Reply(404, (("Content-Type", HTML_TYPE),), b"not found")

    def _feed(self, host: str, n: int, headers: dict[str, str]) -> Reply:
        newest = self.publication_wall(host, n - 1) if n else _ARCHIVE_EPOCH
        stamp = email.utils.formatdate(newest, usegmt=True)
        tag = f'"{host}-{n}"'
        validators = (("ETag", tag), ("Last-Modified", stamp))
        if headers.get("If-None-Match") == tag:
            return Reply(304, validators, b"")
        base = self.url(host)
        items = "".join(
            f"<item><title>Article {i}</title><link>{base}a/{i}</link><guid>{base}a/{i}</guid>"
            f"<pubDate>{email.utils.formatdate(self.publication_wall(host, i), usegmt=True)}</pubDate></item>"
            for i in range(n - 1, max(-1, n - 1 - self.feed_size), -1)
        )
        body = (f'<?xml version="1.0"?><rss version="2.0"><channel><title>{host}</title><link>{base}</link>'
                f"<description>news</description>{items}</channel></rss>")
        return Reply(200, (("Content-Type", "application/rss+xml"), *validators), body.encode())

    def _news_sitemap(self, host: str, n: int) -> Reply:
        base = self.url(host)
        urls = "".join(
            f"<url><loc>{base}a/{i}</loc><news:news><news:publication><news:name>{host}</news:name>"
            f"<news:language>en</news:language></news:publication><news:publication_date>"
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.publication_wall(host, i)))}</news:publication_date>"
            f"<news:title>Article {i}</news:title></news:news></url>"
            for i in range(n - 1, max(-1, n - 1 - 2 * self.feed_size), -1)
        )
        body = ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
                f'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">{urls}</urlset>')
        return Reply(200, (("Content-Type", "application/xml"),), body.encode())


SOURCE_PATHS = ("/", "/feed.xml", "/news-sitemap.xml")


def _kind(path: str) -> str:
    if path in SOURCE_PATHS or path.startswith("/section/"):
        return "source"
    if path.startswith("/a/"):
        return "article"
    if path.startswith(("/archive/", "/old/")):
        return "archive"
    return "other"


def news_report(server: Any, end: float | None = None, *, settle_s: float = 60.0) -> dict[str, Any]:
    """Figures from the server's log, for the crawl that ended at ``end`` (server clock
    seconds since the start; default now):

    * ``articles``: published during the crawl and at least ``settle_s`` before its end;
      ``missed``: those never fetched;
    * ``delay_s``: from publication to the first fetch of each of them (median, p95, max);
    * ``source_requests_per_article``: requests to front, section, feed and sitemap pages
      per article published during the crawl that was fetched (``..._refetches_...``: the
      same without each page's first fetch);
    * ``archive_fetches_per_page``: requests to archive pages (lists and old articles)
      per archive page;
    * ``article_refetches``: requests to articles beyond their first.
    """
    web: NewsWeb = server.web
    end = web.clock() if end is None else end
    log = sorted(server.requests(), key=lambda r: r.start)
    first: dict[tuple[str, int], float] = {}
    kinds: dict[str, int] = defaultdict(int)
    article_requests = 0
    first_source: set[tuple[str, str]] = set()
    for r in log:
        path = r.path_qs
        kinds[_kind(path)] += 1
        if _kind(path) == "source" and (r.host, path) not in first_source:
            first_source.add((r.host, path))
            kinds["source_first"] += 1
        if path.startswith("/a/") and r.status == 200:
            article_requests += 1
            i = int(path[3:])
            first.setdefault((r.host, i), r.start - web.t0)
    delays, missed, found_new = [], [], 0
    for host in web.hosts:
        for i, t in enumerate(web.published[host]):
            if t < 0 or t > end:
                continue
            got = first.get((host, i))
            if got is not None:
                found_new += 1
            if t > end - settle_s:
                continue
            if got is None:
                missed.append(f"{host}/a/{i}")
            else:
                delays.append(got - t)
    archive_pages = len(web.hosts) * (web.archive_size() + web.archive_lists())
    return {
        "articles": len(delays) + len(missed),
        "missed": missed,
        "delay_s": {
            "median": round(statistics.median(delays), 2),
            "p95": round(_pct(delays, 0.95), 2),
            "max": round(max(delays), 2),
            "n": len(delays),
        } if delays else None,
        "new_articles_fetched": found_new,
        "source_requests": kinds["source"],
        "source_requests_per_article": round(kinds["source"] / found_new, 2) if found_new else None,
        # The same without the first fetch of each source page (discovery a crawl makes anyway).
        "source_refetches_per_article": round((kinds["source"] - kinds["source_first"]) / found_new, 2) if found_new else None,
        "archive_fetches_per_page": round(kinds["archive"] / archive_pages, 3),
        "article_refetches": article_requests - len(first),
        "requests": dict(kinds),
    }
