"""Stand-ins for what a shard and a session are wired to, shared by the unit tests.

Every test that builds a shard (crawler.engine.assembly.build_shard) or a session
(crawler.session.crawlsession.CrawlSession) without sockets, threads or Ray takes its
collaborators from here, so that each stand-in is written once and typed once against
the seam it stands in for: a fetcher answering from a script on the mock clock, the seen
set, the page budget, the content index, delivery between shards, the worker thread, a
runtime that does nothing, and a scripted browser with the single-page app it renders.
A test module imports from here, never from another test module
(tests/unit/test_test_layout.py checks it).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.config.settings import CrawlConfig
from crawler.policy.hostpolicy import HostTarget, PolicyChange
from crawler.engine.assembly import build_shard
from crawler.engine.shard import Shard
from crawler.engine.status import ShardStatus
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.engine.shardapi import HostView
from crawler.placement.peers import HostPlacement
from crawler.output import read_pages
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.render.renderer import RenderService
from crawler.session.runtime import Plan

T = TypeVar("T")

#: What a scripted server answers for one URL: (status, body, seconds of the mock clock).
Reply = tuple[int, bytes, float]
#: One content-index question per page: (url, sha256, simhash).
ContentQuery = tuple[str, str, int | None]
#: Its answer: (dup_kind, dup_of), both None for a page seen first.
ContentAnswer = tuple[str | None, str | None]


def html(*links: str) -> bytes:
    """A page of 30 words (enough text to count as content) linking to ``links``."""
    return ("<html><body><p>" + "words " * 30 + "</p>" + "".join(f'<a href="{u}">x</a>' for u in links)
            + "</body></html>").encode()


# -- the web ------------------------------------------------------------------------------


def response(url: str, status: int = 200, body: bytes = b"", *, ctype: str | None = "text/html",
             truncated: bool = False, error: str | None = None, **headers: str) -> FetchResult:
    """A response as the fetcher returns it, all at time 0: ``ctype`` None sends no
    Content-Type; ``headers`` by keyword, ``_`` for ``-`` (``last_modified=...``)."""
    hdrs = {"content-type": ctype} if ctype else {}
    hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
    return FetchResult(
        url=url, status=status, headers=hdrs, body=body, truncated=truncated, error=error, error_kind=None,
        transient=False, started_at=0.0, headers_at=0.0, finished_at=0.0, ip="127.0.0.1",
    )


class ScriptedServer:
    """Answers each URL from a script (one response per request, the last repeats) after
    ``delay`` seconds of the mock clock, and logs (url, start, end) in clock time."""

    def __init__(self, clock: MockClock, script: Mapping[str, list[Reply]]) -> None:
        self.clock = clock
        self.script = {u: list(r) for u, r in script.items()}
        self.log: list[tuple[str, float, float]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        start = self.clock.now()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        replies = self.script.get(url, [(404, b"", 0.1)])
        status, body, delay = replies.pop(0) if len(replies) > 1 else replies[0]
        await self.clock.sleep(delay)
        self.in_flight -= 1
        self.log.append((url, start, self.clock.now()))
        ctype = "text/plain" if url.endswith("robots.txt") else "text/html"
        return FetchResult(
            url=url, status=status, headers={"content-type": ctype}, body=body, truncated=False,
            error=None, error_kind=None, transient=status >= 500, started_at=start,
            headers_at=start + delay, finished_at=self.clock.now(), ip="127.0.0.1",
        )

    async def close(self) -> None:
        return None


class NoFetches:
    """The fetcher of a shard a test never runs: asking it for anything fails the test."""

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        raise AssertionError(f"this test fetches nothing, yet {url} was asked for")

    async def close(self) -> None:
        return None


# -- the crawl-wide services --------------------------------------------------------------


class MemorySeen:
    """The seen-URL service (crawler.engine.linkrouter.SeenService) in memory: a URL's first
    sight, the first within a batch too, is novel; ``forget`` undoes marks as a router does
    when it gives a delivery up. ``fail``: the first calls raise after marking half their
    batch (a seen shard restarting); ``forget_fails``: every undo raises (a seen shard down).
    ``calls`` and ``forgotten`` log what was asked; ``novel`` counts the marks held."""

    def __init__(self, known: Iterable[str] = (), *, fail: int = 0, forget_fails: bool = False) -> None:
        self.seen: set[str] = set(known)
        self.novel = 0
        self.fail = fail
        self.forget_fails = forget_fails
        self.calls: list[list[str]] = []
        self.forgotten: list[str] = []

    async def check_and_add(self, urls: list[str]) -> list[bool]:
        self.calls.append(list(urls))
        if self.fail:
            self.fail -= 1
            self.seen.update(urls[: len(urls) // 2])  # a partial mark before the failure
            raise ConnectionError("seen shard restarting")
        out = []
        for u in urls:
            out.append(u not in self.seen)
            self.seen.add(u)
        self.novel += sum(out)
        return out

    async def forget(self, urls: list[str]) -> int:
        if self.forget_fails:
            raise ConnectionError("seen shard down")
        self.forgotten.extend(urls)
        gone = self.seen & set(urls)
        self.seen -= gone
        self.novel -= len(gone)
        return len(gone)


class NoBudgetLimit:
    """The crawl-wide page budget (crawler.engine.gates.PageBudget) of a crawl without
    ``limits.max_pages``: every page may be fetched."""

    async def acquire(self) -> bool:
        return True


class ContentTable:
    """The duplicate-content service of one page pipeline (crawler.engine.pipeline.ContentCheck):
    answers ``(dup_kind, dup_of)`` from a table by sha256 (empty: every page is new); logs
    what it was asked."""

    def __init__(self, answers: dict[str, tuple[str, str]] | None = None) -> None:
        self.answers = answers or {}
        self.asked: list[ContentQuery] = []

    async def submit(self, item: ContentQuery) -> ContentAnswer:
        self.asked.append(item)
        return self.answers.get(item[1], (None, None))

    def pending(self) -> int:
        return 0


async def no_dups(items: list[ContentQuery]) -> list[ContentAnswer]:
    """The content index (crawler.engine.assembly.ContentCall) of a crawl of distinct pages."""
    return [(None, None)] * len(items)


async def no_delivery(owner: str, items: list[UrlItem]) -> None:
    """The delivery of a shard whose pages link nowhere: a link routed at all fails the test."""
    raise AssertionError(f"no links are routed in this test, yet {len(items)} went to {owner}")


class Accepting(Protocol):
    def admit(self, items: Sequence[UrlItem]) -> int: ...


class LoopBack:
    """The delivery of a one-shard crawl: every link goes back to the shard itself. Built
    before the shard (the shard needs it); ``shard`` is set once the shard is built."""

    def __init__(self) -> None:
        self.shard: Accepting | None = None

    async def __call__(self, owner: str, items: list[UrlItem]) -> None:
        assert self.shard is not None, "a link was delivered before the shard was built"
        self.shard.admit(items)


async def inline(fn: Callable[..., T], *args: Any) -> T:
    """``run_blocking`` without a worker thread: the mock clock can settle (no real time passes)."""
    return fn(*args)


# -- a runtime ----------------------------------------------------------------------------


class IdleRuntime:
    """A runtime (crawler.session.runtime.Runtime) with no shards: it starts at once, holds
    nothing, finds every URL new and takes every delivery. Tests subclass it to script the
    one call they are about."""

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        return 1, 1

    async def start(self, plan: Plan) -> None:
        return None

    async def heartbeat(self) -> None:
        return None

    async def ship_state(self, final: bool = False) -> None:
        return None

    async def seen_check(self, urls: list[str]) -> list[bool]:
        return [True] * len(urls)

    async def seen_forget(self, urls: list[str]) -> int:
        return 0

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        return None

    async def widen_scope(self, urls: list[str]) -> None:
        return None

    async def statuses(self) -> list[ShardStatus] | None:
        return []

    async def set_host_policy(self, shard_id: str | None, change: PolicyChange) -> None:
        return None

    async def place(self, shard_id: str, host: str, region: str | None) -> HostPlacement:
        return HostPlacement(None, "default")

    async def url_status(self, shard_id: str | None, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        return None

    async def url_for_hash(self, url_hash: str) -> str | None:
        return None

    async def host_info(self, shard_id: str | None, target: HostTarget) -> list[HostView]:
        return []

    async def vet_seeds(self, shard_id: str, urls: list[str]) -> list[str | None]:
        return [None] * len(urls)

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]:
        return []

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int:
        return 0

    async def held_keys(self, shard_id: str, after: int | None, limit: int) -> list[int]:
        return []

    async def held_ids(self, shard_id: str, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        return []

    async def stop(self) -> list[ShardStatus]:
        return []

    async def service_stats(self) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        return None


# -- a shard that renders: a single-page app and a scripted browser ------------------------

SPA_HOST = "spa.test"
SPA_INTERVAL = 1.0
SHELL = b'<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'


def spa_url(path: str) -> str:
    return f"http://{SPA_HOST}{path}"


class SpaServer:
    """The app's host: scripted responses after 0.1 s of the mock clock (30 s for a long
    poll), headers at the end; logs (path, start, end, request headers)."""

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
        self.log: list[tuple[str, float, float, dict[str, str]]] = []
        self.in_flight = self.max_in_flight = 0

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        start = self.clock.now()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        path = url.split(SPA_HOST, 1)[1] if SPA_HOST in url else url
        status, body, ctype = self.PAGES.get(path, (404, b"", "text/plain"))
        try:
            await self.clock.sleep(30.0 if path == "/slow.json" else 0.1)
        finally:
            self.in_flight -= 1
            self.log.append((path, start, self.clock.now(), dict(headers or {})))
        return FetchResult(url=url, status=status, headers={"content-type": ctype, "etag": '"e"'}, body=body,
                           truncated=False, error=None, error_kind=None, transient=False, started_at=start,
                           headers_at=self.clock.now(), finished_at=self.clock.now(), ip="127.0.0.1")

    async def close(self) -> None:
        return None


class ScriptedBrowser:
    """Stands in for the browser pool (crawler.render.renderer.RenderService): requests
    what the app would, draws the links. ``fail``: every render raises it; ``stall``: a
    render never ends; ``slow``: a render starts a long poll and then never ends."""

    def __init__(self, clock: MockClock, fail: Exception | None = None, stall: bool = False, slow: bool = False) -> None:
        self.clock, self.fail, self.stall, self.slow = clock, fail, stall, slow
        self.jobs: list[RenderJob] = []
        self.answers: list[tuple[str, str | None]] = []
        self.detached: asyncio.Future[SubResponse] | None = None

    async def render(self, job: RenderJob, subfetch: Callable[[SubRequest], Awaitable[SubResponse]]) -> RenderReply:
        self.jobs.append(job)
        if self.fail is not None:
            raise self.fail
        if self.stall:
            await self.clock.sleep(1000.0)
        if self.slow:  # a long poll, asked the way a remote render actor asks: not cancelled with the render
            self.detached = asyncio.ensure_future(subfetch(SubRequest(job.render_id, spa_url("/slow.json"), "GET", "XHR")))
            await self.clock.sleep(1000.0)
        key = "home" if job.url.endswith("/") else "r" + job.url.rsplit("/", 1)[1]
        got: dict[str, SubResponse] = {}
        for target, rtype in [(spa_url("/app.js"), "Script"), (spa_url(f"/api/{key}.json"), "XHR"),
                              (spa_url("/private/t"), "XHR"), (spa_url("/logo.png"), "Image"),
                              ("http://cdn.test/lib.js", "Script")]:
            res = await subfetch(SubRequest(job.render_id, target, "GET", rtype))
            self.answers.append((target, res.refused))
            got[target] = res
        routes = got[spa_url(f"/api/{key}.json")].body.decode().split()
        drawn = "".join(f'<a href="{r}">{r}</a>' for r in routes)
        page = job.body.decode().replace('<div id="root"></div>', f'<div id="root">{drawn}</div>')
        return RenderReply(page, "ok", 0.5, requests=5)


def render_crawl(tmp_path: Path, browser_kw: dict[str, Any] | None = None, timeout_s: float = 20.0,
                 seeds: tuple[str, ...] = ("/",), service: RenderService | None = None,
                 ) -> tuple[CrawlConfig, SpaServer, ScriptedBrowser, Shard, dict[str, dict[str, Any]]]:
    """One shard with ``render.mode: auto`` crawls the app on the mock clock until idle,
    rendering through ``service`` (default: a :class:`ScriptedBrowser` with ``browser_kw``);
    returns the config, the server, the browser, the shard and the rows by URL."""
    cfg = config.from_dict({
        "seeds": [spa_url("/")], "politeness": {"interval_s": SPA_INTERVAL}, "sitemaps": {"enabled": False},
        "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 1.0},
        "render": {"mode": "auto", "browser": "/bin/true", "spot_check_share": 0.0, "timeout_s": timeout_s,
                   "max_wait_s": 2.0},
    })
    clock = MockClock()
    server = SpaServer(clock)
    browser = ScriptedBrowser(clock, **(browser_kw or {}))
    deliver = LoopBack()
    shard = build_shard(cfg, "shard-000", seeds=[spa_url("/")], seen=MemorySeen({spa_url("/")}), content=no_dups,
                        budget=NoBudgetLimit(), deliver=deliver, owner_of=lambda h: "shard-000", clock=clock,
                        rng=random.Random(1), fetcher=server, run_blocking=inline,
                        render_service=service or browser)
    deliver.shard = shard

    async def scenario() -> None:
        shard.admit([UrlItem(spa_url(p), 0) for p in seeds])
        runner = asyncio.ensure_future(shard.run())
        await clock.run_until(lambda: shard.report().idle and shard.parts.outbox.pending() == 0, max_time=3000)
        shard.stop()
        await runner
        await shard.close()

    asyncio.run(scenario())
    rows = {r["url"]: r for r in read_pages(cfg.output.path).to_pylist()}
    return cfg, server, browser, shard, rows
