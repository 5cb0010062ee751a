"""The loop of one shard: take a due URL, pass its gates, fetch it, handle the response.

For each URL the frontier hands out (at most one per host, when the host is due) the
:class:`Dispatcher` asks its gates (crawler.engine.gates: region, robots, page budget),
fetches the URL in its host's politeness slot (crawler.engine.requests) and hands the
response to the :class:`~crawler.engine.handler.FetchHandler`. It coordinates and decides
nothing else (model: Scrapy's ``ExecutionEngine``).

An error while processing a URL is not a web outcome (docs/invariants.md #13): a page whose
links a receiver refuses for now stays in flight, unacked, while the router asks again;
any other error goes to :class:`~crawler.engine.internalerrors.InternalErrors` (a stop
leaves the URL for the resume, "not now" defers it, a bug is counted and retried).

Every wait is on the injected clock, so the whole loop is unit-tested with ``MockClock``
and a fake transport (tests/unit/test_scheduler.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, Sequence

from crawler.clock import Clock, wait_event
from crawler.engine.gates import FetchGate, Verdict
from crawler.engine.handler import FetchHandler
from crawler.engine.internalerrors import InternalErrors
from crawler.engine.linkrouter import LinkRouter
from crawler.engine.optional import FeedPart
from crawler.engine.requests import RequestLane
from crawler.frontier.recrawl import conditional_headers
from crawler.freshness.sitemaps import SitemapReader
from crawler.frontier.frontier import Frontier
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem

#: Longest wait of the loop with nothing due (it wakes earlier on any event).
IDLE_WAIT_S = 1.0
#: How often a shard whose gate is shut (driver silent, lease unknown) looks again. The
#: gate opens without an event (a heartbeat, a lease read), so the loop polls it -- and
#: waits between looks: a shut gate with due hosts must not spin the loop.
GATE_RETRY_S = 0.1


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
class DispatchSettings:
    """The config values the loop needs (from crawler.config.settings)."""

    max_in_flight: int
    attempts: int
    respect_robots: bool


class Dispatcher:
    """Runs one shard's fetches (module docstring).

    Args:
        settings: in-flight limit and tries.
        frontier: hands out due URLs, takes them back.
        gates: the checks before a fetch, in order (crawler.engine.gates).
        lane: the shard's paced requests.
        handler: what follows a response.
        sitemaps: reads sitemap items (None: sitemaps off).
        router: delivers a sitemap's links.
        errors: what an error while processing a URL costs.
        feed: loads refreshes coming due before each round.
        timing: the clock, the hold after a resume and the gate (driver heard, lease ours).
        claims: the fetches started, made durable before their links are seen-checked.
    """

    def __init__(self, settings: DispatchSettings, *, frontier: Frontier, gates: Sequence[FetchGate],
                 lane: RequestLane, handler: FetchHandler, sitemaps: SitemapReader | None, router: LinkRouter,
                 errors: InternalErrors, feed: FeedPart, timing: tuple[Clock, Hold, Gate], claims: Claims) -> None:
        self.settings = settings
        self._frontier, self._gates, self._lane, self._handler = frontier, tuple(gates), lane, handler
        self._sitemaps, self._router, self._errors, self._feed = sitemaps, router, errors, feed
        self._clock, self._hold, self._may_work = timing
        self._claims = claims
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.stopping = False
        self.budget_spent = False
        self._gated = False  # the last dispatch found the gate shut

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def wake(self) -> None:
        """Look at the frontier again now (new work, a setting changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Dispatch until :meth:`stop`, waking on events or the next due host."""
        while not self.stopping:
            self._wake.clear()
            self._dispatch()
            await wait_event(self._clock, self._wake, self._idle_wait())

    def stop(self) -> None:
        """Dispatch and retry nothing more (in-flight work is ended by :meth:`drain`)."""
        self.stopping = True
        self._wake.set()

    async def drain(self, *, cancel: bool) -> None:
        """Cancel (or let finish) the fetches in flight, and wait for them."""
        if cancel:
            for t in list(self._tasks):
                t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _idle_wait(self) -> float:
        wake = self._frontier.next_wakeup()
        if wake is None or self.budget_spent or len(self._tasks) >= self.settings.max_in_flight:
            return IDLE_WAIT_S  # all slots taken (pages waiting on a receiver): a task's end wakes the loop
        if self._gated:
            return GATE_RETRY_S
        return min(IDLE_WAIT_S, max(0.0, max(wake, self._hold.until) - self._clock.now()))

    def _dispatch(self) -> None:
        self._gated = False
        if self.stopping or self.budget_spent or self._clock.now() < self._hold.until:
            return
        if not self._may_work():
            self._gated = True
            return
        self._feed.tick()
        free = self.settings.max_in_flight - len(self._tasks)
        if free <= 0:
            return
        items = self._frontier.pop_ready(free)
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
                assert self._sitemaps is not None, "a sitemap item with sitemaps off"
                await self._sitemaps.read(item, self._lane.fetch, self._frontier.push,
                                          lambda links: self._router.submit(links, bypass_seen=item.replay))
                return
            for gate in self._gates:
                verdict = await gate.check(item)
                if verdict is Verdict.GO:
                    continue
                if verdict is Verdict.SPENT:
                    self.budget_spent = True
                if verdict is not Verdict.DONE:
                    self._frontier.requeue(item)
                return
            await self._handler.handle(item, await self._lane.fetch(host, item.url, conditional_headers(item.prev)))
        except asyncio.CancelledError:
            raise  # a stop: the URL stays claimed (or queued) and is fetched again on resume
        except Exception as exc:  # noqa: BLE001 - sorted there: never the shard, never a silent loss
            self._errors.cost(item, exc, stopping=self.stopping)
        finally:
            self._frontier.release(host)  # whatever happened (docs/invariants.md #4)
