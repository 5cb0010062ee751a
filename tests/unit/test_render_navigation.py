"""A rendered page that navigates stays itself; its navigation's target is a link (crawler.render.navigation).

The bookkeeping and the link merge are pure; the page renderer is driven with a scripted
DevTools connection that plays Chromium's events (the real browser's behaviour is checked
by tests/integration/test_render_navigation.py), and a shard renders through a scripted
service on the mock clock: a GET target goes through scope and the seen set like any
link, a POST target is counted and never fetched, a ``navigated`` render stores the raw page.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crawler.clock import MockClock
from crawler.output import BlobStore
from crawler.parse import parse_page
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.render.navigation import NAVIGATION_TAG, TopFrameNavigations, with_navigations
from crawler.render.page import PageRenderer

from tests.unit.doubles import SHELL, render_crawl, spa_url

MAIN, CHILD = "F-main", "F-child"


def frame(loader: str, url: str, fid: str = MAIN, parent: str | None = None) -> dict[str, Any]:
    f = {"id": fid, "loaderId": loader, "url": url}
    if parent:
        f["parentId"] = parent
    return f


# -- the bookkeeping -----------------------------------------------------------------------

def test_only_the_top_frame_is_top_and_targets_are_distinct_and_capped():
    nav = TopFrameNavigations(limit=2)
    assert not nav.is_top(MAIN)  # no document served yet
    nav.document_served(MAIN)
    nav.document_served(CHILD)  # a later document is not the top frame's first
    assert nav.is_top(MAIN) and not nav.is_top(CHILD) and not nav.is_top(None)
    for url, method in [("http://a.test/", "GET"), ("http://a.test/", "GET"), ("http://a.test/", "POST"),
                        ("http://b.test/", "GET"), ("", "GET")]:
        nav.attempt(url, method)
    assert nav.attempts == 5
    assert nav.targets == [("http://a.test/", "GET"), ("http://a.test/", "POST")]
    assert nav.links() == ["http://a.test/"]


@pytest.mark.parametrize(("loader", "commits", "replaced"), [
    ("L1", [frame("L1", "http://one.test/")], None),
    ("L1", [], None),
    # an iframe's commit is the iframe's business
    ("L1", [frame("L1", "http://one.test/"), frame("L9", "http://x.test/", CHILD, MAIN)], None),
    ("L1", [frame("L1", "http://one.test/"), frame("L2", "chrome-error://chromewebdata/")], "error page"),
    ("L1", [frame("L1", "http://one.test/"), frame("L2", "http://other.test/")], "another document"),
    (None, [frame("L1", "http://one.test/")], None),
    (None, [frame("L1", "http://one.test/"), frame("L2", "http://other.test/")], "2 documents"),
])
def test_the_top_frame_is_replaced_only_by_another_commit_or_an_error_page(loader, commits, replaced):
    nav = TopFrameNavigations()
    nav.document_served(MAIN)
    for f in commits:
        nav.committed(f)
    why = nav.replaced(loader)
    assert (why is None) if replaced is None else (replaced in why)


def test_the_top_frame_stopping_counts_only_after_the_fetched_document_committed():
    nav = TopFrameNavigations()
    nav.document_served(MAIN)
    assert not nav.stopped_loading(MAIN)  # the blank tab's own stop, before ours committed
    nav.committed(frame("L1", "http://one.test/"))
    assert not nav.stopped_loading(CHILD) and nav.stopped_loading(MAIN)


def test_get_targets_become_links_after_the_pages_own_and_the_raw_pages():
    raw = parse_page(b'<a href="/after">after the script</a>', "http://one.test/", "text/html")
    dom = parse_page(b'<a href="/before">before</a>', "http://one.test/", "text/html")
    assert with_navigations(dom, (), raw) is dom
    out = with_navigations(dom, (("http://other.test/x", "GET"), ("http://one.test/form", "POST")), raw)
    assert [(link.resolved, link.tag) for link in out.links] == [
        ("http://one.test/before", "a"), ("http://one.test/after", "a"), ("http://other.test/x", NAVIGATION_TAG)]
    assert [link.resolved for link in dom.links] == ["http://one.test/before"]  # not changed in place


# -- the page renderer, on a scripted connection ---------------------------------------------

class ScriptedCdp:
    """Answers a render's commands as Chromium does; ``Page.navigate`` plays ``events``."""

    closed = False

    def __init__(self, events: list[tuple[str, dict[str, Any]]], html: str = "<html>own</html>") -> None:
        self.events, self.html = events, html
        self.posted: list[tuple[str, dict[str, Any]]] = []
        self.listener: Any = None

    def listen(self, session: str | None, listener: Any) -> None:
        self.listener = listener

    def post(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> None:
        self.posted.append((method, params or {}))

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        if method == "Target.createBrowserContext":
            return {"browserContextId": "C"}
        if method == "Target.createTarget":
            return {"targetId": MAIN}
        if method == "Target.attachToTarget":
            return {"sessionId": "S"}
        if method == "Page.navigate":
            for event in self.events:
                self.listener(*event)
            return {"frameId": MAIN, "loaderId": "L1"}
        if method == "Runtime.evaluate":
            value: Any = 0 if "__rcMut" in (params or {}).get("expression", "") else self.html
            return {"result": {"value": value}}
        return {}


def paused(rid: str, url: str, fid: str, method: str = "GET", rtype: str = "Document") -> tuple[str, dict[str, Any]]:
    return "Fetch.requestPaused", {"requestId": rid, "frameId": fid, "resourceType": rtype,
                                   "request": {"url": url, "method": method}}


def render(events: list[tuple[str, dict[str, Any]]]) -> tuple[RenderReply, ScriptedCdp]:
    conn = ScriptedCdp(events)
    renderer = PageRenderer(conn, MockClock(), quiet_s=0.0, max_wait_s=0.0)  # type: ignore[arg-type]

    async def refuse(req: SubRequest) -> SubResponse:
        return SubResponse(refused="blocked_type")

    job = RenderJob("r1", "http://one.test/", 200, (("content-type", "text/html"),), b"<html>own</html>", 10.0)
    # The mock clock never moves here: a render that waits (for a DOMContentLoaded that a
    # navigation stopped) would wait forever; the wall-clock bound turns that into a failure.
    return asyncio.run(asyncio.wait_for(renderer.render(job, refuse), 5.0)), conn


def test_a_top_frame_navigation_is_aborted_and_kept_an_iframes_document_blocked():
    reply, conn = render([
        paused("1", "http://one.test/", MAIN),
        ("Page.frameNavigated", {"frame": frame("L1", "http://one.test/")}),
        paused("2", "http://other.test/landing", MAIN),
        paused("3", "http://one.test/form", MAIN, "POST"),
        paused("4", "http://ads.test/frame", CHILD),
        ("Page.windowOpen", {"url": "http://other.test/popup"}),
        # The navigation stopped the parser: no DOMContentLoaded, the frame's stop stands in.
        ("Page.frameStoppedLoading", {"frameId": MAIN}),
    ])
    assert reply.reason == "ok" and reply.html == "<html>own</html>"
    answers = {p["requestId"]: (m, p.get("errorReason")) for m, p in conn.posted if "requestId" in p}
    assert answers == {"1": ("Fetch.fulfillRequest", None), "2": ("Fetch.failRequest", "Aborted"),
                       "3": ("Fetch.failRequest", "Aborted"), "4": ("Fetch.failRequest", "BlockedByClient")}
    assert reply.navigations == (("http://other.test/landing", "GET"), ("http://one.test/form", "POST"),
                                 ("http://other.test/popup", "GET"))
    assert reply.notes["navigation_refused"] == 2 and reply.notes["refused_document"] == 1
    assert reply.notes["navigation_window_open"] == 1


def test_a_render_whose_top_frame_shows_an_error_page_fails_as_navigated():
    reply, conn = render([
        paused("1", "http://one.test/", MAIN),
        ("Page.frameNavigated", {"frame": frame("L1", "http://one.test/")}),
        ("Page.domContentEventFired", {}),
        ("Page.frameNavigated", {"frame": frame("L2", "chrome-error://chromewebdata/")}),
    ])
    assert reply.html is None and reply.reason == "navigated" and "error page" in reply.detail


# -- a shard: GET targets crawled as links, POST counted, never sent ----------------------

class NavigatingBrowser:
    """The app's home page tries to go to a route (GET), an off-scope host (GET) and a
    form target (POST); ``navigated``: its render fails as ``navigated`` instead."""

    def __init__(self, navigated: bool = False) -> None:
        self.navigated = navigated

    async def render(self, job: RenderJob, subfetch: Any) -> RenderReply:
        if not job.url.endswith("/"):
            return RenderReply(job.body.decode(), "ok")
        navs = ((spa_url("/r/1"), "GET"), ("http://elsewhere.test/x", "GET"), (spa_url("/api/submit"), "POST"))
        if self.navigated:
            return RenderReply(None, "navigated", navigations=navs[:1] + navs[2:])
        return RenderReply(job.body.decode().replace("</body>", "<p>own text</p></body>"), "ok", navigations=navs)


def test_a_navigations_get_target_is_crawled_as_a_link_and_a_post_is_only_counted(tmp_path):
    cfg, server, _browser, shard, rows = render_crawl(tmp_path, service=NavigatingBrowser())
    paths = [p for p, _, _, _ in server.log]
    assert sorted(rows) == [spa_url("/"), spa_url("/r/1")]  # the off-scope host dropped by scope
    assert "/api/submit" not in paths and paths.count("/r/1") == 1
    home = rows[spa_url("/")]
    assert home["rendered"] is True and b"own text" in BlobStore(cfg.output.path).get(home["blob_key"])
    fam = shard.parts.counters.families
    assert fam["render_navigation_link"] == 2 and fam["render_navigation_post"] == 1


def test_a_navigated_render_stores_the_raw_page_and_keeps_the_target(tmp_path):
    cfg, server, _browser, shard, rows = render_crawl(tmp_path, service=NavigatingBrowser(navigated=True))
    home = rows[spa_url("/")]
    assert home["rendered"] is False and "render: navigated, raw page stored" in home["error"]
    assert BlobStore(cfg.output.path).get(home["blob_key"]) == SHELL
    assert spa_url("/r/1") in rows  # the raw page has no links: this one came from the navigation
    fam = shard.parts.counters.families
    assert fam["render_fallback_navigated"] == 1 and fam["render_navigation_post"] == 1
    assert "/api/submit" not in [p for p, _, _, _ in server.log]
