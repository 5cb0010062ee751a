"""Moving discovered links to the shards that own their hosts, in batches.

A shard never sends one URL per call: links are buffered, and a flush (by size, or by a
short timer) (1) asks the seen-URL service which of them are new, marking them seen in
the same call (docs/invariants.md #3: seen when enqueued), then (2) groups the novel
ones by owning shard and delivers one batch per destination.

For termination (docs/invariants.md #4) the router is counted as *busy* from the moment a
link is submitted until the destination has accepted it: :meth:`LinkRouter.pending`
includes buffered links and links inside a flush that has not completed. ``sent`` and
``delivered`` batch counters let the driver check that no batch is between shards.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Awaitable, Callable, Protocol, Sequence

from crawler.clock import SYSTEM_CLOCK, Clock, Timer
from crawler.frontier.urlitem import UrlItem

log = logging.getLogger(__name__)


class SeenService(Protocol):
    """The seen-URL set: ``check_and_add(urls) -> [novel?]`` in one batched call."""

    async def check_and_add(self, urls: list[str]) -> Sequence[bool]: ...


Deliver = Callable[[str, list[UrlItem]], Awaitable[None]]


class LinkRouter:
    """Buffers links, seen-checks them in batches and delivers them to their owners.

    Owners must accept idempotently (their durable store ignores a URL it already has):
    deliveries are retried after a failure, and a batch whose seen check failed is
    delivered unfiltered.

    Args:
        seen: the seen-URL service.
        owner_of: maps a host key to the id of the shard that owns it.
        deliver: ``await deliver(owner, items)`` hands a batch to that shard; it must
            not return before the shard has accepted (queued or recorded) the batch.
        batch_size: flush when this many links are buffered.
        flush_interval_s: flush at least this often while links are buffered (the
            longest a link waits here).
        early_flush_s, small_batch: ``early_flush_s`` after the first buffered link, a
            buffer still holding fewer than ``small_batch`` links is flushed at once:
            traffic is light, so waiting would add latency and save few calls. Under
            load the buffer fills past it and waits for ``batch_size`` or
            ``flush_interval_s``: fewer, larger seen checks, deliveries and commits.
            ``None`` (the default): no early flush.
        max_attempts: delivery attempts before a batch is reported lost (logged, counted).
    """

    def __init__(
        self,
        seen: SeenService,
        owner_of: Callable[[str], str],
        deliver: Deliver,
        *,
        batch_size: int = 1000,
        flush_interval_s: float = 0.05,
        early_flush_s: float | None = None,
        small_batch: int = 0,
        max_attempts: int = 10,
        before_flush: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        # before_flush: called once per flush before the seen check (group commit hook).
        self._seen = seen
        self._clock = clock
        self.before_flush = before_flush
        self._owner_of = owner_of
        self._deliver = deliver
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        early = early_flush_s is not None and early_flush_s < flush_interval_s and small_batch > 0
        self._early_flush_s = early_flush_s if early else None
        self._small_batch = small_batch
        # After the early check, a buffer that stays waits out the rest of the interval.
        self._late_s = flush_interval_s - early_flush_s if early and early_flush_s is not None else 0.0
        self._max_attempts = max_attempts
        self._buffer: list[UrlItem] = []
        self._force: list[bool] = []  # parallel to _buffer: deliver even if already seen
        self._waiters: list[asyncio.Future[bool]] = []
        self._in_flush = 0  # links inside a flush that has not finished
        self._timer: Timer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.submitted = 0
        self.novel = 0
        self.already_seen = 0
        self.batches_sent = 0
        self.batches_failed = 0
        self.links_lost = 0
        self.seen_bypassed = 0

    def pending(self) -> int:
        """Links submitted and not yet accepted by their owner (0 means nothing in transit)."""
        return len(self._buffer) + self._in_flush

    def submit(self, items: list[UrlItem], *, bypass_seen: bool = False) -> asyncio.Future[bool]:
        """Queue links for routing (non-blocking; call from within the event loop).

        Returns a future that resolves to True once every one of these links has been
        accepted by its owner (or dropped as already seen), False if a delivery was given
        up. ``bypass_seen`` delivers them even if the seen set knows them: used when a
        page fetched before a crash is fetched again, since its links may have been
        marked seen without reaching their owner (the owner's table de-duplicates).
        """
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if not items:
            fut.set_result(True)
            return fut
        self._buffer.extend(items)
        self._force.extend([bypass_seen] * len(items))
        self._waiters.append(fut)
        self.submitted += len(items)
        if len(self._buffer) >= self._batch_size:
            self._start_flush()
        elif self._timer is None:
            if self._early_flush_s is not None:
                self._timer = self._clock.call_later(self._early_flush_s, self._early_check)
            else:
                self._timer = self._clock.call_later(self._flush_interval_s, self._start_flush)
        return fut

    def _early_check(self) -> None:
        """``early_flush_s`` after the first buffered link: flush a small buffer now, else
        wait for a full batch or the rest of ``flush_interval_s``."""
        self._timer = None
        if len(self._buffer) < self._small_batch:
            self._start_flush()
        else:
            self._timer = self._clock.call_later(self._late_s, self._start_flush)

    async def flush(self) -> None:
        """Flush now and wait until every submitted link has been delivered."""
        self._start_flush()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        force, self._force = self._force, []
        waiters, self._waiters = self._waiters, []
        self._in_flush += len(batch)
        task = asyncio.get_running_loop().create_task(self._flush(batch, force, waiters))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[UrlItem], force: list[bool], waiters: list[asyncio.Future[bool]]) -> None:
        ok = False
        try:
            # 0. Whatever must be durable before links are marked seen (the sources' claims).
            if self.before_flush is not None:
                self.before_flush()
            # 1. Seen check: one call marks every novel URL seen (first one in the batch wins).
            try:
                verdicts = await self._seen.check_and_add([i.url for i in batch])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a seen shard down or restarting
                # The failed call may have marked part of the batch (one seen shard
                # answered, another did not; or a reply was lost), so asking again would
                # call those URLs "seen" and drop them. Deliver the whole batch instead:
                # each owner's durable store de-duplicates exactly.
                self.batches_failed += 1
                self.seen_bypassed += len(batch)
                log.warning("seen check failed (%r): delivering %d links unfiltered", exc, len(batch))
                verdicts = [True] * len(batch)
            by_owner: dict[str, list[UrlItem]] = defaultdict(list)
            for item, is_new, forced in zip(batch, verdicts, force):
                if is_new or forced:
                    by_owner[self._owner_of(item.host)].append(item)
                else:
                    self.already_seen += 1
            # 2. One delivery per owning shard, concurrently.
            results = await asyncio.gather(*(self._send(owner, items) for owner, items in by_owner.items()))
            ok = all(results)
        finally:
            self._in_flush -= len(batch)
            for w in waiters:
                if not w.done():
                    w.set_result(ok)

    async def _send(self, owner: str, items: list[UrlItem]) -> bool:
        self.batches_sent += 1
        ok = await self._retrying(lambda: self._deliver(owner, items), f"delivery to {owner}")
        if ok is None:
            self.links_lost += len(items)
            return False
        self.novel += len(items)
        return True

    async def _retrying(self, call: Callable[[], Awaitable], what: str):
        """At-least-once: retry a failed call with a short backoff; None after max_attempts."""
        delay = 0.05
        for attempt in range(1, self._max_attempts + 1):
            try:
                result = await call()
                return True if result is None else result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - remote failures of any kind are retried
                self.batches_failed += 1
                log.warning("%s failed (attempt %d/%d): %r", what, attempt, self._max_attempts, exc)
                if attempt == self._max_attempts:
                    log.error("%s gave up after %d attempts", what, attempt)
                    return None
                await self._clock.sleep(delay)
                delay = min(2.0, delay * 2)
        return None

    def stats(self) -> dict[str, int]:
        return {
            "links_submitted": self.submitted,
            "links_novel": self.novel,
            "links_already_seen": self.already_seen,
            "batches_sent": self.batches_sent,
            "batches_failed": self.batches_failed,
            "links_lost": self.links_lost,
            "links_seen_bypassed": self.seen_bypassed,
            "links_in_transit": self.pending(),
        }
