"""A deterministic synthetic multi-host web, and the ground truth of crawling it.

Every end-to-end test, the demo and the benchmarks crawl this web (served by
:mod:`crawler.testing.server`). It is pure: no sockets, no clocks, no global state. The
graph and every byte served follow from ``seed`` (and the bound port, which appears in
absolute links).

Hosts are names under the reserved ``.test`` TLD (RFC 2606), so a crawler reaches them
only through its ``fetch.resolve: {"*.test": "127.0.0.1"}`` override:

* normal hosts ``h0000.web.test`` ... with pages ``/`` and ``/p/<n>``
  (:mod:`crawler.testing.graph`). Links are written in every spelling a crawler must
  canonicalize to one URL (:data:`SPELLINGS`) plus hrefs that are not pages at all
  (:data:`JUNK_HREFS`).
* special hosts ``<behaviour>.web.test`` (:data:`SPECIAL_BEHAVIOURS`), one per behaviour
  so a test can assert per host: robots.txt variants, retries, redirects, traps,
  duplicates and awkward content (the table is in :mod:`crawler.testing.sites`). Each is
  linked from a normal host's root.

:class:`SyntheticWeb` puts the parts together: the link graph
(:class:`~crawler.testing.graph.WebGraph`), the bytes
(:class:`~crawler.testing.render.PageRenderer`), the HTTP replies (here) and the ground
truth (:class:`~crawler.testing.truth.GroundTruth`, whose answers it also offers as its
own methods). Values and constants live in :mod:`crawler.testing.webtypes` and are
re-exported here.
"""

from __future__ import annotations

import gzip
import html
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Callable

from crawler.errors import ConfigError
from crawler.testing.graph import WebGraph
from crawler.testing.render import PageRenderer
from crawler.testing.sites import Site
from crawler.testing.truth import GroundTruth
from crawler.testing.webtypes import (
    CROSS_SPELLINGS,
    DOMAIN,
    HTML_TYPE,
    JUNK_HREFS,
    PROFILES,
    RELATIVE_SPELLINGS,
    SELF_SPELLINGS,
    SPECIAL_BEHAVIOURS,
    SPELLINGS,
    TEXT_TYPE,
    TRACKING_PARAMS,
    USER_AGENT,
    Link,
    Page,
    Profile,
    Reply,
    canonical_path_qs,
    split_url,
)

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
    "SyntheticWeb",
    "TRACKING_PARAMS",
    "USER_AGENT",
    "canonical_path_qs",
]


class SyntheticWeb:
    """A deterministic multi-host web: pages, replies and ground truth (see module doc).

    ``profile`` is one of :data:`PROFILES`; ``hosts`` and ``pages_per_host`` override the
    profile's number of normal hosts and pages per host. URLs carry the port given to
    :meth:`bind` (the server calls it); before that they have none.

    ``graph``, ``renderer`` and ``truth`` are the parts (see the module doc).
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
        self._lock = threading.Lock()
        self._bodies: OrderedDict[tuple[str, str, bool], bytes] = OrderedDict()
        self.renderer = PageRenderer(seed, prof, self.netloc)
        self.graph = WebGraph(seed, prof, self.renderer.html)
        self.truth = GroundTruth(self.graph, self.url)  # port-free: bind() keeps its walks

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
        return self.graph.normal_host(i)

    def host_for(self, behaviour: str) -> str:
        """Host of a special behaviour, e.g. ``host_for("robots-500")``."""
        if behaviour not in SPECIAL_BEHAVIOURS:
            raise KeyError(f"unknown behaviour {behaviour!r}; see SPECIAL_BEHAVIOURS")
        return f"{behaviour}.{DOMAIN}"

    def hosts(self) -> list[str]:
        """Every host name served (normal, then special)."""
        return [self.normal_host(i) for i in range(self.profile.hosts)] + list(self.graph.sites)

    def special_hosts(self) -> dict[str, str]:
        """Special host -> behaviour."""
        return {h: s.behaviour for h, s in self.graph.sites.items()}

    def seeds(self) -> list[str]:
        """Entry URLs from which everything in :meth:`must_fetch` is reachable."""
        return [self.url(h) for h in self.graph.seed_hosts()]


    def split(self, url: str) -> tuple[str, str] | None:
        """(lower-case host, canonical path_qs) of a URL, or None if it does not parse."""
        return split_url(url)

    def page(self, host: str, path_qs: str) -> Page | None:
        """What is served at ``host`` + canonical ``path_qs`` (None: 404)."""
        return self.graph.page(host, path_qs)

    # ----------------------------------------------------------------------- replies

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        """The response to the ``attempt``-th request for ``host`` + ``path_qs`` (raw target).

        ``host`` is the Host header without port. The target is canonicalized first, as a
        real server would decode escapes and ignore unknown parameters.
        """
        host = host.lower()
        canon = canonical_path_qs(path_qs)
        path = canon.partition("?")[0]
        site = self.graph.sites.get(host)
        if site is None and self.graph.normal_index(host) is None:
            return _small(404, f"unknown host {host!r}")
        if path == "/robots.txt" or (path == "/robots-real.txt" and site is not None and site.robots_status == 301):
            return self._robots(site, path)
        page = self.page(host, canon)
        if page is None:
            return _small(404, "no such page")
        kind = page.kind
        if kind == "redirect":
            th, tp = page.target  # type: ignore[misc]  # a redirect's target is a (host, path) pair
            loc = tp if page.location_relative else self.url(th or host, tp)
            return Reply(page.status, (("Location", loc), ("Content-Type", HTML_TYPE)),
                         f'<a href="{html.escape(loc)}">moved</a>'.encode())
        if kind == "status":
            return _small(page.status, "not found" if page.status == 404 else "forbidden")
        if kind == "down" or (kind == "flaky-503" and attempt <= 1):
            return _small(503, "temporarily unavailable")
        if kind == "flaky-429" and attempt <= 1:
            return Reply(429, (("Content-Type", HTML_TYPE), ("Retry-After", "1")), b"<p>slow down</p>")
        if kind == "binary":
            return Reply(200, (("Content-Type", "image/png"),), self._cached(page, False, self.renderer.png))
        if kind in ("oversized", "oversized-chunked"):
            body = self._cached(Page(page.host, "/big"), False, self.renderer.oversized)
            return Reply(200, (("Content-Type", HTML_TYPE),), body, chunk_size=65536 if kind == "oversized-chunked" else 0)
        ctype = "text/html; charset=windows-1251" if kind == "cp1251" else HTML_TYPE
        if site is not None and site.gzip and accept_gzip:
            body = self._cached(page, True, self.renderer.html)
            return Reply(200, (("Content-Type", ctype), ("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")), body)
        headers = (("Content-Type", ctype),) + ((("Vary", "Accept-Encoding"),) if site is not None and site.gzip else ())
        return Reply(200, headers, self._cached(page, False, self.renderer.html),
                     delay=self.profile.stall_seconds if kind == "stall" else 0.0)

    def _robots(self, site: Site | None, path: str) -> Reply:
        if site is None:
            return Reply(200, (("Content-Type", TEXT_TYPE),), b"User-agent: *\nDisallow:\n")
        if site.robots_status == 301:
            if path == "/robots.txt":
                return Reply(301, (("Location", self.url(site.host, "/robots-real.txt")), ("Content-Type", TEXT_TYPE)), b"moved")
            return Reply(200, (("Content-Type", TEXT_TYPE),), (site.robots or "").encode())
        if site.robots_status != 200:
            return _small(site.robots_status, "robots.txt unavailable")
        return Reply(200, (("Content-Type", TEXT_TYPE),), (site.robots or "").encode())

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
            return self._cached(page, False, self.renderer.png)
        if page.kind.startswith("oversized"):
            return self._cached(Page(page.host, "/big"), False, self.renderer.oversized)
        return self._cached(page, False, self.renderer.html)

    # ------------------------------------------------------------------- ground truth
    # The answers of self.truth (crawler.testing.truth.GroundTruth), where tests ask them.

    def must_fetch(self, *, max_depth: int | None = None, follow_rel_nofollow: bool = False) -> set[str]:
        """Canonical URLs a correct crawler requests exactly once (:meth:`GroundTruth.must_fetch`)."""
        return self.truth.must_fetch(max_depth=max_depth, follow_rel_nofollow=follow_rel_nofollow)

    def depth(self, url: str, *, follow_rel_nofollow: bool = False) -> int | None:
        """Hops from the nearest seed, or None if the walk never reaches ``url``."""
        return self.truth.depth(url, follow_rel_nofollow=follow_rel_nofollow)

    def required_depth(self) -> int:
        """The largest shortest-path depth in :meth:`must_fetch`."""
        return self.truth.required_depth()

    def max_pages_on_host(self) -> int:
        """Most URLs a non-trap host needs fetched."""
        return self.truth.max_pages_on_host()

    def failure_urls(self) -> dict[str, str]:
        """Reachable URLs that fail at first: url -> flaky-503 | flaky-429 | down | stall."""
        return self.truth.failure_urls()

    def robots_blocked_urls(self, *, follow_rel_nofollow: bool = False) -> set[str]:
        """Reachable URLs robots.txt forbids (:meth:`GroundTruth.robots_blocked_urls`)."""
        return self.truth.robots_blocked_urls(follow_rel_nofollow=follow_rel_nofollow)

    def must_not_fetch(self, host_or_url: str, path_qs: str | None = None, *,
                       follow_rel_nofollow: bool = False) -> str | None:
        """Why a request must never happen, or None if it may (:meth:`GroundTruth.must_not_fetch`)."""
        return self.truth.must_not_fetch(host_or_url, path_qs, follow_rel_nofollow=follow_rel_nofollow)

    def expected_requests(self, url: str, attempts: int = 3) -> int | None:
        """How many requests a correct crawler sends for ``url`` (:meth:`GroundTruth.expected_requests`)."""
        return self.truth.expected_requests(url, attempts)

    def retry_after(self, url: str) -> float | None:
        """Seconds the server asks to wait before the second request (429-once), else None."""
        return self.truth.retry_after(url)

    def expected_outcome(self, url: str) -> str | None:
        """The row status a correct crawler ends ``url`` with (:meth:`GroundTruth.expected_outcome`)."""
        return self.truth.expected_outcome(url)

    def trap_hosts(self) -> dict[str, str]:
        """Trap host -> calendar | path-repetition | session-id | faceted-search | deep."""
        return self.truth.trap_hosts()

    def mirror_pairs(self) -> list[tuple[str, str]]:
        """(origin URL, mirror URL) pairs served with byte-identical bodies, both must-fetch."""
        return self.truth.mirror_pairs()

    def near_duplicate_groups(self) -> list[set[str]]:
        """Groups of must-fetch pages whose visible text differs only in a footer line."""
        return self.truth.near_duplicate_groups()

    def chrome_duplicate_groups(self) -> list[set[str]]:
        """Groups of 4 copies of one article differing only in footer, nav and aside
        (:meth:`GroundTruth.chrome_duplicate_groups`)."""
        return self.truth.chrome_duplicate_groups()

    def robots_delay_hosts(self) -> dict[str, float]:
        """Host -> Crawl-delay (seconds) its robots.txt sets."""
        return self.truth.robots_delay_hosts()


def _small(status: int, text: str) -> Reply:
    return Reply(status, (("Content-Type", HTML_TYPE),), f"<!DOCTYPE html><title>{status}</title><p>{text}</p>\n".encode())
