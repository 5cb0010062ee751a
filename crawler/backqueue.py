"""One host's back queue: its discovery URLs, retries and due refreshes, and which of
them goes next when the host's politeness slot comes up.

A host's allowance (one request at a time, ``interval`` apart: crawler.politeness) is
shared between *discovery* (new URLs) and *refresh* (recrawls that are due):
``refresh_share`` of it goes to refreshes, the rest to discovery, by stride scheduling
(each pick goes to the class with the smaller served/share ratio). When only one class
has work it takes the whole allowance and no credit piles up for later, so neither
starves the other and neither waits for nothing (docs/invariants.md #10).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

from crawler.errors import ConfigError
from crawler.recrawl import Previous
from crawler.urls import host_key

#: How many depth levels one point of seed priority is worth (``add_seeds(priority=)``).
PRIORITY_STEP = 100.0
#: The rank of fresh news (crawler.news): ahead of every discovery depth, behind a
#: seed priority of 1 or more; lowered by ``NEWS_RECENCY`` per second of publication
#: time, so across hosts the most recently published article goes first.
NEWS_RANK = -1.0
NEWS_RECENCY = 1e-10  # 1.7e9 s of epoch time -> -0.17: stays within one depth level
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
    sitemap or hub (crawler.news), ahead of older discovery; ``published``: its
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

Priority = Callable[[UrlItem, float], float]


def default_priority(item: UrlItem, now: float) -> float:
    """Lower first. Discovery: depth (breadth-first), a seed's priority lifting it by
    ``PRIORITY_STEP`` levels per point. Refresh: how overdue it is (seconds, negative), so
    overdue refreshes come before discovery of the same rank. Fresh news: ``NEWS_RANK``,
    the most recently published first."""
    if item.kind == "refresh":
        return -(now - item.due_at)
    if item.fresh:
        return NEWS_RANK - NEWS_RECENCY * (item.published or 0.0)
    return float(item.depth) - PRIORITY_STEP * item.boost


_seq = itertools.count()


@dataclass
class HostQueue:
    """The queues of one host; the frontier keeps one per host with work."""

    ready: list[tuple[float, int, UrlItem]] = field(default_factory=list)  # discovery: (priority, seq, item)
    delayed: list[tuple[float, int, UrlItem]] = field(default_factory=list)  # retries: (due_at, seq, item)
    refresh: list[tuple[float, int, UrlItem]] = field(default_factory=list)  # recrawls: (due_at, seq, item)
    in_flight: bool = False
    scheduled_at: float | None = None  # the key of this host's live entry in a time heap
    tier: int = 0  # which time heap holds that entry: 0 normal, 1 demoted
    due_key: tuple | None = None  # its live entry in the frontier's due heap, if any
    spilled: int = 0  # discovery URLs left in the durable store, not in memory
    cursor: int = 0  # store id of the last URL of this host brought into memory
    served_refresh: int = 0
    served_discovery: int = 0

    def __len__(self) -> int:
        return len(self.ready) + len(self.delayed) + len(self.refresh) + self.spilled

    def add(self, item: UrlItem, priority: Priority, now: float) -> None:
        """File ``item`` by kind (spilling is the frontier's decision, made before)."""
        if item.kind == "refresh":
            heapq.heappush(self.refresh, (item.due_at, next(_seq), item))
        elif item.due_at > now:
            heapq.heappush(self.delayed, (item.due_at, next(_seq), item))
        else:
            item.priority = priority(item, now)
            heapq.heappush(self.ready, (item.priority, next(_seq), item))

    def promote(self, now: float, priority: Priority) -> None:
        """Retries whose backoff has passed become ready."""
        while self.delayed and self.delayed[0][0] <= now:
            _, _, item = heapq.heappop(self.delayed)
            item.priority = priority(item, now)
            heapq.heappush(self.ready, (item.priority, next(_seq), item))

    def earliest_wait(self) -> float | None:
        """When this host next has work if nothing is ready (a retry or a refresh coming due)."""
        tops = [h[0][0] for h in (self.delayed, self.refresh) if h]
        return min(tops) if tops else None

    def has_ready(self, now: float) -> bool:
        return bool(self.ready) or bool(self.refresh and self.refresh[0][0] <= now)

    def head_priority(self, now: float, priority: Priority) -> float:
        """The rank of what this host would send next (for the order across hosts)."""
        keys = []
        if self.ready:
            keys.append(self.ready[0][0])
        if self.refresh and self.refresh[0][0] <= now:
            keys.append(priority(self.refresh[0][2], now))
        return min(keys) if keys else 0.0  # only spilled discovery: rank unknown, load it

    def take(self, now: float, share: float) -> UrlItem | None:
        """Pop the next URL to fetch, splitting the allowance by ``share`` (module docstring)."""
        refresh_due = bool(self.refresh) and self.refresh[0][0] <= now
        if refresh_due and self.ready:
            # Stride: refresh goes when its served/share is not ahead of discovery's.
            pick_refresh = self.served_refresh * (1.0 - share) <= self.served_discovery * share
        else:
            pick_refresh = refresh_due
            self.served_refresh = self.served_discovery = 0  # alone: no credit for later
        if pick_refresh:
            self.served_refresh += 1
            return heapq.heappop(self.refresh)[2]
        if self.ready:
            self.served_discovery += 1
            return heapq.heappop(self.ready)[2]
        return None

    def items(self) -> list[UrlItem]:
        """Every URL held in memory."""
        return [e[2] for e in (*self.ready, *self.delayed, *self.refresh)]
