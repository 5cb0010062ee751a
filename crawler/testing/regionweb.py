"""A loopback web whose hosts are near one region and far from the others (issue 21).

Each host has a home region. The server tells regions apart by the client's source
address (a region's nodes bind their connections to it: ``RAYCRAWL_SOURCE_ADDRESS``;
Linux routes all of 127.0.0.0/8 to ``lo``), and delays every answer to a client of
another region by ``cross_delay_s`` (``near_delay_s`` at home). A client address it does
not know is far from every host. The delay comes before the headers, so it is what a
time-to-first-byte probe measures, as distance would be.

Hosts are ``<region>-<i>.test`` (route ``*.test`` to the server with ``fetch.resolve``);
each has a home page, ``pages_per_host - 1`` pages ``/p/<k>`` reachable from it (a chain
plus one seeded extra link per page), a link from its home page to the next host's, and
an allow-all ``robots.txt``. The page text is seeded: the same seed gives the same bytes.

The request log is the server's (:class:`~crawler.testing.server.WebServer`): each
:class:`~crawler.testing.server.RequestRecord` carries the host, the path, the client
address and the start and end times, so a test checks one request in flight and the
interval per host at the server (``tests/integration/checks.py``) and which region
fetched each host (:func:`region_report`).
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crawler.testing.webtypes import HTML_TYPE, TEXT_TYPE, Reply, SmallWeb

if TYPE_CHECKING:
    from crawler.testing.server import RequestRecord

__all__ = ["REGION_ADDRESSES", "RegionWeb", "region_report"]

#: The source address of each test region (one per raylet in the region tests).
REGION_ADDRESSES: Mapping[str, str] = {"127.0.0.2": "eu-west", "127.0.0.3": "us-east"}

_ROBOTS = b"User-agent: *\nAllow: /\n"
_VOCABULARY = tuple(f"{a}{b}" for a in ("al", "bo", "ci", "du", "ek", "fa", "gu", "hi") for b in ("ra", "se", "ton", "vik", "lem", "nor"))


class RegionWeb(SmallWeb):
    """``hosts_per_region`` hosts homed in each region of ``regions``, ``pages_per_host``
    pages each; answers are delayed by (client's region, host's home) as the module says.

    ``clients`` maps a client address to its region (default :data:`REGION_ADDRESSES`).
    """

    def __init__(
        self,
        regions: Sequence[str] = ("eu-west", "us-east"),
        *,
        hosts_per_region: int = 3,
        pages_per_host: int = 6,
        clients: Mapping[str, str] = REGION_ADDRESSES,
        cross_delay_s: float = 0.6,
        near_delay_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if hosts_per_region < 1 or pages_per_host < 1:
            raise ValueError("a region web needs at least one host per region and one page per host")
        self.regions = tuple(regions)
        self.clients = dict(clients)
        self.cross_delay_s = float(cross_delay_s)
        self.near_delay_s = float(near_delay_s)
        self.seed = seed
        self.pages_per_host = pages_per_host
        self._home = {f"{r}-{i}.test": r for r in self.regions for i in range(hosts_per_region)}
        self._hosts = list(self._home)
        self._templates = {(h, p): self._render(h, p) for h in self._hosts for p in self.paths()}
        self._bodies = dict(self._templates)

    # -- the ground truth --------------------------------------------------------------

    def hosts(self) -> list[str]:
        """Every host, region by region."""
        return list(self._hosts)

    def home_of(self, host: str) -> str | None:
        """The host's home region (None: not a host of this web)."""
        return self._home.get(host)

    def hosts_in(self, region: str) -> list[str]:
        """The hosts homed in ``region``."""
        return [h for h in self._hosts if self._home[h] == region]

    def region_of_client(self, client: str) -> str | None:
        """The region a client address belongs to (None: unknown, far from everything)."""
        return self.clients.get(client)

    def delay(self, host: str, client: str) -> float:
        """Seconds every answer of ``host`` to ``client`` waits: near at home, else cross."""
        home = self._home.get(host)
        near = home is not None and self.clients.get(client) == home
        return self.near_delay_s if near else self.cross_delay_s

    def paths(self) -> list[str]:
        """Each host's page paths: ``/`` and ``/p/1`` .. ``/p/<pages_per_host - 1>``."""
        return ["/"] + [f"/p/{k}" for k in range(1, self.pages_per_host)]

    def seeds(self) -> list[str]:
        """Every host's home page."""
        return [self.url(h) for h in self._hosts]

    def links(self, host: str, path: str) -> list[str]:
        """The URLs the page links to (what a crawler should find there)."""
        return [self.url(h, p) for h, p in self._link_targets(host, path)]

    def must_fetch(self, **_: Any) -> set[str]:
        """Every page of every host (all reachable from the seeds)."""
        return {self.url(h, p) for h in self._hosts for p in self.paths()}

    def must_not_fetch(self, host: str, path_qs: str | None = None, **_: Any) -> str | None:
        """Why a request must never happen, or None (robots.txt and the pages are fine)."""
        if host not in self._home:
            return "not a host of this web"
        if path_qs not in ("/robots.txt", "/sitemap.xml") and path_qs not in self.paths():
            return "not a page of this web"
        return None

    def failure_urls(self) -> dict[str, str]:
        """No page fails here (the checks in tests/integration/checks.py ask)."""
        return {}

    def robots_delay_hosts(self) -> dict[str, float]:
        """No robots.txt sets a Crawl-delay here."""
        return {}

    # -- serving -------------------------------------------------------------------------

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False, client: str = "") -> Reply:
        """The answer to ``client``, after :meth:`delay` (the server sleeps it)."""
        wait = self.delay(host, client)
        if host not in self._home:
            return Reply(404, (("Content-Type", TEXT_TYPE),), b"no such host", delay=wait)
        if path_qs == "/robots.txt":
            return Reply(200, (("Content-Type", TEXT_TYPE),), _ROBOTS, delay=wait)
        body = self._bodies.get((host, path_qs))
        if body is None:
            return Reply(404, (("Content-Type", TEXT_TYPE),), b"not found", delay=wait)
        return Reply(200, (("Content-Type", HTML_TYPE),), body, delay=wait)

    def _link_targets(self, host: str, path: str) -> list[tuple[str, str]]:
        pages = self.paths()
        k = pages.index(path)
        out = []
        if k + 1 < len(pages):
            out.append((host, pages[k + 1]))  # the chain: every page reachable from "/"
        extra = random.Random(f"{self.seed}:{host}:{path}:link").randrange(len(pages))
        out.append((host, pages[extra]))
        if k == 0:
            nxt = self._hosts[(self._hosts.index(host) + 1) % len(self._hosts)]
            out.append((nxt, "/"))  # across hosts (and regions): found twice, fetched once
        return out

    def _render(self, host: str, path: str) -> bytes:
        # Relative links, as the page's own URL is only known once the port is bound.
        rng = random.Random(f"{self.seed}:{host}:{path}:text")
        words = " ".join(rng.choice(_VOCABULARY) for _ in range(80))
        links = "".join(
            f'<a href="{p}">{p}</a>' if h == host else f'<a href="//{h}:{{port}}{p}">{h}</a>'
            for h, p in self._link_targets(host, path)
        )
        return (
            f"<html><head><title>{host}{path}</title></head><body><main><h1>{host} {path}</h1>"
            f"<p>{host} {path} {words}</p></main><nav>{links}</nav></body></html>"
        ).encode()

    def bind(self, port: int) -> None:
        """Called by the server once it listens: links to other hosts carry its port."""
        super().bind(port)
        self._bodies = {key: body.replace(b"{port}", str(port).encode()) for key, body in self._templates.items()}


def region_report(server: Any) -> dict[str, Any]:
    """Per host, from the server's own log: its home, requests by the client's region
    (``"unknown"`` for an address no region has), the share fetched from home, and the
    mean time the server took to answer (which is the delay the host's region paid);
    ``min_home_share`` is the lowest share of any requested host (issue 21 asks >= 0.9)."""
    web: RegionWeb = server.web
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in server.requests():
        by_host[r.host].append(r)
    hosts: dict[str, Any] = {}
    for host in web.hosts():
        recs = by_host.get(host, [])
        counts: dict[str, int] = defaultdict(int)
        for r in recs:
            counts[web.region_of_client(r.client) or "unknown"] += 1
        home = web.home_of(host)
        hosts[host] = {
            "home": home,
            "requests": len(recs),
            "by_region": dict(counts),
            "home_share": round((counts[home] if home is not None else 0) / len(recs), 3) if recs else None,
            "mean_latency_s": round(statistics.mean(r.end - r.start for r in recs), 4) if recs else None,
        }
    shares = [h["home_share"] for h in hosts.values() if h["home_share"] is not None]
    return {"hosts": hosts, "requests": sum(h["requests"] for h in hosts.values()),
            "min_home_share": min(shares, default=None)}
