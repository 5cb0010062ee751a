"""The ground truth of crawling the synthetic web: what a correct crawler requests, and why.

Computed by a breadth-first walk over the *abstract* link graph
(:class:`~crawler.testing.graph.WebGraph`, not the HTML), with the rules of a correct
crawler: RFC 9309 robots, ``<meta name=robots content=nofollow>`` honoured,
``rel=nofollow`` links not followed unless ``urls.follow_rel_nofollow`` is true, a
redirect treated as a link to its ``Location`` (one request per redirect URL: the
crawler records a ``redirect`` row and enqueues the target; it does not follow
redirects inside one fetch), trap spaces not expanded. ``tests/unit/test_synthetic_web.py``
checks the walk against the served HTML parsed independently.

The walk is port-free (it is kept when the server binds); answers are URLs written with
the web's current port, through the ``url`` function the web passes in.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterable
from urllib.parse import urlsplit

from crawler.testing.graph import WebGraph
from crawler.testing.webtypes import DOMAIN, FAILURE_KINDS, LEAF_KINDS, MIRROR_ORIGIN, NUL_PREFIX, canonical_path_qs, split_url

__all__ = ["GroundTruth"]

Node = tuple[str, str]  # (host, canonical path_qs)


class GroundTruth:
    """Answers about crawling ``graph`` (see the module doc); URLs are built by ``url``."""

    def __init__(self, graph: WebGraph, url: Callable[[str, str], str]) -> None:
        self.graph = graph
        self.url = url
        self._lock = threading.Lock()
        self._walks: dict[bool, dict[Node, int]] = {}
        self._once: dict[bool, dict[Node, int]] = {}
        self._failures: dict[Node, str] | None = None

    def _blocked(self, host: str, path_qs: str) -> str | None:
        site = self.graph.sites.get(host)
        if site is None:
            return None
        path = path_qs.partition("?")[0]
        if path == "/robots.txt" or (path == "/robots-real.txt" and site.robots_status == 301):
            return None
        for prefix, reason in site.blocked:
            if path.startswith(prefix):
                return reason
        return None

    def _walk(self, follow_rel_nofollow: bool = False) -> dict[Node, int]:
        """Breadth-first walk from the seeds: node -> depth (link hops; a redirect is one)."""
        with self._lock:
            got = self._walks.get(follow_rel_nofollow)
        if got is not None:
            return got
        depth: dict[Node, int] = {}
        queue: deque[Node] = deque()
        for host in self.graph.seed_hosts():
            node = (host, "/")
            depth[node] = 0
            queue.append(node)
        while queue:
            node = queue.popleft()
            host, path_qs = node
            page = self.graph.page(host, path_qs)
            if page is None or page.trap or self._blocked(host, path_qs) or page.kind in LEAF_KINDS:
                continue
            if page.kind == "redirect":
                children: Iterable[tuple[str | None, str]] = (page.target,)  # type: ignore[assignment]  # a redirect's target is a (host, path) pair
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

    def _fetch_once(self, follow_rel_nofollow: bool) -> dict[Node, int]:
        """The walk restricted to URLs requested exactly once: node -> depth (memoized)."""
        with self._lock:
            got = self._once.get(follow_rel_nofollow)
        if got is not None:
            return got
        out = {}
        for (host, path_qs), d in self._walk(follow_rel_nofollow).items():
            page = self.graph.page(host, path_qs)
            if page is None or page.trap or page.kind in FAILURE_KINDS or self._blocked(host, path_qs):
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
        node = split_url(url)
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
                page = self.graph.page(host, path_qs)
                if page is not None and page.kind in FAILURE_KINDS and not self._blocked(host, path_qs):
                    found[(host, path_qs)] = page.kind
            self._failures = found
        return {self.url(*node): kind for node, kind in self._failures.items()}

    def robots_blocked_urls(self, *, follow_rel_nofollow: bool = False) -> set[str]:
        """Reachable URLs robots.txt forbids: each is linked from (or redirected to by) a
        page a correct crawler fetches, so it must end as a ``robots_blocked`` row.

        The walk expands only pages that are fetched (allowed, outside trap spaces, not a
        leaf such as a 404 or a binary, not behind meta nofollow; a failing page once its
        retry succeeds), so a blocked URL it reaches was linked from one of them.
        """
        return {self.url(h, p) for h, p in self._walk(follow_rel_nofollow) if self._blocked(h, p)}

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
        if self.graph.normal_index(host) is None and host not in self.graph.sites:
            return f"unknown host {host!r}: no link in the synthetic web leads there"
        canon = canonical_path_qs(path_qs)
        if canon != path_qs:
            return f"request target {path_qs!r} is not canonical (expected {canon!r})"
        if path_qs == "/robots.txt":
            return None
        if path_qs == "/sitemap.xml":
            # A crawler reading sitemaps may ask any host, never where robots says no. Whether
            # it does depends on the crawl (crawler.freshness.sitemapprobe: the shard's first
            # hosts, every host while probes pay, big hosts), so it is allowed, never required.
            return self._blocked(host, path_qs)
        if path_qs == "/robots-real.txt" and host in self.graph.sites and self.graph.sites[host].robots_status == 301:
            return None
        if path_qs.startswith(NUL_PREFIX):
            # The HTML parser turns a NUL in an attribute into U+FFFD (WHATWG tokenizer),
            # and a browser follows that link; a crawler may too (the server answers 404).
            return None
        reason = self._blocked(host, path_qs)
        if reason:
            return reason
        page = self.graph.page(host, path_qs)
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
        node = split_url(url)
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
        node = split_url(url)
        page = self.graph.page(*node) if node else None
        return 1.0 if page is not None and page.kind == "flaky-429" else None

    def expected_outcome(self, url: str) -> str | None:
        """The row status a correct crawler ends ``url`` with (docs/invariants.md #5).

        fetched | redirect | http_error | failed | robots_blocked, or None if not determined.
        The oversized bodies are ``fetched`` with ``truncated`` set (cut at limits.max_body_bytes).
        """
        node = split_url(url)
        if node is None:
            return None
        page = self.graph.page(*node)
        if page is None or node not in self._walk(False) or page.trap:
            return None
        if self._blocked(*node):
            return "robots_blocked"
        return {"redirect": "redirect", "status": "http_error", "down": "http_error", "stall": "failed"}.get(page.kind, "fetched")

    def trap_hosts(self) -> dict[str, str]:
        """Trap host -> calendar | path-repetition | session-id | faceted-search | deep."""
        return {h: s.trap for h, s in self.graph.sites.items() if s.trap}

    def mirror_pairs(self) -> list[tuple[str, str]]:
        """(origin URL, mirror URL) pairs served with byte-identical bodies, both must-fetch."""
        if f"mirror.{DOMAIN}" not in self.graph.sites:
            return []
        got = self._fetch_once(False)
        origin = self.graph.normal_host(MIRROR_ORIGIN)
        return sorted((self.url(origin, p), self.url(f"mirror.{DOMAIN}", p))
                      for h, p in got if h == origin and (f"mirror.{DOMAIN}", p) in got)

    def near_duplicate_groups(self) -> list[set[str]]:
        """Groups of must-fetch pages whose visible text differs only in a footer line."""
        if f"near-dup.{DOMAIN}" not in self.graph.sites:
            return []
        return [{self.url(f"near-dup.{DOMAIN}", f"/v/{k}") for k in range(1, 6)}]

    def chrome_duplicate_groups(self) -> list[set[str]]:
        """Groups of must-fetch copies of one article (chrome-variant near-duplicates).

        Each group holds the 4 copies of an article on chrome-origin and chrome-syndicate:
        the same ``<title>`` and ``<main>`` byte for byte (~10 KB), each with its own
        ``<footer>`` (render time and request id) and its own ``<nav>``/``<aside>``. Their
        whole-page text is several SimHash bits apart; only a fingerprint of the main
        content groups them. Separate from :meth:`near_duplicate_groups`.
        """
        copies = [(page.text_key, (host, path_qs)) for host, site in self.graph.sites.items()
                  for path_qs, page in site.pages.items() if page.kind == "article" and page.text_key]
        if not copies:  # no walk of a web without them (a bench web has thousands of hosts)
            return []
        once = self._fetch_once(False)
        groups: dict[str, set[str]] = {}
        for key, node in copies:
            if node in once:
                groups.setdefault(key, set()).add(self.url(*node))
        return list(groups.values())

    def robots_delay_hosts(self) -> dict[str, float]:
        """Host -> Crawl-delay (seconds) its robots.txt sets."""
        h = f"robots-delay.{DOMAIN}"
        return {h: self.graph.profile.crawl_delay} if h in self.graph.sites else {}
