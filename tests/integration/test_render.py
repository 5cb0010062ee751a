"""Rendering JavaScript pages with the real Chromium, judged from the server's own log.

A small web of single-page apps whose routes exist only in what their script draws, one
app asking for a robots-disallowed URL, plain pages with a harmless script, and a
server-rendered page with framework markers whose extra links only its script adds
(crawler.testing.spaweb). Chromium comes from the system (``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.output import BlobStore, read_pages
from crawler.testing.server import WebServer
from crawler.testing.spaweb import SpaWeb
from crawler.testing.webtypes import USER_AGENT

from tests.integration import checks, procs
from tests.integration.chromium import NEEDS_CHROMIUM

pytestmark = NEEDS_CHROMIUM

INTERVAL = 0.05


@pytest.fixture(scope="module")
def spa():
    server = WebServer(SpaWeb(apps=4, routes=6, plain_pages=10))  # benchmarks/render.py: 12 routes
    server.start()
    try:
        yield server
    finally:
        server.stop()


def spa_config(server: WebServer, out, **render) -> config.CrawlConfig:
    return config.from_dict({
        "seeds": server.web.seeds(), "scope": "any", "user_agent": USER_AGENT,
        "politeness": {"interval_s": INTERVAL}, "sitemaps": {"enabled": False},
        "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0},
        "output": {"path": str(out)},
        "render": {"mode": "auto", "quiet_s": 0.15, "max_wait_s": 3.0, "timeout_s": 15.0, **render},
    })


def precision_recall(web: SpaWeb, rows: list[dict]) -> tuple[float, float]:
    """Of the pages rendered, the share that needed it; of those that needed it, the share rendered."""
    rendered = {r["url"] for r in rows if r["rendered"]}
    needed = {u for u, need in web.documents().items() if need}
    hit = len(rendered & needed)
    return hit / max(1, len(rendered)), hit / max(1, len(needed))


def test_auto_renders_the_apps_once_each_and_politely(spa, tmp_path):
    spa.reset()
    web: SpaWeb = spa.web
    cfg = spa_config(spa, tmp_path / "out")
    stats = asyncio.run(local_session(cfg).run())
    counts = spa.request_counts()
    docs = web.documents()
    # Every app route found (they exist only in what the scripts drew), the server-rendered
    # page's script-only links too; each document requested exactly once.
    assert not [u for u in docs if counts.get(u, 0) == 0]
    assert {u: counts[u] for u in docs if counts[u] != 1} == {}
    # No disallowed request reached the server; politeness held over every request,
    # subresources included; the crawler's User-Agent on every one.
    checks.check_never_requested(spa)
    checks.check_politeness(spa, cfg)
    assert {r.user_agent for r in spa.requests()} == {USER_AGENT}
    sub = [r for r in spa.requests() if r.path_qs.startswith(("/api/", "/static/"))]
    assert len(sub) >= len(web.app_hosts()) * (web.routes + 1)  # the browsers' requests are in that log
    # The app bundle once per host (script cache), whatever the number of renders.
    bundles = [r for r in spa.requests() if r.path_qs == "/static/app.js"]
    assert len(bundles) == len(web.app_hosts())
    # Rows: one per document, `rendered` set, the DOM stored and the raw response beside it.
    rows = read_pages(cfg.output.path).to_pylist()
    by_url = {r["url"]: r for r in rows}
    assert set(by_url) == set(docs) and all(r["outcome"] == "fetched" for r in rows)
    assert all(isinstance(r["rendered"], bool) for r in rows)
    app_home = by_url[web.url("app-0.test", "/")]
    blobs = BlobStore(cfg.output.path)
    assert app_home["rendered"] and b'href="/r/0"' in blobs.get(app_home["blob_key"])
    assert b'<div id="root"></div>' in blobs.get(app_home["raw_blob_key"])
    # Plain pages stay unrendered beyond the spot-check share (5% of 26 such pages: at most 3).
    plain_rendered = [u for u, r in by_url.items() if r["rendered"] and not docs[u]]
    assert len(plain_rendered) <= 3, plain_rendered
    precision, recall = precision_recall(web, rows)
    assert recall == 1.0 and precision >= 0.9
    r = stats["render"]
    assert r["rendered"] == sum(1 for x in rows if x["rendered"]) and r["fallbacks"] == {}
    assert r["refused"].get("robots", 0) >= web.routes  # the tracker, asked by each page of one app
    assert r["decisions"].get("plain", 0) >= 20


def chromium_pids() -> list[int]:
    """Browser main processes started by this test process (crawler.render.browser)."""
    out = []
    for pid, cmd, _env in procs.processes():
        if b"raycrawl-chromium-" not in cmd:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone since the scan
        if int(stat[stat.rindex(b")") + 2:].split()[1]) == os.getpid():  # field 4: the parent
            out.append(pid)
    return out


def test_a_browser_killed_mid_crawl_loses_no_url(tmp_path):
    with WebServer(SpaWeb(apps=2, routes=6, plain_pages=4, plain_hosts=1)) as spa:
        killed = _crawl_and_kill(spa, tmp_path)
    assert killed


def _crawl_and_kill(spa: WebServer, tmp_path) -> list[int]:
    web = spa.web
    assert isinstance(web, SpaWeb)
    cfg = spa_config(spa, tmp_path / "out")
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            if sum(r.path_qs.startswith("/api/") for r in spa.requests()) >= 6:
                for pid in chromium_pids():
                    os.killpg(pid, signal.SIGKILL)  # the browser and its renderers, as an OOM kill would
                    killed.append(pid)
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    stats = asyncio.run(local_session(cfg).run())
    t.join()
    assert killed, "the browser was never killed"
    rows = read_pages(cfg.output.path).to_pylist()
    counts = spa.request_counts()
    fetched = {u for u in web.documents() if counts.get(u, 0)}
    # Every document fetched has its row; none fetched twice; the crawl finished.
    assert {r["url"] for r in rows} == fetched and all(counts[u] == 1 for u in fetched)
    checks.check_ledger(stats)
    assert stats["finished"] is True
    r = stats["render"]
    # The renders on the killed browser were tried again on a new one, or fell back.
    assert r["started"] == r["rendered"] + sum(r["fallbacks"].values())
    assert r["retried_after_crash"] + r["fallbacks"].get("crash", 0) >= 1
    assert r["rendered"] > 0
    checks.check_never_requested(spa)
    checks.check_politeness(spa, cfg)
    return killed


def test_the_pool_recycles_a_browser_after_its_renders_with_a_fresh_context_each():
    from crawler.render.browser import BrowserPool, PoolSettings, find_browser
    from crawler.render.jobs import RenderJob, SubResponse

    page = (b'<html><body><div id="root"></div><script>'
            b'document.getElementById("root").textContent = "seen before: " + (localStorage.getItem("k") || "no");'
            b'localStorage.setItem("k", "yes");</script></body></html>')

    async def scenario():
        pool = BrowserPool(PoolSettings(find_browser(None), processes=1, tabs=2, quiet_s=0.1, max_wait_s=2.0,
                                        recycle_renders=2))

        async def refuse(req):
            return SubResponse(refused="blocked_type")

        replies, pids = [], []
        for i in range(5):
            replies.append(await pool.render(RenderJob(f"p{i}", "http://one.test/", 200, (("content-type", "text/html"),),
                                                       page, 15.0), refuse))
            pids.append(tuple(pool.pids()))
        status = pool.status()
        await pool.close()
        return replies, pids, status

    replies, pids, status = asyncio.run(scenario())
    assert [r.reason for r in replies] == ["ok"] * 5
    # Every render in a fresh context: storage from the previous page is never there.
    assert all("seen before: no" in r.html for r in replies)
    # A browser serves 2 renders, then a new process takes over.
    assert status["launched"] == 3 and status["recycled"] == 2
    assert len({p for p in pids if p}) >= 2
