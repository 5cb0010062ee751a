"""Fetching an origin's robots.txt with the host's own politeness slot (RFC 9309 2.3.1.2:
up to five redirects), and parsing it off the event loop (DESIGN invariant 16: a file cut
at ROBOTS_MAX_BYTES takes a tenth of a second to parse, more with wildcard rules;
benchmarks/results/parsecost.json, case robots)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol

from crawler.robots.cache import RobotsCache
from crawler.robots.rules import MAX_ROBOTS_REDIRECTS, RobotsRules


class _Pacer(Protocol):
    def in_flight(self, host: str) -> bool: ...

    def next_allowed(self, host: str) -> float: ...


class RobotsClient:
    """Fetches an origin's robots.txt with the host's own politeness slot and caches it.

    Args:
        cache: where the rules go.
        classify: maps a response to "redirect" or anything else (crawler.fetch.fetcher.classify).
        normalize: canonical form of a redirect target, None if unusable.
        join: resolves a Location header against the URL it came from.
        pacer: per-host in-flight state and next allowed time (crawler.policy.politeness).
        clock: waits for the host's allowance between same-host redirect hops.
        run_blocking: where a fetched file is parsed (default: a worker thread; tests on
            the mock clock run it inline).
    """

    def __init__(
        self,
        cache: RobotsCache,
        *,
        classify: Callable[[Any], str],
        normalize: Callable[[str], str | None],
        join: Callable[[str, str], str | None],
        host_of: Callable[[str], str],
        pacer: _Pacer,
        clock: Any,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    ) -> None:
        self.cache = cache
        self._classify = classify
        self._normalize = normalize
        self._join = join
        self._host_of = host_of
        self._pacer = pacer
        self._clock = clock
        self._run_blocking = run_blocking

    async def refresh(
        self, origin: str, host: str, fetch: Callable[[str, str], Awaitable[Any]]
    ) -> tuple[RobotsRules, int]:
        """Fetch and cache ``origin``'s rules; ``host`` is the origin's politeness key.
        Returns the rules and the number of requests it took.

        ``await fetch(host, url)`` makes one request, paced like any other, and returns a
        response with ``status``, ``headers``, ``body``, ``truncated`` and ``error``.

        Redirects are followed up to 5 hops (RFC 9309 2.3.1.2); more is "unavailable".
        A hop to another host whose request is already running is not made (one request
        in flight per host): the origin counts as unreachable until the error TTL passes.
        """
        url = self.cache.robots_url(origin)
        for hop in range(MAX_ROBOTS_REDIRECTS + 1):
            target = self._host_of(url)
            if target != host and self._pacer.in_flight(target):
                return self.cache.from_response(origin, None, None, error="robots.txt redirect target busy"), hop
            if hop > 0 and target == host:
                # Same host: the next hop waits for the host's allowance like any request.
                await self._clock.sleep(max(0.0, self._pacer.next_allowed(host) - self._clock.now()))
            res = await fetch(target, url)
            if self._classify(res) != "redirect":
                body = res.body if res.status else None
                reading = None
                if body and res.status is not None and 200 <= res.status < 300:
                    reading = await self._run_blocking(self.cache.read, body, res.truncated)
                rules = self.cache.from_response(origin, res.status, body, truncated=res.truncated, error=res.error,
                                                 reading=reading)
                return rules, hop + 1
            joined = self._join(url, res.headers.get("location", ""))
            nxt = self._normalize(joined) if joined else None
            if nxt is None:  # a redirect to nowhere: the file is unavailable
                return self.cache.from_response(origin, 404, b""), hop + 1
            url = nxt
        return self.cache.from_redirect_overflow(origin), MAX_ROBOTS_REDIRECTS + 1
