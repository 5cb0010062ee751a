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
import random

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.urlitem import UrlItem
from crawler.output import BlobStore, read_pages
from crawler.render.jobs import RenderJob, RenderReply, SubRequest
from crawler.engine.assembly import build_shard

HOST = "spa.test"
INTERVAL = 1.0
SHELL = b'<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'


def url(path: str) -> str:
    return f"http://{HOST}{path}"


class Server:
    """Scripted responses after 0.1 s of the mock clock (30 s for a long poll), headers at
    the end; logs (path, start, end, request headers)."""

    PAGES = {
        "/robots.txt": (200, b"User-agent: *\nDisallow: /private/\n", "text/plain"),
        "/": (200, SHELL, "text/html"),
        "/r/1": (200, SHELL, "text/html"),
        "/r/2": (200, SHELL, "text/html"),
        "/app.js": (200, b"/* the app */", "application/javascript"),
        "/api/home.json": (200, b"/r/1 /r/2", "application/json"),
        "/api/r1.json": (200, b"", "application/json"),
        "/api/r2.json": (200, b"", "application/json"),
    }

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self.log: list[tuple[str, float, float, dict]] = []
        self.in_flight = self.max_in_flight = 0

    async def fetch(self, target: str, headers=None, **kw) -> FetchResult:
        start = self.clock.now()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        path = target.split(HOST, 1)[1] if HOST in target else target
        status, body, ctype = self.PAGES.get(path, (404, b"", "text/plain"))
        try:
            await self.clock.sleep(30.0 if path == "/slow.json" else 0.1)
        finally:
            self.in_flight -= 1
            self.log.append((path, start, self.clock.now(), dict(headers or {})))
        return FetchResult(url=target, status=status, headers={"content-type": ctype, "etag": '"e"'}, body=body,
                           truncated=False, error=None, error_kind=None, transient=False, started_at=start,
                           headers_at=self.clock.now(), finished_at=self.clock.now(), ip="127.0.0.1")

    async def close(self) -> None:
        return None


class ScriptedBrowser:
    """Stands in for the browser pool: requests what an app would, draws the links."""

    def __init__(self, clock: MockClock, fail: Exception | None = None, stall: bool = False, slow: bool = False) -> None:
        self.clock, self.fail, self.stall, self.slow = clock, fail, stall, slow
        self.jobs: list[RenderJob] = []
        self.answers: list[tuple[str, str | None]] = []

    async def render(self, job: RenderJob, subfetch) -> RenderReply:
        self.jobs.append(job)
        if self.fail is not None:
            raise self.fail
        if self.stall:
            await self.clock.sleep(1000.0)
        if self.slow:  # a long poll, asked the way a remote render actor asks: not cancelled with the render
            self.detached = asyncio.ensure_future(subfetch(SubRequest(job.render_id, url("/slow.json"), "GET", "XHR")))
            await self.clock.sleep(1000.0)
        key = "home" if job.url.endswith("/") else "r" + job.url.rsplit("/", 1)[1]
        got = {}
        for target, rtype in [(url("/app.js"), "Script"), (url(f"/api/{key}.json"), "XHR"), (url("/private/t"), "XHR"),
                              (url("/logo.png"), "Image"), ("http://cdn.test/lib.js", "Script")]:
            res = await subfetch(SubRequest(job.render_id, target, "GET", rtype))
            self.answers.append((target, res.refused))
            got[target] = res
        routes = got[url(f"/api/{key}.json")].body.decode().split()
        drawn = "".join(f'<a href="{r}">{r}</a>' for r in routes)
        html = job.body.decode().replace('<div id="root"></div>', f'<div id="root">{drawn}</div>')
        return RenderReply(html, "ok", 0.5, requests=5)


class Seen:
    def __init__(self) -> None:
        self.seen: set[str] = {url("/")}

    async def check_and_add(self, urls):
        out = [u not in self.seen for u in urls]
        self.seen.update(urls)
        return out


class Unlimited:
    async def acquire(self) -> bool:
        return True


async def inline(fn, *args):
    return fn(*args)


def crawl(tmp_path, browser_kw=None, timeout_s: float = 20.0, seeds=("/",), service=None):
    cfg = config.from_dict({
        "seeds": [url("/")], "politeness": {"interval_s": INTERVAL}, "sitemaps": {"enabled": False},
        "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 1.0},
        "render": {"mode": "auto", "browser": "/bin/true", "spot_check_share": 0.0, "timeout_s": timeout_s,
                   "max_wait_s": 2.0},
    })
    clock = MockClock()
    server = Server(clock)
    browser = ScriptedBrowser(clock, **(browser_kw or {}))

    async def no_dups(items):
        return [(None, None)] * len(items)

    shard = None

    async def deliver(owner, items):
        shard.admit(items)

    shard = build_shard(cfg, "shard-000", seeds=[url("/")], seen=Seen(), content=no_dups, budget=Unlimited(),
                        deliver=deliver, owner_of=lambda h: "shard-000", clock=clock, rng=random.Random(1),
                        fetcher=server, run_blocking=inline, render_service=service or browser)

    async def scenario():
        shard.admit([UrlItem(url(p), 0) for p in seeds])
        runner = asyncio.ensure_future(shard.run())
        await clock.run_until(lambda: shard.report().idle and shard.parts.outbox.pending() == 0, max_time=3000)
        shard.stop()
        await runner
        await shard.close()

    asyncio.run(scenario())
    rows = {r["url"]: r for r in read_pages(cfg.output.path).to_pylist()}
    return cfg, server, browser, shard, rows


def test_each_page_is_fetched_once_and_every_browser_request_obeys_the_crawler(tmp_path):
    cfg, server, browser, shard, rows = crawl(tmp_path)
    paths = [p for p, _, _, _ in server.log]
    # The app's routes exist only in what the script drew: found, each document fetched once.
    assert sorted(rows) == [url("/"), url("/r/1"), url("/r/2")]
    assert sorted(p for p in paths if p in ("/", "/r/1", "/r/2")) == ["/", "/r/1", "/r/2"]
    assert [j.body for j in browser.jobs] == [SHELL] * 3  # the browser got the crawler's response
    # The bundle once (then the script cache), each route's data once.
    assert paths.count("/app.js") == 1
    assert sorted(p for p in paths if p.startswith("/api/")) == ["/api/home.json", "/api/r1.json", "/api/r2.json"]
    # Refused, never sent: robots-disallowed, blocked type, another host.
    refused = {t: r for t, r in browser.answers if r is not None}
    assert refused == {url("/private/t"): "robots", url("/logo.png"): "blocked_type", "http://cdn.test/lib.js": "offhost"}
    assert not any(p.startswith(("/private", "/logo")) for p in paths)
    # Politeness over every request: one in flight, starts INTERVAL after the previous headers.
    assert server.max_in_flight == 1
    for (_, _, prev_end, _), (p, start, _, _) in zip(server.log, server.log[1:]):
        assert start >= prev_end + INTERVAL - 1e-9, p
    c = shard.parts.counters
    assert c.rendered == 3 and c.families["render_refused_robots"] == 3 and c.render_script_cache_hits == 2
    assert c.families["render_decision_signal_empty_root"] == 3
    # Rows: the DOM is stored and parsed, the raw response stays reachable.
    blobs = BlobStore(cfg.output.path)
    home = rows[url("/")]
    assert home["rendered"] is True
    assert b'<a href="/r/1">' in blobs.get(home["blob_key"])
    assert blobs.get(home["raw_blob_key"]) == SHELL
    assert home["content_length"] == len(blobs.get(home["blob_key"]))


def test_a_render_service_that_dies_costs_the_render_not_the_page(tmp_path):
    cfg, server, browser, shard, rows = crawl(tmp_path, {"fail": ConnectionError("render actor died")})
    home = rows[url("/")]
    assert home["outcome"] == "fetched" and home["rendered"] is False and home["raw_blob_key"] is None
    assert "render: crash, raw page stored" in home["error"]
    assert BlobStore(cfg.output.path).get(home["blob_key"]) == SHELL
    assert shard.parts.counters.families["render_fallback_crash"] == 1 and shard.parts.counters.render_retried_crash == 1
    assert len(browser.jobs) == 2  # tried once more before falling back


def test_a_render_past_its_deadline_falls_back_on_the_mock_clock(tmp_path):
    cfg, server, browser, shard, rows = crawl(tmp_path, {"stall": True}, timeout_s=5.0)
    home = rows[url("/")]
    assert home["rendered"] is False and "render: timeout" in home["error"]
    assert shard.parts.counters.families["render_fallback_timeout"] == 1


def test_a_render_that_ends_with_a_request_in_flight_keeps_the_host_until_it_ends(tmp_path):
    # The render times out while its long poll is at the server; the host's next page
    # must not start before that request ended (one in flight, as measured at the server).
    cfg, server, browser, shard, rows = crawl(tmp_path, {"slow": True}, timeout_s=3.0, seeds=("/", "/r/1"))
    assert server.max_in_flight == 1
    slow = next(x for x in server.log if x[0] == "/slow.json")
    later = [x for x in server.log if x[1] >= slow[1] and x is not slow]
    assert later and all(start >= slow[2] + INTERVAL - 1e-9 for _, start, _, _ in later)
    assert shard.parts.counters.internal_errors == 0
    assert rows[url("/")]["rendered"] is False and "render: timeout" in rows[url("/")]["error"]


def test_the_gate_caps_requests_and_bytes_per_render():
    from crawler.engine.counters import ShardCounters

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
        server = Server(clock)
        robots = RobotsCache("raycrawl", clock=clock)  # not asked: respect_robots is off here
        gate = RenderGate(fetch=server.fetch, politeness=Politeness(0.0, 1.0, clock=clock), robots=robots,
                          scope=Scope("any", [url("/")]), normalize=lambda u: u, clock=clock,
                          cache=ScriptCache(clock, max_entries=10, max_bytes=1000, ttl_s=60), counters=ShardCounters(),
                          block=("image",), max_requests=2, max_bytes=20, respect_robots=False)
        gate.open("r1", HOST, 10.0)
        first = await gate.answer(SubRequest("r1", url("/api/r1.json"), "GET", "XHR"))
        second = await gate.answer(SubRequest("r1", url("/app.js"), "GET", "XHR"))  # 13 bytes: 13 <= 20
        third = await gate.answer(SubRequest("r1", url("/api/r2.json"), "GET", "XHR"))
        await gate.close("r1")
        gate.open("r2", HOST, 10.0)
        a = await gate.answer(SubRequest("r2", url("/app.js"), "GET", "XHR"))
        b = await gate.answer(SubRequest("r2", url("/api/home.json"), "GET", "XHR"))  # 13 + 9 bytes > 20
        await gate.close("r2")
        late = await gate.answer(SubRequest("r2", url("/app.js"), "GET", "XHR"))
        return first, second, third, a, b, late, gate.counters, server

    first, second, third, a, b, late, counters, server = asyncio.run(driven())
    assert first.refused is None and second.refused is None
    assert third.refused == "cap"  # a third request of a two-request render: never sent
    assert a.refused is None and b.refused == "cap"  # past the byte cap
    assert late.refused == "closed"
    assert [p for p, *_ in server.log] == ["/api/r1.json", "/app.js", "/app.js", "/api/home.json"]
    assert counters.families["render_refused_cap"] == 2 and counters.families["render_refused_closed"] == 1
