"""The two-tier URL frontier of one shard (Mercator-style).

Back queues: one per host (crawler.frontier.backqueue.HostQueue) with its discovery URLs in
priority order, its retries waiting out their backoff and its refreshes waiting for
their due time; the host's politeness allowance is shared between discovery and refresh.

Host selection (:class:`HostHeaps`): a heap of hosts keyed by the time the host may next
be contacted (the politeness object's ``next_allowed``, or the due time of the host's
first waiting URL). A host leaves the heaps while one of its URLs is being fetched, so
there is never more than one request in flight per host (docs/invariants.md #2); it
re-enters when released.
Hosts whose time has come move to a *due* heap ordered across hosts by the pluggable
priority of what each would send next (front queues by priority): demoted hosts (low
novelty, crawler.policy.hostbudget) after all others, then by rank (depth for discovery, how overdue
for refresh, seed priority). So a demoted host yields to other due hosts but is not
slowed when it is the only work left.

The frontier does not know about robots, budgets or the seen set: the scheduler applies
those before :meth:`Frontier.push` and after :meth:`Frontier.pop_ready`. It answers
"nothing ready now" (:attr:`FrontierState.WAITING` with a wake-up time) differently from
"nothing at all" (:attr:`FrontierState.EMPTY`).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import math
import random
from typing import Iterable, Protocol

from crawler.frontier.backqueue import HostQueue, Priority, default_priority
from crawler.frontier.urlitem import UrlItem

log = logging.getLogger(__name__)

__all__ = ["Frontier", "FrontierState", "UrlItem", "default_priority"]


class FrontierState(enum.Enum):
    """What :meth:`Frontier.state` reports."""

    READY = "ready"  # a host may be contacted now
    WAITING = "waiting"  # work exists but no host is due yet (see next_wakeup)
    BUSY = "busy"  # work exists only for hosts with a request in flight
    EMPTY = "empty"  # no queued URL at all


class HostPacer(Protocol):
    """What the frontier needs from the politeness policy."""

    def next_allowed(self, host: str) -> float: ...


class SpillStore(Protocol):
    """Where a host's discovery URLs beyond the in-memory window wait (crawler.frontier.store).

    Its queued rows of a host with ids above the frontier's cursor are exactly that
    host's spilled URLs; :meth:`count_queued` lets the frontier recount them.
    """

    def load(self, host: str, after_id: int, limit: int) -> list[UrlItem]: ...

    def count_queued(self, host: str, after_id: int) -> int: ...

    def drop_newest(self, host: str, after_id: int, limit: int) -> list[str]: ...


class Frontier:
    """Per-host back queues behind host heaps (see the module docstring).

    Args:
        pacer: gives each host's next allowed request time (crawler.policy.politeness.Politeness).
        clock: injected clock (``now()``).
        rng: random source for retry jitter.
        priority: ``priority(item, now)``, lower first (crawler.frontier.backqueue.default_priority).
        backoff_s / max_backoff_s: exponential retry backoff base and cap.
        window / spill: keep at most ``window`` discovery URLs per host in memory, the
            rest in ``spill`` (the shard's durable store).
        refresh_share: share of each host's allowance for due refreshes.
    """

    def __init__(
        self,
        pacer: HostPacer,
        clock,
        rng: random.Random | None = None,
        *,
        priority: Priority = default_priority,
        backoff_s: float = 2.0,
        max_backoff_s: float = 600.0,
        window: int | None = None,
        spill: SpillStore | None = None,
        refresh_share: float = 0.2,
    ) -> None:
        if (window is None) != (spill is None):
            raise ValueError("window and spill go together")
        self._pacer = pacer
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._priority = priority
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._share = refresh_share
        self._queues: dict[str, HostQueue] = {}
        self._heaps = HostHeaps(self._queues)
        self._demoted: set[str] = set()
        self._size = 0
        self._in_flight = 0
        self._window = window
        self._spill = spill
        self._parked: set[str] = set()  # hosts with queued work that may never be contacted (paused)
        self._held: set[str] = set()  # hosts being handed to another shard (crawler.placement.handover)
        self._refreshes = 0  # refresh items held in memory
        self._due_count: tuple[float, int] = (float("-inf"), 0)  # (computed at, refreshes due then)
        self.recounts = 0  # spill counts corrected from the store (each one is a bug: logged)

    # -- queries --------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of queued URLs (in memory or spilled), excluding those being fetched."""
        return self._size

    @property
    def in_flight(self) -> int:
        """Hosts with a URL handed out and not yet released."""
        return self._in_flight

    def host_count(self) -> int:
        """Hosts with queued or in-flight work."""
        return len(self._queues)

    def keys(self) -> list[str]:
        """Hosts with queued or in-flight work (the control API's host view)."""
        return list(self._queues)

    def queued_for(self, host: str) -> int:
        q = self._queues.get(host)
        return len(q) if q else 0

    def parked(self) -> tuple[int, int]:
        """(hosts, queued URLs) held by hosts that are paused: work that exists but will
        not start until an operator unpauses the host."""
        return len(self._parked), sum(self.queued_for(h) for h in self._parked)

    def refreshes(self) -> tuple[int, int]:
        """(refreshes held in memory, of which due now). The second is recounted at most
        every 5 s: it walks the hosts, and progress asks several times a second."""
        now = self._clock.now()
        if now - self._due_count[0] >= 5.0:
            due = sum(1 for q in self._queues.values() for at, _, _ in q.refresh if at <= now)
            self._due_count = (now, due)
        return self._refreshes, min(self._due_count[1], self._refreshes)

    def next_wakeup(self) -> float | None:
        """Earliest clock time at which some queued host may become ready; None if none."""
        return self._heaps.next_wakeup()

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

        With a spill window, a host keeps at most ``window`` discovery URLs in memory;
        the rest stay in the durable store (where it already put them) and are loaded
        back in acceptance order as the host's queue drains. ``in_memory`` forces a URL
        into memory (one taken out and put back, e.g. after a robots fetch). Refreshes
        are always in memory (the store hands out only those due soon).
        """
        n = 0
        # Hosts in the order their URLs came (a dict, not a set: the order hosts are
        # scheduled in must not depend on string hashes, so a simulated crawl replays).
        touched: dict[str, None] = {}
        now = self._clock.now()
        window = self._window
        for item in items:
            q = self._queues.get(item.host)
            if q is None:
                q = self._queues[item.host] = HostQueue()
            if window is not None and not in_memory and item.kind == "discover" and item.due_at <= now:
                if q.spilled or len(q.ready) >= window:
                    q.spilled += 1
                    touched[item.host] = None
                    n += 1
                    continue
                q.cursor = max(q.cursor, item.sid)
            q.add(item, self._priority, now)
            self._refreshes += item.kind == "refresh"
            touched[item.host] = None
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
        in its host's queue (the "full jitter" variant keeps retries of many URLs of one
        failing host from arriving in lockstep).
        """
        if delay is None:
            cap = min(self._max_backoff_s, self._backoff_s * (2 ** max(0, item.attempts - 1)))
            delay = cap / 2 + self._rng.uniform(0, cap / 2)
        item.due_at = self._clock.now() + max(0.0, delay)
        self.push([item], in_memory=True)
        return item.due_at

    # -- taking work ----------------------------------------------------------------

    def pop_ready(self, limit: int) -> list[UrlItem]:
        """Hand out up to ``limit`` URLs, at most one per host, from hosts that are due,
        best rank first (demoted hosts last).

        Each returned URL's host is marked in flight until :meth:`release`.
        """
        out: list[UrlItem] = []
        now = self._clock.now()
        self._heaps.collect_due(now, self._priority)
        while len(out) < limit:
            host = self._heaps.pop_due()
            if host is None:
                break
            q = self._queues[host]
            q.due_key = q.scheduled_at = None
            self._load(q, now, host)
            item = q.take(now, self._share)
            if item is None:  # politeness moved on, or only waiting URLs remain
                self._schedule(host)
                continue
            self._size -= 1
            self._refreshes -= item.kind == "refresh"
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
        q = self._queues.get(host)
        if q is not None:
            q.scheduled_at = q.due_key = None  # its entries are now stale
            self._schedule(host)

    def trim(self, host: str, drop: int) -> list[str]:
        """Remove ``drop`` of the host's queued discovery URLs (a budget cut); returns them.

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
            now = self._clock.now()
            entries = [(p, s, it) for p, s, it in q.ready] + [(self._priority(it, now), s, it) for _, s, it in q.delayed]
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
        self._forget_if_empty(host, q)
        return removed

    def release(self, host: str) -> None:
        """The host's in-flight URL is finished (fetched, failed, blocked or re-queued)."""
        q = self._queues.get(host)
        if q is None or not q.in_flight:
            raise RuntimeError(f"release of host {host!r} that has nothing in flight")
        q.in_flight = False
        self._in_flight -= 1
        if not self._forget_if_empty(host, q):
            self._schedule(host)

    def reschedule(self, host: str) -> None:
        """Recompute a host's place after its politeness changed (override, pause)."""
        q = self._queues.get(host)
        if q is not None:
            q.scheduled_at = q.due_key = None
            self._schedule(host)

    def remove_where(self, host: str, predicate) -> list[UrlItem]:
        """Remove and return the host's in-memory URLs matching ``predicate`` (robots purge)."""
        q = self._queues.get(host)
        if q is None:
            return []
        removed: list[UrlItem] = []
        for name in ("ready", "delayed", "refresh"):
            heap = getattr(q, name)
            keep = [e for e in heap if not predicate(e[2])]
            if len(keep) != len(heap):
                removed.extend(e[2] for e in heap if predicate(e[2]))
                heapq.heapify(keep)
                setattr(q, name, keep)
        self._size -= len(removed)
        self._refreshes -= sum(1 for it in removed if it.kind == "refresh")
        self._forget_if_empty(host, q)
        return removed

    def hold(self, host: str) -> None:
        """Hand out no URL of ``host`` until :meth:`unhold` (it is being handed over)."""
        self._held.add(host)
        self.reschedule(host)

    def unhold(self, host: str) -> None:
        """Schedule a held host again."""
        self._held.discard(host)
        self.reschedule(host)

    def busy(self, host: str) -> bool:
        """True while one of ``host``'s URLs is handed out (between pop and release)."""
        q = self._queues.get(host)
        return q is not None and q.in_flight

    def evict(self, host: str) -> int:
        """Forget every URL of ``host`` (it moves to another shard, which gets them from
        the durable store where all of them are); returns how many were queued.
        ValueError while one of its URLs is in flight."""
        q = self._queues.get(host)
        if q is None:
            return 0
        if q.in_flight:
            raise ValueError(f"frontier: {host!r} has a URL in flight")
        n = len(q)
        self._refreshes -= sum(1 for it in q.items() if it.kind == "refresh")
        self._size -= n
        del self._queues[host]  # its heap entries are stale now (checked on pop)
        self._parked.discard(host)
        self._demoted.discard(host)
        self._held.discard(host)
        return n

    def restore_spilled(self, host: str, count: int) -> None:
        """After a restart: ``count`` queued URLs of ``host`` wait in the durable store."""
        if count <= 0:
            return
        q = self._queues.get(host)
        if q is None:
            q = self._queues[host] = HostQueue()
        q.spilled += count
        self._size += count
        self._schedule(host)

    def in_memory(self) -> int:
        """URLs held in memory (the rest of :meth:`__len__` is spilled to the store)."""
        return sum(len(q) - q.spilled for q in self._queues.values())

    def drain(self) -> list[UrlItem]:
        """Remove and return every queued URL held in memory (shutdown, snapshot)."""
        items = [it for q in self._queues.values() for it in q.items()]
        for q in self._queues.values():
            q.ready.clear()
            q.delayed.clear()
            q.refresh.clear()
            q.scheduled_at = q.due_key = None
        for host in [h for h, q in self._queues.items() if not q.in_flight]:
            del self._queues[host]  # in place: the heaps share this dict
        self._parked.clear()
        self._heaps.clear()
        self._size = self._refreshes = 0
        return items

    # -- internals ------------------------------------------------------------------

    def _load(self, q: HostQueue, now: float, host: str) -> None:
        """Bring spilled discovery URLs into memory when the host's ready queue is empty."""
        if not q.ready and q.spilled and self._spill is not None:
            loaded = self._spill.load(host, q.cursor, self._window or 1)
            for item in loaded:
                q.cursor = max(q.cursor, item.sid)
                q.add(item, self._priority, now)
            q.spilled -= len(loaded)
            if q.spilled < 0 or not loaded:
                # The store disagrees with our count: it is the truth. Recount rather than
                # guess (guessing zero once lost the host's last URLs), and say so.
                actual = self._spill.count_queued(host, q.cursor)
                log.error("frontier: %s had %d URLs left to load by count, the store has %d", host, q.spilled, actual)
                self._size += actual - q.spilled
                q.spilled = actual
                self.recounts += 1
        q.promote(now, self._priority)

    def _schedule(self, host: str) -> None:
        q = self._queues[host]
        self._parked.discard(host)
        if q.in_flight or len(q) == 0:
            return
        if host in self._held:  # its entries go stale; nothing is handed out
            q.scheduled_at = q.due_key = None
            return
        at = self._pacer.next_allowed(host)
        if not q.ready and not q.spilled:
            wait = q.earliest_wait()
            if wait is not None:
                at = max(at, wait)
        if math.isinf(at):  # paused host: stays queued, never scheduled until reschedule()
            q.scheduled_at = q.due_key = None
            self._parked.add(host)
            return
        self._heaps.schedule(host, q, at, 1 if host in self._demoted else 0)

    def _forget_if_empty(self, host: str, q: HostQueue) -> bool:
        if len(q) == 0 and not q.in_flight:
            del self._queues[host]
            self._parked.discard(host)
            return True
        return False


class HostHeaps:
    """Which host the frontier contacts next: the host-selection heaps of one shard.

    Two time heaps (tier 0 normal, tier 1 demoted) hold ``(at, seq, host)``: when each
    scheduled host may next be contacted. :meth:`collect_due` moves the hosts whose time
    has come to the due heap, ``(tier, rank, at, seq, host)``, so hosts that are due are
    served demoted-last, then best rank first. Entries are never removed in place: a
    host's :class:`~crawler.frontier.backqueue.HostQueue` remembers its live entry
    (``scheduled_at``/``tier``, ``due_key``) and any other entry is stale, skipped when
    it reaches the top. ``queues`` is the frontier's own dict of host queues (shared).
    """

    def __init__(self, queues: dict[str, HostQueue]) -> None:
        self._queues = queues
        self._timed: tuple[list, list] = ([], [])  # (at, seq, host) per tier: 0 normal, 1 demoted
        self._due: list[tuple] = []  # (tier, rank, at, seq, host): hosts whose time has come
        self._seq = itertools.count()

    def schedule(self, host: str, q: HostQueue, at: float, tier: int) -> None:
        """Put ``host`` in the ``tier`` time heap at ``at`` (no-op if it is already there)."""
        if q.scheduled_at == at and q.tier == tier:
            return
        q.scheduled_at, q.tier, q.due_key = at, tier, None
        heapq.heappush(self._timed[tier], (at, next(self._seq), host))

    def collect_due(self, now: float, priority: Priority) -> None:
        """Move hosts whose time has come from the time heaps to the due heap, ranked."""
        for tier, heap in enumerate(self._timed):
            while heap and heap[0][0] <= now:
                at, _, host = heapq.heappop(heap)
                q = self._queues.get(host)
                if q is None or q.scheduled_at != at or q.tier != tier or q.in_flight or q.due_key is not None:
                    continue
                key = (tier, q.head_priority(now, priority), at, next(self._seq), host)
                q.due_key = key
                heapq.heappush(self._due, key)

    def pop_due(self) -> str | None:
        """The best due host, taken off the due heap (None when no host is due)."""
        while self._due:
            entry = heapq.heappop(self._due)
            if self._live_due(entry):
                return entry[4]
        return None

    def next_wakeup(self) -> float | None:
        """Earliest time at which a scheduled host may be contacted; None if none is."""
        tops = []
        while self._due:
            if self._live_due(self._due[0]):
                tops.append(self._due[0][2])
                break
            heapq.heappop(self._due)
        tops += [h[0][0] for tier, h in enumerate(self._timed) if self._drop_stale(h, tier)]
        return min(tops) if tops else None

    def clear(self) -> None:
        """Forget every entry (the frontier drained its queues)."""
        for heap in (*self._timed, self._due):
            heap.clear()

    def _live_due(self, entry: tuple) -> bool:
        q = self._queues.get(entry[4])
        return q is not None and q.due_key == entry and not q.in_flight

    def _drop_stale(self, heap: list[tuple[float, int, str]], tier: int) -> bool:
        """Pop stale entries off ``heap``'s top; True if a live entry remains."""
        while heap:
            at, _, host = heap[0]
            q = self._queues.get(host)
            if q is not None and q.scheduled_at == at and q.tier == tier and not q.in_flight and q.due_key is None:
                return True
            heapq.heappop(heap)
        return False
