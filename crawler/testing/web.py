"""A deterministic synthetic multi-host web, and the ground truth of crawling it.

Every end-to-end test, the demo and the benchmarks crawl this web (served by
:mod:`crawler.testing.server`). It is pure: no sockets, no clocks, no global state. The
graph and every byte served follow from ``seed`` (and the bound port, which appears in
absolute links).

Hosts are names under the reserved ``.test`` TLD (RFC 2606), so a crawler reaches them
only through its ``fetch.resolve: {"*.test": "127.0.0.1"}`` override:

* normal hosts ``h0000.web.test`` ... with pages ``/`` and ``/p/<n>``: a tree of host
  roots (root *i* links the roots of its ``fanout`` children, so every host is a few hops
  from the seeds), hub pages reachable from the root, a chain of up to 6 pages each
  linked only from the previous one, and an "orphan" page linked only from the parent
  host's root. Links are written in every spelling a crawler must canonicalize to one
  URL (:data:`SPELLINGS`) plus hrefs that are not pages at all (:data:`JUNK_HREFS`).
* special hosts ``<behaviour>.web.test`` (:data:`SPECIAL_BEHAVIOURS`), one per behaviour
  so a test can assert per host: robots.txt variants, retries, redirects, traps,
  duplicates and awkward content. Each is linked from a normal host's root.

Ground truth is computed by a breadth-first walk over the *abstract* link graph (not
the HTML), with the rules of a correct crawler: RFC 9309 robots, ``<meta name=robots
content=nofollow>`` honoured, ``rel=nofollow`` links not followed unless
``urls.follow_rel_nofollow`` is true, a redirect treated as a link to its ``Location``
(one request per redirect URL: the crawler records a ``redirect`` row and enqueues the
target; it does not follow redirects inside one fetch), trap spaces not expanded.
``tests/unit/test_synthetic_web.py`` checks the walk against the served HTML parsed
independently.

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
================  ===================================================================
"""

from __future__ import annotations

import array
import gzip
import html
import operator
import posixpath
import re
import string
import struct
import threading
import zlib
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from functools import lru_cache
from hashlib import blake2b
from random import Random
from typing import Callable, Iterable
from urllib.parse import quote, unquote, urlsplit

from crawler.errors import ConfigError

__all__ = [
    "CROSS_SPELLINGS",
    "JUNK_HREFS",
    "Link",
    "PROFILES",
    "Page",
    "Profile",
    "Reply",
    "SELF_SPELLINGS",
    "SPECIAL_BEHAVIOURS",
    "SPELLINGS",
    "SyntheticWeb",
    "TRACKING_PARAMS",
    "USER_AGENT",
    "canonical_path_qs",
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


PROFILES: dict[str, Profile] = {
    # End-to-end tests: done in a few seconds at a 0.02 s politeness interval.
    "test": Profile("test", 12, (8, 15), (150, 400), (3, 8), 4, True, 0.2, 5.0,
                    3_000_000, 100_000, 0.02, 1.0, 2_000_000),
    # `crawl demo`: ~300 hosts, ~3,000 pages, every behaviour mixed in.
    "demo": Profile("demo", 300, (5, 15), (150, 400), (4, 10), 8, True, 1.5, 10.0,
                    3_000_000, 50_000, 0.25, 3.0, 2_000_000),
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
_NUL_PREFIX = "/nul-href"

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
)
_DOMAIN = "web.test"
_MIRROR_ORIGIN = 1  # normal host whose pages mirror.web.test serves byte for byte

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
    redirect | status | flaky-503 | flaky-429 | down | stall.
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


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP response as the server should send it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    delay: float = 0.0     # seconds to wait (asynchronously) before answering
    chunk_size: int = 0    # > 0: stream the body chunked, without Content-Length


_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"
_FAILURE_KINDS = frozenset({"flaky-503", "flaky-429", "down", "stall"})
_LEAF_KINDS = frozenset({"binary", "oversized", "oversized-chunked", "status", "down", "stall"})

# ------------------------------------------------------------------- canonicalization

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")


def _norm_pct(s: str) -> str:
    # RFC 3986 6.2.2.1 / 6.2.2.2: upper-case hex, decode escaped unreserved characters.
    def sub(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

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


# ------------------------------------------------------------------------ vocabularies


@lru_cache(maxsize=1)
def _vocab() -> tuple[str, ...]:
    """4096 pronounceable pseudo-words, fixed for all seeds (the seed picks among them)."""
    onsets = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v",
              "w", "z", "br", "ch", "cl", "dr", "gr", "pl", "st", "tr", "sh")
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou")
    codas = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st")
    rng = Random("raycrawl-vocabulary-1")
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < 4096:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(rng.randint(1, 3)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return tuple(words)


@lru_cache(maxsize=1)
def _vocab16() -> tuple[str, ...]:
    """The vocabulary repeated to 65536 entries, indexed by 16-bit random numbers."""
    return _vocab() * (65536 // len(_vocab()))


def _draw(rng: Random, vocab: tuple[str, ...], k: int) -> list[str]:
    """``k`` words drawn uniformly from ``vocab``; for the main vocabulary, at C speed
    (two random bytes per word instead of a Python-level ``choices`` loop)."""
    if k <= 0:
        return []
    if vocab is _vocab():
        idx = array.array("H", rng.randbytes(2 * k))
        return [_vocab16()[idx[0]]] if k == 1 else list(operator.itemgetter(*idx)(_vocab16()))
    return rng.choices(vocab, k=k)


_RU_WORDS = tuple(
    "город река дом лес поле небо окно книга слово время работа жизнь дорога память "
    "утро вечер зима весна лето осень море гора ветер солнце земля вода огонь письмо "
    "школа друг голос улица сад мост край путь песня свет тень история страница".split()
)
_RU_TARGET = "/ru/" + quote("страница")  # canonical: UTF-8, upper-case escapes


def _digest(*parts: object) -> str:
    return blake2b("|".join(map(str, parts)).encode(), digest_size=6).hexdigest()


# ---------------------------------------------------------------------- layouts, sites


@dataclass(frozen=True, slots=True)
class _Layout:
    pages: int   # including the root
    hubs: int    # /p/1 .. /p/hubs
    chain: int   # the next `chain` numbers
    orphan: bool  # one more number, linked only from the parent host's root


@dataclass
class _Site:
    """A special host: fixed pages, robots.txt, and the rules a correct crawler obeys."""

    host: str
    behaviour: str
    pages: dict[str, Page]
    robots: str | None = "User-agent: *\nDisallow:\n"
    robots_status: int = 200
    blocked: tuple[tuple[str, str], ...] = ()  # (path prefix, reason)
    gzip: bool = False
    trap: str | None = None


_TRAP_PATTERNS = {
    "calendar": re.compile(r"/cal/(\d{4})/(0[1-9]|1[0-2])"),
    "path-repetition": re.compile(r"(?:/loop)+/"),
    "session-id": re.compile(r"/s/([0-9a-f]{12})/(page|other)"),
    "deep": re.compile(r"/deep/([1-9]\d{0,17})"),
}
_FACETS = {
    "brand": ("acme", "globex", "initech", "umbrella"),
    "color": ("red", "green", "blue", "black", "white", "grey"),
    "material": ("wood", "steel", "cotton", "glass"),
    "size": ("xs", "s", "m", "l", "xl"),
    "sort": ("price", "name", "new", "rating"),
}


class SyntheticWeb:
    """A deterministic multi-host web: pages, replies and ground truth (see module doc).

    ``profile`` is one of :data:`PROFILES`; ``hosts`` and ``pages_per_host`` override the
    profile's number of normal hosts and pages per host. URLs carry the port given to
    :meth:`bind` (the server calls it); before that they have none.
    """

    def __init__(self, seed: int = 0, profile: str = "test", hosts: int | None = None,
                 pages_per_host: int | None = None) -> None:
        if profile not in PROFILES:
            raise ConfigError(f"profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
        prof = PROFILES[profile]
        if hosts is not None:
            if hosts < 1:
                raise ConfigError(f"hosts: must be >= 1, got {hosts}")
            prof = replace(prof, hosts=hosts)
        if pages_per_host is not None:
            if pages_per_host < 5:
                raise ConfigError(f"pages_per_host: must be >= 5 (root, hubs, chain, orphan), got {pages_per_host}")
            prof = replace(prof, pages_per_host=(pages_per_host, pages_per_host))
        self.seed = seed
        self.profile = prof
        self.port: int | None = None
        self._layouts: dict[int, _Layout] = {}
        self._lock = threading.Lock()
        self._bodies: OrderedDict[tuple[str, str, bool], bytes] = OrderedDict()
        self._walks: dict[bool, dict[tuple[str, str], int]] = {}  # ground truth is port-free:
        self._once: dict[bool, dict[tuple[str, str], int]] = {}   # bind() keeps these
        self._failures: dict[tuple[str, str], str] | None = None
        self._specials: dict[str, _Site] = self._build_specials() if prof.specials else {}
        self._special_links = self._assign_special_links()

    # ------------------------------------------------------------------ names and URLs

    def bind(self, port: int) -> None:
        """Put ``port`` in every URL and absolute link from now on (drops cached bodies)."""
        with self._lock:
            self.port = int(port)
            self._bodies.clear()

    def netloc(self, host: str) -> str:
        """``host:port`` once bound (the port is never the scheme default)."""
        return f"{host}:{self.port}" if self.port else host

    def url(self, host: str, path_qs: str = "/") -> str:
        """The canonical URL of ``path_qs`` on ``host``."""
        return f"http://{self.netloc(host)}{path_qs}"

    def normal_host(self, i: int) -> str:
        """Name of normal host number ``i``."""
        return f"h{i:04d}.{_DOMAIN}"

    def host_for(self, behaviour: str) -> str:
        """Host of a special behaviour, e.g. ``host_for("robots-500")``."""
        if behaviour not in SPECIAL_BEHAVIOURS:
            raise KeyError(f"unknown behaviour {behaviour!r}; see SPECIAL_BEHAVIOURS")
        return f"{behaviour}.{_DOMAIN}"

    def hosts(self) -> list[str]:
        """Every host name served (normal, then special)."""
        return [self.normal_host(i) for i in range(self.profile.hosts)] + list(self._specials)

    def special_hosts(self) -> dict[str, str]:
        """Special host -> behaviour."""
        return {h: s.behaviour for h, s in self._specials.items()}

    def seeds(self) -> list[str]:
        """Entry URLs from which everything in :meth:`must_fetch` is reachable."""
        return [self.url(self.normal_host(i)) for i in range(min(3, self.profile.hosts))]

    def split(self, url: str) -> tuple[str, str] | None:
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

    # --------------------------------------------------------------------- the graph

    def _normal_index(self, host: str) -> int | None:
        if not (host.startswith("h") and host.endswith("." + _DOMAIN)):
            return None
        digits = host[1:-len(_DOMAIN) - 1]
        if not digits.isdigit():
            return None
        i = int(digits)
        return i if i < self.profile.hosts and self.normal_host(i) == host else None

    def _layout(self, i: int) -> _Layout:
        lay = self._layouts.get(i)
        if lay is None:
            rng = Random(f"{self.seed}|layout|{i}")
            n = rng.randint(*self.profile.pages_per_host)
            orphan = i != 0 and i != _MIRROR_ORIGIN  # host 0 has no parent; the mirror origin
            # must stay byte-identical, so no page of it is linked only from elsewhere
            # Host 0 carries the longest chain (6) so every profile has a deep page.
            chain = min(6, n - 2) if i == 0 else rng.randint(1, min(6, n - 3))
            lay = _Layout(n, n - 1 - chain - orphan, chain, orphan)
            self._layouts[i] = lay
        return lay

    def _children(self, i: int) -> range:
        f = self.profile.fanout
        return range(min(f * i + 1, self.profile.hosts), min(f * i + f + 1, self.profile.hosts))

    def _assign_special_links(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        linked = [h for h, s in self._specials.items() if s.behaviour != "redirect-dest"]
        for j, host in enumerate(linked):
            out.setdefault(j % self.profile.hosts, []).append(host)
        return out

    def page(self, host: str, path_qs: str) -> Page | None:
        """What is served at ``host`` + canonical ``path_qs`` (None: 404)."""
        i = self._normal_index(host)
        if i is not None:
            return self._normal_page(i, path_qs)
        site = self._specials.get(host)
        if site is None:
            return None
        if site.behaviour == "mirror":
            return self._normal_page(_MIRROR_ORIGIN, path_qs)
        page = site.pages.get(path_qs)
        if page is None and site.trap:
            page = self._trap_page(site, path_qs)
        return page

    def _normal_page(self, i: int, path_qs: str) -> Page | None:
        lay = self._layout(i)
        if path_qs == "/":
            k = 0
        elif path_qs.startswith("/p/") and path_qs[3:].isdigit() and str(int(path_qs[3:])) == path_qs[3:]:
            k = int(path_qs[3:])
            if not 1 <= k < lay.pages:
                return None
        else:
            return None
        host = self.normal_host(i)
        prof = self.profile
        rng = Random(f"{self.seed}|links|{i}|{k}")
        rel_only = i == _MIRROR_ORIGIN
        self_sp = RELATIVE_SPELLINGS if rel_only else SELF_SPELLINGS
        first_chain = lay.hubs + 1
        targets: list[tuple[str | None, str]] = []
        if k == 0:
            targets += [(None, f"/p/{h}") for h in range(1, min(lay.hubs, 16) + 1)]
            targets.append((None, f"/p/{first_chain}"))
            for c in self._children(i):
                targets.append((self.normal_host(c), "/"))
                cl = self._layout(c)
                if cl.orphan:
                    targets.append((self.normal_host(c), f"/p/{cl.hubs + cl.chain + 1}"))
            targets += [(h, "/") for h in self._special_links.get(i, ())]
        elif k <= lay.hubs:
            targets += [(None, f"/p/{c}") for c in (2 * k, 2 * k + 1) if c <= lay.hubs]
            targets.append((None, "/"))
        elif k < first_chain + lay.chain:
            if k + 1 < first_chain + lay.chain:
                targets.append((None, f"/p/{k + 1}"))
            targets.append((None, "/"))
        else:  # the orphan
            targets.append((None, "/"))
        # Fill to the profile's link count with hubs of this host and roots/hubs of others:
        # never chain or orphan pages, which must stay reachable only their one way.
        want = rng.randint(*prof.links)
        while len(targets) < want:
            if rng.random() < 0.5 or prof.hosts == 1:
                h = rng.randint(0, lay.hubs)
                targets.append((None, f"/p/{h}" if h else "/"))
            else:
                j = rng.randrange(prof.hosts - 1)
                j += j >= i
                h = rng.randint(0, self._layout(j).hubs)
                targets.append((self.normal_host(j), f"/p/{h}" if h else "/"))
        off = rng.randrange(len(SPELLINGS))
        links = []
        for n, (th, tp) in enumerate(targets):
            choices = self_sp if th is None else CROSS_SPELLINGS
            links.append(Link(th, tp, choices[(off + n) % len(choices)]))
        if rng.random() < 0.4:  # one link as <area href> in an image map
            links[-1] = Link(links[-1].host, links[-1].path_qs, links[-1].spelling, area=True)
        base = None
        base_abs = False
        if k and rng.random() < 0.25:
            base = rng.choice(("/b/{0}/", "/b/{0}/x/index.html", "/p/")).format(rng.randint(1, 9))
            base_abs = not rel_only and rng.random() < 0.5
        junk = tuple(JUNK_HREFS) if k == 0 else (rng.choice(tuple(JUNK_HREFS)),)
        return Page(host, path_qs, links=tuple(links), base=base, base_absolute=base_abs, junk=junk)

    def _trap_page(self, site: _Site, path_qs: str) -> Page | None:
        kind = site.trap
        path, _, query = path_qs.partition("?")
        mk = lambda *links: Page(site.host, path_qs, links=tuple(links), trap=kind)  # noqa: E731
        home = Link(None, "/", "root-relative")
        if kind == "faceted-search":
            if path != "/shop":
                return None
            params: dict[str, str] = {}
            for kv in query.split("&") if query else ():
                key, _, val = kv.partition("=")
                ok = (key in _FACETS and val in _FACETS[key]) or (key == "page" and val.isdigit() and val[0] != "0")
                if not ok or key in params:
                    return None
                params[key] = val
            rng = Random(f"{self.seed}|facets|{path_qs}")
            out = []
            for key, values in _FACETS.items():
                nxt = dict(params, **{key: rng.choice([v for v in values if v != params.get(key)])})
                out.append(Link(None, "/shop?" + _query(nxt), "root-relative"))
            out.append(Link(None, "/shop?" + _query(dict(params, page=str(int(params.get("page", "1")) + 1))), "root-relative"))
            return Page(site.host, path_qs, links=tuple(out) + (home,), trap=kind, text_key=f"{site.host}/shop")
        if query:
            return None
        m = _TRAP_PATTERNS[kind].fullmatch(path)
        if m is None:
            return None
        if kind == "calendar":
            y, mo = int(m.group(1)), int(m.group(2))
            nxt = (y + (mo == 12), mo % 12 + 1)
            prev = (y - (mo == 1), (mo - 2) % 12 + 1)
            return mk(*(Link(None, f"/cal/{a:04d}/{b:02d}") for a, b in (nxt, prev) if 1 <= a <= 9999), home)
        if kind == "path-repetition":
            return mk(Link(None, path + "loop/", "relative"), home)
        if kind == "session-id":
            return mk(Link(None, f"/s/{_digest(self.seed, path, 'a')}/page"),
                      Link(None, f"/s/{_digest(self.seed, path, 'b')}/other"), home)
        n = int(m.group(1))  # deep
        return mk(Link(None, f"/deep/{n + 1}"), Link(None, f"/deep/{2 * n + 1}"), home)

    # ------------------------------------------------------------------ special hosts

    def _build_specials(self) -> dict[str, _Site]:
        sites: dict[str, _Site] = {}
        prof = self.profile

        def site(behaviour: str, spec: dict[str, object], **kw: object) -> _Site:
            host = f"{behaviour}.{_DOMAIN}"
            pages: dict[str, Page] = {}
            for n, (path, val) in enumerate(spec.items()):
                if isinstance(val, Page):
                    pages[path] = val
                    continue
                links = tuple(
                    t if isinstance(t, Link) else Link(None, t, SELF_SPELLINGS[(n + m) % len(SELF_SPELLINGS)])
                    for m, t in enumerate(val)  # type: ignore[union-attr]
                )
                pages[path] = Page(host, path, links=links)
            s = _Site(host, behaviour, pages, **kw)  # type: ignore[arg-type]
            sites[host] = s
            return s

        def pg(behaviour: str, path: str, **kw: object) -> Page:
            return Page(f"{behaviour}.{_DOMAIN}", path, **kw)  # type: ignore[arg-type]

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
        dest = f"redirect-dest.{_DOMAIN}"

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
                      "trap-session": ("session-id", f"/s/{_digest(self.seed, 'session')}/page"),
                      "trap-facets": ("faceted-search", "/shop"), "trap-deep": ("deep", "/deep/1")}
        for behaviour, (kind, entry) in trap_kinds.items():
            site(behaviour, {"/": [Link(None, entry, "relative" if kind == "path-repetition" else "root-relative")]},
                 trap=kind)
        if prof.hosts > _MIRROR_ORIGIN:
            site("mirror", {})
        nd: dict[str, object] = {"/": [f"/v/{k}" for k in range(1, 6)]}
        for k, page in enumerate(self._near_duplicates(f"near-dup.{_DOMAIN}"), 1):
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
        return sites

    def _near_duplicates(self, host: str, count: int = 5) -> list[Page]:
        """``count`` pages with one text, differing only in a view counter in the footer.

        A single changed token flips a SimHash bit wherever the other features' votes
        nearly cancel, so for a ~300-word text a few pairs in a hundred land 4-8 bits
        apart. The counters are therefore chosen, deterministically, so that every pair
        is within distance 3 under the crawler's own ``crawler.dedup.simhash64`` of the
        visible text (fixed counters if that module is missing).
        """
        def make(n: int) -> Page:
            return Page(host, "/v/", links=(Link(None, "/"),), text_key="near-dup/v",
                        footer=f"Rendered on 2024-01-05. Page views: {n}")

        try:
            from crawler.dedup import hamming, simhash64
        except ImportError:
            chosen = [1000 + 37 * k for k in range(count)]
        else:
            chosen, fps = [], []
            for n in range(1000, 1400):
                body = self._render(make(n)).decode()
                text = html.unescape(re.sub(r"<[^>]*>", " ", body[body.index("<body>"):]))
                fp = simhash64(text)
                if all(hamming(fp, f) <= 3 for f in fps):
                    chosen.append(n)
                    fps.append(fp)
                    if len(chosen) == count:
                        break
        return [Page(host, f"/v/{k}", links=(Link(None, "/"),), text_key="near-dup/v",
                     footer=f"Rendered on 2024-01-05. Page views: {n}") for k, n in enumerate(chosen, 1)]

    # ----------------------------------------------------------------------- replies

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        """The response to the ``attempt``-th request for ``host`` + ``path_qs`` (raw target).

        ``host`` is the Host header without port. The target is canonicalized first, as a
        real server would decode escapes and ignore unknown parameters.
        """
        host = host.lower()
        canon = canonical_path_qs(path_qs)
        path = canon.partition("?")[0]
        site = self._specials.get(host)
        if site is None and self._normal_index(host) is None:
            return _small(404, f"unknown host {host!r}")
        if path == "/robots.txt" or (path == "/robots-real.txt" and site is not None and site.robots_status == 301):
            return self._robots(site, path)
        page = self.page(host, canon)
        if page is None:
            return _small(404, "no such page")
        kind = page.kind
        if kind == "redirect":
            th, tp = page.target  # type: ignore[misc]
            loc = tp if page.location_relative else self.url(th or host, tp)
            return Reply(page.status, (("Location", loc), ("Content-Type", _HTML)),
                         f'<a href="{html.escape(loc)}">moved</a>'.encode())
        if kind == "status":
            return _small(page.status, "not found" if page.status == 404 else "forbidden")
        if kind == "down" or (kind == "flaky-503" and attempt <= 1):
            return _small(503, "temporarily unavailable")
        if kind == "flaky-429" and attempt <= 1:
            return Reply(429, (("Content-Type", _HTML), ("Retry-After", "1")), b"<p>slow down</p>")
        if kind == "binary":
            return Reply(200, (("Content-Type", "image/png"),), self._cached(page, False, self._png))
        if kind in ("oversized", "oversized-chunked"):
            body = self._cached(Page(page.host, "/big"), False, self._oversized)
            return Reply(200, (("Content-Type", _HTML),), body, chunk_size=65536 if kind == "oversized-chunked" else 0)
        ctype = "text/html; charset=windows-1251" if kind == "cp1251" else _HTML
        if site is not None and site.gzip and accept_gzip:
            body = self._cached(page, True, self._render)
            return Reply(200, (("Content-Type", ctype), ("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")), body)
        headers = (("Content-Type", ctype),) + ((("Vary", "Accept-Encoding"),) if site is not None and site.gzip else ())
        return Reply(200, headers, self._cached(page, False, self._render),
                     delay=self.profile.stall_seconds if kind == "stall" else 0.0)

    def _robots(self, site: _Site | None, path: str) -> Reply:
        if site is None:
            return Reply(200, (("Content-Type", _TEXT),), b"User-agent: *\nDisallow:\n")
        if site.robots_status == 301:
            if path == "/robots.txt":
                return Reply(301, (("Location", self.url(site.host, "/robots-real.txt")), ("Content-Type", _TEXT)), b"moved")
            return Reply(200, (("Content-Type", _TEXT),), (site.robots or "").encode())
        if site.robots_status != 200:
            return _small(site.robots_status, "robots.txt unavailable")
        return Reply(200, (("Content-Type", _TEXT),), (site.robots or "").encode())

    def _cached(self, page: Page, gz: bool, render: Callable[[Page], bytes]) -> bytes:
        """A rendered body from the LRU cache (bounded by ``profile.cache_pages``)."""
        key = (page.host, page.path_qs, gz)
        with self._lock:
            body = self._bodies.get(key)
            if body is not None:
                self._bodies.move_to_end(key)
                return body
        body = render(page)
        if gz:
            body = gzip.compress(body, compresslevel=6, mtime=0)  # mtime=0: deterministic bytes
        with self._lock:
            self._bodies[key] = body
            while len(self._bodies) > self.profile.cache_pages:
                self._bodies.popitem(last=False)
        return body

    def body(self, host: str, path_qs: str) -> bytes | None:
        """The uncompressed 200 body of a page (None for non-pages, redirects, errors)."""
        page = self.page(host.lower(), canonical_path_qs(path_qs))
        if page is None or page.kind in ("redirect", "status", "down"):
            return None
        if page.kind == "binary":
            return self._cached(page, False, self._png)
        if page.kind.startswith("oversized"):
            return self._cached(Page(page.host, "/big"), False, self._oversized)
        return self._cached(page, False, self._render)

    # --------------------------------------------------------------------- rendering

    def _href(self, link: Link, serve_host: str, base_dir: str) -> str:
        host = link.host or serve_host
        path = link.path_qs
        sp = link.spelling
        net = self.netloc(host)
        if sp == "absolute":
            return f"http://{net}{path}"
        if sp == "scheme-relative":
            return f"//{net}{path}"
        if sp == "upper-case":
            return f"HTTP://{net.upper()}{path}"
        if sp == "relative":
            return _relative(base_dir, path)
        if sp == "dot-relative":
            return "./" + _relative(base_dir, path)
        if sp == "parent-relative":
            return "../" * max(1, base_dir.count("/") - 1) + path[1:]
        if sp == "raw-unicode":
            return unquote(path)
        prefix = f"http://{net}" if link.host else ""
        if sp == "fragment":
            return f"{prefix}{path}#section-{len(path) % 7}"
        if sp == "tracking":
            return f"{prefix}{path}{'&' if '?' in path else '?'}utm_source=x&utm_medium=y"
        if sp == "percent-escape":
            return prefix + _escape_unreserved(path)
        if sp == "whitespace":
            cut = path.find("/", 1) + 1 or len(path)
            return f"\n \t{prefix}{path[:cut]}\n{path[cut:]}  \n"
        return path  # root-relative

    def _render(self, page: Page) -> bytes:
        """The HTML bytes of an html-like page (deterministic)."""
        key = page.text_key or page.host + page.path_qs
        rng = Random(f"{self.seed}|text|{key}")
        cyr = page.kind == "cp1251"
        vocab = _RU_WORDS if cyr else _vocab()
        words = _draw(rng, vocab, rng.randint(*self.profile.words))
        anchor_words = _draw(rng, vocab, 2 * len(page.links))
        title = " ".join(words[:4]).capitalize()
        if page.trap == "faceted-search":
            words = words + ["showing"] + page.path_qs.partition("?")[2].replace("&", " ").replace("=", " ").split()
        elif page.trap:
            words = words + page.path_qs.strip("/").split("/")
        serve = page.host
        base_dir = "/"
        head = ["<!DOCTYPE html>\n<html lang=\"ru\">" if cyr else "<!DOCTYPE html>\n<html lang=\"en\">", "<head>"]
        if not cyr:
            head.append('<meta charset="utf-8">')
        head.append(f"<title>{title}</title>")
        if page.base:
            base_dir = page.base[: page.base.rfind("/") + 1]
            href = self.url(serve, page.base) if page.base_absolute else page.base
            head.append(f'<base href="{html.escape(href)}">')
        else:
            base_dir = page.path_qs.partition("?")[0]
            base_dir = base_dir[: base_dir.rfind("/") + 1]
        if page.meta_nofollow:
            head.append('<meta name="robots" content="index, nofollow">')
        head.append("</head>\n<body>\n<h1 id=\"top\">" + title + "</h1>")
        anchors: list[str] = []
        areas: list[str] = []
        rels = ("nofollow", "nofollow noopener", "NoFollow", "ugc nofollow")
        for n, link in enumerate(page.links if page.kind != "malformed" else ()):
            href = html.escape(self._href(link, serve, base_dir), quote=True)
            rel = f' rel="{rels[n % len(rels)]}"' if link.nofollow else ""
            if link.area:
                areas.append(f'<area shape="rect" coords="0,{n * 10},40,{n * 10 + 10}" href="{href}"{rel} alt="{words[n % len(words)]}">')
            else:
                text = f"{anchor_words[2 * n]} {anchor_words[2 * n + 1]}"
                anchors.append(f'<a href="{href}"{rel}>{text}</a>')
        for name in page.junk:
            anchors.append(f'<a href="{html.escape(JUNK_HREFS[name], quote=True)}">{name}</a>')
        if not page.base and page.kind == "html":
            anchors.append('<a href="#top">top</a>')
        paras = max(1, len(words) // 60)
        step = -(-len(words) // paras)
        per = -(-len(anchors) // paras) if anchors else 0
        body = []
        for p in range(paras):
            chunk = " ".join(words[p * step:(p + 1) * step])
            extra = " ".join(anchors[p * per:(p + 1) * per])
            body.append(f"<p>{chunk} {extra}</p>" if extra else f"<p>{chunk}</p>")
        if areas:
            body.append('<map name="nav">' + "".join(areas) + "</map>")
        if page.footer:
            body.append(f"<footer><p>{page.footer}</p></footer>")
        doc = "\n".join(head + body) + "\n</body>\n</html>\n"
        if page.kind == "malformed":
            return _malformed(doc)
        return doc.encode("windows-1251" if cyr else "utf-8")

    def _png(self, page: Page) -> bytes:
        rng = Random(f"{self.seed}|png|{page.host}{page.path_qs}")
        w = h = 16
        raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(w * 3)) for _ in range(h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"tEXt", b'Comment\x00<a href="/from-png">not a link</a>')
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    def _oversized(self, page: Page) -> bytes:
        rng = Random(f"{self.seed}|big")
        para = ("<p>" + " ".join(_draw(rng, _vocab(), 2000)) + "</p>\n").encode()
        head = b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Oversized</title></head><body>\n'
        tail = b'<p><a href="/after-big">after the limit</a></p></body></html>\n'
        reps = -(-(self.profile.oversized_bytes - len(head) - len(tail)) // len(para))
        return head + para * reps + tail

    # ------------------------------------------------------------------- ground truth

    def _blocked(self, host: str, path_qs: str) -> str | None:
        site = self._specials.get(host)
        if site is None:
            return None
        path = path_qs.partition("?")[0]
        if path == "/robots.txt" or (path == "/robots-real.txt" and site.robots_status == 301):
            return None
        for prefix, reason in site.blocked:
            if path.startswith(prefix):
                return reason
        return None

    def _walk(self, follow_rel_nofollow: bool = False) -> dict[tuple[str, str], int]:
        """Breadth-first walk from the seeds: node -> depth (link hops; a redirect is one)."""
        with self._lock:
            got = self._walks.get(follow_rel_nofollow)
        if got is not None:
            return got
        depth: dict[tuple[str, str], int] = {}
        queue: deque[tuple[str, str]] = deque()
        for i in range(min(3, self.profile.hosts)):
            node = (self.normal_host(i), "/")
            depth[node] = 0
            queue.append(node)
        while queue:
            node = queue.popleft()
            host, path_qs = node
            page = self.page(host, path_qs)
            if page is None or page.trap or self._blocked(host, path_qs) or page.kind in _LEAF_KINDS:
                continue
            if page.kind == "redirect":
                children: Iterable[tuple[str | None, str]] = (page.target,)  # type: ignore[assignment]
            elif page.meta_nofollow:
                continue
            else:
                children = ((lk.host, lk.path_qs) for lk in page.links if follow_rel_nofollow or not lk.nofollow)
            d = depth[node] + 1
            for th, tp in children:
                child = (th or host, tp)
                if child not in depth:
                    depth[child] = d
                    queue.append(child)
        with self._lock:
            self._walks[follow_rel_nofollow] = depth
        return depth

    def _fetch_once(self, follow_rel_nofollow: bool) -> dict[tuple[str, str], int]:
        """The walk restricted to URLs requested exactly once: node -> depth (memoized)."""
        with self._lock:
            got = self._once.get(follow_rel_nofollow)
        if got is not None:
            return got
        out = {}
        for (host, path_qs), d in self._walk(follow_rel_nofollow).items():
            page = self.page(host, path_qs)
            if page is None or page.trap or page.kind in _FAILURE_KINDS or self._blocked(host, path_qs):
                continue
            out[(host, path_qs)] = d
        with self._lock:
            self._once[follow_rel_nofollow] = out
        return out

    def must_fetch(self, *, max_depth: int | None = None, follow_rel_nofollow: bool = False) -> set[str]:
        """Canonical URLs a correct crawler requests exactly once (see module doc).

        Reachable pages, robots-allowed, not only behind nofollow, outside trap spaces;
        this includes redirects (each hop once), 404/403 pages, the binary and the
        oversized bodies. Retried failures are in :meth:`failure_urls` instead.

        With ``max_depth``, only pages whose *shortest* path from a seed has at most that
        many hops (a redirect counts one). A crawler keeps the depth at which it first
        discovered a URL, which can be longer, so this is exact only for a breadth-first
        crawl; end-to-end tests crawl with a generous depth (see ``crawl_config_for``).
        """
        return {self.url(h, p) for (h, p), d in self._fetch_once(follow_rel_nofollow).items()
                if max_depth is None or d <= max_depth}

    def depth(self, url: str, *, follow_rel_nofollow: bool = False) -> int | None:
        """Hops from the nearest seed, or None if the walk never reaches ``url``."""
        node = self.split(url)
        return None if node is None else self._walk(follow_rel_nofollow).get(node)

    def required_depth(self) -> int:
        """The largest shortest-path depth in :meth:`must_fetch` (a breadth-first crawl with
        ``limits.max_depth`` at least this fetches all of it)."""
        return max(max(self._fetch_once(f).values()) for f in (False, True))

    def max_pages_on_host(self) -> int:
        """Most URLs a non-trap host needs fetched (size ``limits.max_pages_per_host`` above it)."""
        count: dict[str, int] = {}
        for host, _ in self._walk(True):
            count[host] = count.get(host, 0) + 1
        traps = self.trap_hosts()
        return max(n for h, n in count.items() if h not in traps)

    def failure_urls(self) -> dict[str, str]:
        """Reachable URLs that fail at first: url -> flaky-503 | flaky-429 | down | stall."""
        if self._failures is None:
            found = {}
            for host, path_qs in self._walk(False):
                page = self.page(host, path_qs)
                if page is not None and page.kind in _FAILURE_KINDS and not self._blocked(host, path_qs):
                    found[(host, path_qs)] = page.kind
            self._failures = found
        return {self.url(*node): kind for node, kind in self._failures.items()}

    def robots_blocked_urls(self) -> set[str]:
        """Discovered URLs robots.txt forbids (a crawler records them as robots_blocked)."""
        return {self.url(h, p) for h, p in self._walk(False) if self._blocked(h, p)}

    def must_not_fetch(self, host_or_url: str, path_qs: str | None = None, *,
                       follow_rel_nofollow: bool = False) -> str | None:
        """Why a request must never happen, or None if it may.

        Call with a URL, or with the (host, raw path_qs) of a server log record. Flags
        unknown hosts, non-canonical request targets (escaped unreserved characters,
        dot segments, tracking parameters), robots-disallowed paths, paths no link leads
        to, and pages linked only where a correct crawler does not follow.
        """
        if path_qs is None:
            try:
                parts = urlsplit(host_or_url)
                host = (parts.hostname or "").lower()
            except ValueError:
                return f"{host_or_url!r} is not a URL"
            path_qs = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        else:
            host = host_or_url.lower().rsplit(":", 1)[0] if host_or_url.count(":") == 1 else host_or_url.lower()
        if self._normal_index(host) is None and host not in self._specials:
            return f"unknown host {host!r}: no link in the synthetic web leads there"
        canon = canonical_path_qs(path_qs)
        if canon != path_qs:
            return f"request target {path_qs!r} is not canonical (expected {canon!r})"
        if path_qs == "/robots.txt":
            return None
        if path_qs == "/robots-real.txt" and host in self._specials and self._specials[host].robots_status == 301:
            return None
        if path_qs.startswith(_NUL_PREFIX):
            # The HTML parser turns a NUL in an attribute into U+FFFD (WHATWG tokenizer),
            # and a browser follows that link; a crawler may too (the server answers 404).
            return None
        reason = self._blocked(host, path_qs)
        if reason:
            return reason
        page = self.page(host, path_qs)
        if page is None:
            return f"no page at {path_qs!r} on {host} and no link leads there (a link was resolved wrongly?)"
        if page.trap:
            return None
        if (host, path_qs) not in self._walk(follow_rel_nofollow):
            return page.hidden or "not reachable from the seeds through followable links"
        return None

    def expected_requests(self, url: str, attempts: int = 3) -> int | None:
        """How many requests a correct crawler sends for ``url`` (``attempts``: fetch.attempts).

        1 for :meth:`must_fetch` URLs, 2 for 503-once and 429-once, ``attempts`` for
        always-503 and the stalling page (timeouts are retried), 0 if it must not be
        fetched; None when it is not determined (trap pages, depth-limited pages).
        """
        node = self.split(url)
        if node is None:
            return None
        self.failure_urls()
        kind = (self._failures or {}).get(node)
        if kind in ("flaky-503", "flaky-429"):
            return 2
        if kind in ("down", "stall"):
            return attempts
        if node in self._fetch_once(False):
            return 1
        if self.must_not_fetch(self.url(*node)) is not None:
            return 0
        return None

    def retry_after(self, url: str) -> float | None:
        """Seconds the server asks to wait before the second request (429-once), else None."""
        node = self.split(url)
        page = self.page(*node) if node else None
        return 1.0 if page is not None and page.kind == "flaky-429" else None

    def expected_outcome(self, url: str) -> str | None:
        """The row status a correct crawler ends ``url`` with (DESIGN.md invariant 5).

        fetched | redirect | http_error | failed | robots_blocked, or None if not determined.
        The oversized bodies are ``fetched`` with ``truncated`` set (cut at limits.max_body_bytes).
        """
        node = self.split(url)
        if node is None:
            return None
        page = self.page(*node)
        if page is None or node not in self._walk(False) or page.trap:
            return None
        if self._blocked(*node):
            return "robots_blocked"
        return {"redirect": "redirect", "status": "http_error", "down": "http_error", "stall": "failed"}.get(page.kind, "fetched")

    def trap_hosts(self) -> dict[str, str]:
        """Trap host -> calendar | path-repetition | session-id | faceted-search | deep."""
        return {h: s.trap for h, s in self._specials.items() if s.trap}

    def mirror_pairs(self) -> list[tuple[str, str]]:
        """(origin URL, mirror URL) pairs served with byte-identical bodies, both must-fetch."""
        if f"mirror.{_DOMAIN}" not in self._specials:
            return []
        got = self._fetch_once(False)
        origin = self.normal_host(_MIRROR_ORIGIN)
        return sorted((self.url(origin, p), self.url(f"mirror.{_DOMAIN}", p))
                      for h, p in got if h == origin and (f"mirror.{_DOMAIN}", p) in got)

    def near_duplicate_groups(self) -> list[set[str]]:
        """Groups of must-fetch pages whose visible text differs only in a footer line."""
        if f"near-dup.{_DOMAIN}" not in self._specials:
            return []
        return [{self.url(f"near-dup.{_DOMAIN}", f"/v/{k}") for k in range(1, 6)}]

    def robots_delay_hosts(self) -> dict[str, float]:
        """Host -> Crawl-delay (seconds) its robots.txt sets."""
        h = f"robots-delay.{_DOMAIN}"
        return {h: self.profile.crawl_delay} if h in self._specials else {}


# --------------------------------------------------------------------------- helpers


def _small(status: int, text: str) -> Reply:
    return Reply(status, (("Content-Type", _HTML),), f"<!DOCTYPE html><title>{status}</title><p>{text}</p>\n".encode())


def _query(params: dict[str, str]) -> str:
    # Sorted keys: a crawler that sorts query parameters sends the same bytes.
    return "&".join(f"{k}={params[k]}" for k in sorted(params))


def _relative(base_dir: str, path_qs: str) -> str:
    """A relative reference from directory ``base_dir`` (ends in '/') to ``path_qs``."""
    path, sep, query = path_qs.partition("?")
    rel = posixpath.relpath(path, base_dir)
    if rel == ".":
        rel = "./"
    elif path.endswith("/"):
        rel += "/"
    if ":" in rel.split("/", 1)[0]:  # would read as a scheme (RFC 3986 4.2)
        rel = "./" + rel
    return rel + sep + query


def _escape_unreserved(path: str) -> str:
    """Percent-encode the first unreserved character of each segment (mixed hex case)."""
    out = []
    for n, seg in enumerate(path.split("/")):
        if seg and seg[0] in _UNRESERVED and seg[0] != ".":
            code = f"{ord(seg[0]):02X}" if n % 2 else f"{ord(seg[0]):02x}"
            seg = "%" + code + seg[1:]
        out.append(seg)
    return "/".join(out)


def _malformed(doc: str) -> bytes:
    """Broken HTML around one good link: unclosed and mis-nested tags, invalid UTF-8,
    an unquoted attribute, links inside <script> text and a comment (not links), and an
    unterminated comment at the end."""
    start = doc.index("<body>") + len("<body>")
    body = doc[start:doc.rindex("</body>")]
    mid = len(body) // 2
    return (
        doc[:start].replace("</head>", "").encode()
        + b"\n<div><p>unclosed <span><b><i>mis-nested</b></i> \xff\xfe\x80 bad bytes \xc3\x28 \xed\xa0\x80"
        + body[:mid].encode()
        + b"\n<table><tr><td>cell<td>cell<tr><td>row"
        + b"\n<p>go to <a href=/broken-target class=x>the target</a> then <a href='/'>home</a>"
        + b"\n<script>var s = '<a href=\"/in-script\">x</a>'; if (1 < 2) {}</script>"
        + b'\n<!-- <a href="/in-comment">hidden</a> -->'
        + body[mid:].encode()
        + b"\n</span></div></div></div></p></i>\n<!-- unterminated comment <a href=\"/in-comment\">"
    )
