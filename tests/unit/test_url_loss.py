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
from pathlib import Path

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.engine.outbox import Outbox
from crawler.output import read_pages
from crawler.engine.assembly import build_shard
from crawler.engine.partbuilders import build_writer
from crawler.engine.shard import Shard

from tests.unit.doubles import MemorySeen, NoBudgetLimit, NoFetches, no_delivery, no_dups

HOST = "h0053.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def _cfg(tmp_path):
    return config.from_dict(
        {
            "seeds": [f"http://{HOST}/"],
            "scope": "host",
            "politeness": {"interval_s": 1.0},
            "output": {"path": str(tmp_path / "out")},
        }
    )


def _shard(tmp_path: Path, clock: MockClock) -> Shard:
    return build_shard(
        _cfg(tmp_path), "shard-000", seeds=[f"http://{HOST}/"], seen=MemorySeen(), content=no_dups,
        budget=NoBudgetLimit(), deliver=no_delivery, owner_of=lambda h: "shard-000",
        store=FrontierStore(str(tmp_path / "shard.sqlite")), clock=clock, fetcher=NoFetches(),
    )


def test_urls_refused_by_cached_robots_do_not_eat_the_spill_count(tmp_path):
    clock = MockClock()
    shard = _shard(tmp_path, clock)
    shard.parts.robots.cache.from_response(f"http://{HOST}", 200, ROBOTS)
    # One page's links, as the router delivers them: allowed and /private/ ones mixed,
    # far more than the frontier's in-memory window of 4 per host.
    paths = [f"/a/{i}.html" for i in range(12)]
    paths[6:6] = [f"/private/{i}.html" for i in range(6)]  # behind the in-memory window
    shard.admit([UrlItem(f"http://{HOST}{p}", 1) for p in paths])

    popped = []
    while len(shard.parts.frontier):
        clock.advance(1.0)
        batch = shard.parts.frontier.pop_ready(8)
        assert batch, "the frontier counts queued URLs but hands none out"
        for item in batch:
            popped.append(item.url)
            shard.parts.frontier.release(item.host)
    allowed = [f"http://{HOST}{p}" for p in paths if not p.startswith("/private/")]
    assert sorted(popped) == sorted(allowed)
    # Nothing stays queued in the durable store behind the frontier's back.
    assert shard.parts.store.counts()["queued"] == len(allowed)  # popped, not yet claimed
    assert shard.parts.counters.robots_blocked == 6
    assert shard.parts.frontier.recounts == 0


def test_stopping_while_a_flush_is_starting_loses_no_row(tmp_path):
    async def scenario() -> None:
        cfg = _cfg(tmp_path)
        clock = MockClock()
        store = FrontierStore(str(tmp_path / "shard.sqlite"))
        shard = _shard(tmp_path / "rows", clock)
        outbox = Outbox(build_writer(cfg, "shard-000", clock), store, clock, interval_s=0.25)
        loop = asyncio.get_running_loop()
        # A busy executor: the flush's thread job queues behind a blocked one.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(pool)
        gate = threading.Event()
        blocker = loop.run_in_executor(None, gate.wait)
        urls = [f"http://{HOST}/a/{i}.html" for i in range(4)]
        store.add([UrlItem(u, 1) for u in urls])
        for u in urls:
            outbox.put(shard.parts.pipeline.row(UrlItem(u, 1), "http_error", error="HTTP 404"))
        flush = loop.create_task(outbox.flush())
        await asyncio.sleep(0)  # the flush is now waiting for its thread
        flush.cancel()  # what stopping the shard does to the output loop
        await asyncio.gather(flush, return_exceptions=True)
        gate.set()
        await blocker
        await outbox.flush(final=True)
        rows = read_pages(cfg.output.path).to_pylist()
        assert sorted(r["url"] for r in rows) == sorted(urls)
        assert store.counts()["done"] == 4  # and acked

    asyncio.run(scenario())
