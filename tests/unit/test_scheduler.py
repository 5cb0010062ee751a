"""One shard's scheduler on the mock clock: robots first, politeness waits, a retry with
backoff, output flushed and acked. No sockets, no Ray, no sleeping: every time below is
exact, read off the clock the fake server was called at."""

from __future__ import annotations

import asyncio
import random

import pytest

from crawler.config import settings as config
from crawler.policy.hostpolicy import PolicyChange
from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output import read_pages
from crawler.engine.assembly import build_shard
from crawler.engine.shard import Shard

from tests.unit.doubles import LoopBack, MemorySeen, NoBudgetLimit, ScriptedServer, html, inline, no_delivery, no_dups

HOST = "a.test"
INTERVAL = 1.0
BACKOFF = 4.0
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def url(path: str) -> str:
    return f"http://{HOST}{path}"


@pytest.fixture
def crawl(tmp_path):
    cfg = config.from_dict(
        {
            "seeds": [url("/")],
            "politeness": {"interval_s": INTERVAL},
            "fetch": {"attempts": 3, "backoff_s": BACKOFF, "max_backoff_s": BACKOFF},
            "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 5.0, "outbox_interval_s": 0.25},
        }
    )
    clock = MockClock()
    server = ScriptedServer(
        clock,
        {
            url("/robots.txt"): [(200, ROBOTS, 0.1)],
            url("/"): [(200, html("/p/1", "/private/x", "/flaky"), 0.2)],
            url("/p/1"): [(200, html("/"), 0.2)],
            url("/flaky"): [(503, b"busy", 0.1), (200, html(), 0.1)],
        },
    )
    seen = MemorySeen()
    store = FrontierStore(str(tmp_path / "shard.sqlite"))
    deliver = LoopBack()
    shard = build_shard(
        cfg, "shard-000", seeds=[url("/")], seen=seen, content=no_dups, budget=NoBudgetLimit(),
        deliver=deliver, owner_of=lambda host: "shard-000", store=store, clock=clock,
        rng=random.Random(7), fetcher=server, run_blocking=inline,
    )
    deliver.shard = shard
    return cfg, clock, server, shard, seen


def test_robots_politeness_retry_and_output_on_the_mock_clock(crawl):
    cfg, clock, server, shard, seen = crawl

    async def scenario():
        seen.seen.add(url("/"))
        shard.admit([UrlItem(url("/"), 0)])
        runner = asyncio.ensure_future(shard.run())
        await clock.run_until(lambda: shard.report().idle and server.log and len(server.log) == 6)
        # An output flush happens on the outbox timer, after row_flush_interval_s.
        await clock.run_until(lambda: shard.parts.outbox.rows_acked == 4, max_time=10)
        shard.stop()
        await runner
        await shard.close()

    asyncio.run(scenario())
    log = server.log
    paths = [u.split(HOST, 1)[1] for u, _, _ in log]
    # 1. robots.txt first, with the host's own slot; then the host's sitemap and the seed.
    assert paths[0] == "/robots.txt" and set(paths[1:3]) == {"/sitemap.xml", "/"}
    # 2. Disallowed by robots: never requested. The flaky page twice, the rest once.
    assert "/private/x" not in paths
    assert sorted(paths) == sorted(["/robots.txt", "/sitemap.xml", "/", "/p/1", "/flaky", "/flaky"])
    # 3. Politeness, from the server's view: one request in flight, and each start at
    #    least INTERVAL after the previous response's headers (here: its end).
    assert server.max_in_flight == 1
    for (_, _, prev_end), (_, start, _) in zip(log, log[1:]):
        assert start >= prev_end + INTERVAL - 1e-9
    # 4. The retry waited for its backoff (full jitter: between BACKOFF/2 and BACKOFF).
    flaky = [(s, e) for u, s, e in log if u.endswith("/flaky")]
    assert BACKOFF / 2 <= flaky[1][0] - flaky[0][1] <= BACKOFF + INTERVAL
    # 5. Every URL is one row, flushed to Parquet and acked in the durable store.
    rows = {r["url"]: r for r in read_pages(cfg.output.path).to_pylist()}
    assert {u: r["outcome"] for u, r in rows.items()} == {
        url("/"): "fetched", url("/p/1"): "fetched", url("/flaky"): "fetched", url("/private/x"): "robots_blocked",
    }
    assert rows[url("/flaky")]["attempts"] == 2
    assert shard.store_counts() == {"queued": 0, "claimed": 0, "done": 4, "dropped": 0}


def test_host_policy_and_backoff_survive_a_restart_of_the_shard(tmp_path):
    cfg = config.from_dict({"seeds": [url("/")], "politeness": {"interval_s": INTERVAL, "max_interval_s": 30.0},
                            "output": {"path": str(tmp_path / "out")}})

    def shard(clock: MockClock) -> Shard:
        return build_shard(
            cfg, "shard-000", seeds=[url("/")], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
            deliver=no_delivery, owner_of=lambda h: "shard-000", store=FrontierStore(str(tmp_path / "shard.sqlite")),
            clock=clock, fetcher=ScriptedServer(clock, {}), run_blocking=inline,
        )

    async def scenario():
        clock = MockClock()
        first = shard(clock)
        first.apply_host_policy(PolicyChange("paused.test", paused=True))  # saved at once
        first.apply_host_policy(PolicyChange("slow.test", interval_s=5.0))
        for _ in range(3):  # a struggling host: 503s widen its interval
            first.parts.politeness.on_start("busy.test")
            first.parts.politeness.on_finish("busy.test", 503)
        widened = first.parts.politeness.interval("busy.test")
        assert widened > INTERVAL
        first.parts.checkpointer.save()  # the periodic checkpoint
        await first.close()

        again = shard(MockClock(start=1000.0))  # another process: another clock origin
        assert again.parts.politeness.override("paused.test") == (None, True)
        assert again.parts.politeness.override("slow.test") == (5.0, False)
        assert again.parts.politeness.interval("busy.test") == widened

    asyncio.run(scenario())


@pytest.mark.parametrize("unclean", [False, True])
def test_a_shard_after_an_unclean_end_waits_out_its_predecessors_requests(tmp_path, unclean):
    """A restarted shard's predecessor may still be fetching (a zombie on a cut-off machine):
    after an unclean end the first request waits fetch.timeout_s plus one interval, after a
    clean resume one interval (docs/invariants.md #2, across incarnations)."""
    from crawler.engine.assembly import unclean_hold_s

    cfg = config.from_dict({"seeds": [url("/")], "politeness": {"interval_s": INTERVAL}, "fetch": {"timeout_s": 7.0},
                            "output": {"path": str(tmp_path / "out")}})
    store = FrontierStore(str(tmp_path / "shard.sqlite"))
    store.add([UrlItem(url("/"), 0)])  # queued by the predecessor
    clock = MockClock()
    server = ScriptedServer(clock, {url("/robots.txt"): [(404, b"", 0.1)], url("/"): [(200, html(), 0.1)]})
    shard = build_shard(cfg, "shard-000", seeds=[url("/")], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
                        deliver=no_delivery, owner_of=lambda host: "shard-000", store=store, clock=clock,
                        fetcher=server, run_blocking=inline, unclean_start=unclean)

    async def scenario():
        runner = asyncio.ensure_future(shard.run())
        await clock.run_until(lambda: bool(server.log), max_time=60)
        shard.stop()
        await runner
        await shard.close()

    asyncio.run(scenario())
    first = server.log[0][1]
    if unclean:
        assert first >= unclean_hold_s(cfg) == 7.0 + INTERVAL
    else:
        assert INTERVAL <= first < unclean_hold_s(cfg)
