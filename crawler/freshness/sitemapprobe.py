"""When to ask a host for a ``/sitemap.xml`` its robots.txt does not name: where it can pay.

A host with sitemaps usually names them in robots.txt (sitemaps.org, "Informing search
engine crawlers"); those are always read (crawler.freshness.sitemaps). A host that names
none may still answer ``/sitemap.xml``, but the probe is one request whatever it finds: on
a web of small hosts whose pages are all linked it is 1/n more requests for a host of n
pages and finds nothing (the bench crawl: 1.40 requests per stored page with a probe on
every host, 1.2 without). :class:`SitemapProbe` decides, per shard, when the probe is made:

* **at once** for the shard's first :data:`SAMPLE_PROBES` hosts (the sample that measures
  the yield), and for every host while the measured yield -- probes that found a sitemap
  listing URLs, over probes settled -- is at least ``min_yield``;
* **once the host has shown it is big enough**: when its ``after_pages``-th page passes
  robots, so a probe never costs more than 1/``after_pages`` requests per page of a host;
* **when the yield rises** past ``min_yield`` (a bigger host's probe found one), for
  every host that was waiting.

``after_pages`` 0 probes every host at once (the rule before this class). The estimate is
the shard's own (hosts are spread over the shards by hash, so each shard samples the
crawl's web). Waiting hosts are kept in memory, at most :data:`MAX_WAITING` (the oldest
are dropped: they are then probed only if robots.txt is read again); a restart starts
afresh, as pending sitemap reads do.
"""

from __future__ import annotations

from collections.abc import Sequence

from crawler.counters import ShardCounters

#: Hosts per shard probed at once whatever the yield: the sample that measures it.
SAMPLE_PROBES = 4
#: Hosts waiting for a probe, per shard (~100 B each): the rest wait no more.
MAX_WAITING = 100_000


class _Wait:
    """A host waiting for its probe: its origin and the pages of it that passed robots."""

    __slots__ = ("origin", "pages")

    def __init__(self, origin: str) -> None:
        self.origin, self.pages = origin, 0


def probe_url(origin: str) -> str:
    """The conventional sitemap location of ``origin`` (``scheme://host[:port]``)."""
    return origin.rstrip("/") + "/sitemap.xml"


class SitemapProbe:
    """One shard's decisions on ``/sitemap.xml`` probes (module docstring).

    Args:
        after_pages: pages of a host that pass robots before its probe is made when the
            yield is low (``sitemaps.probe_after_pages``); 0: every host at once.
        min_yield: the yield at which every host is probed at once (``sitemaps.probe_min_yield``).
        counters: the shard's counters (``sitemap_probes``, ``sitemap_probes_found``).
        sample: hosts probed at once whatever the yield.
        max_waiting: hosts kept waiting at most.
    """

    def __init__(self, *, after_pages: int, min_yield: float, counters: ShardCounters, sample: int = SAMPLE_PROBES,
                 max_waiting: int = MAX_WAITING) -> None:
        self._after = after_pages
        self._min_yield = min_yield
        self._sample = sample
        self._max_waiting = max_waiting
        self._counters = counters
        self._waiting: dict[str, _Wait] = {}  # host -> its wait, oldest first
        self._due: list[str] = []  # origins whose wait ended when the yield rose
        self._open: set[str] = set()  # probe URLs made and not settled
        self.made = 0  #: probes made
        self.settled = 0  #: probes whose read ended
        self.found = 0  #: of those, the ones that found a sitemap listing URLs

    @property
    def paying(self) -> bool:
        """The measured yield is at least ``min_yield`` (False until a probe has settled)."""
        return self.settled > 0 and self.found >= self._min_yield * self.settled

    def at_robots(self, origin: str, host: str) -> bool:
        """``host``'s robots.txt names no sitemap and allows ``/sitemap.xml``: probe now?
        If not, the host waits (for its pages, or for the yield to rise)."""
        if self._after == 0 or self.made < self._sample or self.paying:
            return True
        if host not in self._waiting:
            if len(self._waiting) >= self._max_waiting:
                del self._waiting[next(iter(self._waiting))]
            self._waiting[host] = _Wait(origin)
        return False

    def due(self, host: str) -> Sequence[str]:
        """A page of ``host`` passed robots: the origins to probe now -- ``host``'s own once
        its ``after_pages``-th page passes, and those of hosts whose wait ended when the
        yield rose (each handed out once). Called for every page: no allocation when none."""
        own = self._page(host) if self._waiting else None
        if not self._due:
            return () if own is None else (own,)
        due, self._due = self._due, []
        if own is not None:
            due.append(own)
        return due

    def _page(self, host: str) -> str | None:
        entry = self._waiting.get(host)
        if entry is None:
            return None
        entry.pages += 1
        if entry.pages < self._after:
            return None
        del self._waiting[host]
        return entry.origin

    def launched(self, url: str) -> None:
        """A probe of ``url`` is queued."""
        self.made += 1
        self._counters.sitemap_probes += 1
        self._open.add(url)

    def settle(self, url: str, found: bool) -> None:
        """The read of sitemap ``url`` ended; ``found``: it listed URLs or further sitemaps.
        Reads of sitemaps robots.txt named are not probes and are not counted."""
        if url not in self._open:
            return
        self._open.discard(url)
        self.settled += 1
        self.found += found
        self._counters.sitemap_probes_found += found
        if self._waiting and self.paying:
            self._due.extend(entry.origin for entry in self._waiting.values())
            self._waiting.clear()
