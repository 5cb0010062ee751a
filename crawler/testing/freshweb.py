"""A small web whose pages change on a clock, for testing and measuring recrawl.

Five kinds of page, ``PAGES_PER_KIND`` of each, on two hosts, found from a home page and
from ``/sitemap.xml`` (which lists some pages the home page does not link):

* ``changing``: new main content on every fetch, no validators;
* ``etag``: static, with an ETag; a matching ``If-None-Match`` gets a 304 and no body;
* ``lastmod``: static, with Last-Modified only; ``If-Modified-Since`` gets a 304;
* ``plain``: static main content, no validators, and a footer that changes on every
  fetch (render time, request id): only the main-content fingerprint says "unchanged";
* ``periodic``: new content every ``period_s`` seconds, with an ETag that follows it.

:func:`freshness_report` reads the server's own log: fetches per page per kind, the share
of 304s among refetches, and how long after a ``periodic`` page changed the crawler got
the new version.
"""

from __future__ import annotations

import email.utils
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from crawler.testing.webtypes import HTML_TYPE, Reply, SmallWeb

if TYPE_CHECKING:
    from crawler.testing.server import RequestRecord

KINDS = ("changing", "etag", "lastmod", "plain", "periodic")
PAGES_PER_KIND = 4
HOSTS = ("fresh-a.test", "fresh-b.test")
_EPOCH = 1_700_000_000.0  # Last-Modified of the static pages


def _words(seed: str, n: int = 60) -> str:
    return " ".join(f"{seed}w{k}" for k in range(n))


class FreshWeb(SmallWeb):
    """Serves the pages above; time is measured from :meth:`bind` (the server's start)."""

    def __init__(self, period_s: float = 3.0) -> None:
        super().__init__()
        self.period_s = period_s
        self.t0 = time.monotonic()
        self._hits: dict[str, int] = defaultdict(int)

    def bind(self, port: int) -> None:
        super().bind(port)
        self.t0 = time.monotonic()

    def seeds(self) -> list[str]:
        return [self.url(h) for h in HOSTS]

    def pages(self) -> dict[str, list[str]]:
        """Kind -> page URLs."""
        out: dict[str, list[str]] = {k: [] for k in KINDS}
        for i in range(PAGES_PER_KIND):
            for kind in KINDS:
                out[kind].append(self.url(HOSTS[i % 2], f"/{kind}/{i}"))
        return out

    def version(self, at: float) -> int:
        """The ``periodic`` pages' version at monotonic time ``at``."""
        return int((at - self.t0) // self.period_s)

    def reply(
        self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False, headers: dict[str, str] | None = None,
    ) -> Reply:
        headers = headers or {}
        if path_qs == "/robots.txt":
            return Reply(404, (("Content-Type", "text/plain"),), b"")
        if path_qs == "/sitemap.xml":
            locs = "".join(f"<url><loc>{u}</loc></url>" for urls in self.pages().values() for u in urls if self.url(host) in u)
            body = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
            return Reply(200, (("Content-Type", "application/xml"),), body.encode())
        if path_qs == "/":
            own = [u for urls in self.pages().values() for u in urls[:2] if self.url(host) in u]  # the rest only in the sitemap
            links = "".join(f'<a href="{u}">{u}</a>' for u in own)
            return self._html("home", _words(host), links)
        parts = path_qs.strip("/").split("/")
        if len(parts) != 2 or parts[0] not in KINDS:
            return Reply(404, (("Content-Type", HTML_TYPE),), b"not found")
        kind, key = parts[0], f"{host}{path_qs}"
        self._hits[key] += 1
        n = self._hits[key]
        if kind == "changing":
            return self._html(kind, _words(f"{key}v{n}"))
        if kind == "etag":
            tag = f'"{abs(hash(key)) % 10**8}"'
            if headers.get("If-None-Match") == tag:
                return Reply(304, (("ETag", tag),), b"")
            return self._html(kind, _words(key), extra=(("ETag", tag),))
        if kind == "lastmod":
            stamp = email.utils.formatdate(_EPOCH, usegmt=True)
            since = email.utils.parsedate_to_datetime(headers["If-Modified-Since"]).timestamp() if "If-Modified-Since" in headers else None
            if since is not None and since >= _EPOCH:
                return Reply(304, (("Last-Modified", stamp),), b"")
            return self._html(kind, _words(key), extra=(("Last-Modified", stamp),))
        if kind == "plain":
            return self._html(kind, _words(key), footer=f"rendered {time.time():.6f} request {n}")
        v = self.version(time.monotonic())  # periodic
        tag = f'"{key}-{v}"'
        if headers.get("If-None-Match") == tag:
            return Reply(304, (("ETag", tag),), b"")
        return self._html(kind, _words(f"{key}v{v}"), extra=(("ETag", tag),))

    def _html(self, title: str, text: str, links: str = "", footer: str = "", extra: tuple[tuple[str, str], ...] = ()) -> Reply:
        body = (
            f"<html><head><title>{title}</title></head><body><nav><a href='/'>home</a></nav>"
            f"<main><article><h1>{title}</h1><p>{text}</p></article></main>{links}"
            f"<footer>{footer}</footer></body></html>"
        )
        return Reply(200, (("Content-Type", HTML_TYPE), *extra), body.encode())


def freshness_report(server: Any) -> dict[str, Any]:
    """Figures from the server's log (see the module docstring)."""
    web: FreshWeb = server.web
    log = sorted((r for r in server.requests() if r.path_qs.count("/") == 2), key=lambda r: r.start)
    by_url: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in log:
        by_url[web.url(r.host, r.path_qs)].append(r)
    out: dict[str, Any] = {"fetches_per_page": {}, "not_modified_share": {}}
    for kind, urls in web.pages().items():
        counts = [len(by_url[u]) for u in urls]
        out["fetches_per_page"][kind] = round(statistics.mean(counts), 2)
        refetches = [r for u in urls for r in by_url[u][1:]]
        if refetches:
            out["not_modified_share"][kind] = round(sum(r.status == 304 for r in refetches) / len(refetches), 3)
    # For every new version of a periodic page after the first fetch: from the moment it
    # appeared to the first fetch that got it (or a later one).
    delays = []
    for u in web.pages()["periodic"]:
        reqs = [r for r in by_url[u] if r.status == 200]
        if not reqs:
            continue
        first = web.version(reqs[0].start)
        last_seen = web.version(by_url[u][-1].start)
        for k in range(first + 1, last_seen + 1):
            got = next((r for r in reqs if web.version(r.start) >= k), None)
            if got is not None:
                delays.append(got.start - (web.t0 + k * web.period_s))
    out["pickup_delay_s"] = {"max": round(max(delays), 2), "mean": round(statistics.mean(delays), 2), "n": len(delays)} if delays else None
    return out
