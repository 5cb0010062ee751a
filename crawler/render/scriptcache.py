"""The shard's cache of scripts fetched for renders, by URL, with their validators.

An app's pages all load the same bundle; without a cache every render of the app would
fetch it again, spending the host's allowance (one request per ``interval_s``) on bytes
already held. An entry is served without any request for ``ttl_s``; after that it is
revalidated with its ``ETag`` / ``Last-Modified`` (RFC 9110 13.1) and a 304 renews it.
Responses marked ``no-store`` are not kept (RFC 9111 5.2.2.5). Bounded by entries and
bytes, least recently used first out. Times come from the injected clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from crawler.clock import Clock

__all__ = ["CachedScript", "ScriptCache"]


@dataclass(slots=True)
class CachedScript:
    """One cached response: status, headers, body, and when it was last validated."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    stored_at: float

    def validators(self) -> dict[str, str]:
        """Conditional request headers for revalidating this entry (may be empty)."""
        h = {k.lower(): v for k, v in self.headers}
        out = {}
        if "etag" in h:
            out["If-None-Match"] = h["etag"]
        if "last-modified" in h:
            out["If-Modified-Since"] = h["last-modified"]
        return out


class ScriptCache:
    """URL -> :class:`CachedScript`, bounded; see the module docstring."""

    def __init__(self, clock: Clock, *, max_entries: int, max_bytes: int, ttl_s: float) -> None:
        self.clock = clock
        self.max_entries, self.max_bytes, self.ttl_s = max_entries, max_bytes, ttl_s
        self._items: OrderedDict[str, CachedScript] = OrderedDict()
        self._bytes = 0
        self.stats = {"hits": 0, "revalidated": 0, "misses": 0, "stored": 0}

    def lookup(self, url: str) -> tuple[CachedScript | None, bool]:
        """The entry for ``url`` and whether it is fresh (usable with no request)."""
        entry = self._items.get(url)
        if entry is None:
            self.stats["misses"] += 1
            return None, False
        self._items.move_to_end(url)
        fresh = self.clock.now() - entry.stored_at < self.ttl_s
        if fresh:
            self.stats["hits"] += 1
        return entry, fresh

    def renew(self, url: str) -> None:
        """A 304 said the entry is still valid."""
        entry = self._items.get(url)
        if entry is not None:
            entry.stored_at = self.clock.now()
            self.stats["revalidated"] += 1

    def store(self, url: str, status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> None:
        """Keep a 200 response unless it says ``no-store`` or is larger than the cache."""
        cc = ",".join(v.lower() for k, v in headers if k.lower() == "cache-control")
        if status != 200 or "no-store" in cc or len(body) > self.max_bytes:
            return
        old = self._items.pop(url, None)
        if old is not None:
            self._bytes -= len(old.body)
        self._items[url] = CachedScript(status, headers, body, self.clock.now())
        self._bytes += len(body)
        self.stats["stored"] += 1
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            _, gone = self._items.popitem(last=False)
            self._bytes -= len(gone.body)

    def __len__(self) -> int:
        return len(self._items)
