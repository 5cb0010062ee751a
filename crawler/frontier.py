"""The two-tier URL frontier of one shard (Mercator-style).

Tier 1 orders work by priority: each host's back queue is a heap keyed by the pluggable
priority function (default: breadth-first by depth), and URLs that must wait (a retry
after backoff, a recrawl not yet due) sit in a per-host *delayed* heap keyed by their
due time until it passes.

Tier 2 enforces politeness: a heap of hosts keyed by the time the host may next be
contacted (the politeness object's ``next_allowed``, or the due time of the host's first
delayed URL). A host leaves the heap while one of its URLs is being fetched, so there is
never more than one request in flight per host (DESIGN.md invariant 2); it re-enters when
the fetch is released. Demoted hosts (low novelty, crawler.traps) wait in a second heap
that is served only when no host of the first is due: they yield to other work, but are
not slowed when they are the only work left.

The frontier does not know about robots, budgets or the seen set: the engine applies
those before :meth:`Frontier.push` and after :meth:`Frontier.pop_ready`. It answers
"nothing ready now" (:attr:`FrontierState.WAITING` with a wake-up time) differently from
"nothing at all" (:attr:`FrontierState.EMPTY`).
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import itertools
import math
import logging
import operator
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from crawler.urls import host_key

log = logging.getLogger(__name__)


class FrontierState(enum.Enum):
    """What :meth:`Frontier.state` reports."""

    READY = "ready"  # a host may be contacted now
    WAITING = "waiting"  # work exists but no host is due yet (see next_wakeup)
    BUSY = "busy"  # work exists only for hosts with a request in flight
    EMPTY = "empty"  # no queued URL at all


@dataclass(slots=True)
class UrlItem:
    """One unit of frontier work: a normalized URL and what we know about it.

    ``due_at`` is clock time before which it must not be fetched (a retry's backoff).
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

    def __post_init__(self) -> None:
        if not self.host:
            self.host = host_key(self.url)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        # (perf) Links cross shards by the thousand and Ray pickles them: a plain tuple of
        # the fields pickles ~3x faster than the default for a slots dataclass.
        return (UrlItem, _url_item_fields(self))


_url_item_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(UrlItem)))


class HostPacer(Protocol):
    """What the frontier needs from the politeness policy."""

    def next_allowed(self, host: str) -> float: ...


class SpillStore(Protocol):
    """Where a host's URLs beyond the in-memory window wait (crawler.journal.FrontierStore).

    Its queued rows of a host with ids above the frontier's cursor are exactly that
    host's spilled URLs; :meth:`count_queued` lets the frontier recount them.
    """

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]: ...

    def count_queued(self, host: str, after_id: int) -> int: ...

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]: ...


def bfs_priority(item: UrlItem) -> float:
    """Default priority: breadth-first (shallow pages first, FIFO among equals)."""
    return float(item.depth)


@dataclass
class _HostQueue:
    ready: list[tuple[float, int, UrlItem]] = field(default_factory=list)  # (priority, seq, item)
    delayed: list[tuple[float, int, UrlItem]] = field(default_factory=list)  # (due_at, seq, item)
    in_flight: bool = False
    scheduled_at: float | None = None  # the key of this host's live entry in a host heap
    tier: int = 0  # which heap holds that entry: 0 normal, 1 demoted
    spilled: int = 0  # queued URLs left in the durable store, not in memory
    cursor: int = 0  # store id of the last URL of this host brought into memory

    def __len__(self) -> int:
        return len(self.ready) + len(self.delayed) + self.spilled


class Frontier:
    """Per-host back queues behind a next-allowed-time heap of hosts.

    Args:
        pacer: gives each host's next allowed request time (crawler.politeness.Politeness).
        clock: injected clock (``now()``).
        rng: random source for retry jitter.
        priority: maps a UrlItem to a sort key (lower first).
        backoff_s / max_backoff_s: exponential retry backoff base and cap.
    """

    def __init__(
        self,
        pacer: HostPacer,
        clock,
        rng: random.Random | None = None,
        *,
        priority: Callable[[UrlItem], float] = bfs_priority,
        backoff_s: float = 2.0,
        max_backoff_s: float = 600.0,
        window: int | None = None,
        spill: SpillStore | None = None,
    ) -> None:
        if (window is None) != (spill is None):
            raise ValueError("window and spill go together")
        self._pacer = pacer
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._priority = priority
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._queues: dict[str, _HostQueue] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._low: list[tuple[float, int, str]] = []  # demoted hosts: served after due others
        self._demoted: set[str] = set()
        self._seq = itertools.count()
        self._size = 0
        self._in_flight = 0
        self._window = window
        self._spill = spill
        self._parked: set[str] = set()  # hosts with queued work that may never be contacted (paused)
        self.recounts = 0  # spill counts corrected from the store (each one is a bug: logged)

    # -- queries --------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of queued URLs (ready and delayed), excluding those being fetched."""
        return self._size

    @property
    def in_flight(self) -> int:
        """Hosts with a URL handed out and not yet released."""
        return self._in_flight

    def host_count(self) -> int:
        """Hosts with queued or in-flight work."""
        return len(self._queues)

    def queued_for(self, host: str) -> int:
        q = self._queues.get(host)
        return len(q) if q else 0

    def parked(self) -> tuple[int, int]:
        """(hosts, queued URLs) held by hosts that are paused: work that exists but will
        not start until an operator unpauses the host."""
        return len(self._parked), sum(self.queued_for(h) for h in self._parked)

    def next_wakeup(self) -> float | None:
        """Earliest clock time at which some queued host may become ready; None if none."""
        tops = [h[0][0] for tier, h in enumerate((self._heap, self._low)) if self._drop_stale(h, tier)]
        return min(tops) if tops else None

    def state(self) -> FrontierState:
        """READY / WAITING / BUSY / EMPTY (see :class:`FrontierState`)."""
        if self._size == 0:
            return FrontierState.EMPTY
        wake = self.next_wakeup()
        if wake is None:
            return FrontierState.BUSY
        return FrontierState.READY if wake <= self._clock.now() else FrontierState.WAITING

    # -- adding work ----------------------------------------------------------------

    def push(self, items: Iterable[UrlItem], *, in_memory: bool = False) -> int:
        """Enqueue URLs (already seen-checked, robots-checked if known). Returns the count.

        With a spill window, a host keeps at most ``window`` URLs in memory; the rest
        stay in the durable store (where :meth:`FrontierStore.add` already put them) and
        are loaded back in acceptance order as the host's queue drains. ``in_memory``
        forces a URL into memory (one taken out and put back, e.g. after a robots fetch).
        """
        n = 0
        touched: set[str] = set()
        now = self._clock.now()
        window = self._window
        for item in items:
            q = self._queues.get(item.host)
            if q is None:
                q = self._queues[item.host] = _HostQueue()
            if window is not None and not in_memory and item.due_at <= now:
                if q.spilled or len(q.ready) >= window:
                    q.spilled += 1
                    touched.add(item.host)
                    n += 1
                    continue
                q.cursor = max(q.cursor, item.sid)
            if item.due_at > now:
                heapq.heappush(q.delayed, (item.due_at, next(self._seq), item))
            else:
                item.priority = self._priority(item)
                heapq.heappush(q.ready, (item.priority, next(self._seq), item))
            touched.add(item.host)
            n += 1
        self._size += n
        for host in touched:
            self._schedule(host)
        return n

    def requeue(self, item: UrlItem) -> None:
        """Put back a URL that was handed out but not fetched (kept in memory, never spilled)."""
        self.push([item], in_memory=True)

    def retry(self, item: UrlItem, delay: float | None = None) -> float:
        """Re-enter a transiently failed URL after exponential backoff with jitter.

        ``item.attempts`` must already count the failed attempt. ``delay`` overrides the
        backoff (e.g. a Retry-After). Returns the due time. Nobody sleeps: the URL waits
        in its host's delayed heap (the "full jitter" variant keeps retries of many URLs
        of one failing host from arriving in lockstep).
        """
        if delay is None:
            cap = min(self._max_backoff_s, self._backoff_s * (2 ** max(0, item.attempts - 1)))
            delay = cap / 2 + self._rng.uniform(0, cap / 2)
        item.due_at = self._clock.now() + max(0.0, delay)
        self.push([item], in_memory=True)
        return item.due_at

    # -- taking work ----------------------------------------------------------------

    def pop_ready(self, limit: int) -> list[UrlItem]:
        """Hand out up to ``limit`` URLs, at most one per host, from hosts that are due;
        demoted hosts only once no other host is due.

        Each returned URL's host is marked in flight until :meth:`release`.
        """
        out: list[UrlItem] = []
        now = self._clock.now()
        for tier, heap in enumerate((self._heap, self._low)):
            while heap and len(out) < limit:
                at, _, host = heap[0]
                q = self._queues.get(host)
                if q is None or q.scheduled_at != at or q.tier != tier or q.in_flight:
                    heapq.heappop(heap)  # stale entry
                    continue
                if at > now:
                    break
                heapq.heappop(heap)
                q.scheduled_at = None
                self._promote(q, now, host)
                if not q.ready:  # politeness moved on, or only delayed items remain
                    self._schedule(host)
                    continue
                _, _, item = heapq.heappop(q.ready)
                self._size -= 1
                q.in_flight = True
                self._in_flight += 1
                out.append(item)
        return out

    def demote(self, host: str, demoted: bool) -> None:
        """Serve ``host`` after every other due host (True), or like the others again."""
        if demoted == (host in self._demoted):
            return
        if demoted:
            self._demoted.add(host)
        else:
            self._demoted.discard(host)
        if host in self._queues:
            self._schedule(host)  # moves its live entry to the other heap

    def trim(self, host: str, drop: int) -> list[str]:
        """Remove ``drop`` of the host's queued URLs (a budget cut); returns their URLs.

        The spilled ones go first (the newest, from the durable store), then the
        lowest-priority ones in memory. The caller records them as dropped.
        """
        q = self._queues.get(host)
        if q is None or drop <= 0:
            return []
        removed: list[str] = []
        if q.spilled and self._spill is not None:
            urls = self._spill.drop_newest(host, q.cursor, min(drop, q.spilled))
            removed.extend(urls)
            q.spilled -= len(urls)
            self._size -= len(urls)
        left = drop - len(removed)
        if left > 0:
            entries = [(p, s, it) for p, s, it in q.ready] + [(self._priority(it), s, it) for _, s, it in q.delayed]
            entries.sort(key=lambda e: (e[0], e[1]))
            doomed = {id(it) for _, _, it in entries[-left:]}
            for name in ("ready", "delayed"):
                heap = getattr(q, name)
                keep = [e for e in heap if id(e[2]) not in doomed]
                removed.extend(e[2].url for e in heap if id(e[2]) in doomed)
                if len(keep) != len(heap):
                    heapq.heapify(keep)
                    setattr(q, name, keep)
            self._size -= min(left, len(doomed))
        if len(q) == 0 and not q.in_flight:
            del self._queues[host]
            self._parked.discard(host)
        return removed

    def release(self, host: str) -> None:
        """The host's in-flight URL is finished (fetched, failed, blocked or re-queued)."""
        q = self._queues.get(host)
        if q is None or not q.in_flight:
            raise RuntimeError(f"release of host {host!r} that has nothing in flight")
        q.in_flight = False
        self._in_flight -= 1
        if len(q) == 0:
            del self._queues[host]
            self._parked.discard(host)
        else:
            self._schedule(host)

    def reschedule(self, host: str) -> None:
        """Recompute a host's place after its politeness changed (override, pause, penalty)."""
        if host in self._queues:
            self._schedule(host)

    def remove_where(self, host: str, predicate: Callable[[UrlItem], bool]) -> list[UrlItem]:
        """Remove and return the host's queued URLs matching ``predicate`` (robots purge)."""
        q = self._queues.get(host)
        if q is None:
            return []
        removed: list[UrlItem] = []
        for name in ("ready", "delayed"):
            heap = getattr(q, name)
            keep = []
            for entry in heap:
                (removed if predicate(entry[2]) else keep).append(entry)
            if len(keep) != len(heap):
                heapq.heapify(keep)
                setattr(q, name, keep)
        removed_items = [e[2] for e in removed]
        self._size -= len(removed_items)
        if len(q) == 0 and not q.in_flight:
            del self._queues[host]
            self._parked.discard(host)
        return removed_items

    def restore_spilled(self, host: str, count: int) -> None:
        """After a restart: ``count`` queued URLs of ``host`` wait in the durable store."""
        if count <= 0:
            return
        q = self._queues.get(host)
        if q is None:
            q = self._queues[host] = _HostQueue()
        q.spilled += count
        self._size += count
        self._schedule(host)

    def in_memory(self) -> int:
        """URLs held in memory (the rest of :meth:`__len__` is spilled to the store)."""
        return sum(len(q.ready) + len(q.delayed) for q in self._queues.values())

    def drain(self) -> list[UrlItem]:
        """Remove and return every queued URL (shutdown, snapshot)."""
        items = [e[2] for q in self._queues.values() for e in (*q.ready, *q.delayed)]
        for q in self._queues.values():
            q.ready.clear()
            q.delayed.clear()
            q.scheduled_at = None
        self._queues = {h: q for h, q in self._queues.items() if q.in_flight}
        self._parked.clear()
        self._heap.clear()
        self._low.clear()
        self._size = 0
        return items

    # -- internals ------------------------------------------------------------------

    def _promote(self, q: _HostQueue, now: float, host: str = "") -> None:
        if not q.ready and q.spilled and self._spill is not None:
            loaded = self._spill.load(host, q.cursor, self._window or 1)
            for item in loaded:
                q.cursor = max(q.cursor, item.sid)
                item.priority = self._priority(item)
                heapq.heappush(q.ready, (item.priority, next(self._seq), item))
            q.spilled -= len(loaded)
            if q.spilled < 0 or not loaded:
                # The store disagrees with our count: it is the truth. Recount rather than
                # guess (guessing zero once lost the host's last URLs), and say so.
                actual = self._spill.count_queued(host, q.cursor)
                log.error("frontier: %s had %d URLs left to load by count, the store has %d", host, q.spilled, actual)
                self._size += actual - q.spilled
                q.spilled = actual
                self.recounts += 1
        while q.delayed and q.delayed[0][0] <= now:
            _, _, item = heapq.heappop(q.delayed)
            item.priority = self._priority(item)
            heapq.heappush(q.ready, (item.priority, next(self._seq), item))

    def _schedule(self, host: str) -> None:
        q = self._queues[host]
        self._parked.discard(host)
        if q.in_flight or len(q) == 0:
            return
        at = self._pacer.next_allowed(host)
        if not q.ready and not q.spilled and q.delayed:
            at = max(at, q.delayed[0][0])
        if math.isinf(at):  # paused host: stays queued, never scheduled until reschedule()
            q.scheduled_at = None
            self._parked.add(host)
            return
        tier = 1 if host in self._demoted else 0
        if q.scheduled_at == at and q.tier == tier:
            return
        q.scheduled_at, q.tier = at, tier
        heapq.heappush(self._low if tier else self._heap, (at, next(self._seq), host))

    def _drop_stale(self, heap: list[tuple[float, int, str]], tier: int) -> bool:
        """Pop stale entries off ``heap``'s top; True if a live entry remains."""
        while heap:
            at, _, host = heap[0]
            q = self._queues.get(host)
            if q is not None and q.scheduled_at == at and q.tier == tier and not q.in_flight:
                return True
            heapq.heappop(heap)
        return False
