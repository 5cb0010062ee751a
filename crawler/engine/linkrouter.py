"""Moving discovered links to the shards that own their hosts, in batches.

A shard never sends one URL per call: links are buffered, and a flush (by size, or by a
short timer) (1) asks the seen-URL service which of them are new, marking them seen in
the same call (docs/invariants.md #3: seen when enqueued), then (2) groups the novel
ones by owning shard and delivers one batch per destination.

For termination (docs/invariants.md #4) the router is counted as *busy* from the moment a
link is submitted until the destination has accepted it: :meth:`LinkRouter.pending`
includes buffered links and links inside a flush that has not completed. ``sent`` and
``delivered`` batch counters let the driver check that no batch is between shards.

A delivery that fails is never a web outcome (docs/invariants.md #13). A receiver that
cannot take the batch *now* (fenced while its driver is silent or its lease unreadable,
restarting, its object store failing, a timeout: crawler.errors.retry_later) is asked
again with backoff on the injected clock for as long as the run lives, so the pages that
yielded the links wait, unacked. Any other error is a bug: the batch is tried
``max_attempts`` times and then given up (counted ``links_lost``). A batch given up, or
abandoned because this shard stops (:meth:`LinkRouter.stop`, counted ``links_unsent``), has
its seen marks undone, so that no URL stays marked that no shard holds; the pages that
sent it are told (their future resolves False) and are not acked: they are fetched again
(a stopped shard's claimed pages on its resume, their links past the seen filter).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Awaitable, Callable, Protocol, Sequence

from crawler.clock import SYSTEM_CLOCK, Clock, Timer, wait_event
from crawler.errors import retry_later
from crawler.frontier.urlitem import UrlItem

log = logging.getLogger(__name__)

#: Backoff between two attempts of one delivery: doubling from the first to the cap.
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0


class SeenService(Protocol):
    """The seen-URL set: ``check_and_add(urls) -> [novel?]`` in one batched call, and
    ``forget(urls)`` to undo the marks of URLs whose delivery was given up."""

    async def check_and_add(self, urls: list[str]) -> Sequence[bool]: ...

    async def forget(self, urls: list[str]) -> int: ...


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
        max_attempts: attempts of a delivery that fails with a bug (not a refusal:
            crawler.errors.retry_later) before it is given up (logged, counted).
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
        self._stop = asyncio.Event()  # set by stop(): no new flush, no more retries
        self.submitted = 0
        self.novel = 0
        self.already_seen = 0
        self.batches_sent = 0
        self.batches_failed = 0
        self.links_lost = 0  # given up after max_attempts bugs
        self.links_unsent = 0  # not delivered because this shard stopped
        self.batches_refused = 0  # attempts a receiver refused for now (retried)
        self.marks_undone = 0  # seen marks undone after a delivery was given up
        self.marks_kept = 0  # ... that could not be undone (the seen service failed)
        self.seen_bypassed = 0

    def pending(self) -> int:
        """Links submitted and not yet accepted by their owner (0 means nothing in transit)."""
        return len(self._buffer) + self._in_flush

    def submit(self, items: list[UrlItem], *, bypass_seen: bool = False) -> asyncio.Future[bool]:
        """Queue links for routing (non-blocking; call from within the event loop).

        Returns a future that resolves to True once every one of these links has been
        accepted by its owner (or dropped as already seen), False if a delivery was given
        up or abandoned (module docstring). ``bypass_seen`` delivers them even if the seen
        set knows them: used when a page fetched before a crash is fetched again, since its
        links may have been marked seen without reaching their owner (the owner's table
        de-duplicates). After :meth:`stop` nothing is taken: the future is False at once.
        """
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if not items:
            fut.set_result(True)
            return fut
        if self._stop.is_set():
            self.links_unsent += len(items)
            fut.set_result(False)
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
        """Flush now and wait until every submitted link has been delivered (or, after
        :meth:`stop`, abandoned)."""
        self._start_flush()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def stop(self) -> None:
        """This shard stops: links still buffered are dropped (not yet seen-checked, so
        nothing is marked), deliveries waiting to be retried end at once with their marks
        undone, a delivery call under way is let finish; every page waiting on them is
        told False. Its URL stays claimed in the store (or queued: its claim was never
        committed), so a resume fetches it again and re-sends its links (DESIGN
        invariant 13)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        dropped, self._buffer, self._force = self._buffer, [], []
        waiters, self._waiters = self._waiters, []
        self.links_unsent += len(dropped)
        for w in waiters:
            if not w.done():
                w.set_result(False)

    async def close(self) -> None:
        """:meth:`stop`, then wait for the deliveries under way to end."""
        self.stop()
        await self.flush()

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer or self._stop.is_set():
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
            marked: set[str] | None = None  # URLs this flush marked (None: not known)
            try:
                verdicts = await self._seen.check_and_add([i.url for i in batch])
                marked = {i.url for i, new in zip(batch, verdicts) if new}
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
            results = await asyncio.gather(*(self._send(owner, items, marked) for owner, items in by_owner.items()))
            ok = all(results)
        finally:
            self._in_flush -= len(batch)
            for w in waiters:
                if not w.done():
                    w.set_result(ok)

    async def _send(self, owner: str, items: list[UrlItem], marked: set[str] | None) -> bool:
        """Deliver one owner's batch: True once accepted; False when given up or
        abandoned, after undoing the seen marks this flush made for it."""
        self.batches_sent += 1
        delay, bugs, refusals, since = FIRST_BACKOFF_S, 0, 0, self._clock.now()
        while not self._stop.is_set():
            try:
                await self._deliver(owner, items)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified: a refusal waits, a bug is bounded
                self.batches_failed += 1
                if retry_later(exc):
                    # The receiver cannot take it now (docs/invariants.md #13): wait, never give up.
                    self.batches_refused += 1
                    refusals += 1
                    if refusals == 1:
                        log.warning("delivery to %s refused (%r): retrying until it is taken", owner, exc)
                else:
                    bugs += 1
                    log.error("delivery to %s failed (attempt %d/%d): %r", owner, bugs, self._max_attempts, exc,
                              exc_info=exc)
                    if bugs >= self._max_attempts:
                        log.error("delivery to %s gave up after %d attempts", owner, bugs)
                        self.links_lost += len(items)
                        await self._unmark(items, marked)
                        return False
                await wait_event(self._clock, self._stop, delay)
                delay = min(MAX_BACKOFF_S, delay * 2)
                continue
            if refusals:
                waited = self._clock.now() - since
                log.warning("delivery to %s taken after %d refusals (%.1f s)", owner, refusals, waited)
            self.novel += len(items)
            return True
        self.links_unsent += len(items)
        await self._unmark(items, marked)
        return False

    async def _unmark(self, items: list[UrlItem], marked: set[str] | None) -> None:
        """Undo the seen marks this flush made for ``items`` (none is held by a shard), so
        that another page's link to one of them is admitted again and the seen filter
        counts no URL as admitted that no shard holds (crawler.session.ledger). Marks of a
        flush whose seen check failed are unknown and stay (that flush bypassed the
        filter: the ledger knows its count is not exact)."""
        urls = [i.url for i in items if marked is not None and i.url in marked]
        if not urls:
            return
        try:
            self.marks_undone += await self._seen.forget(urls)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the seen service failed: counted, and the ledger will say
            self.marks_kept += len(urls)
            log.error("undoing %d seen marks failed (%r): they stay marked with no shard holding them", len(urls), exc)

    def stats(self) -> dict[str, int]:
        return {
            "links_submitted": self.submitted,
            "links_novel": self.novel,
            "links_already_seen": self.already_seen,
            "batches_sent": self.batches_sent,
            "batches_failed": self.batches_failed,
            "links_lost": self.links_lost,
            "links_unsent": self.links_unsent,
            "batches_refused": self.batches_refused,
            "links_seen_marks_undone": self.marks_undone,
            "links_seen_marks_kept": self.marks_kept,
            "links_seen_bypassed": self.seen_bypassed,
            "links_in_transit": self.pending(),
        }
