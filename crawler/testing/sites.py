"""The special hosts of the synthetic web: one host per awkward behaviour.

Each behaviour lives on its own host ``<behaviour>.web.test`` so a test can assert per
host. :func:`build_sites` returns them as :class:`Site` values: fixed pages (the link
graph of trap hosts is generated on demand by :mod:`crawler.testing.graph`), the
robots.txt served there and the paths it blocks, with the reason a correct crawler must
not ask for them (the ground truth in :mod:`crawler.testing.truth` quotes it).

Special hosts (``web.host_for(name)``; each root ``/`` is an ordinary page):

================  ===================================================================
robots-private    robots.txt disallows ``/private/`` (linked from ``/`` and ``/p/1``)
robots-agent      a ``RayCrawl`` group disallows ``/nobots/``; ``*`` allows all
robots-otherbot   an ``otherbot`` group disallows ``/``; ``*`` allows: crawl it all
robots-delay      ``Crawl-delay: profile.crawl_delay`` (0.2 s in "test"), ``/p/1``-``5``
robots-404        robots.txt 404: allow all
robots-500        robots.txt 500: nothing else may be fetched (RFC 9309 2.3.1.4)
robots-redirect   ``/robots.txt`` 301 -> ``/robots-real.txt``, which disallows ``/secret/``
retry-503-once    ``/flaky``: 503 on the first request, then 200
retry-503-always  ``/down``: always 503
retry-429-once    ``/busy``: 429 with ``Retry-After: 1`` once, then 200
stall             ``/slow``: answers after ``profile.stall_seconds`` (5 s in "test")
status-4xx        ``/missing`` 404, ``/forbidden`` 403
redirect          ``/r/moved`` 301 -> ``/r/target``; ``/r/c1`` -> ``c2`` -> ``c3`` ->
                  ``/r/chain-end`` (302, 307, 308; some Locations relative);
                  ``/r/loop-a`` <-> ``/r/loop-b``; ``/r/offsite`` -> redirect-dest
redirect-dest     ``/landing``, reached only through ``redirect``'s ``/r/offsite``
trap-*            ``/cal/YYYY/MM`` forever, ``/loop/loop/...``, ``/s/<new id>/page``,
                  ``/shop?<facets>&page=n``, ``/deep/<n>`` (:meth:`SyntheticWeb.trap_hosts`)
mirror            byte-identical copy of ``h0001`` (whose self-links are all relative)
near-dup          ``/v/1``-``5``: one text, footer counters differ, SimHash within 3
binary            ``/asset/1``: image/png
oversized         ``/big`` (Content-Length) and ``/big-chunked``: 3 MB of HTML
meta-nofollow     ``/nf`` has ``<meta name=robots content=nofollow>``; targets ``/nf-hidden/*``
rel-nofollow      ``/rn`` links only with ``rel=nofollow``; targets ``/rn-hidden/*``
malformed         ``/broken``: broken markup, bad bytes, one real link ``/broken-target``
cp1251            ``/ru``: windows-1251 (Content-Type only), links ``/ru/страница``
gzip              all pages gzip-encoded when the request accepts it
chrome-origin     ``/news/<g>`` and ``/amp/news/<g>``: two copies of article ``g``
                  (``profile.chrome_groups`` articles; ~10 KB each)
chrome-syndicate  ``/story/<g>`` and ``/print/story/<g>``: two more copies; the four
                  differ only in ``<footer>`` (render time, request id), ``<nav>`` and
                  ``<aside>`` (:meth:`GroundTruth.chrome_duplicate_groups`)
================  ===================================================================
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, cast
from urllib.parse import quote

from crawler.testing.webtypes import DOMAIN, MIRROR_ORIGIN, SELF_SPELLINGS, Link, Page, Profile, digest

__all__ = ["CHROME_COPIES", "Site", "build_sites"]

_RU_TARGET = "/ru/" + quote("страница")  # canonical: UTF-8, upper-case escapes


@dataclass
class Site:
    """A special host: fixed pages, robots.txt, and the rules a correct crawler obeys."""

    host: str
    behaviour: str
    pages: dict[str, Page]
    robots: str | None = "User-agent: *\nDisallow:\n"
    robots_status: int = 200
    blocked: tuple[tuple[str, str], ...] = ()  # (path prefix, reason)
    gzip: bool = False
    trap: str | None = None


def build_sites(seed: int, profile: Profile, render: Callable[[Page], bytes]) -> dict[str, Site]:
    """Every special host of a web with ``seed`` and ``profile``, by host name.

    ``render`` writes a page's HTML (the near-duplicates are chosen by their rendered text).
    """
    sites: dict[str, Site] = {}
    prof = profile

    def site(behaviour: str, spec: dict[str, object], **kw: object) -> Site:
        host = f"{behaviour}.{DOMAIN}"
        pages: dict[str, Page] = {}
        for n, (path, val) in enumerate(spec.items()):
            if isinstance(val, Page):
                pages[path] = val
                continue
            links = tuple(
                t if isinstance(t, Link) else Link(None, t, SELF_SPELLINGS[(n + m) % len(SELF_SPELLINGS)])
                for m, t in enumerate(cast("Iterable[Link | str]", val))  # not a Page: its links
            )
            pages[path] = Page(host, path, links=links)
        s = Site(host, behaviour, pages, **kw)  # type: ignore[arg-type]  # a table's keywords, each Site's own field
        sites[host] = s
        return s

    def pg(behaviour: str, path: str, **kw: object) -> Page:
        return Page(f"{behaviour}.{DOMAIN}", path, **kw)  # type: ignore[arg-type]  # a table's keywords, each Page's own field

    rfc = "RFC 9309 2.2.2"
    site("robots-private", {"/": ["/p/1", "/p/2", "/private/1", "/private/2"], "/p/1": ["/", "/private/3"],
                            "/p/2": ["/"], "/private/1": ["/"], "/private/2": ["/"], "/private/3": ["/"]},
         robots="User-agent: *\nDisallow: /private/\n",
         blocked=(("/private/", f"robots.txt disallows /private/ for * ({rfc})"),))
    site("robots-agent", {"/": ["/p/1", "/nobots/1", "/nobots/2"], "/p/1": ["/"], "/nobots/1": ["/"], "/nobots/2": ["/"]},
         robots="User-agent: RayCrawl\nDisallow: /nobots/\n\nUser-agent: *\nAllow: /\n",
         blocked=(("/nobots/", "robots.txt group for our product token (matched case-insensitively, "
                               "RFC 9309 2.2.1) disallows /nobots/"),))
    site("robots-otherbot", {"/": ["/p/1", "/p/2"], "/p/1": ["/"], "/p/2": ["/"]},
         robots="User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow:\n")
    site("robots-delay", {"/": [f"/p/{k}" for k in range(1, 6)], **{f"/p/{k}": ["/"] for k in range(1, 6)}},
         robots=f"User-agent: *\nCrawl-delay: {prof.crawl_delay:g}\nDisallow:\n")
    site("robots-404", {"/": ["/p/1", "/p/2"], "/p/1": ["/"], "/p/2": ["/"]}, robots=None, robots_status=404)
    site("robots-500", {"/": ["/p/1"], "/p/1": ["/"]}, robots=None, robots_status=500,
         blocked=(("/", "robots.txt answers 500: the site is unreachable, so complete disallow (RFC 9309 2.3.1.4)"),))
    site("robots-redirect", {"/": ["/p/1", "/secret/1"], "/p/1": ["/", "/secret/2"], "/secret/1": ["/"], "/secret/2": ["/"]},
         robots="User-agent: *\nDisallow: /secret/\n", robots_status=301,
         blocked=(("/secret/", "robots.txt (reached through a 301 to /robots-real.txt, RFC 9309 2.3.1.2) "
                               "disallows /secret/"),))
    site("retry-503-once", {"/": ["/flaky"], "/flaky": pg("retry-503-once", "/flaky", kind="flaky-503", links=(Link(None, "/"),))})
    site("retry-503-always", {"/": ["/down"], "/down": pg("retry-503-always", "/down", kind="down")})
    site("retry-429-once", {"/": ["/busy"], "/busy": pg("retry-429-once", "/busy", kind="flaky-429", links=(Link(None, "/"),))})
    site("stall", {"/": ["/slow"], "/slow": pg("stall", "/slow", kind="stall")})
    site("status-4xx", {"/": ["/missing", "/forbidden"], "/missing": pg("status-4xx", "/missing", kind="status", status=404),
                        "/forbidden": pg("status-4xx", "/forbidden", kind="status", status=403)})
    dest = f"redirect-dest.{DOMAIN}"

    def redir(path: str, status: int, target: tuple[str | None, str], rel: bool = False) -> Page:
        return pg("redirect", path, kind="redirect", status=status, target=target, location_relative=rel)

    site("redirect", {"/": ["/r/moved", "/r/c1", "/r/loop-a", "/r/offsite"],
                      "/r/moved": redir("/r/moved", 301, (None, "/r/target")), "/r/target": ["/"],
                      "/r/c1": redir("/r/c1", 302, (None, "/r/c2"), True),
                      "/r/c2": redir("/r/c2", 307, (None, "/r/c3")),
                      "/r/c3": redir("/r/c3", 308, (None, "/r/chain-end"), True), "/r/chain-end": ["/"],
                      "/r/loop-a": redir("/r/loop-a", 301, (None, "/r/loop-b")),
                      "/r/loop-b": redir("/r/loop-b", 301, (None, "/r/loop-a"), True),
                      "/r/offsite": redir("/r/offsite", 302, (dest, "/landing"))})
    site("redirect-dest", {"/landing": []})
    trap_kinds = {"trap-calendar": ("calendar", "/cal/2024/01"), "trap-loop": ("path-repetition", "/loop/"),
                  "trap-session": ("session-id", f"/s/{digest(seed, 'session')}/page"),
                  "trap-facets": ("faceted-search", "/shop"), "trap-deep": ("deep", "/deep/1")}
    for behaviour, (kind, entry) in trap_kinds.items():
        site(behaviour, {"/": [Link(None, entry, "relative" if kind == "path-repetition" else "root-relative")]},
             trap=kind)
    if prof.hosts > MIRROR_ORIGIN:
        site("mirror", {})
    nd: dict[str, object] = {"/": [f"/v/{k}" for k in range(1, 6)]}
    for k, page in enumerate(_near_duplicates(f"near-dup.{DOMAIN}", render), 1):
        nd[f"/v/{k}"] = page
    site("near-dup", nd)
    png_hidden = "linked only from text inside a PNG's tEXt chunk (not HTML)"
    site("binary", {"/": ["/asset/1"], "/asset/1": pg("binary", "/asset/1", kind="binary"),
                    "/from-png": pg("binary", "/from-png", hidden=png_hidden)})
    site("oversized", {"/": ["/big", "/big-chunked"], "/big": pg("oversized", "/big", kind="oversized"),
                       "/big-chunked": pg("oversized", "/big-chunked", kind="oversized-chunked"),
                       "/after-big": pg("oversized", "/after-big", hidden="linked only past max_body_bytes of an oversized body")})
    nf = "linked only from a page with <meta name=robots content=nofollow>"
    site("meta-nofollow", {"/": ["/nf"], "/nf": pg("meta-nofollow", "/nf", meta_nofollow=True,
                                                   links=(Link(None, "/nf-hidden/1"), Link(None, "/nf-hidden/2", "relative"))),
                           "/nf-hidden/1": pg("meta-nofollow", "/nf-hidden/1", hidden=nf),
                           "/nf-hidden/2": pg("meta-nofollow", "/nf-hidden/2", hidden=nf)})
    rn = "linked only with rel=nofollow (followed only if urls.follow_rel_nofollow is true)"
    site("rel-nofollow", {"/": ["/rn"], "/rn": pg("rel-nofollow", "/rn", links=(
                              Link(None, "/rn-hidden/1", nofollow=True), Link(None, "/rn-hidden/2", "relative", nofollow=True),
                              Link(None, "/", nofollow=True))),
                          "/rn-hidden/1": pg("rel-nofollow", "/rn-hidden/1", hidden=rn, links=(Link(None, "/rn-hidden/3"),)),
                          "/rn-hidden/2": pg("rel-nofollow", "/rn-hidden/2", hidden=rn),
                          "/rn-hidden/3": pg("rel-nofollow", "/rn-hidden/3", hidden=rn)})
    site("malformed", {"/": ["/broken"], "/broken": pg("malformed", "/broken", kind="malformed",
                                                       links=(Link(None, "/broken-target"), Link(None, "/"))),
                       "/broken-target": ["/"],
                       "/in-script": pg("malformed", "/in-script", hidden="appears only inside <script> text"),
                       "/in-comment": pg("malformed", "/in-comment", hidden="appears only inside an HTML comment")})
    site("cp1251", {"/": ["/ru"], "/ru": pg("cp1251", "/ru", kind="cp1251",
                                            links=(Link(None, _RU_TARGET, "raw-unicode"), Link(None, "/"))),
                    _RU_TARGET: ["/", "/ru"]})
    site("gzip", {"/": ["/z/1", "/z/2"], "/z/1": ["/", "/z/2"], "/z/2": ["/"]}, gzip=True)
    if prof.chrome_groups:
        for behaviour, pages in _chrome_copies(seed, prof.chrome_groups).items():
            site(behaviour, {"/": [p.path_qs for p in pages], **{p.path_qs: p for p in pages}})
    return sites


#: Where the 4 copies of chrome-variant article ``g`` live: (behaviour, path prefix).
CHROME_COPIES = (("chrome-origin", "/news/"), ("chrome-origin", "/amp/news/"),
                 ("chrome-syndicate", "/story/"), ("chrome-syndicate", "/print/story/"))


def _chrome_copies(seed: int, groups: int) -> dict[str, list[Page]]:
    """Behaviour -> its article copies: ``groups`` articles, 4 copies each (:data:`CHROME_COPIES`).

    The copies of an article share its text (``text_key``) and differ in their footer
    (render time and request id, unique per copy) and in their chrome: each page's
    ``<nav>`` links the host's root and the next article, its ``<aside>`` links related
    copies (a syndicated copy credits the origin), and the print copy has no nav.
    """
    out: dict[str, list[Page]] = {}
    origin = f"chrome-origin.{DOMAIN}"
    for g in range(1, groups + 1):
        nxt = g % groups + 1
        for behaviour, prefix in CHROME_COPIES:
            host = f"{behaviour}.{DOMAIN}"
            nav = [] if prefix.startswith("/print/") else [Link(None, "/"), Link(None, f"{prefix}{nxt}", "relative")]
            if behaviour == "chrome-origin":
                other = "/amp/news/" if prefix == "/news/" else "/news/"
                aside = [Link(None, f"{other}{g}"), Link(None, f"{other}{nxt}", "dot-relative")]
            else:
                other = "/story/" if prefix.startswith("/print/") else "/print/story/"
                aside = [Link(origin, f"/news/{g}", "absolute"), Link(None, f"{other}{g}")]
            out.setdefault(behaviour, []).append(Page(
                host, f"{prefix}{g}", kind="article", text_key=f"chrome/{g}", links=tuple(nav + aside),
                nav=len(nav), footer=_render_stamp(seed, host, f"{prefix}{g}")))
    return out


def _render_stamp(seed: int, host: str, path: str) -> str:
    """The footer of one copy: when it was rendered and the id of the request that did it."""
    ident = digest(seed, host, path, "request")
    when = datetime(2024, 3, 1, tzinfo=timezone.utc) + timedelta(seconds=int(ident[:6], 16) % (30 * 86400))
    return f"Rendered {when:%Y-%m-%d %H:%M:%S} UTC \u00b7 request id {ident}"


def _near_duplicates(host: str, render: Callable[[Page], bytes], count: int = 5) -> list[Page]:
    """``count`` pages with one text, differing only in a view counter in the footer.

    A single changed token flips a SimHash bit wherever the other features' votes
    nearly cancel, so for a ~300-word text a few pairs in a hundred land 4-8 bits
    apart. The counters are therefore chosen, deterministically, so that every pair
    is within distance 3 under the crawler's own ``crawler.content.fingerprints.simhash64`` of the
    visible text (fixed counters if that module is missing).
    """

    def make(n: int) -> Page:
        return Page(host, "/v/", links=(Link(None, "/"),), text_key="near-dup/v",
                    footer=f"Rendered on 2024-01-05. Page views: {n}")

    try:
        from crawler.content.fingerprints import hamming, simhash64
    except ImportError:
        chosen: list[int] = [1000 + 37 * k for k in range(count)]
    else:
        chosen = []
        fps: list[int] = []
        for n in range(1000, 6000):  # usually a few dozen; a web's chrome can make it hundreds
            body = render(make(n)).decode()
            text = html.unescape(re.sub(r"<[^>]*>", " ", body[body.index("<body>"):]))
            fp = simhash64(text)
            if all(hamming(fp, f) <= 3 for f in fps):
                chosen.append(n)
                fps.append(fp)
                if len(chosen) == count:
                    break
    if len(chosen) < count:  # the index links /v/1-count: a page missing would be a link to nothing
        raise ValueError(f"found {len(chosen)} of {count} near-duplicate counters for {host}")
    return [Page(host, f"/v/{k}", links=(Link(None, "/"),), text_key="near-dup/v",
                 footer=f"Rendered on 2024-01-05. Page views: {n}") for k, n in enumerate(chosen, 1)]
