"""The crawl engine of one shard of hosts.

An engine owns a slice of hosts (DESIGN.md invariant 1) and everything that is per host:
the frontier's back queues, politeness, robots and DNS caches, per-host budgets. It runs
one asyncio fetch loop and, for each URL it pops:

1. robots: unknown rules for the URL's origin -> fetch robots.txt first (using the host's
   politeness slot), then re-queue the URL; refused -> a ``robots_blocked`` row;
2. page budget (``limits.max_pages``, counted when a URL is popped for fetching);
3. fetch (politeness ``on_start`` / ``on_finish`` around it);
4. classify: transient failures re-enter the frontier with backoff (nobody sleeps),
   final ones become rows;
5. for pages: fingerprint (SHA-256, SimHash), content-duplicate check, parse, hand the
   followable links to the router, and write the outcome row plus the body.

Everything that crosses shards sits behind small interfaces so the Ray actors wrap this
class unchanged: a :class:`~crawler.routing.LinkRouter` for discovered links (seen check
+ delivery to the owning shard), a ``ContentService`` for duplicate content and a
``PageBudget`` for the global page cap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, Protocol, Sequence

from crawler.batching import MicroBatcher
from crawler.clock import SYSTEM_CLOCK
from crawler.config import CrawlConfig
from crawler.dedup import content_sha256, text_fingerprint, to_int64
from crawler.fetch import FetchResult, Fetcher, classify
from crawler.frontier import Frontier, UrlItem
from crawler.journal import FrontierStore, is_remote, ship_snapshot
from crawler.links import LinkPolicy
from crawler.output import BlobStore, OutcomeRow, ResultWriter
from crawler.parse import ParsedPage, is_html, parse_page
from crawler.politeness import Politeness
from crawler.robots import MAX_ROBOTS_REDIRECTS, RobotsCache
from crawler.routing import LinkRouter
from crawler.traps import HostBudget, TrapRules
from crawler.urls import DEFAULT_TRACKING_PARAMS, Scope, UrlNormalizer, host_key, join_url, origin

log = logging.getLogger(__name__)


class ContentService(Protocol):
    """Duplicate-content index: ``(url, sha256, simhash|None)`` -> ``(dup_kind, dup_of)``."""

    async def check_and_add(
        self, items: list[tuple[str, str, int | None]]
    ) -> Sequence[tuple[str | None, str | None]]: ...


class PageBudget(Protocol):
    """The crawl-wide ``limits.max_pages`` budget."""

    async def acquire(self) -> bool:
        """Take one page from the budget; False once it is spent."""


class LocalPageBudget:
    """In-process page budget (None = unlimited)."""

    def __init__(self, max_pages: int | None) -> None:
        self.max_pages = max_pages
        self.used = 0

    async def acquire(self) -> bool:
        if self.max_pages is not None and self.used >= self.max_pages:
            return False
        self.used += 1
        return True


def build_link_policy(cfg: CrawlConfig, seeds: Sequence[str]) -> LinkPolicy:
    """The link policy a config describes (shared by the engine and ``crawl links``)."""
    normalizer = UrlNormalizer(
        cfg.urls.tracking_params if cfg.urls.tracking_params is not None else DEFAULT_TRACKING_PARAMS,
        sort_query=cfg.urls.sort_query,
    )
    lim = cfg.limits
    return LinkPolicy(
        normalizer,
        Scope(cfg.scope, seeds),
        TrapRules(lim.max_depth, lim.max_url_length, lim.max_query_params, lim.max_path_repeats),
        follow_rel_nofollow=cfg.urls.follow_rel_nofollow,
    )


def build_fetcher(cfg: CrawlConfig, clock=SYSTEM_CLOCK, **kw: Any) -> Fetcher:
    """The HTTP fetcher a config describes."""
    f = cfg.fetch
    return Fetcher(
        user_agent=cfg.user_agent,
        timeout_s=f.timeout_s,
        connect_timeout_s=f.connect_timeout_s,
        max_body_bytes=cfg.limits.max_body_bytes,
        resolve=dict(f.resolve),
        dns_ttl_s=f.dns_ttl_s,
        dns_negative_ttl_s=f.dns_negative_ttl_s,
        ssrf_guard=f.ssrf_guard,
        allow_networks=f.allow_networks,
        max_connections=max(16, f.max_in_flight * 2),
        clock=clock,
        **kw,
    )


def _utc(wall: float) -> datetime:
    return datetime.fromtimestamp(wall, timezone.utc)


class ShardEngine:
    """Frontier + fetch loop + parse + fingerprints + store, for one shard of hosts."""

    def __init__(
        self,
        cfg: CrawlConfig,
        shard_id: str,
        *,
        content: ContentService,
        budget: PageBudget,
        seeds: Sequence[str] = (),
        router: LinkRouter | None = None,
        fetcher: Fetcher | None = None,
        writer: ResultWriter | None = None,
        store: FrontierStore | None = None,
        clock=SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.shard_id = shard_id
        self.clock = clock
        self.rng = rng or random.Random(hash(shard_id) & 0xFFFF)
        self.router = router
        self.content = content
        self.budget = budget
        pol = cfg.politeness
        self.politeness = Politeness(
            pol.interval_s,
            pol.max_interval_s,
            clock=clock,
            backoff_factor=pol.backoff_factor,
            recovery_factor=pol.recovery_factor,
            retry_after_cap_s=pol.retry_after_cap_s,
        )
        self.robots = RobotsCache(cfg.user_agent, ttl_s=pol.robots_ttl_s, error_ttl_s=pol.robots_error_ttl_s, clock=clock)
        self.store = store
        self.frontier = Frontier(
            self.politeness,
            clock,
            self.rng,
            backoff_s=cfg.fetch.backoff_s,
            max_backoff_s=cfg.fetch.max_backoff_s,
            window=cfg.runtime.frontier_window if store is not None else None,
            spill=store,
        )
        self.links = build_link_policy(cfg, seeds)
        self.host_budget = HostBudget(
            cfg.limits.max_pages_per_host,
            novelty_window=cfg.dedup.novelty_window,
            novelty_threshold=cfg.dedup.novelty_threshold,
        )
        self.fetcher = fetcher
        self.writer = writer
        self._content_batcher: MicroBatcher[tuple[str, str, int | None], tuple[str | None, str | None]] = MicroBatcher(
            content.check_and_add, max_size=256, max_delay_s=0.005
        )
        self._ua_token = cfg.product_token()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._budget_spent = False
        self._rows: list[OutcomeRow] = []
        self._bodies: dict[str, bytes] = {}
        self._output_lock: asyncio.Lock | None = None
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.batches_received = 0
        self.started_wall = clock.wall()
        self._handed: list[str] = []  # URLs whose rows the writer holds, not yet durable
        self._pending_claims: list[str] = []
        self._hold_until = 0.0
        self._last_checkpoint = clock.now()
        self._last_ship = clock.now()
        self.resumed = 0
        self._final_counts: dict[str, int] | None = None
        if store is not None:
            self._restore()

    # -- lifecycle ------------------------------------------------------------------

    def attach_router(self, router: LinkRouter) -> None:
        self.router = router

    def commit_claims(self) -> None:
        """Make the claims of fetches started so far durable (one commit for all of them)."""
        if self._pending_claims and self.store is not None:
            claims, self._pending_claims = self._pending_claims, []
            self.store.claim(claims)

    def _ensure_started(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
            self._output_lock = asyncio.Lock()
        if self.fetcher is None:
            self.fetcher = build_fetcher(self.cfg, self.clock)
        if self.writer is None:
            o = self.cfg.output
            self.writer = ResultWriter(
                o.path,
                self.shard_id,
                storage_options=dict(o.storage_options) or None,
                rows_per_file=o.rows_per_file,
                flush_interval_s=o.flush_interval_s,
                clock=self.clock,
                store_bodies=o.store_bodies,
            )

    async def run(self) -> None:
        """Fetch until :meth:`stop`. Waits on an event when nothing is due (no polling)."""
        self._ensure_started()
        assert self._wake is not None
        output = asyncio.get_running_loop().create_task(self._output_loop())
        try:
            while not self._stopping:
                self._wake.clear()
                self._dispatch()
                timeout = self._idle_timeout()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        finally:
            output.cancel()
            try:
                await output
            except asyncio.CancelledError:
                pass

    def stop(self) -> None:
        """Ask the loop to stop dispatching (in-flight fetches are cancelled by :meth:`close`)."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    async def close(self, *, cancel_in_flight: bool = True) -> None:
        """Stop, finish or cancel in-flight work, flush rows and close the fetcher."""
        self.stop()
        if cancel_in_flight:
            for t in list(self._tasks):
                t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.router is not None:
            await self.router.flush()
        await self.flush_output(final=True)
        if self.fetcher is not None:
            await self.fetcher.close()
        if self.store is not None:
            self._final_counts = self.store.counts()  # after the last acks, for the ledger
            self.store.close()

    def _restore(self) -> None:
        """Resume from the durable store: queued URLs back into the frontier, caches back.

        Steps, in order:
        1. URLs that were claimed (in flight) when the shard stopped return to the queue
           flagged ``replay`` (their links bypass the seen filter when re-fetched);
        2. every host's queued URLs are registered as spilled (loaded lazily);
        3. robots rules and per-host budgets come back from the last checkpoint;
        4. no request leaves before one politeness interval has passed, so a host
           contacted just before the crash is not contacted again too soon.
        """
        assert self.store is not None
        self.store.recover()
        for host, n in self.store.pending_hosts():
            self.frontier.restore_spilled(host, n)
            self.resumed += n
        raw = self.store.get_meta("checkpoint")
        if raw:
            try:
                cp = json.loads(raw)
                self.robots.restore(cp.get("robots", []))
                self.host_budget.restore(cp.get("host_budget", {}))
                self.counters.update(cp.get("counters", {}))
                self.dropped.update(cp.get("dropped", {}))
            except (ValueError, TypeError, KeyError) as exc:  # a bad checkpoint costs caches, not URLs
                log.warning("%s: ignoring unreadable checkpoint: %r", self.shard_id, exc)
        if self.resumed or raw:
            self._hold_until = self.clock.now() + max(self.cfg.politeness.interval_s, 0.05)

    def checkpoint(self) -> None:
        """Save caches and counters next to the queue (robots, budgets); cheap, periodic."""
        if self.store is None:
            return
        cp = {
            "robots": self.robots.snapshot(),
            "host_budget": self.host_budget.snapshot(),
            "counters": dict(self.counters),
            "dropped": dict(self.dropped),
        }
        self.store.set_meta("checkpoint", json.dumps(cp))
        self._last_checkpoint = self.clock.now()

    async def _ship_state(self, force: bool) -> None:
        """With a remote output, copy the store to OUT/state/ every minute and at the end."""
        out = self.cfg.output.path
        if self.store is None or not is_remote(out):
            return
        if not force and self.clock.now() - self._last_ship < 60.0:
            return
        self._last_ship = self.clock.now()
        target = f"{out.rstrip('/')}/state/{self.shard_id}.sqlite"
        try:
            await asyncio.to_thread(ship_snapshot, self.store, target, dict(self.cfg.output.storage_options) or None)
        except Exception as exc:  # noqa: BLE001 - the local store is intact; try again next time
            log.warning("%s: copying state to %s failed: %r", self.shard_id, target, exc)

    # -- input from routers ---------------------------------------------------------

    def accept(self, items: Sequence[UrlItem]) -> int:
        """Take a batch of novel URLs whose hosts this shard owns. Returns how many were queued.

        Robots rules are applied here when the origin's rules are cached (a refused URL
        gets its ``robots_blocked`` row and never takes frontier space); the per-host
        budget drops the rest of an exhausted host (counted as ``host_budget``).
        """
        self.batches_received += 1
        if self.store is not None:
            # Idempotent on URL: a batch delivered twice (a retry after a lost reply, or
            # links of a replayed page) is queued once. Committed before we return.
            fresh = self.store.add(items)
            if len(fresh) != len(items):
                self.dropped["duplicate_delivery"] += len(items) - len(fresh)
            items = fresh
        keep: list[UrlItem] = []
        refused: list[UrlItem] = []
        over_budget: list[str] = []
        respect = self.cfg.politeness.respect_robots
        for item in items:
            if respect and self.robots.allowed(item.url, origin(item.url)) is False:
                refused.append(item)
            elif not self.host_budget.admit(item.host):
                self.dropped["host_budget"] += 1
                over_budget.append(item.url)
            else:
                keep.append(item)
        if self.store is not None:
            # A refused URL gets a row without a fetch: claim it now, so it never looks
            # like a spilled URL waiting in the frontier (state 0 means exactly that).
            self.store.claim([i.url for i in refused])
            self.store.drop(over_budget)  # dropped by a counted rule: finished, with no row
        for item in refused:
            self._robots_refused(item)
        self.frontier.push(keep)
        self.counters["accepted"] += len(keep)
        if self._wake is not None:
            self._wake.set()
        return len(keep)

    def add_seeds(self, urls: Sequence[str]) -> None:
        """Widen the scope to include new seeds (the seed URLs themselves arrive via :meth:`accept`)."""
        self.links.scope.add_seeds(urls)

    # -- the loop -------------------------------------------------------------------

    def _dispatch(self) -> None:
        if self._stopping or self._budget_spent or self.clock.now() < self._hold_until:
            return
        free = self.cfg.fetch.max_in_flight - len(self._tasks)
        if free <= 0:
            return
        loop = asyncio.get_running_loop()
        items = self.frontier.pop_ready(free)
        if items and self.store is not None:
            # Group-committed before any of their links is seen-checked (router hook).
            self._pending_claims.extend(i.url for i in items)
        for item in items:
            task = loop.create_task(self._process(item))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._wake is not None:
            self._wake.set()

    def _idle_timeout(self) -> float:
        wake = self.frontier.next_wakeup()
        if wake is None or self._budget_spent:
            return 1.0
        wake = max(wake, self._hold_until)
        return min(1.0, max(0.0005, wake - self.clock.now()))

    async def _process(self, item: UrlItem) -> None:
        host = item.host
        try:
            if self.cfg.politeness.respect_robots:
                org = origin(item.url)
                allowed = self.robots.allowed(item.url, org)
                if allowed is None:
                    # First URL of this origin (or expired rules): fetch robots.txt with the
                    # host's slot, then put the URL back to wait for the next allowed time.
                    await self._fetch_robots(org, host)
                    self.frontier.requeue(item)
                    return
                if not allowed:
                    self._robots_refused(item)
                    return
            if item.attempts == 0 and not await self.budget.acquire():
                self._budget_spent = True
                self.frontier.requeue(item)
                return
            headers = {}
            if item.etag:
                headers["If-None-Match"] = item.etag
            if item.last_modified:
                headers["If-Modified-Since"] = item.last_modified
            result = await self._fetch(host, item.url, headers)
            await self._handle(item, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must cost one URL, recorded, not the shard
            log.exception("internal error processing %s", item.url)
            self.counters["internal_errors"] += 1
            self._record(item, "failed", error=f"internal error: {exc!r}")
        finally:
            # The claim is released whatever happened (DESIGN.md invariant 4).
            self.frontier.release(host)

    async def _fetch(self, host: str, url: str, headers: Mapping[str, str] | None = None) -> FetchResult:
        assert self.fetcher is not None
        self.politeness.on_start(host)
        result: FetchResult | None = None
        try:
            result = await self.fetcher.fetch(url, headers)
            return result
        finally:
            if result is None:  # cancelled mid-request: still keep the host's pacing honest
                self.politeness.on_finish(host, None, transient=True)
            else:
                if result.headers_at is not None:
                    self.politeness.on_headers(host, at=result.headers_at)
                self.politeness.on_finish(host, result.status, result.headers.get("retry-after"), transient=result.transient)
            self.counters["requests"] += 1

    async def _fetch_robots(self, org: str, host: str) -> None:
        """Fetch and cache an origin's robots.txt, following up to 5 redirects (RFC 9309 2.3.1.2)."""
        url = self.robots.robots_url(org)
        rules = None
        for hop in range(MAX_ROBOTS_REDIRECTS + 1):
            target_host = host_key(url)
            if target_host != host and self.politeness.in_flight(target_host):
                break  # another request to that host is running: retry after the error TTL
            if hop > 0 and target_host == host:
                # Same host: the next hop waits for the host's allowance like any request.
                await self.clock.sleep(max(0.0, self.politeness.next_allowed(host) - self.clock.now()))
            res = await self._fetch(target_host, url)
            self.counters["robots_requests"] += 1
            kind = classify(res)
            if kind == "redirect":
                nxt = join_url(url, res.headers.get("location", ""))
                nxt = self.links.normalizer(nxt) if nxt else None
                if nxt is None:
                    rules = self.robots.from_response(org, 404, b"")
                    break
                url = nxt
                continue
            rules = self.robots.from_response(
                org, res.status, res.body if res.status else None, truncated=res.truncated, error=res.error
            )
            break
        else:
            rules = self.robots.from_redirect_overflow(org)
        if rules is None:
            rules = self.robots.from_response(org, None, None)
        self.politeness.set_crawl_delay(host, rules.crawl_delay)
        # URLs queued before the rules were known: refuse the disallowed ones now.
        for blocked in self.frontier.remove_where(host, lambda it: not rules.allowed(it.url)):
            self._robots_refused(blocked)

    def _robots_refused(self, item: UrlItem) -> None:
        """Record a URL the robots rules refuse: ``robots_blocked``, or ``failed`` with the
        cause when robots.txt got no response at all (a dead name, the address guard, a
        timeout): the site said nothing, the network failed."""
        cause = self.robots.unreachable_reason(origin(item.url))
        if cause is None:
            self._record(item, "robots_blocked", error="disallowed by robots.txt")
        else:
            self._record(item, "failed", error=f"robots.txt unreachable: {cause}")

    async def _handle(self, item: UrlItem, res: FetchResult) -> None:
        kind = classify(res)
        item.attempts += 1
        if kind == "ok":
            await self._handle_page(item, res)
        elif kind == "redirect":
            await self._handle_redirect(item, res)
        elif kind == "not_modified":
            self._record(item, "not_modified", res)
        elif kind == "transient" and item.attempts < self.cfg.fetch.attempts:
            self.counters["retries"] += 1
            self.frontier.retry(item)
        else:
            outcome = "http_error" if res.status is not None and res.status >= 400 else "failed"
            error = res.error or (f"HTTP {res.status}" if res.status is not None else "no response")
            self._record(item, outcome, res, error=error)

    async def _handle_page(self, item: UrlItem, res: FetchResult) -> None:
        body = res.body
        sha = content_sha256(body)
        ctype = res.headers.get("content-type")  # with its charset parameter
        parsed: ParsedPage | None = None
        fp: int | None = None
        if is_html(ctype, body):
            parsed = parse_page(
                body,
                item.url,
                ctype,
                res.headers,
                user_agent_token=self._ua_token,
                max_links=self.cfg.urls.max_links_per_page,
            )
            if parsed.text:
                fp = text_fingerprint(parsed.text, self.cfg.dedup.min_text_tokens)
        dup_kind, dup_of = await self._content_batcher.submit((item.url, sha, fp))
        if dup_kind is not None:
            self.counters[f"dup_{dup_kind}"] += 1
        self.host_budget.record_fetch(item.host, dup_kind is not None)
        penalty = self.host_budget.penalty(item.host)
        if penalty != 1.0:
            self.politeness.set_penalty(item.host, penalty)
        error = res.error
        if res.truncated:  # the row must say why the stored body is partial
            cut = f"body truncated at limits.max_body_bytes ({self.cfg.limits.max_body_bytes} bytes)"
            error = cut if error is None else f"{error}; {cut}"
        if parsed is not None and parsed.error:
            error = f"parse: {parsed.error}" if error is None else f"{error}; parse: {parsed.error}"
            self.counters["parse_errors"] += 1
        if parsed is not None and parsed.links:
            urls = self.links.follow(parsed, item.depth + 1, self.dropped)
            # The page is acked (its row written) only once its links reached their
            # owners: a crash in between re-fetches the page and re-sends its links.
            await self._route([UrlItem(u, item.depth + 1, item.url) for u in urls], replay=item.replay)
        self._record(item, "fetched", res, sha=sha, simhash=fp, dup_kind=dup_kind, dup_of=dup_of, error=error)
        if self.cfg.output.store_bodies:
            self._bodies[sha] = body
        self.counters["bytes"] += len(body)

    async def _handle_redirect(self, item: UrlItem, res: FetchResult) -> None:
        loc = res.headers.get("location", "")
        resolved = join_url(item.url, loc) if loc else None
        target = self.links.normalizer(resolved) if resolved else None
        if target is None:
            self._record(item, "redirect", res, error=f"unusable Location header: {loc[:200]!r}")
            return
        # The target is an ordinary discovered link: seen check, scope, traps, robots.
        # Depth grows so an endless chain of distinct redirects stays bounded.
        reason = "scope" if not self.links.scope.allows(target) else self.links.traps.check(target, item.depth + 1)
        if reason is not None:
            self.dropped[reason] += 1
        else:
            await self._route([UrlItem(target, item.depth + 1, item.url)], replay=item.replay)
        self._record(item, "redirect", res, redirect_to=target)

    async def _route(self, items: list[UrlItem], *, replay: bool = False) -> None:
        """Hand links to the router and wait until their owners have them."""
        if not items:
            return
        if self.router is None:
            raise RuntimeError("engine has no router attached")
        if not await self.router.submit(items, bypass_seen=replay):
            raise RuntimeError(f"{len(items)} links could not be delivered to their shards")

    # -- output ---------------------------------------------------------------------

    def _record(
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
    ) -> None:
        """Queue one outcome row (every URL ends as exactly one row: DESIGN.md invariant 5)."""
        self.counters[outcome] += 1
        headers = res.headers if res is not None else {}
        row = OutcomeRow(
            url=item.url,
            host=item.host,
            depth=item.depth,
            status=res.status if res is not None else None,
            outcome=outcome,
            error=error if error is not None else (res.error if res is not None else None),
            attempts=item.attempts,
            fetched_at=_utc(self.clock.wall()),
            content_type=res.content_type if res is not None else None,
            content_length=len(res.body) if res is not None and outcome == "fetched" else None,
            content_sha256=sha,
            simhash=to_int64(simhash) if simhash is not None else None,
            dup_kind=dup_kind,
            dup_of=dup_of,
            blob_key=BlobStore.key_for(sha) if sha is not None and self.cfg.output.store_bodies else None,
            etag=headers.get("etag"),
            last_modified=headers.get("last-modified"),
            redirect_to=redirect_to,
            truncated=bool(res.truncated) if res is not None else False,
            shard=self.shard_id,
            crawl_pass=0,
            referrer=item.referrer,
            kind=item.kind,
        )
        self._rows.append(row)

    async def _output_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            await self.flush_output()

    async def flush_output(self, final: bool = False) -> None:
        """Hand buffered rows and bodies to the writer (in a thread: gzip and I/O).

        Once the writer has flushed (rows and blobs durable), the URLs of those rows
        are marked done in the store: ack after store (DESIGN.md invariant 6).
        """
        if self.writer is None:
            return
        assert self._output_lock is not None
        async with self._output_lock:
            rows, bodies = self._rows, self._bodies
            self._rows, self._bodies = [], {}
            writer = self.writer
            if rows or bodies:
                # In the loop, not in a thread: ``add`` only validates and buffers, and a
                # thread job cancelled before it starts (stopping cancels this loop) would
                # drop the rows it carries. From here on the writer holds them.
                writer.add(rows, bodies)
                self._handed.extend(r.url for r in rows)
            if final:
                await asyncio.to_thread(writer.flush)
                flushed = True
            else:
                flushed = await asyncio.to_thread(writer.maybe_flush)
            if flushed and self._handed:
                handed, self._handed = self._handed, []
                if self.store is not None:
                    self.store.done(handed)
            if self.store is not None and (final or self.clock.now() - self._last_checkpoint > 10.0):
                self.checkpoint()
                await self._ship_state(final)

    # -- status ---------------------------------------------------------------------

    def store_counts(self) -> dict[str, int] | None:
        """The durable store's URLs by state (the shard's side of crawler.ledger); None without one.

        After :meth:`close`, the counts as the store was closed (every final ack included).
        """
        if self._final_counts is not None or self.store is None:
            return self._final_counts
        return self.store.counts()

    def status(self) -> dict[str, Any]:
        """Counters for progress and for the termination check.

        ``idle`` is True when this shard has nothing it could do without new input: no
        fetch in flight, no link in transit, and no queued URL that could become ready
        (the page budget is spent, or only paused hosts remain).
        """
        in_flight = len(self._tasks)
        transit = (self.router.pending() if self.router is not None else 0) + self._content_batcher.pending()
        queued = len(self.frontier)
        could_work = queued > 0 and not self._budget_spent and self.frontier.next_wakeup() is not None
        rs = self.router.stats() if self.router is not None else {}
        return {
            "shard": self.shard_id,
            "idle": in_flight == 0 and transit == 0 and not could_work,
            "queued": queued,
            "in_flight": in_flight,
            "in_transit": transit,
            "hosts": self.frontier.host_count(),
            "batches_received": self.batches_received,
            "batches_sent": rs.get("batches_sent", 0),
            "budget_spent": self._budget_spent,
            "counters": dict(self.counters),
            "dropped": dict(self.dropped),
            "router": rs,
            "rows_pending": len(self._rows) + (self.writer.pending_rows() if self.writer is not None else 0),
            "frontier_recounts": self.frontier.recounts,
        }
