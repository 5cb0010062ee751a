"""Regression tests for the two causes of "finished, yet an allowed page has no row".

Cause 1 (robots refusals in the spill area): a URL refused by cached robots rules at
accept time stayed ``queued`` in the durable store until its row was flushed, so the
frontier's spill loader handed it out again as if it were one of the host's spilled URLs.
Each such reload used up the spill count of a real URL, and the host's last spilled URLs
were never loaded: they stayed queued in the store while the frontier said it was empty.
(``../shared/repro/url-loss``: 3 allowed pages of a host with ``Disallow: /private/``.)

Cause 2 (a cancelled output flush): the engine's output loop took the buffered rows and
then awaited a thread to hand them to the writer; stopping the engine cancelled that
await, and a thread job that had not started yet was dropped with the rows it carried.

Both are reproduced here directly, without sockets, Ray or test order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from crawler import config
from crawler.clock import MockClock
from crawler.engine import LocalPageBudget, ShardEngine
from crawler.frontier import UrlItem
from crawler.journal import FrontierStore
from crawler.output import read_pages

HOST = "h0053.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


class NoContent:
    async def check_and_add(self, items):
        return [(None, None)] * len(items)


def _engine(tmp_path, clock) -> ShardEngine:
    cfg = config.from_dict(
        {
            "seeds": [f"http://{HOST}/"],
            "scope": "host",
            "politeness": {"interval_s": 1.0},
            "output": {"path": str(tmp_path / "out")},
        }
    )
    store = FrontierStore(str(tmp_path / "shard.sqlite"))
    return ShardEngine(cfg, "shard-000", content=NoContent(), budget=LocalPageBudget(None), store=store, clock=clock)


def test_urls_refused_by_cached_robots_do_not_eat_the_spill_count(tmp_path):
    clock = MockClock()
    eng = _engine(tmp_path, clock)
    eng.robots.from_response(f"http://{HOST}", 200, ROBOTS)
    # One page's links, as the router delivers them: allowed and /private/ ones mixed,
    # far more than the frontier's in-memory window of 4 per host.
    paths = [f"/a/{i}.html" for i in range(12)]
    paths[6:6] = [f"/private/{i}.html" for i in range(6)]  # behind the in-memory window
    eng.accept([UrlItem(f"http://{HOST}{p}", 1) for p in paths])

    popped = []
    while len(eng.frontier):
        clock.advance(1.0)
        batch = eng.frontier.pop_ready(8)
        assert batch, "the frontier counts queued URLs but hands none out"
        for item in batch:
            popped.append(item.url)
            eng.frontier.release(item.host)
    allowed = [f"http://{HOST}{p}" for p in paths if not p.startswith("/private/")]
    assert sorted(popped) == sorted(allowed)
    # Nothing stays queued in the durable store behind the frontier's back.
    assert eng.store.counts()["queued"] == len(allowed)  # popped, not yet claimed
    assert eng.counters["robots_blocked"] == 6


def test_stopping_while_a_flush_is_starting_loses_no_row(tmp_path):
    async def scenario() -> None:
        eng = _engine(tmp_path, MockClock())
        eng._ensure_started()
        loop = asyncio.get_running_loop()
        # A busy executor: the flush's thread job queues behind a blocked one.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(pool)
        gate = threading.Event()
        blocker = loop.run_in_executor(None, gate.wait)
        urls = [f"http://{HOST}/a/{i}.html" for i in range(4)]
        eng.accept([UrlItem(u, 1) for u in urls])
        for item in eng.frontier.pop_ready(1) + [UrlItem(u, 1) for u in urls[1:]]:
            eng._record(item, "http_error", error="HTTP 404")
        flush = loop.create_task(eng.flush_output())
        await asyncio.sleep(0)  # the flush is now waiting for its thread
        flush.cancel()  # what stopping the engine does to the output loop
        await asyncio.gather(flush, return_exceptions=True)
        gate.set()
        await blocker
        await eng.flush_output(final=True)
        await eng.close()
        rows = read_pages(eng.cfg.output.path).to_pylist()
        assert sorted(r["url"] for r in rows) == sorted(urls)

    asyncio.run(scenario())
