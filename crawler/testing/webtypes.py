"""The vocabulary of the synthetic web: profiles, link spellings, value types, canonical form.

Everything here is data or a pure function shared by the web's parts
(:mod:`crawler.testing.graph` builds :class:`Page` values, :mod:`crawler.testing.render`
turns them into bytes, :mod:`crawler.testing.truth` walks them, and
:mod:`crawler.testing.web` answers requests with :class:`Reply` values). The public names
are re-exported by :mod:`crawler.testing.web`, where tests import them.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from hashlib import blake2b
from urllib.parse import urlsplit

__all__ = [
    "CROSS_SPELLINGS",
    "JUNK_HREFS",
    "Link",
    "PROFILES",
    "Page",
    "Profile",
    "RELATIVE_SPELLINGS",
    "Reply",
    "SELF_SPELLINGS",
    "SPECIAL_BEHAVIOURS",
    "SPELLINGS",
    "SmallWeb",
    "TRACKING_PARAMS",
    "USER_AGENT",
    "canonical_path_qs",
    "split_url",
]

#: The user agent crawl configs for this web use; its product token is ``raycrawl``.
USER_AGENT = "raycrawl/0.1 (+https://example.invalid/bot)"

# ----------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """Size and timing of a synthetic web (see :data:`PROFILES`)."""

    name: str
    hosts: int                      # normal hosts
    pages_per_host: tuple[int, int]  # inclusive range, root included
    words: tuple[int, int]          # visible words per page
    links: tuple[int, int]          # links per page (structural links count; more are added)
    fanout: int                     # host-tree fanout: root i links roots fanout*i+1 ...
    specials: bool                  # serve the special behaviour hosts
    crawl_delay: float              # Crawl-delay of robots-delay.web.test
    stall_seconds: float            # how long stall.web.test/slow sleeps
    oversized_bytes: int            # size of oversized.web.test/big
    cache_pages: int                # rendered bodies kept (LRU)
    # Suggested crawl settings (crawler.testing.fixtures.crawl_config_for):
    interval: float
    fetch_timeout: float
    max_body_bytes: int
    chrome_groups: int = 0          # chrome-variant groups (4 copies of one article each)


PROFILES: dict[str, Profile] = {
    # End-to-end tests: done in a few seconds at a 0.02 s politeness interval.
    "test": Profile("test", 12, (8, 15), (150, 400), (3, 8), 4, True, 0.2, 5.0,
                    3_000_000, 100_000, 0.02, 1.0, 2_000_000, chrome_groups=2),
    # `crawl demo`: ~300 hosts, ~3,000 pages, every behaviour mixed in.
    "demo": Profile("demo", 300, (5, 15), (150, 400), (4, 10), 8, True, 1.5, 10.0,
                    3_000_000, 50_000, 0.25, 3.0, 2_000_000, chrome_groups=6),
    # Benchmarks: thousands of hosts, 20-30 KB pages with 20-60 links, no special hosts.
    "bench": Profile("bench", 2000, (20, 60), (2060, 2800), (20, 60), 12, False, 0.5, 5.0,
                     3_000_000, 4096, 0.05, 5.0, 2_000_000),
}

# ----------------------------------------------------------------------- link spellings

#: Spellings of a link to a page on the same host (rendered by ``SyntheticWeb._href``).
SPELLINGS = (
    "absolute",         # http://h0001.web.test:PORT/p/3
    "relative",         # 3 (from /p/5), p/3 (from /)
    "dot-relative",     # ./3
    "parent-relative",  # ../p/3: one '..' per directory level, at least one (RFC 3986 5.2.4 clips at the root)
    "root-relative",    # /p/3
    "scheme-relative",  # //h0001.web.test:PORT/p/3
    "upper-case",       # HTTP://H0001.WEB.TEST:PORT/p/3 (scheme and host are case-insensitive)
    "fragment",         # /p/3#section-2
    "tracking",         # /p/3?utm_source=x&utm_medium=y
    "percent-escape",   # /%70/%33: escaped unreserved characters (RFC 3986 6.2.2.2)
    "whitespace",       # "\n \t/p/\n3  \n": WHATWG URL strips outer C0/space and removes tab/newline
)
SELF_SPELLINGS = SPELLINGS
#: Self-link spellings of a host whose bytes are mirrored elsewhere (no host in them).
RELATIVE_SPELLINGS = ("relative", "dot-relative", "parent-relative", "root-relative",
                      "fragment", "tracking", "percent-escape", "whitespace")
#: Spellings of a link to another host (all carry the host).
CROSS_SPELLINGS = ("absolute", "scheme-relative", "upper-case", "fragment", "tracking",
                   "percent-escape", "whitespace")
#: Tracking parameters the web adds; a canonical URL has none (any ``utm_*`` counts).
TRACKING_PARAMS = ("utm_source", "utm_medium", "utm_campaign")

#: hrefs that are not crawlable pages; a crawler must skip each alone, keeping siblings.
JUNK_HREFS: dict[str, str] = {
    "mailto": "mailto:webmaster@example.invalid",
    "javascript": "javascript:void(0)",
    "tel": "tel:+1-555-0100",
    "data": "data:text/html;base64,PGEgaHJlZj0iL3giPng8L2E+",
    "bad-host": "http://a[b].test/x",           # urlsplit raises ValueError on it
    "empty-host": "http://:80/",
    "nul": "/nul-href/\x00page",                # a NUL inside an href
}
#: Path prefix of the "nul" junk href (the HTML parser turns its NUL into U+FFFD).
NUL_PREFIX = "/nul-href"

#: Behaviour name -> host ``<name>.web.test`` (each linked from a normal root except
#: redirect-dest, reached only through redirect.web.test/r/offsite).
SPECIAL_BEHAVIOURS = (
    "robots-private", "robots-agent", "robots-otherbot", "robots-delay", "robots-404",
    "robots-500", "robots-redirect",
    "retry-503-once", "retry-503-always", "retry-429-once", "stall", "status-4xx",
    "redirect", "redirect-dest",
    "trap-calendar", "trap-loop", "trap-session", "trap-facets", "trap-deep",
    "mirror", "near-dup",
    "binary", "oversized", "meta-nofollow", "rel-nofollow", "malformed", "cp1251", "gzip",
    "chrome-origin", "chrome-syndicate",  # last: the hosts linked before them keep their roots
)
#: Every host of the web is a name under this domain (``.test``: RFC 2606).
DOMAIN = "web.test"
#: The normal host whose pages mirror.web.test serves byte for byte.
MIRROR_ORIGIN = 1

# ------------------------------------------------------------------------ value types


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a page. ``host`` None means the host the page is served from."""

    host: str | None
    path_qs: str          # canonical path and query
    spelling: str = "root-relative"
    nofollow: bool = False  # rel="nofollow"
    area: bool = False      # written as <area href> in an image map


@dataclass(frozen=True, slots=True)
class Page:
    """What the web serves at one (host, canonical path_qs); bodies are rendered lazily.

    ``kind``: html | cp1251 | malformed | binary | oversized | oversized-chunked |
    redirect | status | flaky-503 | flaky-429 | down | stall | article. An ``article``
    (a chrome-variant copy) is rendered as ``<nav>`` (its first ``nav`` links),
    ``<main><article>`` (the text of its ``text_key``, no links), ``<aside>`` (its other
    links) and ``<footer>``.
    """

    host: str
    path_qs: str
    kind: str = "html"
    links: tuple[Link, ...] = ()
    status: int = 200
    target: tuple[str | None, str] | None = None  # redirect target (host None: same host)
    location_relative: bool = False
    meta_nofollow: bool = False
    trap: str | None = None       # trap kind for pages inside a trap space
    hidden: str | None = None     # why no followable link leads here (must_not_fetch reason)
    text_key: str | None = None   # pages sharing it share their text (near-duplicates)
    footer: str | None = None
    base: str | None = None       # <base href> path
    base_absolute: bool = False
    junk: tuple[str, ...] = ()    # JUNK_HREFS keys written on the page
    nav: int = 0                  # article: how many leading links go in its <nav>


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP response as the server should send it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    delay: float = 0.0     # seconds to wait (asynchronously) before answering
    chunk_size: int = 0    # > 0: stream the body chunked, without Content-Length


class SmallWeb:
    """The base of the small purpose-built webs (trap, freshness, chain, wide): the port
    the server bound and URLs on it. Subclasses add ``reply``."""

    def __init__(self) -> None:
        self.port = 0

    def bind(self, port: int) -> None:
        """Called by crawler.testing.server.WebServer once it listens."""
        self.port = port

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"


HTML_TYPE = "text/html; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
#: Page kinds that fail at first (retried, so requested more than once).
FAILURE_KINDS = frozenset({"flaky-503", "flaky-429", "down", "stall"})
#: Page kinds whose body a crawler does not (or cannot) take links from.
LEAF_KINDS = frozenset({"binary", "oversized", "oversized-chunked", "status", "down", "stall"})

# ------------------------------------------------------------------- canonicalization

UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")


def _norm_pct(s: str) -> str:
    # RFC 3986 6.2.2.1 / 6.2.2.2: upper-case hex, decode escaped unreserved characters.
    def sub(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in UNRESERVED else "%" + m.group(1).upper()

    return _PCT.sub(sub, s) if "%" in s else s


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path."""
    if "." not in path:
        return path
    out: list[str] = []
    segs = path.split("/")
    for i, seg in enumerate(segs[1:], 1):
        last = i == len(segs) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def _is_tracking(param: str) -> bool:
    name = param.partition("=")[0].lower()
    return name.startswith("utm_")


def canonical_path_qs(path_qs: str) -> str:
    """The canonical form of a request target: what a correct crawler sends.

    Escapes normalized (RFC 3986 6.2.2), dot segments removed (5.2.4), ``utm_*``
    parameters dropped (with the ``?`` if nothing is left). Parameter order is kept.
    """
    path, sep, query = path_qs.partition("?")
    path = _remove_dot_segments(_norm_pct(path or "/"))
    if not sep:
        return path
    kept = [p for p in query.split("&") if not _is_tracking(p)]
    if not kept or kept == [""] and query:
        return path
    return path + "?" + _norm_pct("&".join(kept))


def digest(*parts: object) -> str:
    """A short stable hex id of ``parts`` (session ids, request ids): the same on every run."""
    return blake2b("|".join(map(str, parts)).encode(), digest_size=6).hexdigest()


def split_url(url: str) -> tuple[str, str] | None:
    """(lower-case host, canonical path_qs) of a URL, or None if it does not parse."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
    except ValueError:
        return None
    if not host:
        return None
    path_qs = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return host, canonical_path_qs(path_qs)
