"""Sitemaps (sitemaps.org protocol 0.9): where a host says which URLs it has.

A shard reads the sitemaps of its own hosts when it learns their robots.txt: the
``Sitemap:`` lines, or, when there are none, ``/sitemap.xml`` where the probe can pay
(crawler.freshness.sitemapprobe). A sitemap is a ``<urlset>``
of ``<url><loc>`` (with an optional ``<lastmod>``), or a ``<sitemapindex>`` of further
sitemaps, plain or gzip (served gzipped, or named ``.gz``); the protocol also allows a
text file of one URL per line. Limits are the protocol's: 50,000 URLs and 50 MB
uncompressed per file. Anything malformed costs that one sitemap (a result with an
error), never the crawl.

The news extension (``xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"``) adds
``<news:news><news:publication_date>`` and ``<news:title>`` to a ``<url>``: such URLs are
fresh news (crawler.freshness.news), ordered by publication time, and a sitemap that lists any is
read again on the schedule of a news source. A feed named in robots.txt as a sitemap (as
search engines accept) is read as a feed (crawler.parse.feeds).

``<lastmod>`` is a prior only (crawler.frontier.recrawl.RecrawlPolicy.nudge): many sites stamp
every page on each deploy. No DTD or entity is accepted (an XML bomb is malformed here):
expat reads the prolog before the parse, so none hides behind comments or an encoding.

A sitemap at the limits is input-sized work (50 MB, 50,000 URLs: two seconds of CPU,
benchmarks/results/parsecost.json), so :class:`SitemapReader` parses it, and checks its
URLs, off the event loop (``run_blocking``, DESIGN invariant 16); the parse stops at the
URL limit, and builds no tree (a tree's allocations set off the cyclic GC's full
collections, which stop the loop too).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import pyexpat
import re
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler.counters import DropReason, ShardCounters
from crawler.errors import DeliveryError
from crawler.parse.feeds import Feed, looks_like_feed, parse_feed
from crawler.parse.feedstream import Refused
from crawler.freshness.news import NewsPolicy
from crawler.freshness.sitemapprobe import SitemapProbe, probe_url
from crawler.frontier.urlitem import UrlItem
from crawler.urls import join_url

RunBlocking = Callable[..., Awaitable[Any]]


class _Scope(Protocol):
    def allows(self, url: str) -> bool: ...


class _Traps(Protocol):
    def check(self, url: str, depth: int) -> str | None: ...


class SitemapLinks(Protocol):
    """What the reader needs of the link policy (crawler.policy.links.LinkPolicy)."""

    @property
    def normalizer(self) -> Callable[[str], str | None]: ...

    @property
    def scope(self) -> _Scope: ...

    @property
    def traps(self) -> _Traps: ...

    def follow_urls(self, urls: list[str], depth: int, counts: Counter[DropReason]) -> list[tuple[str, str]]: ...


class _Fetched(Protocol):
    """What the reader reads of a fetch (crawler.fetch.fetcher.FetchResult)."""

    @property
    def status(self) -> int | None: ...

    @property
    def body(self) -> bytes: ...


#: ``await fetch(host, url, max_body_bytes=...)``: one politeness-paced GET.
Fetch = Callable[..., Awaitable[_Fetched]]

#: sitemaps.org limits per file.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_LINE = re.compile(rb"[^\r\n]+")
#: Bytes handed to the XML parser per call: the URL limit stops it within one chunk.
CHUNK_BYTES = 64 * 1024


@dataclass
class Sitemap:
    """What one sitemap file said: page URLs (with lastmod as wall seconds, or None),
    further sitemaps (from an index), and why it was cut or refused."""

    urls: list[tuple[str, float | None]] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    news: dict[str, tuple[float | None, str | None]] = field(default_factory=dict)  # url -> (published, title)
    error: str | None = None
    truncated: bool = False
    bytes_parsed: int = 0  # bytes handed to the parser: the work the file cost


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
    reader = _Reader(url, result, max_urls)
    parser = pyexpat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    parser.StartDoctypeDeclHandler = _refuse  # wherever it is, before any entity is declared
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.data
    try:
        for start in range(0, len(body), CHUNK_BYTES):
            piece = body[start : start + CHUNK_BYTES]
            result.bytes_parsed += len(piece)
            parser.Parse(piece, False)
        parser.Parse(b"", True)
    except _Limit:
        result.truncated = True
    except Refused:
        result.error = "DTD or entity declaration (refused)"
    except pyexpat.ExpatError as exc:
        result.error = f"malformed XML: {exc}"
    return result


class _Limit(Exception):
    """The URL limit is reached: stop parsing."""


def _refuse(*_args: object) -> None:
    raise Refused


class _Open:
    """A ``<url>`` or ``<sitemap>`` being read: its depth and what its children said."""

    __slots__ = ("kind", "depth", "loc", "lastmod", "news", "news_depth", "published", "title")

    def __init__(self, kind: str, depth: int) -> None:
        self.kind, self.depth = kind, depth
        self.loc: str | None = None
        self.lastmod: str | None = None
        self.news: tuple[float | None, str | None] | None = None
        self.news_depth = -1  # depth of the <news:news> child being read, if any
        self.published: float | None = None
        self.title: str | None = None


class _Reader:
    """expat handlers collecting ``<url>``/``<sitemap>`` elements as they end (no tree is
    built: a 50 MB file allocates only what it yields). Names are matched by their local
    part, children by depth (a ``<loc>`` is a direct child), a child's text is the text
    before its first element (as ElementTree's ``.text``); the last of a repeated child wins."""

    def __init__(self, base: str, result: Sitemap, max_urls: int) -> None:
        self.base, self.result, self.max_urls = base, result, max_urls
        self.depth = 0
        self.open: list[_Open] = []
        self.text: list[str] | None = None  # the text of the child being read
        self.text_depth = -1
        self.text_open = False  # no element started inside it yet
        self.field = ""
        self.full = False  # the URL limit is reached: the next <url> or <sitemap> stops the parse

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        self.text_open = False  # the text before a child element is all there is
        local = tag.rpartition(" ")[2]
        if local in ("url", "sitemap"):
            if self.full:
                raise _Limit  # one more than the limit: the file is cut here
            self.open.append(_Open(local, self.depth))
            return
        if not self.open:
            return
        rec = self.open[-1]
        if self.depth == rec.depth + 1:
            if local in ("loc", "lastmod"):
                self.text, self.text_depth, self.text_open, self.field = [], self.depth, True, local
            elif local == "news" and rec.kind == "url":
                rec.news_depth, rec.published, rec.title = self.depth, None, None
        elif self.depth == rec.news_depth + 1 and local in ("publication_date", "title"):
            self.text, self.text_depth, self.text_open, self.field = [], self.depth, True, local

    def data(self, text: str) -> None:
        if self.text_open and self.text is not None and self.text_depth == self.depth:
            self.text.append(text)

    def end(self, tag: str) -> None:
        depth = self.depth
        self.depth -= 1
        if self.text is not None and depth == self.text_depth:
            self._keep("".join(self.text))
            self.text = None
            return
        if not self.open:
            return
        rec = self.open[-1]
        if depth == rec.news_depth:
            rec.news, rec.news_depth = (rec.published, rec.title), -1
        elif depth == rec.depth:
            self.open.pop()
            self._finish(rec)

    def _keep(self, text: str) -> None:
        rec = self.open[-1]
        if self.field == "loc":
            rec.loc = text.strip()
        elif self.field == "lastmod":
            rec.lastmod = text
        elif self.field == "publication_date":
            rec.published = parse_lastmod(text)
        else:
            rec.title = text.strip() or None

    def _finish(self, rec: _Open) -> None:
        if self.full:  # a <url> nested in the last one kept
            return
        result = self.result
        target = join_url(self.base, rec.loc) if rec.loc else None
        if target is None:
            return
        if rec.kind == "sitemap":
            result.sitemaps.append(target)
        else:
            result.urls.append((target, parse_lastmod(rec.lastmod)))
            if rec.news is not None:
                result.news[target] = rec.news
        if len(result.urls) + len(result.sitemaps) >= self.max_urls:
            self.full = True


def _text_sitemap(body: bytes, base: str, max_urls: int, result: Sitemap) -> Sitemap:
    """One URL per line (lines read one by one: the file is never copied whole)."""
    for match in _LINE.finditer(body):
        line = match.group().decode("utf-8", "replace").strip()
        if not line.startswith(("http://", "https://")):
            continue
        if len(result.urls) >= max_urls:  # one more than the limit: the file is cut here
            result.truncated = True
            result.bytes_parsed = match.end()
            return result
        target = join_url(base, line)
        if target is not None:
            result.urls.append((target, None))
    result.bytes_parsed = len(body)
    return result


def robots_sitemaps(origin: str, listed: list[str]) -> list[str]:
    """The sitemaps to read for ``origin``: the ones robots.txt lists (resolved against
    it), or ``/sitemap.xml`` when it lists none."""
    robots = origin.rstrip("/") + "/robots.txt"
    found = [u for u in (join_url(robots, s) for s in listed) if u]
    return found or [probe_url(origin)]


@dataclass(slots=True)
class _Digest:
    """What one fetched sitemap yields, worked out off the event loop: the file read (a
    sitemap or a feed), the links to route, and the ``<lastmod>`` nudges to apply."""

    failed: bool = False
    feed: Feed | None = None
    sitemap: Sitemap | None = None
    links: list[UrlItem] = field(default_factory=list)
    nudges: list[tuple[str, float]] = field(default_factory=list)
    news: bool = False


class SitemapReader:
    """A shard's sitemap work: which to read when an origin's robots.txt arrives, and what
    a read one yields (page URLs to route as discovered links, sitemaps to read next).

    Only sitemaps on the origin's own host are read (its politeness slot is this shard's
    to spend), at most ``max_files`` per host per run, indexes included. Pending sitemap
    reads are in memory: a crash loses them until the host's robots.txt is fetched again
    (discovery through links is unaffected; no admitted URL is involved).
    """

    def __init__(
        self,
        *,
        max_files: int,
        max_urls: int,
        max_bytes: int,
        links: SitemapLinks,
        counters: ShardCounters,
        dropped: Counter[DropReason],
        nudge: Callable[[str, float], object] | None = None,
        news: NewsPolicy | None = None,
        probe: SitemapProbe | None = None,
        run_blocking: RunBlocking = asyncio.to_thread,
    ) -> None:
        self._max_files = max_files
        self._max_urls = max_urls
        self.max_bytes = max_bytes
        self._links = links
        self._counters = counters  # the shard's counters (crawler.counters.ShardCounters)
        self._dropped = dropped  # links not followed, by reason (crawler.counters.DropReason)
        self._nudge = nudge  # nudge(url, lastmod): bring a known page's refresh earlier
        self._news = news  # crawler.freshness.news.NewsPolicy: news sitemaps and feeds read again
        self._planned: dict[str, int] = {}  # host -> sitemap files queued this run
        # When /sitemap.xml is asked of a host whose robots.txt names none (default: every host at once).
        self.probe = probe or SitemapProbe(after_pages=0, min_yield=0.0, counters=counters)
        # Parses and URL checks of a read sitemap, and its nudges of the store, run here:
        # a worker thread by default (DESIGN invariant 16), inline in tests on the mock clock.
        self._run_blocking = run_blocking

    def plan(self, origin: str, host: str, listed: list[str], allowed: Callable[[str], bool]) -> list[UrlItem]:
        """Sitemap items for ``origin`` after its robots.txt (``allowed(url)``: its rules)."""
        out: list[UrlItem] = []
        for url in robots_sitemaps(origin, listed):
            item = UrlItem(url, 0, kind="sitemap")
            if item.host != host:
                self._counters.sitemaps_other_host += 1
                continue
            if not listed and not (allowed(url) and self.probe.at_robots(origin, host)):
                continue  # /sitemap.xml is a page like any other, asked where it can pay
            if self._take_slot(host):
                out.append(item)
                if not listed:
                    self.probe.launched(url)
        return out

    def probes_due(self, host: str, allowed: Callable[[str], bool]) -> list[UrlItem]:
        """Probes to queue now that a page of ``host`` passed robots (``allowed(url)``: the
        rules now): the host's own once it is big enough, and those of hosts whose wait ended."""
        out: list[UrlItem] = []
        for org in self.probe.due(host):
            item = UrlItem(probe_url(org), 0, kind="sitemap")
            if allowed(item.url) and self._take_slot(item.host):
                self.probe.launched(item.url)
                out.append(item)
        return out

    def _take_slot(self, host: str) -> bool:
        n = self._planned.get(host, 0)
        if n >= self._max_files:
            self._counters.sitemaps_over_limit += 1
            return False
        self._planned[host] = n + 1
        return True

    async def read(
        self,
        item: UrlItem,
        fetch: Fetch,
        queue: Callable[[list[UrlItem]], object],
        route: Callable[[list[UrlItem]], Awaitable[bool]],
    ) -> None:
        """Fetch one sitemap (``await fetch(host, url, max_body_bytes=...)``, politeness-paced),
        ``queue`` the sitemaps it lists and ``route`` its URLs as discovered links. The file
        is parsed and its URLs checked off the event loop (``run_blocking``)."""
        res = await fetch(item.host, item.url, max_body_bytes=self.max_bytes)
        digest = await self._run_blocking(self._digest, item, res.status, res.body)
        links, more, news, feed = self._settle(item, digest)
        self.probe.settle(item.url, bool(links or more))
        if digest.nudges:
            await self._run_blocking(self._nudge_all, digest.nudges)
        published = [link.published for link in links if link.fresh]
        listed = [link.url for link in links if link.host == item.host] if news else None
        queue(more)
        if links and not await route(links):
            raise DeliveryError(f"{len(links)} sitemap URLs could not be delivered to their shards")
        if self._news is not None:
            # After delivery, so the new URLs it yielded are counted (crawler.freshness.news).
            again = self._news.sitemap_again(item, news, feed, published, listed)
            if again is not None:
                queue([again])

    def yields(self, item: UrlItem, status: int | None, body: bytes) -> tuple[list[UrlItem], list[UrlItem]]:
        """(links to route, sitemap items to queue) from a fetched sitemap."""
        links, more, _, _ = self._yields(item, status, body)
        return links, more

    def _yields(self, item: UrlItem, status: int | None, body: bytes) -> tuple[list[UrlItem], list[UrlItem], bool, Feed | None]:
        """What :meth:`yields` says, and whether the sitemap listed news (or was a feed):
        :meth:`read`'s steps, all inline."""
        digest = self._digest(item, status, body)
        out = self._settle(item, digest)
        self._nudge_all(digest.nudges)
        return out

    def _digest(self, item: UrlItem, status: int | None, body: bytes) -> _Digest:
        """The input-sized part of a read: parse, and the URLs in scope and free of traps.
        Reads nothing the event loop writes but the link policy's caches (plain dicts)."""
        if status != 200:
            return _Digest(failed=True)
        if self._news is not None and self._news.feeds and looks_like_feed("", body[:2048]):
            return _Digest(feed=parse_feed(body, item.url))
        sm = parse_sitemap(body, item.url, max_urls=self._max_urls, max_bytes=self.max_bytes)
        news = bool(sm.news) and self._news is not None and self._news.news_sitemaps
        digest = _Digest(sitemap=sm, news=news)
        normalize, scope, traps = self._links.normalizer, self._links.scope, self._links.traps
        for url, lastmod in sm.urls:
            canon = normalize(url)
            if canon is None:
                continue
            if scope.allows(canon) and traps.check(canon, 1) is None:
                link = UrlItem(canon, 1, item.url)
                if news and url in sm.news:
                    link.fresh, link.published = True, sm.news[url][0]
                digest.links.append(link)
            if lastmod is not None and self._nudge is not None and UrlItem(canon).host == item.host:
                digest.nudges.append((canon, lastmod))
        return digest

    def _settle(self, item: UrlItem, digest: _Digest) -> tuple[list[UrlItem], list[UrlItem], bool, Feed | None]:
        """The shard's side of a read, on its loop: counters, the nested sitemaps' slots,
        a feed's entries as links (at most its entry limit)."""
        if digest.failed:
            self._counters.sitemaps_failed += 1
            return [], [], False, None
        feed = digest.feed
        if feed is not None:
            assert self._news is not None
            self._counters.feeds_read += 1
            self._counters.feeds_malformed += feed.error is not None
            links = self._news.feed_links(item, feed, lambda urls, d: self._links.follow_urls(urls, d, self._dropped))
            return links, [], True, feed
        sm = digest.sitemap
        assert sm is not None
        self._counters.sitemaps_read += 1
        if sm.error:
            self._counters.sitemaps_malformed += 1
        if sm.truncated:
            self._counters.sitemaps_truncated += 1
        more: list[UrlItem] = []
        for url in sm.sitemaps:
            nested = UrlItem(url, 0, kind="sitemap")
            if nested.host == item.host and self._take_slot(item.host):
                more.append(nested)
        self._counters.sitemap_urls += len(digest.links)
        if digest.news:
            self._counters.news_sitemap_urls += len(sm.news)
            assert self._news is not None
            self._news.check_dates(item.host, digest.links)  # a 9999-12-31 is no date (crawler.freshness.news)
        return digest.links, more, digest.news, None

    def _nudge_all(self, nudges: list[tuple[str, float]]) -> None:
        """``<lastmod>`` of this host's known pages: their refreshes brought forward (the
        store serialises its users with its own lock)."""
        if self._nudge is not None:
            for url, lastmod in nudges:
                self._nudge(url, lastmod)
