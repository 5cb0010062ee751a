"""Pages that navigate away while rendered in the real Chromium are stored as themselves.

One crawl (one browser) of a small web whose pages try to leave: a script setting
``location.href`` to another host, a ``<meta http-equiv=refresh>``, a form submitted by
POST and one by GET, and ``window.open``. Each is stored as its own DOM (its text, no
``chrome-error`` page), the GET targets are crawled as links (the server's log says so),
and the POST target is counted and never sent. Before crawler.render.navigation, each
was stored as Chromium's 250 KB ``ERR_BLOCKED_BY_CLIENT`` page.
"""

from __future__ import annotations

import asyncio

from crawler.config import settings as config
from crawler.output import BlobStore, read_pages
from crawler.session.inprocess import local_session
from crawler.testing.server import WebServer
from crawler.testing.webtypes import HTML_TYPE, Reply, SmallWeb, USER_AGENT

from tests.integration.chromium import NEEDS_CHROMIUM

pytestmark = NEEDS_CHROMIUM

SITE, AWAY = "nav.test", "away.test"


class NavigatingWeb(SmallWeb):
    """``nav.test``: an index linking to one host per way of leaving (``<way>.nav.test/``,
    on hosts of their own so that their renders overlap); ``away.test``: where the script
    page goes. Every page says ``own text of <way>``."""

    def pages(self) -> dict[str, str]:
        return {
            "script": f'<p>before</p><script>location.href = "{self.url(AWAY, "/landing")}";</script>',
            "meta": (f'<meta http-equiv="refresh" content="0;url={self.url(self.host("meta"), "/meta-target")}">'
                     '<script>document.title += "";</script>'),  # a script: auto mode renders it
            "post": ('<form id="f" method="post" action="/post-target"><input name="a" value="1"></form>'
                     '<script>document.getElementById("f").submit();</script>'),
            "get": ('<form id="f" method="get" action="/search"><input name="q" value="x"></form>'
                    '<script>document.getElementById("f").submit();</script>'),
            "open": f'<script>window.open("{self.url(self.host("open"), "/popup")}");</script>',
        }

    def host(self, way: str) -> str:
        return f"{way}.{SITE}"

    def seeds(self) -> list[str]:
        return [self.url(SITE, "/")]

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        way = host.split(".", 1)[0]
        if path_qs == "/robots.txt":
            return Reply(404, (("Content-Type", "text/plain"),), b"")
        if host == SITE and path_qs == "/":
            body = "".join(f'<a href="{self.url(self.host(w), "/")}">{w}</a> ' for w in self.pages())
        elif host == self.host(way) and path_qs == "/" and way in self.pages():
            body = f"<p>own text of {way}</p>{self.pages()[way]}"
        else:
            body = f"<p>target {host}{path_qs}</p>"
        html = f"<!doctype html><html><head><title>{host}{path_qs}</title></head><body>{body}</body></html>"
        return Reply(200, (("Content-Type", HTML_TYPE),), html.encode())


def test_pages_that_navigate_are_stored_as_themselves_with_the_target_as_a_link(tmp_path):
    with WebServer(NavigatingWeb()) as server:
        web = server.web
        assert isinstance(web, NavigatingWeb)
        cfg = config.from_dict({
            "seeds": web.seeds(), "scope": "any", "user_agent": USER_AGENT,
            "politeness": {"interval_s": 0.02}, "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0},
            "output": {"path": str(tmp_path / "out")},
            "render": {"mode": "auto", "quiet_s": 0.1, "max_wait_s": 2.0, "timeout_s": 10.0},
        })
        stats = asyncio.run(local_session(cfg).run())
        asked = {(r.method, r.host, r.path_qs) for r in server.requests()}
    rows = {r["url"]: r for r in read_pages(cfg.output.path).to_pylist()}
    blobs = BlobStore(cfg.output.path)
    for way in web.pages():
        row = rows[web.url(web.host(way), "/")]
        body = blobs.get(row["blob_key"])
        assert row["rendered"] is True and row["outcome"] == "fetched", (way, row["error"])
        assert f"own text of {way}".encode() in body and b"chrome-error" not in body, way
        assert len(body) < 2000, way  # the page, not a browser's error page
    # The GET targets were crawled as links of the pages that tried to go there.
    for host, target in [(AWAY, "/landing"), (web.host("meta"), "/meta-target"), (web.host("get"), "/search?q=x"),
                         (web.host("open"), "/popup")]:
        assert ("GET", host, target) in asked, target
        assert rows[web.url(host, target)]["outcome"] == "fetched"
    # The POST was never sent, only counted; nothing but GETs reached the server.
    assert {m for m, _, _ in asked} == {"GET"} and not any(p == "/post-target" for _, _, p in asked)
    nav = stats["render"]["navigations"]
    assert nav["post"] == 1 and nav["link"] >= 4 and nav["refused"] >= 4 and nav["window_open"] == 1
    assert stats["render"]["fallbacks"] == {}
