"""The shard's outbox: outcome rows wait here until they are durable, then their URLs are acked.

docs/invariants.md #6 (nothing acked is lost) is kept by one ordering:

1. :meth:`Outbox.put` buffers a row (and its body) in memory;
2. :meth:`Outbox.flush` hands the buffer to the writer *synchronously* (``add`` only
   validates and buffers), so from that instant the writer holds every row; then the
   writer's flush runs off the event loop (``run_blocking``) and makes them durable;
3. only after that flush returns are the rows handed to ``on_durable`` (the shard's
   ``page.fetched`` events, crawler.events.emitter, which commits them to its own log) and then
   the rows' URLs marked done in the durable store, with their per-URL state (last
   fetch, next due time, validators: crawler.frontier.store). A crash between the two
   re-fetches the page and emits its event again: at least once, never before the row
   is durable.

A flush that is interrupted (the shard stops) never loses rows: they are already in the
writer, whose own flushes serialize, and the final flush writes and acks them. The timer
is the injected clock, so a test drives it with ``MockClock`` and an inline
``run_blocking``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Protocol, Sequence

from crawler.clock import Clock, wait_event
from crawler.errors import FencedError
from crawler.output import OutcomeRow
from crawler.frontier.recrawl import Schedule

log = logging.getLogger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]


class RowWriter(Protocol):
    """What the outbox needs from crawler.output.ResultWriter."""

    def add(self, rows: Sequence[OutcomeRow], bodies: dict[str, bytes]) -> None: ...

    def maybe_flush(self) -> bool: ...

    def flush(self) -> int: ...

    def pending_rows(self) -> int: ...


class Acks(Protocol):
    """Where durable rows are acked (crawler.frontier.store.FrontierStore.record)."""

    def record(self, fetched: Sequence[tuple[OutcomeRow, Schedule | None]]) -> None: ...


class Outbox:
    """Buffers rows and bodies, flushes them every ``interval_s``, acks after durable writes.

    Args:
        writer: the shard's Parquet/blob writer (it decides when a flush is due).
        acks: the durable store, or None for a crawl without one.
        clock: the flush timer's clock.
        interval_s: how often buffered rows are handed to the writer.
        run_blocking: runs the writer's blocking flush (default: a worker thread).
        on_flush: called after every flush round, in the loop (the checkpointer hooks here).
        fence: ``fence(fresh=True)`` is False once another run holds the output's lease:
            then nothing more is written or acked (crawler.recovery.lease).
        on_durable: called with the rows of each durable flush, before their URLs are acked.
        on_acked: called with the (row, schedule) pairs just acked, in the same loop step
            as the store write (crawler.frontier.refreshfeed.RefreshFeed.acked relies on that).
    """

    def __init__(
        self,
        writer: RowWriter,
        acks: Acks | None,
        clock: Clock,
        *,
        interval_s: float,
        run_blocking: RunBlocking = asyncio.to_thread,
        on_flush: Callable[[bool], Awaitable[None]] | None = None,
        fence: Callable[..., bool] | None = None,
        on_durable: Callable[[list[OutcomeRow]], None] | None = None,
        on_acked: Callable[[list[tuple[OutcomeRow, Schedule | None]]], Any] | None = None,
    ) -> None:
        self.writer = writer
        self._acks = acks
        self._clock = clock
        self._interval_s = interval_s
        self._run_blocking = run_blocking
        self._on_flush = on_flush
        self._fence = fence
        self._on_durable = on_durable
        self._on_acked = on_acked
        self._rows: list[OutcomeRow] = []
        self._bodies: dict[str, bytes] = {}
        self._handed: list[tuple[OutcomeRow, Schedule | None]] = []  # rows the writer holds, not yet durable
        self._schedules: list[Schedule | None] = []  # parallel to _rows
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self.rows_acked = 0

    def _check_fence(self) -> None:
        if self._fence is not None and not self._fence(fresh=True):
            raise FencedError("another run holds the output's lease: nothing more is written or acked")

    def put(self, row: OutcomeRow, body: bytes | None = None, schedule: Schedule | None = None,
            raw_body: bytes | None = None) -> None:
        """Queue one row (and its body under its content hash, and its URL's next refresh;
        for a rendered page, the raw response's body under ``row.raw_sha256``)."""
        self._rows.append(row)
        self._schedules.append(schedule)
        if body is not None and row.content_sha256 is not None:
            self._bodies[row.content_sha256] = body
        if raw_body is not None and row.raw_sha256 is not None:
            self._bodies[row.raw_sha256] = raw_body

    def pending(self) -> int:
        """Rows not yet durable (buffered here or in the writer)."""
        return len(self._rows) + self.writer.pending_rows()

    async def run(self) -> None:
        """Flush every ``interval_s`` until :meth:`stop`; never cancelled mid-flush."""
        while not await wait_event(self._clock, self._stop, self._interval_s):
            try:
                await self.flush()
            except FencedError:
                return  # a newer run owns the output: this shard writes nothing more
            except Exception as exc:  # noqa: BLE001 - rows stay buffered in the writer; retried next round
                log.error("output flush failed (will retry): %r", exc)

    def stop(self) -> None:
        """End :meth:`run` after the flush in progress, if any."""
        self._stop.set()

    async def flush(self, final: bool = False) -> None:
        """Steps 2 and 3 of the module docstring; ``final`` flushes whatever is buffered."""
        async with self._lock:
            if self._rows or self._bodies:
                rows, bodies, schedules = self._rows, self._bodies, self._schedules
                self._rows, self._bodies, self._schedules = [], {}, []
                self.writer.add(rows, bodies)  # in the loop: from here on the writer holds them
                self._handed.extend(zip(rows, schedules))
            self._check_fence()
            if final:
                await self._run_blocking(self.writer.flush)
                flushed = True
            else:
                flushed = await self._run_blocking(self.writer.maybe_flush)
            if flushed and self._handed:
                self._check_fence()
                handed = self._handed
                if self._on_durable is not None:
                    self._on_durable([row for row, _ in handed])  # raises: kept, handed again after the next flush
                self._handed = []
                if self._acks is not None:
                    self._acks.record(handed)
                    if self._on_acked is not None:
                        self._on_acked(handed)
                self.rows_acked += len(handed)
            if self._on_flush is not None:
                await self._on_flush(final)
