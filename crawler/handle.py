"""A blocking handle on a running crawl session, for notebooks and scripts.

The session is async; a notebook cell is not. :class:`CrawlHandle` runs the session's
event loop in a background thread and gives every session method a plain, blocking
twin, so a notebook can start a crawl, look at it, steer it and stop it while the crawl
keeps running between cells.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Sequence, TypeVar

from crawler import eventloop
from crawler.session import CrawlSession

T = TypeVar("T")


class CrawlHandle:
    """Blocking access to a :class:`CrawlSession` whose loop runs in a thread.

    ``start()`` starts the crawl and returns at once; ``wait()`` blocks until it is proven
    finished (or ``timeout_s`` passes, then it stops it); ``stop()`` stops it now.
    """

    def __init__(self, session: CrawlSession) -> None:
        self.session = session
        self._loop = eventloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="crawl-session", daemon=True)
        self._thread.start()

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

    def add_seeds(self, urls: Sequence[str]) -> dict[str, int]:
        """Add seed URLs to the running crawl; ``{"accepted": ..., "already_seen": ...}``."""
        return self._call(self.session.add_seeds(urls))

    def set_host_policy(self, host: str, *, max_rps: float | None = None, paused: bool | None = None) -> None:
        """Override one host's rate (requests per second) or pause/unpause it."""
        self._call(self.session.set_host_policy(host, max_rps=max_rps, paused=paused))

    def url_status(self, url: str) -> dict[str, Any] | None:
        """What the crawl knows of one URL (None if it was never admitted)."""
        return self._call(self.session.url_status(url))

    def request_stop(self) -> None:
        """Make a running :meth:`wait` stop at its next poll."""
        self._loop.call_soon_threadsafe(self.session.request_stop)

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Block until the crawl is proven finished (or ``timeout_s``); the final stats."""
        try:
            return self._call(self.session.wait(timeout_s))
        finally:
            self.close()

    def stop(self, *, finished: bool = False) -> dict[str, Any]:
        """Stop now: rows flushed, stats.json written; the final stats."""
        try:
            return self._call(self.session.stop(finished=finished))
        finally:
            self.close()

    def close(self) -> None:
        """End the background loop (after a stop)."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
