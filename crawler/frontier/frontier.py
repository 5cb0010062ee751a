"""The two-tier URL frontier of one shard (Mercator-style).

Back queues: one per host (crawler.frontier.backqueue.HostQueue) with its discovery URLs in
priority order, its retries waiting out their backoff and its refreshes waiting for
their due time; the host's politeness allowance is shared between discovery and refresh.

Host selection (crawler.frontier.hostschedule.HostHeaps): a heap of hosts keyed by the time the host may next
be contacted (the politeness object's ``next_allowed``, or the due time of the host's
first waiting URL). A host leaves the heaps while one of its URLs is being fetched, so
there is never more than one request in flight per host (docs/invariants.md #2); it
re-enters when released.
Hosts whose time has come move to a *due* heap ordered across hosts by the pluggable
priority of what each would send next (front queues by priority): demoted hosts (low
novelty, crawler.policy.hostbudget) after all others, then by rank (depth for discovery, how overdue
for refresh, seed priority). So a demoted host yields to other due hosts but is not
slowed when it is the only work left.

The frontier does not know about robots, budgets or the seen set: the dispatcher's gates apply
those before :meth:`Frontier.push` and after :meth:`Frontier.pop_ready`. It answers
"nothing ready now" (:attr:`FrontierState.WAITING` with a wake-up time) differently from
"nothing at all" (:attr:`FrontierState.EMPTY`).

Its parts: a host's queues (crawler.frontier.backqueue), when each host is scheduled
(crawler.frontier.hostschedule), the in-memory window over the durable store
(crawler.frontier.spillwindow). This class keeps the counts and hands the work out.
"""

from __future__ import annotations

import enum
import random
from typing import Callable, Iterable

from crawler.clock import Clock
from crawler.frontier.backqueue import HostQueue, HostQueues, Priority, default_priority
from crawler.frontier.hostschedule import HostHeaps, HostPacer, HostSchedule
from crawler.frontier.spillwindow import SpillStore, SpillWindow
from crawler.frontier.urlitem import UrlItem

__all__ = ["Frontier", "FrontierState", "HostHeaps", "HostPacer", "SpillStore", "UrlItem", "default_priority"]


class FrontierState(enum.Enum):
    """What :meth:`Frontier.state` reports."""

    READY = "ready"  # a host may be contacted now
    WAITING = "waiting"  # work exists but no host is due yet (see next_wakeup)
    BUSY = "busy"  # work exists only for hosts with a request in flight
    EMPTY = "empty"  # no queued URL at all


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
        clock: Clock,
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
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._priority = priority
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._share = refresh_share
        self._queues = HostQueues()
        self._hosts = HostSchedule(self._queues.by_host, pacer)
        self._spill = SpillWindow(window, spill) if window is not None and spill is not None else None
        self._due_count: tuple[float, int] = (float("-inf"), 0)  # (computed at, refreshes due then)

    # -- queries --------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of queued URLs (in memory or spilled), excluding those being fetched."""
        return self._queues.size

    @property
    def in_flight(self) -> int:
        """Hosts with a URL handed out and not yet released."""
        return self._queues.in_flight

    @property
    def recounts(self) -> int:
        """Spill counts corrected from the store (each one is a bug: logged)."""
        return self._spill.recounts if self._spill is not None else 0

    def host_count(self) -> int:
        """Hosts with queued or in-flight work."""
        return len(self._queues.by_host)

    def keys(self) -> list[str]:
        """Hosts with queued or in-flight work (the control API's host view)."""
        return list(self._queues.by_host)

    def queued_for(self, host: str) -> int:
        """URLs of ``host`` queued (in memory or spilled), excluding one being fetched."""
        return self._queues.queued_for(host)

    def parked(self) -> tuple[int, int]:
        """(hosts, queued URLs) held by hosts that are paused: work that exists but will
        not start until an operator unpauses the host."""
        parked = self._hosts.parked
        return len(parked), sum(self.queued_for(h) for h in parked)

    def refreshes(self) -> tuple[int, int]:
        """(refreshes held in memory, of which due now). The second is recounted at most
        every 5 s: it walks the hosts, and progress asks several times a second."""
        now = self._clock.now()
        if now - self._due_count[0] >= 5.0:
            self._due_count = (now, self._queues.refreshes_due(now))
        held = self._queues.refreshes
        return held, min(self._due_count[1], held)

    def next_wakeup(self) -> float | None:
        """Earliest clock time at which some queued host may become ready; None if none."""
        return self._hosts.heaps.next_wakeup()

    def state(self) -> FrontierState:
        """READY / WAITING / BUSY / EMPTY (see :class:`FrontierState`)."""
        if self._queues.size == 0:
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
        spill = None if in_memory else self._spill
        for item in items:
            q = self._queues.of(item.host)
            touched[item.host] = None
            n += 1
            if spill is not None and item.kind == "discover" and item.due_at <= now and spill.spills(q, item):
                continue
            q.add(item, self._priority, now)
            self._queues.refreshes += item.kind == "refresh"
        self._queues.size += n
        for host in touched:
            self._hosts.schedule(host)
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

    def restore_spilled(self, host: str, count: int) -> None:
        """After a restart: ``count`` queued URLs of ``host`` wait in the durable store."""
        if count <= 0:
            return
        self._queues.of(host).spilled += count
        self._queues.size += count
        self._hosts.schedule(host)

    # -- taking work ----------------------------------------------------------------

    def pop_ready(self, limit: int) -> list[UrlItem]:
        """Hand out up to ``limit`` URLs, at most one per host, from hosts that are due,
        best rank first (demoted hosts last).

        Each returned URL's host is marked in flight until :meth:`release`.
        """
        out: list[UrlItem] = []
        now = self._clock.now()
        heaps = self._hosts.heaps
        heaps.collect_due(now, self._priority)
        while len(out) < limit:
            host = heaps.pop_due()
            if host is None:
                break
            q = self._queues.by_host[host]
            q.due_key = q.scheduled_at = None
            if self._spill is not None:
                self._queues.size += self._spill.load(host, q, now, self._priority)
            q.promote(now, self._priority)
            item = q.take(now, self._share)
            if item is None:  # politeness moved on, or only waiting URLs remain
                self._hosts.schedule(host)
                continue
            self._queues.size -= 1
            self._queues.refreshes -= item.kind == "refresh"
            q.in_flight = True
            self._queues.in_flight += 1
            out.append(item)
        return out

    def release(self, host: str) -> None:
        """The host's in-flight URL is finished (fetched, failed, blocked or re-queued)."""
        q = self._queues.by_host.get(host)
        if q is None or not q.in_flight:
            raise RuntimeError(f"release of host {host!r} that has nothing in flight")
        q.in_flight = False
        self._queues.in_flight -= 1
        if not self._forget_if_empty(host, q):
            self._hosts.schedule(host)

    def busy(self, host: str) -> bool:
        """True while one of ``host``'s URLs is handed out (between pop and release)."""
        q = self._queues.by_host.get(host)
        return q is not None and q.in_flight

    # -- a host's place -------------------------------------------------------------

    def demote(self, host: str, demoted: bool) -> None:
        """Serve ``host`` after every other due host (True), or like the others again."""
        self._hosts.demote(host, demoted)

    def reschedule(self, host: str) -> None:
        """Recompute a host's place after its politeness changed (override, pause)."""
        self._hosts.reschedule(host)

    def hold(self, host: str) -> None:
        """Hand out no URL of ``host`` until :meth:`unhold` (it is being handed over)."""
        self._hosts.hold(host, True)

    def unhold(self, host: str) -> None:
        """Schedule a held host again."""
        self._hosts.hold(host, False)

    # -- taking work out --------------------------------------------------------------

    def trim(self, host: str, drop: int) -> list[str]:
        """Remove ``drop`` of the host's queued discovery URLs (a budget cut); returns them.

        The spilled ones go first (the newest, from the durable store), then the
        lowest-priority ones in memory. The caller records them as dropped.
        """
        q = self._queues.by_host.get(host)
        if q is None or drop <= 0:
            return []
        removed: list[str] = []
        if self._spill is not None:
            removed.extend(self._spill.trim(host, q, drop))
            self._queues.size -= len(removed)
        left = drop - len(removed)
        if left > 0:
            urls, n = q.drop_lowest(left, self._priority, self._clock.now())
            removed.extend(urls)
            self._queues.size -= n
        self._forget_if_empty(host, q)
        return removed

    def remove_where(self, host: str, predicate: Callable[[UrlItem], bool]) -> list[UrlItem]:
        """Remove and return the host's in-memory URLs matching ``predicate`` (robots purge)."""
        removed = self._queues.remove(host, predicate)
        q = self._queues.by_host.get(host)
        if q is not None:
            self._forget_if_empty(host, q)
        return removed

    def evict(self, host: str) -> int:
        """Forget every URL of ``host`` (it moves to another shard, which gets them from
        the durable store where all of them are); returns how many were queued.
        ValueError while one of its URLs is in flight."""
        if host not in self._queues.by_host:
            return 0
        n = self._queues.evict(host)
        self._hosts.forget(host)
        return n

    def in_memory(self) -> int:
        """URLs held in memory (the rest of :meth:`__len__` is spilled to the store)."""
        return self._queues.in_memory()

    def drain(self) -> list[UrlItem]:
        """Remove and return every queued URL held in memory (shutdown, snapshot)."""
        items = self._queues.drain()
        self._hosts.clear()
        return items

    def _forget_if_empty(self, host: str, q: HostQueue) -> bool:
        if self._queues.forget_if_empty(host, q):
            self._hosts.parked.discard(host)
            return True
        return False
