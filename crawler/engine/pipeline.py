"""The page pipeline: one classified response in, one outcome out.

For a page (``200``): content hash, parse, fingerprint, the duplicate-content check, the
followable links and the outcome row. For a redirect: the target as a link, or a row
saying why it cannot be followed. For everything else: the row alone. Every row of the
crawl is built here, by :meth:`PagePipeline.row`, so a row always has the same fields
(docs/invariants.md #5: every URL ends as exactly one row per fetch). With each row
comes the URL's next refresh (crawler.frontier.recrawl): whether the page changed since its last
fetch, its new interval and due time.

The pipeline does no I/O of its own except the batched duplicate-content call, and
knows nothing about politeness, the frontier or the output buffer: the shard's handler routes
the links first and records the row after (a page is acked only once its links reached
their owners). It is tested without sockets or Ray (tests/unit/test_pipeline.py).

Input-sized work runs off the event loop (DESIGN invariant 16) through ``run_blocking``:
a feed's parse always (up to a second for a broken one, crawler.parse.feeds), an
HTML page's parse and SimHash from :data:`OFF_LOOP_BYTES` up (a page of
``limits.max_body_bytes`` costs 0.2-0.4 s, benchmarks/results/parsecost.json). Smaller
pages, nearly all of them, are parsed inline: a worker thread would cost them more than
the parse.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

from crawler.clock import Clock
from crawler.content.fingerprints import content_sha256, text_fingerprint, to_int64
from crawler.parse.feeds import Feed, looks_like_feed, parse_feed
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.urlitem import UrlItem
from crawler.policy.links import LinkPolicy
from crawler.output import BlobStore, OutcomeRow
from crawler.output.headers import encode_headers
from crawler.parse import ParsedPage, is_html, parse_page
from crawler.freshness.news import NewsPolicy
from crawler.frontier.recrawl import Previous, RecrawlPolicy, Schedule
from crawler.render.renderer import RenderedPage, Renderer
from crawler.urls import join_url, url_hash
from crawler.counters import DropReason, ShardCounters

#: Pages of at least this many bytes (main texts of this many characters) are parsed
#: (fingerprinted) in a worker thread. Below it a parse holds the loop for less than
#: Python's 5 ms GIL switch interval (2.3 ms of CPU for 256 KiB, 12 ms for 1 MiB:
#: benchmarks/results/parsecost.json, case sizes), less than the loop waits on any
#: busy worker thread anyway, and the hop (57 us of CPU) would cost more than it saves;
#: above it the loop keeps running while lexbor builds the tree (it releases the GIL:
#: case lexbor) and the SimHash core runs (it does too).
OFF_LOOP_BYTES = 256 * 1024

RunBlocking = Callable[..., Awaitable[Any]]


class ParseSlot:
    """``run_blocking`` for a shard's input-sized parses, one at a time.

    Parses are CPU-bound and hold the GIL for most of their time, so two at once finish
    no sooner than one after the other; what concurrency would add is memory (a page of
    ``limits.max_body_bytes`` takes 80-90 MB to parse, benchmarks/results/parsecost.json,
    case html: docs/invariants.md #8 wants that once, not once per worker thread) and
    worker threads taken from the outbox's writes.
    Waiting for the slot is an ``await``: the loop runs meanwhile."""

    def __init__(self, run_blocking: RunBlocking = asyncio.to_thread) -> None:
        self._run_blocking = run_blocking
        self._slot = asyncio.Semaphore(1)

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async with self._slot:
            return await self._run_blocking(fn, *args, **kwargs)


class ContentCheck(Protocol):
    """The duplicate-content service, one page per call (crawler.engine.batching.MicroBatcher
    over crawler.services.contentindex.ContentIndexService): ``(url, sha256, simhash|None)`` ->
    ``(dup_kind, dup_of)``."""

    async def submit(self, item: tuple[str, str, int | None]) -> tuple[str | None, str | None]: ...

    def pending(self) -> int: ...


@dataclass(slots=True)
class Outcome:
    """What one response produced: the row, the links to route first, the body to store,
    and when to fetch the URL again (None: never, e.g. robots said no)."""

    row: OutcomeRow
    links: list[UrlItem] = field(default_factory=list)
    body: bytes | None = None
    duplicate: bool = False
    schedule: Schedule | None = None
    raw_body: bytes | None = None  # a rendered page's response as fetched (stored beside the DOM)
    feed: Feed | None = None  # the page was an RSS/Atom feed (crawler.parse.feeds): its hints


class PagePipeline:
    """Builds outcomes for one shard.

    Args:
        shard_id: written into every row.
        links: the link policy (normalize, scope, traps, nofollow).
        content: the (micro-batched) duplicate-content service.
        clock: stamps ``fetched_at`` with ``clock.wall()``.
        user_agent_token: for ``<meta name="...">`` robots directives addressed to us.
        max_links_per_page, min_text_tokens, max_body_bytes, store_bodies: from the config.
        recrawl: the interval policy (every outcome gets its URL's next due time).
        renderer: renders the HTML pages that need it (crawler.render), or None. A rendered
            page's DOM is what is stored, parsed and fingerprinted; its raw response is
            stored beside it (``raw_sha256``, ``raw_blob_key``).
        counters: the shard's counters (shared with the renderer), or new ones.
        news: feeds, hubs and news sitemaps (crawler.freshness.news), or None: feeds are read as
            link sources and a page's feeds followed; links of a source are marked fresh.
        run_blocking: runs input-sized parses off the event loop (default: a worker
            thread; tests on the mock clock run them inline).
    """

    def __init__(
        self,
        shard_id: str,
        links: LinkPolicy,
        content: ContentCheck,
        clock: Clock,
        *,
        user_agent_token: str,
        max_links_per_page: int,
        min_text_tokens: int,
        max_body_bytes: int,
        store_bodies: bool,
        recrawl: RecrawlPolicy,
        renderer: Renderer | None = None,
        counters: ShardCounters | None = None,
        news: NewsPolicy | None = None,
        run_blocking: RunBlocking = asyncio.to_thread,
    ) -> None:
        self.shard_id = shard_id
        self.links = links
        self._content = content
        self._clock = clock
        self._ua_token = user_agent_token
        self._max_links = max_links_per_page
        self._min_tokens = min_text_tokens
        self._max_body = max_body_bytes
        self._store_bodies = store_bodies
        self._recrawl = recrawl
        self.renderer = renderer
        self.counters = counters if counters is not None else ShardCounters()
        self._news = news
        self._run_blocking = run_blocking
        self.dropped: Counter[DropReason] = Counter()  # links not followed, by reason

    async def page(self, item: UrlItem, res: FetchResult) -> Outcome:
        """A fetched page: fingerprints, duplicate check, followable links, the row."""
        body = res.body
        sha = content_sha256(body)
        ctype = res.headers.get("content-type")  # with its charset parameter
        parsed: ParsedPage | None = None
        feed: Feed | None = None
        fp: int | None = None
        raw_body: bytes | None = None
        rendered: RenderedPage | None = None
        if is_html(ctype, body, self.counters):
            parsed = await self._parse(body, item.url, ctype, res.headers)
            if self.renderer is not None and not res.truncated and parsed.error is None:
                rendered = await self.renderer.render(item.host, item.url, res, parsed)
                if rendered.body is not None and rendered.parsed is not None:
                    # The DOM is the page from here on: links, text, hashes, duplicates.
                    raw_body, body, parsed = body, rendered.body, rendered.parsed
                    sha = content_sha256(body)
                elif rendered.parsed is not None:  # raw page stored, plus where it tried to navigate
                    parsed = rendered.parsed
            if len(parsed.main_text) >= OFF_LOOP_BYTES:
                fp = await self._run_blocking(text_fingerprint, parsed.main_text, self._min_tokens)
            elif parsed.main_text:
                fp = text_fingerprint(parsed.main_text, self._min_tokens)
            if parsed.main_text_failed:  # odd markup: the whole text stood in (crawler.content.maincontent)
                self.counters.main_text_failed += 1
        elif self._news is not None and self._news.feeds and looks_like_feed(ctype, body):
            # Always off the loop: a feed's cost is not a page's (crawler.parse.feeds).
            feed = await self._run_blocking(parse_feed, body, item.url)
            self.counters.feeds_read += 1
            self.counters.feeds_malformed += feed.error is not None
        dup_kind, dup_of = await self._content.submit((item.url, sha, fp))
        if dup_kind is not None:
            self.counters.families[f"dup_{dup_kind}"] += 1
        errors = [res.error] if res.error else []
        if res.truncated:  # the row must say why the stored body is partial
            errors.append(f"body truncated at limits.max_body_bytes ({self._max_body} bytes)")
        if parsed is not None and parsed.error:
            errors.append(f"parse: {parsed.error}")
            self.counters.parse_errors += 1
        if rendered is not None and rendered.fallback is not None:
            errors.append(f"render: {rendered.fallback}, raw page stored")
        links: list[UrlItem] = []
        if parsed is not None and parsed.links:
            depth = item.depth + 1
            links = [UrlItem(u, depth, item.url) for u in self.links.follow(parsed, depth, self.dropped)]
        if self._news is not None:
            links = self._news_links(item, parsed, feed, links)
        self.counters.bytes += len(body)
        row = self.row(
            item, "fetched", res, sha=sha, simhash=fp, dup_kind=dup_kind, dup_of=dup_of, error="; ".join(errors) or None,
            body_length=len(body), raw_sha=content_sha256(raw_body) if raw_body is not None else None,
        )
        body_kept = body if self._store_bodies else None
        raw_kept = raw_body if self._store_bodies else None
        return Outcome(row, links, body_kept, duplicate=dup_kind is not None, schedule=self.schedule(item, row),
                       raw_body=raw_kept, feed=feed)

    async def _parse(self, body: bytes, url: str, ctype: str | None, headers: Any) -> ParsedPage:
        """``parse_page``, in a worker thread from :data:`OFF_LOOP_BYTES` up."""
        if len(body) < OFF_LOOP_BYTES:
            return parse_page(body, url, ctype, headers, user_agent_token=self._ua_token, max_links=self._max_links)
        page: ParsedPage = await self._run_blocking(
            parse_page, body, url, ctype, headers, user_agent_token=self._ua_token, max_links=self._max_links
        )
        return page

    def _news_links(self, item: UrlItem, parsed: ParsedPage | None, feed: Feed | None, links: list[UrlItem]) -> list[UrlItem]:
        """A feed's entries; a page's feeds (``<link rel="alternate">``) next to its links;
        the links of a source marked fresh (crawler.freshness.news)."""
        news = self._news
        assert news is not None
        depth = item.depth + 1

        def follow(urls: list[str], d: int) -> list[tuple[str, str]]:
            return self.links.follow_urls(urls, d, self.dropped)

        if feed is not None:
            links = news.feed_links(item, feed, follow)
        elif parsed is not None and parsed.feeds and news.feeds and not parsed.meta_nofollow:
            have = {link.url for link in links}
            for url, _ in follow(parsed.feeds, depth):
                if url not in have:
                    have.add(url)
                    links.append(UrlItem(url, depth, item.url))
                    self.counters.feeds_linked += 1
        news.mark(item, links)
        return links

    def outcome(self, item: UrlItem, outcome: str, res: FetchResult | None = None, *, error: str | None = None) -> Outcome:
        """An outcome with no page to process (not_modified, an error, robots refusal)."""
        row = self.row(item, outcome, res, error=error)
        return Outcome(row, schedule=self.schedule(item, row))

    def schedule(self, item: UrlItem, row: OutcomeRow) -> Schedule | None:
        """When ``item`` is due again after ``row`` (None: robots refused it, never)."""
        if row.outcome == "robots_blocked":
            return None
        prev = item.prev or Previous()
        return self._recrawl.after_fetch(prev, self._clock.wall(), row.status, row.content_sha256, row.simhash)

    def links_from(self, url: str, depth: int, content_type: str | None, body: bytes) -> list[UrlItem]:
        """The followable links of a stored page (resuming from OUT: crawler.recovery.statefiles)."""
        if not is_html(content_type, body, self.counters):
            return []
        page = parse_page(body, url, content_type, {}, user_agent_token=self._ua_token, max_links=self._max_links)
        return [UrlItem(u, depth, url) for u in self.links.follow(page, depth, self.dropped)]

    def pending(self) -> int:
        """Duplicate-content checks asked and not yet answered (work in transit)."""
        return self._content.pending()

    def redirect(self, item: UrlItem, res: FetchResult) -> Outcome:
        """A 3xx with a Location: the target is an ordinary discovered link (seen check,
        scope, traps and robots apply); depth grows so an endless chain stays bounded."""
        loc = res.headers.get("location", "")
        resolved = join_url(item.url, loc) if loc else None
        target = self.links.normalizer(resolved) if resolved else None
        if target is None:
            return self.outcome(item, "redirect", res, error=f"unusable Location header: {loc[:200]!r}")
        depth = item.depth + 1
        reason: DropReason | None = "scope" if not self.links.scope.allows(target) else self.links.traps.check(target, depth)
        links: list[UrlItem] = []
        if reason is not None:
            self.dropped[reason] += 1
        else:
            links = [UrlItem(target, depth, item.url)]
        row = self.row(item, "redirect", res, redirect_to=target)
        return Outcome(row, links, schedule=self.schedule(item, row))

    def row(
        self,
        item: UrlItem,
        outcome: str,
        res: FetchResult | None = None,
        *,
        sha: str | None = None,
        simhash: int | None = None,
        dup_kind: str | None = None,
        dup_of: str | None = None,
        error: str | None = None,
        redirect_to: str | None = None,
        body_length: int | None = None,
        raw_sha: str | None = None,
    ) -> OutcomeRow:
        """The outcome row of ``item`` (the one place a row is put together)."""
        headers = res.headers if res is not None else {}
        changed = None
        if item.prev is not None and res is not None:
            changed = self._recrawl.changed(item.prev, res.status, sha, to_int64(simhash) if simhash is not None else None)
        return OutcomeRow(
            url=item.url,
            host=item.host,
            depth=item.depth,
            status=res.status if res is not None else None,
            outcome=outcome,
            error=error if error is not None else (res.error if res is not None else None),
            attempts=item.attempts,
            fetched_at=datetime.fromtimestamp(self._clock.wall(), timezone.utc),
            content_type=res.content_type if res is not None else None,
            content_length=((body_length if body_length is not None else len(res.body))
                            if res is not None and outcome == "fetched" else None),
            content_sha256=sha,
            simhash=to_int64(simhash) if simhash is not None else None,
            dup_kind=dup_kind,
            dup_of=dup_of,
            blob_key=BlobStore.key_for(sha) if sha is not None and self._store_bodies else None,
            etag=headers.get("etag"),
            last_modified=headers.get("last-modified"),
            redirect_to=redirect_to,
            truncated=bool(res.truncated) if res is not None else False,
            shard=self.shard_id,
            referrer=item.referrer,
            url_hash=url_hash(item.url),
            fetch_seq=item.fetch_seq,
            changed=changed,
            response_headers=encode_headers(headers) if res is not None and res.status is not None else None,  # for WARC export
            rendered=(raw_sha is not None) if outcome == "fetched" else None,
            raw_sha256=raw_sha,
            raw_blob_key=BlobStore.key_for(raw_sha) if raw_sha is not None and self._store_bodies else None,
        )

