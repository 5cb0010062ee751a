"""A blocking handle on a running crawl session, for notebooks and scripts.

The session is async; a notebook cell is not. :class:`CrawlHandle` runs the session's
event loop in a background thread and gives every session method a plain, blocking
twin, so a notebook can start a crawl, look at it, steer it and stop it while the crawl
keeps running between cells. With ``api.enabled`` the handle also serves the HTTP control
API (crawler.control.api) in that loop while the crawl runs; :attr:`CrawlHandle.api_url` says where.
"""

from __future__ import annotations

import asyncio
import threading
import sys
from typing import Any, Callable, Coroutine, Sequence, TypeVar

from crawler import eventloop
from crawler.control.api import ControlApi
from crawler.session.crawlsession import CrawlSession
from crawler.frontier.store import UrlStatus

T = TypeVar("T")


class CrawlHandle:
    """Blocking access to a :class:`CrawlSession` whose loop runs in a thread.

    ``start()`` starts the crawl and returns at once; ``wait()`` blocks until it is proven
    finished (or ``timeout_s`` passes, then it stops it); ``stop()`` stops it now.
    """

    def __init__(self, session: CrawlSession, *, on_api_request: Callable[[str, int], None] | None = None) -> None:
        self.session = session
        # Made now: a non-loopback API without a token is refused before anything starts.
        self.api = (ControlApi(session, session.cfg.api, on_stop=self._api_stop, on_request=on_api_request)
                    if session.cfg.api.enabled else None)
        self.api_url: str | None = None
        self._waiting = False
        self._stop_task: asyncio.Future[Any] | None = None
        self._loop = eventloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="crawl-session", daemon=True)
        self._thread.start()

    def _api_stop(self) -> None:
        """POST /stop: a running :meth:`wait` stops at its next poll; with none running, stop now."""
        self.session.request_stop()
        if not self._waiting and self._stop_task is None and self.session.final is None:
            self._stop_task = asyncio.ensure_future(self.session.stop())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def mode(self) -> str:
        """"new", "resume" or "finished" (after :meth:`start`)."""
        return self.session.mode

    @property
    def final(self) -> dict[str, Any] | None:
        """The final stats once the crawl stopped, else None."""
        return self.session.final

    def start(self) -> "CrawlHandle":
        """Create the shards and seed (or find the crawl finished); returns self."""
        try:
            self._call(self.session.start())
            if self.api is not None and self.session.final is None:
                self.api_url = self._call(self.api.start())
                print(f"control API: {self.api_url}", file=sys.stderr, flush=True)  # noqa: T201 - the notebook user's address
        except BaseException:
            self._call(self.session.runtime.close())
            self.close()
            raise
        return self

    def poll(self) -> bool:
        """One termination check; True once the crawl is proven finished."""
        return self._call(self.session.poll())

    def stats(self) -> dict[str, Any]:
        """Crawl-wide totals now: pages, queued, in flight, hosts, errors, duplicates, bytes."""
        return self._call(self.session.stats())

    def add_seeds(self, urls: Sequence[str], *, priority: int = 0) -> dict[str, Any]:
        """Add seed URLs to the running crawl (``priority`` > 0: ahead of other work):
        counts (accepted, already_seen, refused) and each URL's result."""
        return self._call(self.session.steering.add_seeds(urls, priority=priority))

    def set_host_policy(
        self, host: str, *, max_rps: float | None = None, paused: bool | None = None, max_pages: int | None = None
    ) -> str:
        """A host's rate (requests per second), pause, or page limit; ``host`` without a
        port covers every port of the hostname (crawler.policy.hostpolicy)."""
        return self._call(self.session.steering.set_host_policy(host, max_rps=max_rps, paused=paused, max_pages=max_pages))

    def host_info(self, host: str) -> dict[str, Any]:
        """A host's policy, queue, next allowed time, robots rules and backoff, per key."""
        return self._call(self.session.steering.host_info(host))

    def url_status(self, url: str) -> UrlStatus | None:
        """What the crawl knows of one URL or ``url_hash`` (None if it was never admitted)."""
        return self._call(self.session.steering.url_status(url))

    def request_stop(self) -> None:
        """Make a running :meth:`wait` stop at its next poll."""
        self._loop.call_soon_threadsafe(self.session.request_stop)

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Block until the crawl is proven finished (or ``timeout_s``); the final stats."""
        self._waiting = True
        try:
            if self._stop_task is not None:  # stopped through the API meanwhile
                return self._call(self._await(self._stop_task))
            return self._call(self.session.wait(timeout_s))
        finally:
            self._waiting = False
            self.close()

    def stop(self, *, finished: bool = False) -> dict[str, Any]:
        """Stop now: rows flushed, stats.json written; the final stats."""
        try:
            if self._stop_task is not None:
                return self._call(self._await(self._stop_task))
            return self._call(self.session.stop(finished=finished))
        finally:
            self.close()

    @staticmethod
    async def _await(fut: asyncio.Future[T]) -> T:
        return await fut

    def close(self) -> None:
        """Stop serving the API and end the background loop (after a stop)."""
        if self.api is not None and self._loop.is_running():
            self._call(self.api.close())
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
