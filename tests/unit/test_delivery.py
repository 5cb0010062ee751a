"""An internal error is not a web outcome (docs/invariants.md #13), on the mock clock.

Two in-process shards, ``shard-a`` owning ``a.test`` and ``shard-b`` owning ``b.test``,
each with its durable store, a shared seen set and a scripted server. What a user would
notice is read off the server's log (what was fetched, how often), the rows in the output
and the stores: a receiver that refuses for a while costs time, never a page; a stop
leaves the page for the resume; a bug is counted and retried, and never drops links
without saying so.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Callable

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.engine.assembly import ContentCall, build_shard
from crawler.engine.dispatcher import GATE_RETRY_S, IDLE_WAIT_S
from crawler.engine.shard import Shard
from crawler.errors import ServiceUnavailableError
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.output import read_pages

from tests.unit.doubles import ContentAnswer, ContentQuery, MemorySeen, NoBudgetLimit, ScriptedServer, html, inline, no_dups

REFUSAL_S = 30.0
SEED = "http://a.test/"
A_LINKS = ["http://a.test/p", "http://b.test/1", "http://b.test/2"]
WEB = {
    SEED: [(200, html(*A_LINKS), 0.1)],
    "http://a.test/p": [(200, html("/"), 0.1)],
    "http://b.test/1": [(200, html("http://a.test/q"), 0.1)],
    "http://b.test/2": [(200, html(), 0.1)],
    "http://a.test/q": [(200, html(), 0.1)],
}
PAGES = set(WEB)


class ShutFor:
    """A shard's gate (crawler.engine.dispatcher.Gate) shut from ``start`` for ``seconds``
    of the clock: what a silent driver or an unreadable lease does to a shard."""

    def __init__(self, clock: MockClock, start: float, seconds: float) -> None:
        self.clock, self.start, self.end = clock, start, start + seconds

    def __call__(self) -> bool:
        return not self.start <= self.clock.now() < self.end


class Crawl:
    """Two shards over one server and one seen set; ``gates``/``content`` per shard."""

    def __init__(self, tmp: Path, clock: MockClock, server: ScriptedServer, seen: MemorySeen,
                 gates: dict[str, Callable[[], bool]] | None = None, content: ContentCall | None = None, max_in_flight: int = 16) -> None:
        self.tmp, self.clock, self.server, self.seen = tmp, clock, server, seen
        self.cfg = config.from_dict({
            "seeds": [SEED], "scope": "any", "politeness": {"interval_s": 0.5},
            "fetch": {"attempts": 3, "backoff_s": 1.0, "max_backoff_s": 1.0, "max_in_flight": max_in_flight},
            "output": {"path": str(tmp / "out"), "row_flush_interval_s": 1.0, "outbox_interval_s": 0.25},
        })
        self.shards: dict[str, Shard] = {}
        for sid in ("shard-a", "shard-b"):
            self.shards[sid] = build_shard(
                self.cfg, sid, seeds=[SEED], seen=seen, content=content or no_dups, budget=NoBudgetLimit(),
                deliver=self.deliver, owner_of=lambda host: "shard-b" if host.startswith("b.") else "shard-a",
                store=FrontierStore(str(tmp / f"{sid}.sqlite")), clock=clock, rng=random.Random(3), fetcher=server,
                run_blocking=inline, gate=(gates or {}).get(sid),
            )
        self.a, self.b = self.shards["shard-a"], self.shards["shard-b"]
        self.runners: list[asyncio.Future[None]] = []

    async def deliver(self, owner: str, items: list[UrlItem]) -> None:
        await self.shards[owner].accept(items)

    def start(self, seed: bool = True) -> None:
        if seed and self.seen.seen.isdisjoint({SEED}):
            self.seen.seen.add(SEED)
            self.seen.novel += 1
            self.a.admit([UrlItem(SEED, 0)])
        self.runners = [asyncio.ensure_future(s.run()) for s in self.shards.values()]

    def done(self) -> bool:
        return all(s.report().idle and s.parts.outbox.pending() == 0 for s in self.shards.values())

    async def stop(self) -> None:
        for s in self.shards.values():
            s.stop()
        await asyncio.gather(*self.runners)
        for s in self.shards.values():
            await s.close()

    def fetches(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for url, _, _ in self.server.log:
            if url in PAGES:
                out[url] = out.get(url, 0) + 1
        return out

    def rows(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in read_pages(self.cfg.output.path, dedupe=False).to_pylist():
            out.setdefault(r["url"], []).append(r["outcome"])
        return out

    def counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for s in self.shards.values():
            for k, v in (s.store_counts() or {}).items():
                total[k] = total.get(k, 0) + v
        return total


def test_a_receiver_that_refuses_for_30_s_costs_time_not_pages(tmp_path):
    """The finding of issue 31: every accept refused (FencedError) while shard-b's driver
    is silent. Before, the router gave up after ~9 s and the page became a ``failed``
    row whose links stayed marked seen, never admitted again."""

    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        crawl = Crawl(tmp_path, clock, server, MemorySeen(), gates={"shard-b": ShutFor(clock, 0.0, REFUSAL_S)})
        crawl.start()
        await clock.run_until(lambda: crawl.fetches().get(SEED) == 1)
        await clock.run_until(lambda: clock.now() >= REFUSAL_S - 1.0)
        # The seed's page waits for its links: in flight, unacked, and the shard is not idle.
        st = crawl.a.report()
        assert not st.idle and st.in_flight >= 1 and st.router["links_in_transit"] >= 2
        assert crawl.a.parts.store is not None
        seed_status = crawl.a.parts.store.url_status(SEED)
        assert SEED not in crawl.rows() and seed_status is not None and seed_status["in_flight"]
        assert st.router["batches_refused"] > 10 and st.router["links_lost"] == 0
        await clock.run_until(crawl.done)
        assert clock.now() > REFUSAL_S
        await crawl.stop()
        assert crawl.fetches() == {u: 1 for u in PAGES}  # every page, once
        assert crawl.rows() == {u: ["fetched"] for u in PAGES}  # no failed row
        assert crawl.counts() == {"queued": 0, "claimed": 0, "done": len(PAGES), "dropped": 0}
        assert crawl.seen.novel == len(PAGES)  # every link admitted, the ledger balances
        for s in crawl.shards.values():
            assert s.parts.counters.internal_errors == 0 and s.parts.counters.failed == 0

    asyncio.run(scenario())


def test_a_stop_during_the_refusal_leaves_the_page_for_the_resume(tmp_path):
    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        seen = MemorySeen()
        first = Crawl(tmp_path, clock, server, seen, gates={"shard-b": ShutFor(clock, 0.0, 1e9)})
        first.start()
        await clock.run_until(lambda: first.a.report().router["batches_refused"] >= 5)
        stopped_at = clock.now()
        await first.stop()  # returns without waiting out any retry
        assert clock.now() == stopped_at
        # No row, no ack: the seed stays claimed; its links' seen marks are undone, so the
        # seen filter counts no URL that no shard holds.
        assert SEED not in first.rows()
        assert first.counts() == {"queued": 1, "claimed": 1, "done": 0, "dropped": 0}  # the seed, a.test/p
        assert seen.seen == {SEED, "http://a.test/p"} and seen.novel == 2
        assert first.a.report().router["links_unsent"] == 2

        again = Crawl(tmp_path, clock, server, seen)  # the resume: same stores, gates open
        again.start(seed=False)
        await clock.run_until(again.done)
        await again.stop()
        fetched = again.fetches()
        assert fetched.pop(SEED) == 2  # fetched again on resume (it was in flight at the stop)
        assert fetched == {u: 1 for u in PAGES - {SEED}}
        assert again.rows() == {u: ["fetched"] for u in PAGES}
        assert again.counts() == {"queued": 0, "claimed": 0, "done": len(PAGES), "dropped": 0}
        assert seen.novel == len(PAGES)

    asyncio.run(scenario())


def test_a_bug_is_counted_and_retried_and_the_page_fetched_once_more_at_most(tmp_path):
    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        crawl = Crawl(tmp_path, clock, server, MemorySeen())
        page = crawl.a.parts.pipeline.page
        raised: list[str] = []

        async def raises_once(item, res):
            if item.url == SEED and not raised:
                raised.append(item.url)
                raise KeyError("a bug in the pipeline")
            return await page(item, res)

        crawl.a.parts.pipeline.page = raises_once  # type: ignore[method-assign]
        crawl.start()
        await clock.run_until(crawl.done)
        await crawl.stop()
        assert crawl.a.parts.counters.internal_errors == 1
        fetched = crawl.fetches()
        assert fetched.pop(SEED) == 2 and fetched == {u: 1 for u in PAGES - {SEED}}
        assert crawl.rows() == {u: ["fetched"] for u in PAGES}
        assert crawl.seen.novel == len(PAGES) and crawl.counts()["done"] == len(PAGES)

    asyncio.run(scenario())


def test_a_receiver_with_a_bug_ends_in_a_failed_row_and_links_counted_lost(tmp_path):
    """A receiver that always raises (a bug, not a refusal): the page is tried
    ``fetch.attempts`` times, then one ``failed`` row; the links it could not deliver are
    counted lost and their seen marks undone, so another page's link can admit them."""

    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        crawl = Crawl(tmp_path, clock, server, MemorySeen())

        async def broken(items):
            raise RuntimeError("a bug in accept")

        crawl.b.accept = broken  # type: ignore[method-assign]  # a receiver with a bug
        crawl.start()
        await clock.run_until(crawl.done)
        await crawl.stop()
        assert crawl.a.parts.counters.internal_errors == 3
        assert crawl.fetches() == {SEED: 3, "http://a.test/p": 1}
        rows = crawl.rows()
        assert rows[SEED] == ["failed"] and rows["http://a.test/p"] == ["fetched"]
        router = crawl.a.report().router
        assert router["links_lost"] == 3 * 2 and router["links_seen_marks_undone"] == 3 * 2
        assert crawl.seen.seen == {SEED, "http://a.test/p"}  # nothing marked that no shard holds
        assert crawl.seen.novel == crawl.counts()["done"] == 2

    asyncio.run(scenario())


def test_a_service_that_cannot_answer_now_defers_the_page_without_a_row(tmp_path):
    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        calls: list[int] = []

        async def index_restarting_once(items: list[ContentQuery]) -> list[ContentAnswer]:
            calls.append(len(items))
            if len(calls) == 1:
                raise ServiceUnavailableError("content index: unavailable for 120s")
            return await no_dups(items)

        crawl = Crawl(tmp_path, clock, server, MemorySeen(), content=index_restarting_once)
        crawl.start()
        await clock.run_until(crawl.done)
        await crawl.stop()
        assert crawl.a.parts.counters.deferred == 1 and crawl.a.parts.counters.internal_errors == 0
        fetched = crawl.fetches()
        assert fetched.pop(SEED) == 2 and fetched == {u: 1 for u in PAGES - {SEED}}
        assert crawl.rows() == {u: ["fetched"] for u in PAGES}

    asyncio.run(scenario())


def test_a_shut_gate_is_polled_not_spun(tmp_path):
    """While a shard's gate is shut (its driver silent) with work due, the loop asks the
    gate every GATE_RETRY_S, not on every turn: a 10 s silence costs ~100 looks, not a
    core, and the work starts as soon as the gate opens."""

    async def scenario() -> None:
        clock = MockClock()
        server = ScriptedServer(clock, WEB)
        shut = ShutFor(clock, 0.0, 10.0)
        looks: list[float] = []

        def gate() -> bool:
            if crawl.runners:  # shut from the start of the loop (the seed is accepted before)
                looks.append(clock.now())
                return shut()
            return True

        crawl = Crawl(tmp_path, clock, server, MemorySeen(), gates={"shard-a": gate})
        crawl.start()
        await clock.run_until(lambda: bool(server.log))
        assert 10.0 <= server.log[0][1] <= 10.0 + GATE_RETRY_S
        shut_looks = [t for t in looks if t < 10.0]
        assert len(shut_looks) <= 10.0 / GATE_RETRY_S + 5
        await clock.run_until(crawl.done)
        await crawl.stop()
        assert crawl.rows() == {u: ["fetched"] for u in PAGES}

    asyncio.run(scenario())


def test_a_shard_whose_slots_all_wait_on_a_receiver_does_not_spin(tmp_path):
    """One fetch slot, taken by a page whose links shard-b refuses for 30 s, while
    another host's pages are due: the loop waits for the slot to free (a task's end wakes
    it), instead of turning without a pause for 30 s."""

    async def scenario() -> None:
        clock = MockClock()
        c_pages = [f"http://c.test/{i}" for i in range(4)]
        web = {**WEB, "http://c.test/": [(200, html(*c_pages), 0.1)], **{u: [(200, html(), 0.1)] for u in c_pages}}
        server = ScriptedServer(clock, web)
        turns: list[float] = []

        def counting() -> bool:  # asked once per turn of shard-a's loop
            turns.append(clock.now())
            return True

        crawl = Crawl(tmp_path, clock, server, MemorySeen(), gates={"shard-a": counting, "shard-b": ShutFor(clock, 0.0, REFUSAL_S)},
                      max_in_flight=1)
        crawl.a.admit([UrlItem("http://c.test/", 0)])
        crawl.start()
        await clock.run_until(lambda: crawl.fetches().get(SEED) == 1 and len(server.log) >= 4)
        start = clock.now()
        await clock.run_until(lambda: clock.now() >= REFUSAL_S - 1.0)
        assert not crawl.a.report().idle and crawl.a.report().queued > 0  # due work, no free slot
        waiting = [t for t in turns if start <= t < REFUSAL_S - 1.0]
        assert len(waiting) <= (REFUSAL_S - 1.0 - start) / IDLE_WAIT_S + 10
        await clock.run_until(crawl.done)
        await crawl.stop()
        assert crawl.rows() == {u: ["fetched"] for u in set(web)}

    asyncio.run(scenario())
