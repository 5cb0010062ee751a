"""One host's back queue: its discovery URLs, retries and due refreshes, and which of
them goes next when the host's politeness slot comes up.

A host's allowance (one request at a time, ``interval`` apart: crawler.policy.politeness) is
shared between *discovery* (new URLs) and *refresh* (recrawls that are due):
``refresh_share`` of it goes to refreshes, the rest to discovery, by stride scheduling
(each pick goes to the class with the smaller served/share ratio). When only one class
has work it takes the whole allowance and no credit piles up for later, so neither
starves the other and neither waits for nothing (docs/invariants.md #10).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable

from crawler.frontier.urlitem import UrlItem

__all__ = [
    "DueKey", "HostQueue", "HostQueues", "NEWS_RANK", "NEWS_RECENCY", "PRIORITY_STEP", "Priority", "UrlItem",
    "default_priority",
]

Priority = Callable[[UrlItem, float], float]
#: A host's entry in the frontier's due heap: (tier, rank, at, seq, host)
#: (crawler.frontier.hostschedule.HostHeaps).
DueKey = tuple[int, float, float, int, str]

#: How many depth levels one point of seed priority is worth (``add_seeds(priority=)``).
PRIORITY_STEP = 100.0
#: The rank of fresh news (crawler.freshness.news): ahead of every discovery depth, behind a
#: seed priority of 1 or more; lowered by ``NEWS_RECENCY`` per second of publication
#: time, so across hosts the most recently published article goes first.
NEWS_RANK = -1.0
NEWS_RECENCY = 1e-10  # 1.7e9 s of epoch time -> -0.17: stays within one depth level


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
    due_key: DueKey | None = None  # its live entry in the frontier's due heap, if any
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

    def clear(self) -> None:
        """Forget every URL held in memory and this host's heap entries (a drain)."""
        self.ready.clear()
        self.delayed.clear()
        self.refresh.clear()
        self.scheduled_at = self.due_key = None

    def remove(self, predicate: Callable[[UrlItem], bool]) -> list[UrlItem]:
        """Remove and return the URLs held in memory that match ``predicate``."""
        removed: list[UrlItem] = []
        for name in ("ready", "delayed", "refresh"):
            heap: list[tuple[float, int, UrlItem]] = getattr(self, name)
            keep = [e for e in heap if not predicate(e[2])]
            if len(keep) != len(heap):
                removed.extend(e[2] for e in heap if predicate(e[2]))
                heapq.heapify(keep)
                setattr(self, name, keep)
        return removed

    def drop_lowest(self, n: int, priority: Priority, now: float) -> tuple[list[str], int]:
        """Remove the ``n`` lowest-ranked discovery URLs and retries held in memory (a budget
        cut); returns their URLs and how many URLs went."""
        entries = [(p, s, it) for p, s, it in self.ready] + [(priority(it, now), s, it) for _, s, it in self.delayed]
        entries.sort(key=lambda e: (e[0], e[1]))
        doomed = {id(it) for _, _, it in entries[-n:]}
        removed: list[str] = []
        for name in ("ready", "delayed"):
            heap: list[tuple[float, int, UrlItem]] = getattr(self, name)
            keep = [e for e in heap if id(e[2]) not in doomed]
            removed.extend(e[2].url for e in heap if id(e[2]) in doomed)
            if len(keep) != len(heap):
                heapq.heapify(keep)
                setattr(self, name, keep)
        return removed, min(n, len(doomed))


class HostQueues:
    """The back queues of a shard's hosts with work, by host (:attr:`by_host`, shared with
    the host schedule: crawler.frontier.hostschedule), and their totals: URLs queued
    (:attr:`size`, spilled ones included, in-flight ones not), refreshes held in memory,
    hosts with a URL in flight. The frontier (crawler.frontier.frontier) keeps the totals
    as it adds and hands out work; the removals here keep them themselves."""

    def __init__(self) -> None:
        self.by_host: dict[str, HostQueue] = {}
        self.size = 0
        self.refreshes = 0
        self.in_flight = 0

    def of(self, host: str) -> HostQueue:
        """The queue of ``host``, made empty if it has none."""
        q = self.by_host.get(host)
        if q is None:
            q = self.by_host[host] = HostQueue()
        return q

    def queued_for(self, host: str) -> int:
        """URLs of ``host`` queued (in memory or spilled), excluding one being fetched."""
        q = self.by_host.get(host)
        return len(q) if q else 0

    def in_memory(self) -> int:
        """URLs held in memory (the rest of :attr:`size` is spilled to the store)."""
        return sum(len(q) - q.spilled for q in self.by_host.values())

    def refreshes_due(self, now: float) -> int:
        """Refreshes held in memory that are due at ``now`` (walks every host)."""
        return sum(1 for q in self.by_host.values() for at, _, _ in q.refresh if at <= now)

    def forget_if_empty(self, host: str, q: HostQueue) -> bool:
        """Forget ``host`` if it has no work left; True if it was forgotten."""
        if len(q) == 0 and not q.in_flight:
            del self.by_host[host]
            return True
        return False

    def remove(self, host: str, predicate: Callable[[UrlItem], bool]) -> list[UrlItem]:
        """Remove and return the host's in-memory URLs matching ``predicate``."""
        q = self.by_host.get(host)
        if q is None:
            return []
        removed = q.remove(predicate)
        self.size -= len(removed)
        self.refreshes -= sum(1 for it in removed if it.kind == "refresh")
        return removed

    def evict(self, host: str) -> int:
        """Forget every URL of ``host``; returns how many were queued. ValueError while one
        of its URLs is in flight."""
        q = self.by_host.get(host)
        if q is None:
            return 0
        if q.in_flight:
            raise ValueError(f"frontier: {host!r} has a URL in flight")
        n = len(q)
        self.refreshes -= sum(1 for it in q.items() if it.kind == "refresh")
        self.size -= n
        del self.by_host[host]  # its heap entries are stale now (checked on pop)
        return n

    def drain(self) -> list[UrlItem]:
        """Remove and return every URL held in memory; hosts with a URL in flight stay."""
        items = [it for q in self.by_host.values() for it in q.items()]
        for q in self.by_host.values():
            q.clear()
        for host in [h for h, q in self.by_host.items() if not q.in_flight]:
            del self.by_host[host]  # in place: the heaps share this dict
        self.size = self.refreshes = 0
        return items
