"""The scheduler of one shard of hosts: frontier and politeness in, fetches out.

A shard owns a slice of hosts (docs/invariants.md #1) and everything that is per host.
For each URL the frontier hands out (at most one per host, when the host is due):

1. robots: unknown rules for the URL's origin -> fetch robots.txt first (with the host's
   politeness slot), then put the URL back; refused -> a ``robots_blocked`` row;
2. page budget (``limits.max_pages``), taken when a URL is first fetched;
3. fetch, between politeness ``on_start`` and ``on_finish``;
4. transient failures re-enter the frontier with backoff (nobody sleeps); pages go
   through the :class:`~crawler.engine.pipeline.PagePipeline`, whose links are routed to their
   owners *before* the row goes to the :class:`~crawler.engine.outbox.Outbox` (a crash in
   between re-fetches the page and re-sends its links).

An error while processing a URL is not a web outcome (docs/invariants.md #13): a page whose
links a receiver refuses for now stays in flight, unacked, while the router asks again;
any other error goes to :class:`~crawler.engine.internalerrors.InternalErrors` (a stop
leaves the URL for the resume, "not now" defers it, a bug is counted and retried).

Every wait is on the injected clock, so the whole loop is unit-tested with ``MockClock``
and a fake transport (tests/unit/test_scheduler.py). The parts are wired by
:func:`crawler.engine.assembly.build_shard`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, Sequence

from crawler.engine.admission import Admission
from crawler.recovery.checkpoint import Checkpointer
from crawler.clock import Clock, wait_event
from crawler.errors import DeliveryError, FencedError, StorageError
from crawler.events.emitter import EventEmitter
from crawler.fetch.fetcher import FetchResult, classify
from crawler.placement.handover import HostState, Regions
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.control.hostpolicy import PolicyChange, name_of
from crawler.frontier.store import FrontierStore
from crawler.freshness.news import NewsPolicy
from crawler.engine.internalerrors import InternalErrors
from crawler.engine.outbox import Outbox
from crawler.engine.pipeline import Outcome, PagePipeline
from crawler.policy.politeness import Politeness
from crawler.freshness.recrawl import conditional_headers
from crawler.frontier.refreshfeed import RefreshFeed
from crawler.freshness.sitemaps import SitemapReader
from crawler.recovery.statelog import StateLog
from crawler.robots import RobotsCache, RobotsClient
from crawler.engine.linkrouter import LinkRouter
from crawler.engine.status import ShardStatus
from crawler.policy.hostbudget import HostBudget
from crawler.policy.traprules import TrapRules
from crawler.urls import origin

log = logging.getLogger(__name__)

#: Longest wait of the loop with nothing due (it wakes earlier on any event).
IDLE_WAIT_S = 1.0
#: How often a shard whose gate is shut (driver silent, lease unknown) looks again. The
#: gate opens without an event (a heartbeat, a lease read), so the loop polls it -- and
#: waits between looks: a shut gate with due hosts must not spin the loop.
GATE_RETRY_S = 0.1


class PageBudget(Protocol):
    """The crawl-wide ``limits.max_pages`` budget (crawler.engine.sharedservices)."""

    async def acquire(self) -> bool: ...


class Fetcher(Protocol):
    async def fetch(self, url: str, headers: dict[str, str] | None = None) -> FetchResult: ...

    async def close(self) -> None: ...


class Gate(Protocol):
    """May the shard start fetches and accept work now? False while the driver is silent
    or once another run holds the output's lease (crawler.recovery.lease, crawler.recovery.watchdog)."""

    def __call__(self) -> bool: ...


def always_open() -> bool:
    """The gate of a shard with no lease and no driver to lose (tests, ``--local`` without state)."""
    return True


class Hold:
    """Until when the shard starts no request (after a resume, or while the event log is
    full: crawler.events.emitter). Built before the shard so that the parts that hold it need no
    reference to the shard."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.until = 0.0

    def hold(self, seconds: float) -> None:
        """Start no request for ``seconds`` from now."""
        self.until = self._clock.now() + seconds


class Claims:
    """Claims of fetches started since the last commit: made durable together by the
    router just before it seen-checks links (crawler.engine.linkrouter's ``before_flush``), so a
    page's URL is claimed in the store before any link it yields is marked seen."""

    def __init__(self, store: FrontierStore | None) -> None:
        self._store = store
        self._pending: list[str] = []

    def add(self, urls: Sequence[str]) -> None:
        if self._store is not None:
            self._pending.extend(urls)

    def commit(self) -> None:
        """Make the claims so far durable (the router's group commit)."""
        if self._pending and self._store is not None:
            claims, self._pending = self._pending, []
            self._store.claim(claims)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """The config values the loop needs (from crawler.config.settings)."""

    max_in_flight: int
    attempts: int
    respect_robots: bool


def vet_seeds(urls: Sequence[str], traps: TrapRules, robots: RobotsCache | None) -> list[str | None]:
    """Why each seed would be refused by a shard, or None (POST /seeds, before the seen
    check): ``robots`` when the shard's cached rules (``robots``; None when robots.txt is
    not obeyed) disallow it, ``scope: <rule>`` when it breaks a trap rule (length, query
    parameters, repeated segments)."""
    out: list[str | None] = []
    for url in urls:
        rule = traps.check(url, 0)
        if rule is not None:
            out.append(f"scope: {rule}")
        elif robots is not None and robots.allowed(url, origin(url)) is False:
            out.append("robots: disallowed by robots.txt")
        else:
            out.append(None)
    return out


class ShardScheduler:
    """Runs one shard: see the module docstring for the order of the steps."""

    def __init__(
        self,
        shard_id: str,
        settings: SchedulerSettings,
        *,
        frontier: Frontier,
        politeness: Politeness,
        robots: RobotsClient,
        pipeline: PagePipeline,
        host_budget: HostBudget,
        admission: Admission,
        budget: PageBudget,
        fetcher: Fetcher,
        outbox: Outbox,
        router: LinkRouter,
        clock: Clock,
        store: FrontierStore | None = None,
        checkpointer: Checkpointer | None = None,
        feed: RefreshFeed | None = None,
        sitemaps: SitemapReader | None = None,
        news: NewsPolicy | None = None,
        state_log: StateLog | None = None,
        regions: Regions | None = None,
        events: EventEmitter | None = None,
        gate: Gate = always_open,
        hold: Hold | None = None,
        claims: Claims | None = None,
        on_start: Sequence[Callable[[], Awaitable[None]]] = (),
        resumed: int = 0,
    ) -> None:
        self.shard_id = shard_id
        self.settings = settings
        self.frontier, self.politeness, self.robots = frontier, politeness, robots
        self.pipeline, self.host_budget, self.admission, self.budget = pipeline, host_budget, admission, budget
        self.fetcher, self.outbox, self.router = fetcher, outbox, router
        self.clock, self.store, self.checkpointer, self.feed = clock, store, checkpointer, feed
        self.sitemaps = sitemaps
        self.news = news  # feeds, hubs, news sitemaps (crawler.freshness.news): credited at accept
        self.state_log = state_log  # the store's journal in a remote OUT (crawler.recovery.statelog)
        self.regions = regions  # hosts placed in regions and handed over (crawler.placement.handover)
        self.counters: Counter[str] = pipeline.counters
        self.dropped: Counter[str] = pipeline.dropped
        self.batches_received = 0
        self.resumed = resumed  # URLs re-queued from the store at start (crawler.recovery.checkpoint)
        self.events = events  # None with ``events.sink: none``
        self.gate = gate
        # Run once before the first dispatch (resuming from a remote copy: crawler.recovery.statefiles).
        self.on_start = tuple(on_start)
        self._hold = hold if hold is not None else Hold(clock)
        self._claims = claims if claims is not None else Claims(store)
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._budget_spent = False
        self._final_counts: dict[str, int] | None = None
        self._started = False
        self._gated = False  # the last dispatch found the gate shut
        self._robots_misses: dict[str, int] = {}  # origins whose robots.txt failed, in a row
        self._errors = InternalErrors(  # what an error while processing a URL costs
            shard_id, settings.attempts, retry=frontier.retry, counters=self.counters,
            fail=lambda item, error: self._record(item, pipeline.outcome(item, "failed", error=error)))

    # -- input ----------------------------------------------------------------------

    def accept(self, items: Sequence[UrlItem]) -> int:
        """Take a batch of URLs whose hosts this shard owns (crawler.engine.admission: de-duplicated
        and committed before this returns, cached robots refusals recorded, budget drops
        counted); returns how many were queued."""
        if not self.gate():
            raise FencedError(f"{self.shard_id} is not accepting work (fenced or cut off from its driver)")
        self.batches_received += 1
        keep, refused = self.admission.take(items)
        for item in refused:
            self._refused(item)
        if self.news is not None:
            self.news.credit(keep)
        accepted = len(keep)
        boosted = [i for i in keep if i.boost or i.fresh]
        if boosted:  # an operator's priority, and news, live in memory only: never spilled
            self.frontier.push(boosted, in_memory=True)
            keep = [i for i in keep if not (i.boost or i.fresh)]
        self.frontier.push(keep)
        self.counters["accepted"] += accepted
        self._wake.set()
        return accepted

    async def accept_durably(self, items: Sequence[UrlItem]) -> int:
        """:meth:`accept`, returning only once the batch is durable where this shard's state
        is kept: in its store, and with a remote output in OUT too (crawler.recovery.statelog), so
        that a sender may forget the batch when this returns (docs/invariants.md #11)."""
        forwarded = 0
        if self.regions is not None:  # URLs of hosts that live elsewhere go on, durably
            if not self.gate():
                raise FencedError(f"{self.shard_id} is not accepting work (fenced or cut off from its driver)")
            items, forwarded = await self.regions.route(items)
        queued = self.accept(items) if items or self.regions is None else 0
        await self.synced()
        return queued + forwarded

    async def adopt(self, state: HostState) -> int:
        """Take over a host handed over by another shard (crawler.placement.handover); durable
        before it returns."""
        if self.regions is None:
            raise DeliveryError(f"{self.shard_id} has no regions: it cannot adopt {state.host}")
        queued = await self.regions.adopt(state)
        self._wake.set()
        return queued

    async def synced(self) -> None:
        """Return once every change journaled so far is in OUT (a no-op for a local output)."""
        if self.state_log is not None:
            await self.state_log.synced()

    def set_host_policy(self, change: PolicyChange) -> None:
        """Operator policy (crawler.control.hostpolicy.PolicyChange) of one politeness key,
        or with ``hostname_wide`` of every key of a hostname that this shard owns now or
        later; saved at once so it survives restarts. ``max_pages`` cuts the queue of a
        host past its new limit (counted as ``host_limit``, no rows)."""
        host, interval_s, paused, max_pages = change.host, change.interval_s, change.paused, change.max_pages
        if change.hostname_wide:
            keys = set(self.politeness.set_name_override(host, interval_s=interval_s, paused=paused))
            keys.update(k for k in self.frontier.keys() if name_of(k) == host)
            drops = self.host_budget.set_name_limit(host, max_pages, self.frontier.queued_for) if max_pages is not None else {}
        else:
            self.politeness.set_override(host, interval_s=interval_s, paused=paused)
            keys = {host}
            drops = {host: self.host_budget.set_limit(host, max_pages, self.frontier.queued_for(host))} if max_pages is not None else {}
        self.admission.limit(drops)  # the trim and the budgets it set: one commit
        for key in keys:
            self.frontier.reschedule(key)
        if self.checkpointer is not None:
            self.checkpointer.save(journal=True)  # an operator's setting: journaled (synced by the caller)
        self._wake.set()

    def widen_scope(self, urls: Sequence[str]) -> None:
        """Seeds added while the crawl runs: scope ``host``/``domain`` grows with them."""
        self.pipeline.links.scope.add_seeds(urls)

    def vet_seeds(self, urls: Sequence[str]) -> list[str | None]:
        """Why each seed would be refused here, or None (:func:`vet_seeds`)."""
        return vet_seeds(urls, self.pipeline.links.traps, self.robots.cache if self.settings.respect_robots else None)

    def hold(self, seconds: float) -> None:
        """Start no request for ``seconds`` (after a resume: a host contacted just before
        the stop is not contacted again sooner than one interval)."""
        self._hold.hold(seconds)

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Dispatch until :meth:`stop`, waking on events or the next due host."""
        output = asyncio.ensure_future(self.outbox.run())
        journal = asyncio.ensure_future(self.state_log.run()) if self.state_log is not None else None
        try:
            for step in self.on_start:
                await step()
            self._started = True
            while not self._stopping:
                self._wake.clear()
                self._dispatch()
                await wait_event(self.clock, self._wake, self._idle_wait())
        finally:
            self.outbox.stop()
            await output
            if journal is not None:
                self.state_log.stop()  # type: ignore[union-attr]
                await journal

    def stop(self) -> None:
        """Dispatch and retry nothing more (in-flight work is cancelled by :meth:`close`)."""
        self._stopping = True
        self.router.stop()
        self._wake.set()

    async def close(self, *, cancel_in_flight: bool = True) -> None:
        """Stop; cancel or finish in-flight work; flush, ack and checkpoint; close."""
        self.stop()
        if cancel_in_flight:
            for t in list(self._tasks):
                t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.router.close()
        if self.regions is not None:
            await self.regions.close()
        try:
            await self.outbox.flush(final=True)
        except (FencedError, StorageError) as exc:
            # Not acked: the URLs stay claimed in the store, and the next run fetches them again.
            log.error("%s: final rows not written: %s (the next run fetches them again)", self.shard_id, exc)
        if self.events is not None:
            await self.events.close()  # done by the final flush, unless that was fenced off
        await self.fetcher.close()
        try:
            await self.synced()
        except FencedError as exc:  # a newer incarnation of this shard holds its state (DESIGN invariant 15)
            log.error("%s: last changes not journaled: %s (their senders deliver them again)", self.shard_id, exc)
        if self.store is not None:
            self._final_counts = self.store.counts()  # after the last acks, for the ledger
            self.store.close()

    def _idle_wait(self) -> float:
        wake = self.frontier.next_wakeup()
        if wake is None or self._budget_spent or len(self._tasks) >= self.settings.max_in_flight:
            return IDLE_WAIT_S  # all slots taken (pages waiting on a receiver): a task's end wakes the loop
        if self._gated:
            return GATE_RETRY_S
        return min(IDLE_WAIT_S, max(0.0, max(wake, self._hold.until) - self.clock.now()))

    def _dispatch(self) -> None:
        self._gated = False
        if self._stopping or self._budget_spent or self.clock.now() < self._hold.until:
            return
        if not self.gate():
            self._gated = True
            return
        if self.feed is not None:
            self.feed.tick()
        free = self.settings.max_in_flight - len(self._tasks)
        if free <= 0:
            return
        items = self.frontier.pop_ready(free)
        self._claims.add([i.url for i in items])  # committed before their links are seen-checked
        for item in items:
            task = asyncio.ensure_future(self._process(item))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _process(self, item: UrlItem) -> None:
        host = item.host
        try:
            if item.kind == "sitemap":  # one of our hosts' sitemaps: links, no row
                assert self.sitemaps is not None
                await self.sitemaps.read(item, self._fetch, self.frontier.push,
                                         lambda links: self.router.submit(links, bypass_seen=item.replay))
                return
            if self.regions is not None and await self.regions.before_fetch(host, origin(item.url)):
                # Timed from every region (the probes took the host's slot), or on its way
                # to another region: the URL waits for the host's next allowed time, here
                # or on the shard the host moves to (held here from now on).
                self.frontier.requeue(item)
                return
            if self.settings.respect_robots:
                org = origin(item.url)
                allowed = self.robots.cache.allowed(item.url, org)
                if allowed is None:
                    # First URL of this origin (or expired rules): robots.txt takes the
                    # host's slot; the URL waits for the next allowed time.
                    await self._refresh_robots(org, host)
                    self.frontier.requeue(item)
                    return
                if not allowed:
                    self._refused(item)
                    return
            if item.attempts == 0 and not await self.budget.acquire():
                self._budget_spent = True
                self.frontier.requeue(item)
                return
            await self._handle(item, await self._fetch(host, item.url, conditional_headers(item.prev)))
        except asyncio.CancelledError:
            raise  # a stop: the URL stays claimed (or queued) and is fetched again on resume
        except Exception as exc:  # noqa: BLE001 - sorted there: never the shard, never a silent loss
            self._errors.cost(item, exc, stopping=self._stopping)
        finally:
            self.frontier.release(host)  # whatever happened (docs/invariants.md #4)

    async def _fetch(self, host: str, url: str, headers: dict[str, str] | None = None, **kw: Any) -> FetchResult:
        self.counters["requests"] += 1
        return await self.politeness.request(host, lambda: self.fetcher.fetch(url, headers, **kw))

    async def _refresh_robots(self, org: str, host: str) -> None:
        rules, requests = await self.robots.refresh(org, host, self._fetch)
        self.counters["robots_requests"] += requests
        misses = self._robots_misses.get(org, 0) + 1
        if rules.unreachable is not None and misses < self.settings.attempts:
            # robots.txt could not be had (a timeout, a reset, a 5xx): like a page that
            # fails that way, it is asked again after the host's (widened) interval before
            # the host counts as unreachable and its URLs are refused. Nothing of the host
            # is fetched meanwhile: complete disallow while it is unreachable (RFC 9309
            # 2.3.1.4). A lost robots.txt response -- a slow server, or this shard's own
            # loop stalled past the deadline -- so costs a retry, not a whole host.
            self._robots_misses[org] = misses
            self.counters["robots_retries"] += 1
            self.robots.cache.drop([org])
            return
        self._robots_misses.pop(org, None)
        self.politeness.set_crawl_delay(host, rules.crawl_delay)
        if self.sitemaps is not None:
            self.frontier.push(self.sitemaps.plan(org, host, rules.sitemaps, rules.allowed))
        # URLs queued before the rules were known: refuse the disallowed ones now, the
        # verdict durable with them (a restart refuses without asking robots.txt again).
        blocked = self.frontier.remove_where(host, lambda it: not rules.allowed(it.url))
        self.admission.robots_verdict(org, [it.url for it in blocked])
        for item in blocked:
            self._refused(item)

    async def _handle(self, item: UrlItem, res: FetchResult) -> None:
        kind = classify(res)
        item.attempts += 1
        if kind == "transient" and item.attempts < self.settings.attempts:
            self.counters["retries"] += 1
            self.frontier.retry(item)
            return
        if kind == "ok":
            outcome = await self.pipeline.page(item, res)
            drop = self.host_budget.record_fetch(item.host, outcome.duplicate, self.frontier.queued_for(item.host))
            if drop:
                self.admission.trim(item.host, drop)
            self.frontier.demote(item.host, self.host_budget.penalty(item.host) > 1.0)
        elif kind == "redirect":
            outcome = self.pipeline.redirect(item, res)
        elif kind == "not_modified":
            outcome = self.pipeline.outcome(item, "not_modified", res)
        else:
            final = "http_error" if res.status is not None and res.status >= 400 else "failed"
            error = res.error or (f"HTTP {res.status}" if res.status is not None else "no response")
            outcome = self.pipeline.outcome(item, final, res, error=error)
        if outcome.links:
            # Acked only once its links reached their owners: in flight (docs/invariants.md #4)
            # however long a receiver refuses. False: given up (a bug) or a stop: InternalErrors.
            if not await self.router.submit(outcome.links, bypass_seen=item.replay):
                raise DeliveryError(f"{len(outcome.links)} links could not be delivered to their shards")
        if self.news is not None:  # after delivery: the new URLs it yielded are counted
            outcome.schedule = self.news.after_fetch(item, outcome.row.status, outcome.schedule, outcome.feed)
        self._record(item, outcome)

    def _refused(self, item: UrlItem) -> None:
        """A URL the robots rules refuse: ``robots_blocked``, or ``failed`` with the cause
        when robots.txt got no response at all (the site said nothing, the network failed)."""
        cause = self.robots.cache.unreachable_reason(origin(item.url))
        if cause is None:
            self._record(item, self.pipeline.outcome(item, "robots_blocked", error="disallowed by robots.txt"))
        else:
            self._record(item, self.pipeline.outcome(item, "failed", error=f"robots.txt unreachable: {cause}"))

    def _record(self, item: UrlItem, outcome: Outcome) -> None:
        """Every fetch of a URL ends as exactly one row (docs/invariants.md #5)."""
        row = outcome.row
        self._errors.settled(item.url)
        self.counters[row.outcome] += 1
        if item.kind == "refresh":
            self.counters["refresh_fetches"] += 1
            self.counters["changes_found"] += bool(row.changed)
        self.outbox.put(row, outcome.body, outcome.schedule, outcome.raw_body)
        if self.feed is not None:
            self.feed.after_record(item, row, outcome.schedule)

    # -- status ---------------------------------------------------------------------

    def store_counts(self) -> dict[str, int] | None:
        """The durable store's URLs by state (crawler.session.ledger); after :meth:`close`, as closed."""
        if self._final_counts is not None or self.store is None:
            return self._final_counts
        return self.store.counts()

    def status(self) -> ShardStatus:
        """This shard's numbers now, for progress and for termination (crawler.session.termination)."""
        queued = len(self.frontier)
        transit = self.router.pending() + self.pipeline.pending() + (self.regions.pending() if self.regions else 0)
        could_work = queued > 0 and not self._budget_spent and self.frontier.next_wakeup() is not None
        paused_hosts, paused_urls = self.frontier.parked() if not self._budget_spent else (0, 0)
        refresh_waiting, refresh_due = self.frontier.refreshes()
        rs = self.router.stats()
        return ShardStatus(
            shard=self.shard_id,
            idle=not self._tasks and transit == 0 and not could_work and (self._started or not self.on_start),
            paused_hosts=paused_hosts,
            paused_urls=paused_urls,
            queued=queued,
            in_flight=len(self._tasks),
            in_transit=transit,
            hosts=self.frontier.host_count(),
            batches_received=self.batches_received,
            batches_sent=rs.get("batches_sent", 0),
            budget_spent=self._budget_spent,
            counters=dict(self.counters),
            dropped=dict(self.dropped),
            router=rs,
            rows_pending=self.outbox.pending(),
            frontier_recounts=self.frontier.recounts,
            refresh_waiting=refresh_waiting,
            refresh_due=refresh_due,
            resumed=self.resumed,
            events=self.events.stats() if self.events is not None else None,
            news=self.news.stats(fresh=self._stopping) if self.news is not None else {},
            state_log=self.state_log.stats() if self.state_log is not None else None,
            regions=self.regions.stats() if self.regions is not None else None,
        )
