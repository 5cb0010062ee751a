"""Every request a browser makes while rendering is a request of the crawler.

The shard that owns a page's host answers each request its render makes
(:class:`~crawler.render.jobs.SubRequest`), by the rules every crawler request keeps
(docs/invariants.md #12), in this order:

1. only ``GET`` (the crawler never sends a form or an API write), ``http``/``https``;
2. resource types in ``render.block`` (images, fonts, media, style sheets by default)
   are refused without a request: the DOM does not need them;
3. the per-render cap on requests (``max_requests``); past it the render fails
   (``cap``) and the raw page is stored;
4. the request's host must be the page's own politeness key: that host's allowance is
   this shard's to spend, and its frontier holds the host while the page renders, so
   the render's requests are the only ones to it. Another host's allowance belongs to
   its own frontier (maybe on another shard): such requests are refused (``offhost``);
5. scope and robots.txt (the page's origin's rules, known since the page was fetched;
   unknown rules refuse);
6. a fresh copy in the shard's script cache answers with no request
   (crawler.render.scriptcache); a stale one is revalidated;
7. the host's politeness gate: wait (on the injected clock) until the host is ready,
   then one request in flight through :meth:`Politeness.request`, so ``interval_s``,
   ``Crawl-delay``, backoff and Retry-After hold for subresources as for pages;
8. the crawler's own fetcher sends it: configured User-Agent, SSRF guard, body cap,
   timeouts; the per-render byte cap (``max_bytes``) counts what came back.

Each refusal is counted as ``render_refused_<reason>``. A request that cannot start
before the render's deadline is refused (``deadline``) rather than left waiting.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TYPE_CHECKING

from crawler.clock import Clock
from crawler.fetch.fetcher import FetchResult
from crawler.policy.politeness import Politeness
from crawler.render.jobs import SubRequest, SubResponse
from crawler.render.scriptcache import ScriptCache
from crawler.robots import RobotsCache
from crawler.urls import Scope, host_key, origin

if TYPE_CHECKING:
    from crawler.counters import ShardCounters

__all__ = ["RenderGate"]

Fetch = Callable[[str, dict[str, str] | None], Awaitable[FetchResult]]
Normalize = Callable[[str], str | None]


@dataclass(slots=True)
class _Open:
    """One render in progress: its host, deadline, what it has spent, what is in flight."""

    host: str
    deadline: float
    requests: int = 0
    bytes: int = 0
    in_flight: int = 0
    closed: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class RenderGate:
    """The shard's answers to its renders' requests (see the module docstring)."""

    def __init__(
        self,
        *,
        fetch: Fetch,
        politeness: Politeness,
        robots: RobotsCache,
        scope: Scope,
        normalize: Normalize,
        clock: Clock,
        cache: ScriptCache,
        counters: ShardCounters,
        block: tuple[str, ...],
        max_requests: int,
        max_bytes: int,
        respect_robots: bool = True,
    ) -> None:
        self._fetch, self.politeness, self.robots, self.scope = fetch, politeness, robots, scope
        self._normalize, self.clock, self.cache, self.counters = normalize, clock, cache, counters
        self.block = frozenset(t.lower() for t in block)
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.respect_robots = respect_robots
        self._open: dict[str, _Open] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def open(self, render_id: str, host: str, timeout_s: float) -> None:
        """A render of a page of ``host`` starts now and may take ``timeout_s``."""
        self._open[render_id] = _Open(host, self.clock.now() + timeout_s)

    async def close(self, render_id: str) -> dict[str, int]:
        """The render is over: later requests under its id are refused, and this returns
        once its requests in flight have ended (the caller then releases the host to
        its frontier: no request of the render may still be open then). Returns its spend."""
        st = self._open.pop(render_id, None)
        if st is None:
            return {}
        st.closed = True
        if st.in_flight:
            await st.idle.wait()
        if not any(o.host == st.host for o in self._open.values()):
            lock = self._locks.get(st.host)
            if lock is not None and not lock.locked():
                del self._locks[st.host]
        return {"requests": st.requests, "bytes": st.bytes}

    def open_renders(self) -> int:
        return len(self._open)

    async def answer(self, req: SubRequest) -> SubResponse:
        """The crawler's answer to one browser request (never raises but CancelledError)."""
        st = self._open.get(req.render_id)
        if st is None:
            return self._refuse("closed")
        if req.method.upper() != "GET":
            return self._refuse("method")
        if req.resource_type.lower() in self.block:
            return self._refuse("blocked_type")
        if not req.url.startswith(("http://", "https://")):
            return self._refuse("scheme")
        st.requests += 1
        if st.requests > self.max_requests:
            return self._refuse("cap")
        norm = self._normalize(req.url)
        if norm is None:
            return self._refuse("url")
        if host_key(norm) != st.host:
            return self._refuse("offhost")
        if not self.scope.allows(norm):
            return self._refuse("scope")
        if self.respect_robots:
            allowed = self.robots.allowed(norm, origin(norm))
            if not allowed:
                return self._refuse("robots" if allowed is False else "robots_unknown")
        script = req.resource_type == "Script"
        cached, fresh = self.cache.lookup(req.url) if script else (None, False)
        if cached is not None and fresh:
            self.counters.render_script_cache_hits += 1
            return SubResponse(cached.status, cached.headers, cached.body)
        res = await self._polite(st, req.url, cached.validators() if cached is not None else None)
        if res is None:
            return self._refuse("deadline")
        if res.status is None:
            return self._refuse("error")
        headers = tuple(res.headers.items())
        if cached is not None and res.status == 304:
            self.cache.renew(req.url)
            self.counters.render_script_cache_revalidated += 1
            return SubResponse(cached.status, cached.headers, cached.body)
        st.bytes += len(res.body)
        self.counters.render_bytes += len(res.body)
        if st.bytes > self.max_bytes:
            return self._refuse("cap")
        if script:
            self.cache.store(req.url, res.status, headers, res.body)
        return SubResponse(res.status, headers, res.body)

    async def _polite(self, st: _Open, url: str, headers: dict[str, str] | None) -> FetchResult | None:
        """Send through the host's politeness gate, or None if it cannot start in time."""
        lock = self._locks.setdefault(st.host, asyncio.Lock())
        async with lock:  # one request in flight to the host, whatever the render does
            while not self.politeness.ready(st.host):
                now = self.clock.now()
                at = self.politeness.next_allowed(st.host)
                if math.isinf(at) or at >= st.deadline or now >= st.deadline or st.closed:
                    return None
                await self.clock.sleep(max(at - now, 0.001))
            if self.clock.now() >= st.deadline or st.closed:
                return None  # the render is over: the host may be its frontier's again
            self.counters.render_requests += 1
            st.in_flight += 1
            st.idle.clear()
            try:
                result: FetchResult = await self.politeness.request(st.host, lambda: self._fetch(url, headers))
                return result
            finally:
                st.in_flight -= 1
                if not st.in_flight:
                    st.idle.set()

    def _refuse(self, reason: str) -> SubResponse:
        self.counters.families["render_refused_" + reason] += 1
        return SubResponse(refused=reason)

    def stats(self) -> dict[str, Any]:
        return {"open": len(self._open), "script_cache": dict(self.cache.stats), "script_cache_entries": len(self.cache)}
