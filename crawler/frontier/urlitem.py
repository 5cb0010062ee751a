"""One URL on its way through a shard: the unit the frontier, the store and the routers move.

A :class:`UrlItem` carries what the crawl knows of a URL before it is fetched: its
depth and referrer, its host (politeness key), what kind of work it is (discovery,
refresh, sitemap), an operator's seed priority, and for a refetch the previous fetch
(validators, fingerprint) that conditional requests and change detection need.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any

from crawler.errors import ConfigError
from crawler.frontier.recrawl import Previous
from crawler.urls import host_key

__all__ = ["MAX_PRIORITY", "UrlItem", "check_priority"]

#: Seed priorities run from -MAX_PRIORITY to MAX_PRIORITY. A thousand points is already
#: 100,000 depth levels: anything beyond says nothing more, and an unbounded integer
#: does not fit the shard store's 64-bit column.
MAX_PRIORITY = 1000


def check_priority(value: object) -> int:
    """``value`` as a seed priority, or ConfigError naming ``priority`` and its range."""
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise ConfigError(f"priority: expected a whole number from {-MAX_PRIORITY} to {MAX_PRIORITY}, got {value!r}")
    return value


@dataclass(slots=True)
class UrlItem:
    """One unit of frontier work: a normalized URL and what we know about it.

    ``due_at`` is clock time before which it must not be fetched (a retry's backoff, a
    refresh's schedule). ``kind``: "discover" (first fetch), "refresh" (a recrawl, with
    ``prev`` from the durable store) or "sitemap" (a sitemap to read, no row).
    ``boost``: seed priority (higher first). ``fresh``: a new URL from a feed, news
    sitemap or hub (crawler.freshness.news), ahead of older discovery; ``published``: its
    publication time (wall seconds) when the source gave one. Both live in memory only.
    """

    url: str
    depth: int = 0
    referrer: str | None = None
    host: str = ""
    priority: float = 0.0
    due_at: float = 0.0
    attempts: int = 0
    fetch_seq: int = 1  # which fetch of this URL this is (1: discovery; more: recrawls)
    sid: int = 0  # row id in the shard's durable store (acceptance order); 0 = not stored
    replay: bool = False  # fetched before a crash: its links bypass the seen filter
    kind: str = "discover"
    boost: int = 0
    prev: Previous | None = None
    fresh: bool = False
    published: float | None = None

    def __post_init__(self) -> None:
        if not self.host:
            self.host = host_key(self.url)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        # (perf) Links cross shards by the thousand and Ray pickles them: a plain tuple of
        # the fields pickles ~3x faster than the default for a slots dataclass.
        return (UrlItem, _url_item_fields(self))


_url_item_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(UrlItem)))
