"""When each host of a shard's frontier (crawler.frontier.frontier) may next be contacted,
and which due host goes first: the host-selection half of the Mercator design.

A host is scheduled at the time its politeness allows (``next_allowed``), or at the due
time of its first waiting URL when nothing of it is ready. A host with a URL in flight is
not scheduled (one request per host at a time: docs/invariants.md #2); nor is a host held
for a handover; a paused host (``next_allowed`` infinite) is *parked*: its work exists but
will not start until it is rescheduled. Demoted hosts (low novelty,
crawler.policy.hostbudget) go after all other due hosts but are not slowed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol

from crawler.frontier.backqueue import DueKey, HostQueue, Priority

__all__ = ["HostHeaps", "HostPacer", "HostSchedule"]

#: A host's entry in a time heap: (at, seq, host).
_Timed = tuple[float, int, str]


class HostPacer(Protocol):
    """What the frontier needs from the politeness policy."""

    def next_allowed(self, host: str) -> float: ...


class HostSchedule:
    """Puts hosts in the :class:`HostHeaps` at the time each may next be contacted, minding
    the hosts parked (paused), held (being handed over) and demoted (the module
    docstring). ``queues`` is the frontier's own dict of host queues (shared)."""

    def __init__(self, queues: dict[str, HostQueue], pacer: HostPacer) -> None:
        self._queues = queues
        self._pacer = pacer
        self.heaps = HostHeaps(queues)
        self._demoted: set[str] = set()
        self.parked: set[str] = set()  # hosts with queued work that may never be contacted (paused)
        self._held: set[str] = set()  # hosts being handed to another shard (crawler.placement.handover)

    def schedule(self, host: str) -> None:
        """Give ``host`` its place in the heaps (none while in flight, empty, held or paused)."""
        q = self._queues[host]
        self.parked.discard(host)
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
            self.parked.add(host)
            return
        self.heaps.schedule(host, q, at, 1 if host in self._demoted else 0)

    def reschedule(self, host: str) -> None:
        """Recompute a host's place (its entries are stale now)."""
        q = self._queues.get(host)
        if q is not None:
            q.scheduled_at = q.due_key = None
            self.schedule(host)

    def demote(self, host: str, demoted: bool) -> None:
        """Serve ``host`` after every other due host (True), or like the others again."""
        if demoted == (host in self._demoted):
            return
        if demoted:
            self._demoted.add(host)
        else:
            self._demoted.discard(host)
        self.reschedule(host)

    def hold(self, host: str, held: bool) -> None:
        """Schedule ``host`` no more (True: it is being handed over), or again."""
        if held:
            self._held.add(host)
        else:
            self._held.discard(host)
        self.reschedule(host)

    def forget(self, host: str) -> None:
        """``host`` left the shard: nothing of it is parked, held or demoted any more."""
        self.parked.discard(host)
        self._demoted.discard(host)
        self._held.discard(host)

    def clear(self) -> None:
        """Forget every host's place (the frontier drained its queues)."""
        self.parked.clear()
        self.heaps.clear()


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
        self._timed: tuple[list[_Timed], list[_Timed]] = ([], [])  # per tier: 0 normal, 1 demoted
        self._due: list[DueKey] = []  # hosts whose time has come
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
        self._timed[0].clear()
        self._timed[1].clear()
        self._due.clear()

    def _live_due(self, entry: DueKey) -> bool:
        q = self._queues.get(entry[4])
        return q is not None and q.due_key == entry and not q.in_flight

    def _drop_stale(self, heap: list[_Timed], tier: int) -> bool:
        """Pop stale entries off ``heap``'s top; True if a live entry remains."""
        while heap:
            at, _, host = heap[0]
            q = self._queues.get(host)
            if q is not None and q.scheduled_at == at and q.tier == tier and not q.in_flight and q.due_key is None:
                return True
            heapq.heappop(heap)
        return False
