"""When to fetch a page again: an interval per URL that follows how often it changes.

After every fetch of a URL (:meth:`RecrawlPolicy.after_fetch`):

1. *changed?* A 304 is unchanged. Otherwise identical bytes are unchanged; different
   bytes are a change only if the page's main-content fingerprint moved by more than
   ``fingerprint_distance`` bits (so a rotating timestamp, request id or ad slot is not a
   change); with no fingerprint on either side (not HTML, too little text) the bytes
   decide. A first fetch has nothing to compare: it is neither.
2. *the interval*: the first is ``initial_interval_s``; unchanged multiplies it by
   ``grow_factor`` up to ``max_interval_s``; changed multiplies it by ``shrink_factor``
   down to ``min_interval_s``. A failed fetch keeps it.
3. *next due time*: the fetch time plus the interval (wall clock: it is stored, and
   survives a restart on another machine).

``<lastmod>`` from a sitemap is a prior, never a verdict (many sites stamp every page on
each deploy): :meth:`RecrawlPolicy.nudge` only brings a due time earlier, to half the
current interval after the last fetch, when the sitemap says the page moved since.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crawler.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Previous:
    """What the durable store remembers of a URL's last fetch (None fields: unknown)."""

    fetches: int = 0
    interval_s: float | None = None
    content_sha256: str | None = None
    fingerprint: int | None = None
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """The decision after one fetch."""

    changed: bool | None  # None: a first fetch, or nothing to compare
    interval_s: float
    next_crawl_at: float  # wall-clock seconds


def hamming64(a: int, b: int) -> int:
    return ((a ^ b) & 0xFFFF_FFFF_FFFF_FFFF).bit_count()


class RecrawlPolicy:
    """The interval rules of the module docstring (``recrawl:`` config keys)."""

    def __init__(
        self,
        *,
        min_interval_s: float,
        max_interval_s: float,
        initial_interval_s: float,
        grow_factor: float,
        shrink_factor: float,
        fingerprint_distance: int = 3,
    ) -> None:
        if not 0 < min_interval_s <= initial_interval_s <= max_interval_s or not math.isfinite(max_interval_s):
            raise ConfigError(
                "recrawl: need 0 < min_interval_s <= initial_interval_s <= max_interval_s "
                f"(got {min_interval_s}, {initial_interval_s}, {max_interval_s})"
            )
        if grow_factor < 1.0 or not 0 < shrink_factor <= 1.0:
            raise ConfigError(f"recrawl: grow_factor must be >= 1 and shrink_factor in (0, 1] (got {grow_factor}, {shrink_factor})")
        self.min_interval_s = float(min_interval_s)
        self.max_interval_s = float(max_interval_s)
        self.initial_interval_s = float(initial_interval_s)
        self.grow_factor = float(grow_factor)
        self.shrink_factor = float(shrink_factor)
        self.fingerprint_distance = int(fingerprint_distance)

    def changed(self, prev: Previous, status: int | None, sha: str | None, fingerprint: int | None) -> bool | None:
        """Step 1 of the module docstring."""
        if prev.fetches == 0:
            return None
        if status == 304:
            return False
        if sha is None or prev.content_sha256 is None:
            return None  # nothing to compare (the last fetch or this one had no body)
        if sha == prev.content_sha256:
            return False
        if fingerprint is not None and prev.fingerprint is not None:
            return hamming64(fingerprint, prev.fingerprint) > self.fingerprint_distance
        return True

    def interval(self, prev: Previous, changed: bool | None) -> float:
        """Step 2 of the module docstring."""
        current = prev.interval_s if prev.interval_s is not None else self.initial_interval_s
        if changed is True:
            return max(self.min_interval_s, current * self.shrink_factor)
        if changed is False:
            return min(self.max_interval_s, current * self.grow_factor)
        return min(self.max_interval_s, max(self.min_interval_s, current))

    def after_fetch(self, prev: Previous, fetched_at: float, status: int | None, sha: str | None, fingerprint: int | None) -> Schedule:
        """Steps 1-3 after a fetch. An error status (4xx, 5xx) counts as unchanged for the
        interval (a gone page is checked less and less often); no response keeps it."""
        changed = self.changed(prev, status, sha, fingerprint)
        failed = status is not None and status >= 400
        interval = self.interval(prev, False if failed and prev.fetches else changed)
        return Schedule(changed, interval, fetched_at + interval)

    def nudge(self, last_crawled_at: float, interval_s: float, next_crawl_at: float, lastmod: float, now: float) -> float:
        """A sitemap's ``<lastmod>``: a due time no later than half an interval after the
        last fetch if the page moved since; otherwise unchanged."""
        if lastmod <= last_crawled_at:
            return next_crawl_at
        return max(now, min(next_crawl_at, last_crawled_at + interval_s / 2))


def conditional_headers(prev: Previous | None) -> dict[str, str] | None:
    """A refetch asks only for a changed page: If-None-Match with the stored ETag,
    If-Modified-Since with the stored Last-Modified (RFC 9110 13.1); a 304 sends no body."""
    if prev is None:
        return None
    headers = {}
    if prev.etag:
        headers["If-None-Match"] = prev.etag
    if prev.last_modified:
        headers["If-Modified-Since"] = prev.last_modified
    return headers or None
