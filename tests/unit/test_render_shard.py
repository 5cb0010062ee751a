"""A shard that renders, on the mock clock, with a scripted stand-in for the browser.

The stand-in asks for what a single-page app asks for (its bundle, its route data, a
disallowed tracker, an image, a script on another host) through the shard's gate and
draws the links it got. Judged from the scripted server's log: each document fetched
once, the bundle once (script cache), nothing refused ever sent, and every request,
subresources included, spaced by the politeness interval with one in flight.
No browser, no sockets, no Ray.
"""

from __future__ import annotations

import asyncio

from crawler.clock import MockClock
from crawler.output import BlobStore
from crawler.render.jobs import SubRequest

from tests.unit.doubles import SHELL, SPA_HOST, SPA_INTERVAL, SpaServer, render_crawl, spa_url


def test_each_page_is_fetched_once_and_every_browser_request_obeys_the_crawler(tmp_path):
    cfg, server, browser, shard, rows = render_crawl(tmp_path)
    paths = [p for p, _, _, _ in server.log]
    # The app's routes exist only in what the script drew: found, each document fetched once.
    assert sorted(rows) == [spa_url("/"), spa_url("/r/1"), spa_url("/r/2")]
    assert sorted(p for p in paths if p in ("/", "/r/1", "/r/2")) == ["/", "/r/1", "/r/2"]
    assert [j.body for j in browser.jobs] == [SHELL] * 3  # the browser got the crawler's response
    # The bundle once (then the script cache), each route's data once.
    assert paths.count("/app.js") == 1
    assert sorted(p for p in paths if p.startswith("/api/")) == ["/api/home.json", "/api/r1.json", "/api/r2.json"]
    # Refused, never sent: robots-disallowed, blocked type, another host.
    refused = {t: r for t, r in browser.answers if r is not None}
    assert refused == {spa_url("/private/t"): "robots", spa_url("/logo.png"): "blocked_type", "http://cdn.test/lib.js": "offhost"}
    assert not any(p.startswith(("/private", "/logo")) for p in paths)
    # Politeness over every request: one in flight, starts SPA_INTERVAL after the previous headers.
    assert server.max_in_flight == 1
    for (_, _, prev_end, _), (p, start, _, _) in zip(server.log, server.log[1:]):
        assert start >= prev_end + SPA_INTERVAL - 1e-9, p
    c = shard.parts.counters
    assert c.rendered == 3 and c.families["render_refused_robots"] == 3 and c.render_script_cache_hits == 2
    assert c.families["render_decision_signal_empty_root"] == 3
    # Rows: the DOM is stored and parsed, the raw response stays reachable.
    blobs = BlobStore(cfg.output.path)
    home = rows[spa_url("/")]
    assert home["rendered"] is True
    assert b'<a href="/r/1">' in blobs.get(home["blob_key"])
    assert blobs.get(home["raw_blob_key"]) == SHELL
    assert home["content_length"] == len(blobs.get(home["blob_key"]))


def test_a_render_service_that_dies_costs_the_render_not_the_page(tmp_path):
    cfg, server, browser, shard, rows = render_crawl(tmp_path, {"fail": ConnectionError("render actor died")})
    home = rows[spa_url("/")]
    assert home["outcome"] == "fetched" and home["rendered"] is False and home["raw_blob_key"] is None
    assert "render: crash, raw page stored" in home["error"]
    assert BlobStore(cfg.output.path).get(home["blob_key"]) == SHELL
    assert shard.parts.counters.families["render_fallback_crash"] == 1 and shard.parts.counters.render_retried_crash == 1
    assert len(browser.jobs) == 2  # tried once more before falling back


def test_a_render_past_its_deadline_falls_back_on_the_mock_clock(tmp_path):
    cfg, server, browser, shard, rows = render_crawl(tmp_path, {"stall": True}, timeout_s=5.0)
    home = rows[spa_url("/")]
    assert home["rendered"] is False and "render: timeout" in home["error"]
    assert shard.parts.counters.families["render_fallback_timeout"] == 1


def test_a_render_that_ends_with_a_request_in_flight_keeps_the_host_until_it_ends(tmp_path):
    # The render times out while its long poll is at the server; the host's next page
    # must not start before that request ended (one in flight, as measured at the server).
    cfg, server, browser, shard, rows = render_crawl(tmp_path, {"slow": True}, timeout_s=3.0, seeds=("/", "/r/1"))
    assert server.max_in_flight == 1
    slow = next(x for x in server.log if x[0] == "/slow.json")
    later = [x for x in server.log if x[1] >= slow[1] and x is not slow]
    assert later and all(start >= slow[2] + SPA_INTERVAL - 1e-9 for _, start, _, _ in later)
    assert shard.parts.counters.internal_errors == 0
    assert rows[spa_url("/")]["rendered"] is False and "render: timeout" in rows[spa_url("/")]["error"]


def test_the_gate_caps_requests_and_bytes_per_render():
    from crawler.counters import ShardCounters

    from crawler.policy.politeness import Politeness
    from crawler.render.gate import RenderGate
    from crawler.render.scriptcache import ScriptCache
    from crawler.robots import RobotsCache
    from crawler.urls import Scope

    clock = MockClock()

    async def driven():
        task = asyncio.ensure_future(scenario())
        await clock.run_until(task.done, max_time=100)
        return task.result()

    async def scenario():
        server = SpaServer(clock)
        robots = RobotsCache("raycrawl", clock=clock)  # not asked: respect_robots is off here
        gate = RenderGate(fetch=server.fetch, politeness=Politeness(0.0, 1.0, clock=clock), robots=robots,
                          scope=Scope("any", [spa_url("/")]), normalize=lambda u: u, clock=clock,
                          cache=ScriptCache(clock, max_entries=10, max_bytes=1000, ttl_s=60), counters=ShardCounters(),
                          block=("image",), max_requests=2, max_bytes=20, respect_robots=False)
        gate.open("r1", SPA_HOST, 10.0)
        first = await gate.answer(SubRequest("r1", spa_url("/api/r1.json"), "GET", "XHR"))
        second = await gate.answer(SubRequest("r1", spa_url("/app.js"), "GET", "XHR"))  # 13 bytes: 13 <= 20
        third = await gate.answer(SubRequest("r1", spa_url("/api/r2.json"), "GET", "XHR"))
        await gate.close("r1")
        gate.open("r2", SPA_HOST, 10.0)
        a = await gate.answer(SubRequest("r2", spa_url("/app.js"), "GET", "XHR"))
        b = await gate.answer(SubRequest("r2", spa_url("/api/home.json"), "GET", "XHR"))  # 13 + 9 bytes > 20
        await gate.close("r2")
        late = await gate.answer(SubRequest("r2", spa_url("/app.js"), "GET", "XHR"))
        return first, second, third, a, b, late, gate.counters, server

    first, second, third, a, b, late, counters, server = asyncio.run(driven())
    assert first.refused is None and second.refused is None
    assert third.refused == "cap"  # a third request of a two-request render: never sent
    assert a.refused is None and b.refused == "cap"  # past the byte cap
    assert late.refused == "closed"
    assert [p for p, *_ in server.log] == ["/api/r1.json", "/app.js", "/app.js", "/api/home.json"]
    assert counters.families["render_refused_cap"] == 2 and counters.families["render_refused_closed"] == 1
