"""Every HTTP request a shard makes, paced by its host's politeness slot.

Pages, robots.txt and sitemaps all go through :class:`RequestLane`: one request per host
in flight, spaced by the host's interval (crawler.policy.politeness, docs/invariants.md
#2), and counted once as ``requests`` (what termination watches move,
crawler.session.termination).
"""

from __future__ import annotations

from typing import Mapping, Protocol

from crawler.fetch.fetcher import FetchResult
from crawler.policy.politeness import Politeness
from crawler.counters import ShardCounters


class Fetcher(Protocol):
    """A shard's HTTP client (crawler.fetch.fetcher.Fetcher, or a test's fake)."""

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult: ...

    async def close(self) -> None: ...


class RequestLane:
    """``await lane.fetch(host, url)``: one request, in ``host``'s politeness slot."""

    def __init__(self, politeness: Politeness, fetcher: Fetcher, counters: ShardCounters) -> None:
        self._politeness = politeness
        self.fetcher = fetcher
        self._counters = counters

    async def fetch(self, host: str, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        self._counters.requests += 1
        result: FetchResult = await self._politeness.request(
            host, lambda: self.fetcher.fetch(url, headers, max_body_bytes=max_body_bytes))
        return result
