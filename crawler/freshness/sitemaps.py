"""Sitemaps (sitemaps.org protocol 0.9): where a host says which URLs it has.

A shard reads the sitemaps of its own hosts when it learns their robots.txt: the
``Sitemap:`` lines, or ``/sitemap.xml`` when there are none. A sitemap is a ``<urlset>``
of ``<url><loc>`` (with an optional ``<lastmod>``), or a ``<sitemapindex>`` of further
sitemaps, plain or gzip (served gzipped, or named ``.gz``); the protocol also allows a
text file of one URL per line. Limits are the protocol's: 50,000 URLs and 50 MB
uncompressed per file. Anything malformed costs that one sitemap (a result with an
error), never the crawl.

The news extension (``xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"``) adds
``<news:news><news:publication_date>`` and ``<news:title>`` to a ``<url>``: such URLs are
fresh news (crawler.freshness.news), ordered by publication time, and a sitemap that lists any is
read again on the schedule of a news source. A feed named in robots.txt as a sitemap (as
search engines accept) is read as a feed (crawler.freshness.feeds).

``<lastmod>`` is a prior only (crawler.freshness.recrawl.RecrawlPolicy.nudge): many sites stamp
every page on each deploy. No DTD or entity is accepted (an XML bomb is malformed here).
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError, XMLPullParser

from crawler.errors import DeliveryError
from crawler.freshness.feeds import Feed, looks_like_feed, parse_feed
from crawler.urls import join_url

#: sitemaps.org limits per file.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


@dataclass
class Sitemap:
    """What one sitemap file said: page URLs (with lastmod as wall seconds, or None),
    further sitemaps (from an index), and why it was cut or refused."""

    urls: list[tuple[str, float | None]] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    news: dict[str, tuple[float | None, str | None]] = field(default_factory=dict)  # url -> (published, title)
    error: str | None = None
    truncated: bool = False


def parse_lastmod(text: str | None) -> float | None:
    """A W3C datetime (``2024-05-01``, ``2024-05-01T10:00:00+02:00``, ``...Z``) as wall
    seconds; None if absent or unreadable. A date alone is midnight UTC."""
    if not text:
        return None
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        value = dt.datetime.fromisoformat(t)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def _gunzip(body: bytes, limit: int) -> tuple[bytes, bool]:
    """Decompress at most ``limit`` bytes; (data, cut short)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(body, limit)
    return out, bool(d.unconsumed_tail) or len(out) >= limit and not d.eof


def parse_sitemap(body: bytes, url: str, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES) -> Sitemap:
    """Read one sitemap file fetched from ``url`` (relative locations resolve against it)."""
    result = Sitemap()
    if body[:2] == _GZIP_MAGIC:
        try:
            body, cut = _gunzip(body, max_bytes)
        except zlib.error as exc:
            result.error = f"broken gzip: {exc}"
            return result
        if cut:
            result.error = f"over {max_bytes} bytes uncompressed"
            return result
    elif len(body) > max_bytes:
        result.error = f"over {max_bytes} bytes"
        return result
    head = body[:512].lstrip()
    if not head.startswith(b"<"):
        return _text_sitemap(body, url, max_urls, result)
    if _DTD.search(body[:4096]):
        result.error = "DTD or entity declaration (refused)"
        return result
    parser = XMLPullParser(events=("end",))
    try:
        for start in range(0, len(body), 65536):
            parser.feed(body[start : start + 65536])
            if _take(parser, url, result, max_urls):
                break
        else:
            parser.close()
            _take(parser, url, result, max_urls)
    except ParseError as exc:
        result.error = f"malformed XML: {exc}"
    return result


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _take(parser: XMLPullParser, base: str, result: Sitemap, max_urls: int) -> bool:
    """Collect finished <url>/<sitemap> elements; True once the URL limit is reached."""
    for _, elem in parser.read_events():
        kind = _local(elem.tag)
        if kind not in ("url", "sitemap"):
            continue
        loc = lastmod = None
        news: tuple[float | None, str | None] | None = None
        for child in elem:
            name = _local(child.tag)
            if name == "loc":
                loc = (child.text or "").strip()
            elif name == "lastmod":
                lastmod = child.text
            elif name == "news" and kind == "url":
                published = title = None
                for part in child:
                    sub = _local(part.tag)
                    if sub == "publication_date":
                        published = parse_lastmod(part.text)
                    elif sub == "title":
                        title = (part.text or "").strip() or None
                news = (published, title)
        elem.clear()
        target = join_url(base, loc) if loc else None
        if target is None:
            continue
        if kind == "sitemap":
            result.sitemaps.append(target)
        else:
            result.urls.append((target, parse_lastmod(lastmod)))
            if news is not None:
                result.news[target] = news
        if len(result.urls) + len(result.sitemaps) >= max_urls:
            result.truncated = True
            return True
    return False


def _text_sitemap(body: bytes, base: str, max_urls: int, result: Sitemap) -> Sitemap:
    for line in body.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line.startswith(("http://", "https://")):
            continue
        target = join_url(base, line)
        if target is not None:
            result.urls.append((target, None))
        if len(result.urls) >= max_urls:
            result.truncated = True
            break
    return result


def robots_sitemaps(origin: str, listed: list[str]) -> list[str]:
    """The sitemaps to read for ``origin``: the ones robots.txt lists (resolved against
    it), or ``/sitemap.xml`` when it lists none."""
    robots = origin.rstrip("/") + "/robots.txt"
    found = [u for u in (join_url(robots, s) for s in listed) if u]
    return found or [origin.rstrip("/") + "/sitemap.xml"]


class SitemapReader:
    """A shard's sitemap work: which to read when an origin's robots.txt arrives, and what
    a read one yields (page URLs to route as discovered links, sitemaps to read next).

    Only sitemaps on the origin's own host are read (its politeness slot is this shard's
    to spend), at most ``max_files`` per host per run, indexes included. Pending sitemap
    reads are in memory: a crash loses them until the host's robots.txt is fetched again
    (discovery through links is unaffected; no admitted URL is involved).
    """

    def __init__(self, *, max_files: int, max_urls: int, max_bytes: int, links, counters, dropped, nudge=None, news=None) -> None:
        self._max_files = max_files
        self._max_urls = max_urls
        self.max_bytes = max_bytes
        self._links = links
        self._counters = counters  # the shard's counters (crawler.engine.counters.COUNTERS)
        self._dropped = dropped  # links not followed, by reason (crawler.engine.counters.DROPPED)
        self._nudge = nudge  # nudge(url, lastmod): bring a known page's refresh earlier
        self._news = news  # crawler.freshness.news.NewsPolicy: news sitemaps and feeds read again
        self._planned: dict[str, int] = {}  # host -> sitemap files queued this run

    def plan(self, origin: str, host: str, listed: list[str], allowed) -> list:
        """Sitemap items for ``origin`` after its robots.txt (``allowed(url)``: its rules)."""
        from crawler.frontier.backqueue import UrlItem

        out = []
        for url in robots_sitemaps(origin, listed):
            item = UrlItem(url, 0, kind="sitemap")
            if item.host != host:
                self._counters["sitemaps_other_host"] += 1
                continue
            if not listed and not allowed(url):  # /sitemap.xml is a page like any other
                continue
            if self._take_slot(host):
                out.append(item)
        return out

    def _take_slot(self, host: str) -> bool:
        n = self._planned.get(host, 0)
        if n >= self._max_files:
            self._counters["sitemaps_over_limit"] += 1
            return False
        self._planned[host] = n + 1
        return True

    async def read(self, item, fetch, queue, route) -> None:
        """Fetch one sitemap (``await fetch(host, url, max_body_bytes=...)``, politeness-paced),
        ``queue`` the sitemaps it lists and ``route`` its URLs as discovered links."""
        res = await fetch(item.host, item.url, max_body_bytes=self.max_bytes)
        links, more, news, feed = self._yields(item, res.status, res.body)
        published = [link.published for link in links if link.fresh]
        queue(more)
        if links and not await route(links):
            raise DeliveryError(f"{len(links)} sitemap URLs could not be delivered to their shards")
        if self._news is not None:
            # After delivery, so the new URLs it yielded are counted (crawler.freshness.news).
            again = self._news.sitemap_again(item, news, feed, published)
            if again is not None:
                queue([again])

    def yields(self, item, status: int | None, body: bytes) -> tuple[list, list]:
        """(links to route, sitemap items to queue) from a fetched sitemap."""
        links, more, _, _ = self._yields(item, status, body)
        return links, more

    def _yields(self, item, status: int | None, body: bytes) -> tuple[list, list, bool, Feed | None]:
        """What :meth:`yields` says, and whether the sitemap listed news (or was a feed)."""
        from crawler.frontier.backqueue import UrlItem

        if status != 200:
            self._counters["sitemaps_failed"] += 1
            return [], [], False, None
        if self._news is not None and self._news.feeds and looks_like_feed("", body[:2048]):
            feed = parse_feed(body, item.url)
            self._counters["feeds_read"] += 1
            self._counters["feeds_malformed"] += feed.error is not None
            links = self._news.feed_links(item, feed, lambda urls, d: self._links.follow_urls(urls, d, self._dropped))
            return links, [], True, feed
        sm = parse_sitemap(body, item.url, max_urls=self._max_urls, max_bytes=self.max_bytes)
        self._counters["sitemaps_read"] += 1
        if sm.error:
            self._counters["sitemaps_malformed"] += 1
        if sm.truncated:
            self._counters["sitemaps_truncated"] += 1
        more = []
        for url in sm.sitemaps:
            nested = UrlItem(url, 0, kind="sitemap")
            if nested.host == item.host and self._take_slot(item.host):
                more.append(nested)
        links = []
        news = bool(sm.news) and self._news is not None and self._news.news_sitemaps
        for url, lastmod in sm.urls:
            canon = self._links.normalizer(url)
            if canon is None:
                continue
            if self._links.scope.allows(canon) and self._links.traps.check(canon, 1) is None:
                link = UrlItem(canon, 1, item.url)
                if news and url in sm.news:
                    link.fresh, link.published = True, sm.news[url][0]
                links.append(link)
                self._counters["sitemap_urls"] += 1
            if lastmod is not None and self._nudge is not None and UrlItem(canon).host == item.host:
                self._nudge(canon, lastmod)
        if news:
            self._counters["news_sitemap_urls"] += len(sm.news)
        return links, more, news, None
