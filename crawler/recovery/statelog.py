"""A shard's state in a remote output: snapshots plus a log of changes, by generation.

docs/invariants.md #11: with a remote output (``s3://...``) a node's disk is a cache, and
losing a node with its disk loses no admitted URL, no acked row's state and no operator
setting. A shard keeps its SQLite store (crawler.frontier.store) on its node's disk, and every
change it must not lose also goes, in order, into a log in the object store:

* ``add``: URLs admitted (queued, or dropped by a counted rule);
* ``drop``: queued URLs dropped later (a budget cut, an operator's ``max_pages``);
* ``done``: acked rows' per-URL state (when fetched, next due, validators, hashes);
* ``meta``: a checkpoint an operator's host policy forced (crawler.engine.checkpoint).

:meth:`StateLog.append` numbers each change (``seq``) in the store's commit; the log writes
what is buffered as one object every ``interval_s`` (a *segment*), and
:meth:`StateLog.synced` returns once every change appended so far is in one. A delivery
of URLs to a shard is acknowledged only after that (crawler.engine.shard
``Shard.accept``): the sender keeps the batch, and retries it, until the receiver made
it durable. A snapshot of the store is considered every ``runtime.state_ship_interval_s``
and written when its :class:`~crawler.recovery.copyschedule.CopySchedule` says enough
changed: once the log written since the last snapshot reaches a share of that snapshot's
size (``runtime.state_snapshot_log_ratio``; a small store whenever it changed). So the
bytes sent to OUT grow with the rate of change, not with the store's size, and a restart
reads at most the snapshot and that share of it in log. Then the objects the snapshot
covers are deleted (compaction).

Each incarnation of a shard claims a new *generation* before it reads anything
(crawler.recovery.incarnation), and checks before each write that no newer one exists
(DESIGN invariant 15). A segment is named by its generation and its first change, so
the next one's name is known: a restart (crawler.recovery.restore) finds the segments
after a snapshot by reading those names, not by trusting a listing, and a segment that
failed is written again under the same name with the same bytes (never a different
superset that a delayed first attempt could land over). Outputs written before this
layout are still read. The folder's names and its access are crawler.recovery.statedir.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from crawler.clock import Clock, wait_event
from crawler.errors import FencedError
from crawler.recovery.copyschedule import CopySchedule
from crawler.recovery.statedir import (  # the folder's names and access, used here and re-exported
    SIDECARS,
    Mark,
    Piece,
    Record,
    RemoteDir,
    Restored,
    covered,
    decode,
    discard,
    encode,
    parse_piece,
    segment_name,
    snapshot_name,
)

__all__ = ["SIDECARS", "Fence", "Mark", "Piece", "Record", "RemoteDir", "Restored", "StateLog", "covered", "decode",
           "discard", "encode", "parse_piece", "segment_name", "snapshot_name"]

log = logging.getLogger(__name__)


class Fence(Protocol):
    """May this incarnation still write? (crawler.recovery.incarnation.Incarnation)"""

    def check(self, fresh: bool = False) -> None:
        """Raise FencedError once a newer incarnation exists; ``fresh``: read the store now,
        else a verdict up to the fence's interval old will do."""

    @property
    def fenced(self) -> bool:
        """The last verdict (no read)."""

    def needs_read(self, fresh: bool = False) -> bool:
        """Whether :meth:`check` would read the store (then it runs off the event loop)."""

    def note_snapshot(self, name: str) -> None:
        """Record the newest snapshot's name where a restart looks first (the claim)."""


@dataclass(frozen=True)
class _Segment:
    first: int
    records: list[Record]
    data: bytes

    @property
    def last(self) -> int:
        return self.first + len(self.records) - 1


class StateLog:
    """Buffers one shard's changes and writes them to OUT in segments; takes snapshots.

    Args:
        remote: the shard's folder in OUT.
        gen: this incarnation's generation (:attr:`Restored.gen`).
        clock: the flush timer's clock.
        interval_s: the longest a change waits in memory before its segment is written
            (the durability window of a delivery, and its added latency).
        run_blocking: runs object-store calls off the event loop.
        fence: checked before every write and, before a change counts as durable, after
            its segment's write (None: unfenced, tests only).
        snapped: the change of this generation the newest snapshot in OUT matches (0: the
            store is what a snapshot holds, e.g. restored from one with nothing after it);
            None: no snapshot matches the store.
        schedule: when a snapshot is worth writing (None: whenever something changed).
        snap_bytes: the size of the snapshot the store was restored from (0: none).
        log_bytes: the bytes of log in OUT after that snapshot (what the restore replayed).
    """

    def __init__(
        self, remote: RemoteDir, gen: int, clock: Clock, *, interval_s: float,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
        fence: Fence | None = None, snapped: int | None = None,
        schedule: CopySchedule | None = None, snap_bytes: int = 0, log_bytes: int = 0,
    ) -> None:
        self.remote = remote
        self.gen = gen
        self._clock = clock
        self._interval_s = interval_s
        self._run_blocking = run_blocking
        self._fence = fence
        self._snapped = snapped
        self._tried: tuple[int, int, float] | None = None  # (seq, anchor, wall) of the last snapshot tried
        self._buf: list[Record] = []
        self._buf_first = 1
        self._cut: _Segment | None = None  # taken from the buffer, not yet written: written again as is
        self._cuts: list[tuple[int, int]] = []  # (first, last) of segments cut, for snapshot anchors
        self.seq = 0  # the last change appended
        self.durable = 0  # the last change in a written segment
        self.fenced: FencedError | None = None  # set once a newer incarnation exists
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._running = False
        self._written = asyncio.Event()  # set (and replaced) after every write attempt
        self._compactions: asyncio.Future[None] | None = None  # the last one started in the background
        self.segments_written = 0
        self.bytes_written = 0  # log segments
        self.snapshot_bytes = 0  # snapshots
        self.records_written = 0
        self.snapshots_written = 0
        self.snapshots_skipped = 0  # nothing changed since the last one
        self.snapshots_deferred = 0  # changed, but too little for a whole copy (the schedule)
        self._schedule = schedule
        self._snap_size = snap_bytes  # the newest snapshot's store file
        self._log_base = log_bytes  # log in OUT after it, as of _log_mark
        self._log_mark = 0  # bytes_written when _log_base was counted
        self.write_failures = 0

    def log_since_snapshot(self) -> int:
        """Bytes of log written to OUT after the newest snapshot (a restore replays them)."""
        return self._log_base + self.bytes_written - self._log_mark

    def snapshot_due(self) -> bool:
        """Whether :meth:`snapshot` would write one now: something changed since the last
        one, and its schedule says the log since it is worth a whole copy (the log still
        buffered counts: it is written in the next ``interval_s``)."""
        if self._snapped is not None and self.seq == self._snapped:
            return False
        if self._schedule is None:
            return True
        return self._schedule.due(max(1, self.log_since_snapshot()), self._snap_size)

    def append(self, kind: str, payload: Any) -> int:
        """Buffer one change (call right after the store committed it); returns its seq."""
        if not self._buf:
            self._buf_first = self.seq + 1
        self.seq += 1
        self._buf.append([kind, payload])
        return self.seq

    def pending(self) -> int:
        """Changes appended and not yet in a written segment."""
        return self.seq - self.durable

    async def synced(self, upto: int | None = None) -> None:
        """Return once every change up to ``upto`` (default: all so far) is in OUT.

        Concurrent callers share the next timed write (group commit: one segment per
        ``interval_s`` however many deliveries arrived); with no timer running (before
        :meth:`run`, after :meth:`stop`) the caller writes. A failed write keeps the
        changes buffered, and the caller waits for the retry. Raises FencedError once a
        newer incarnation exists: what is not durable by then never will be here (the
        sender keeps it, and delivers it to the successor).
        """
        upto = self.seq if upto is None else upto
        while self.durable < upto:
            if self.fenced is not None:
                raise self.fenced
            if self._running:
                await self._written.wait()
                continue
            try:
                await self.flush()
            except FencedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the object store failed: keep the changes, retry
                log.warning("%s: writing a state segment failed (will retry): %r", self.remote.base, exc)
                await self._clock.sleep(min(2.0, max(0.05, self._interval_s)))

    async def _check(self, fresh: bool) -> None:
        if self._fence is None:
            return
        try:
            if self._fence.needs_read(fresh):
                await self._run_blocking(self._fence.check, fresh)
            else:
                self._fence.check(fresh)
        except FencedError as exc:
            self.fenced = exc
            raise

    async def flush(self) -> None:
        """Write what is buffered (nothing if the buffer is empty).

        The fence is checked before each PUT and again after it, before the changes count
        as durable: a segment that lands after a successor claimed the shard is never
        acknowledged, so the only changes a successor can miss are ones nobody was told
        are safe (crawler.recovery.incarnation)."""
        async with self._lock:
            upto = self.seq  # what is appended later waits for the next flush (its waiters are woken first)
            while self.durable < upto:
                if self.fenced is not None:
                    raise self.fenced
                if self._cut is None:
                    if not self._buf:
                        return
                    records, self._buf = self._buf, []
                    self._cut = _Segment(self._buf_first, records, encode(records))
                    self._cuts.append((self._cut.first, self._cut.last))
                seg = self._cut
                await self._check(fresh=False)
                try:
                    await self._run_blocking(self.remote.put, segment_name(self.gen, seg.first), seg.data)
                    await self._check(fresh=True)
                except FencedError:
                    raise
                except BaseException:
                    self.write_failures += 1
                    raise
                self._cut = None
                self.durable = seg.last
                self.segments_written += 1
                self.records_written += len(seg.records)
                self.bytes_written += len(seg.data)

    async def run(self) -> None:
        """Write a segment every ``interval_s`` while changes are buffered, until :meth:`stop`
        (or until a newer incarnation exists)."""
        self._running = True
        try:
            while not await wait_event(self._clock, self._stop, self._interval_s):
                if self._buf or self._cut is not None:
                    try:
                        await self.flush()
                    except FencedError as exc:
                        log.error("%s: %s", self.remote.base, exc)
                        return
                    except Exception as exc:  # noqa: BLE001 - kept in the buffer; retried next round
                        log.warning("%s: writing a state segment failed (will retry): %r", self.remote.base, exc)
                    finally:
                        self._wake_waiters()
        finally:
            self._running = False
            self._wake_waiters()  # waiters write themselves from now on
            if self._compactions is not None:
                await asyncio.gather(self._compactions, return_exceptions=True)

    def _wake_waiters(self) -> None:
        done, self._written = self._written, asyncio.Event()
        done.set()

    def stop(self) -> None:
        self._stop.set()

    def _segment_start(self, seq: int) -> int:
        """The first change of the segment that holds (or will hold) change ``seq + 1``."""
        nxt = seq + 1
        for first, last in reversed(self._cuts):
            if first <= nxt <= last:
                return first
        if self._buf and self._buf_first <= nxt:
            return self._buf_first  # buffered, or appended next to what is buffered
        return nxt  # not appended yet, with nothing buffered: it starts the next segment

    async def snapshot(self, backup_at: Callable[[str], int], events: Callable[[str], None] | None = None) -> bool:
        """Write a snapshot and delete what it covers (compaction); False if nothing
        changed since the last snapshot (an idle shard is not copied again and again), or
        too little for a whole copy (:meth:`snapshot_due`: the log in OUT holds it).

        ``backup_at(dest)`` writes a consistent copy of the store to ``dest`` and returns the
        seq of the last change in it (read under the store's lock: crawler.frontier.store).
        Changes after it stay in their segments; changes up to it that are still buffered
        are written later and skipped by a restart. ``events(dest)``, if given, copies the
        shard's pending events; they are written beside the snapshot first, under the same
        name, so a restart takes the copy that goes with the snapshot it starts from.

        Then (in the background while :meth:`run` runs) the snapshot's name goes into the
        incarnation's claim, and compaction deletes
        only what the new snapshot covers (:func:`covered`), after a fresh fence check: an
        incarnation that has a successor deletes nothing, and one whose delete lands after
        that check removes only objects older than a snapshot it wrote and named before
        the check, which its successor therefore finds and starts from (or from a newer one).
        """
        if self.fenced is not None:
            raise self.fenced
        if self._snapped is not None and self.seq == self._snapped:
            self.snapshots_skipped += 1
            return False
        if not self.snapshot_due():
            self.snapshots_deferred += 1
            return False
        if self._fence is not None and self._fence.fenced:  # the last verdict: no read on the outbox's path
            await self._check(fresh=False)
        wall = self._clock.wall()
        with tempfile.TemporaryDirectory(prefix="raycrawl-snap-") as tmp:
            local = os.path.join(tmp, "store.sqlite")
            log_mark = self.bytes_written  # segments written from here on may hold changes after the copy
            seq = await self._run_blocking(backup_at, local)
            anchor = self._segment_start(seq)
            if self._tried is not None and self._tried[0] == seq:
                # The same state again after a PUT that failed (and may have landed): the
                # same name. The lower anchor is the safe one: a restart replays from it
                # and skips what the snapshot holds.
                _, tried_anchor, wall = self._tried
                if tried_anchor > anchor:
                    wall = self._clock.wall()  # would name less than it needs: a new name
                else:
                    anchor = tried_anchor
            self._tried = (seq, anchor, wall)
            if events is not None:
                pending = os.path.join(tmp, "events.sqlite")
                await self._run_blocking(events, pending)
                await self._run_blocking(self.remote.put_file, snapshot_name(self.gen, seq, anchor, wall, "events"), pending)
                self.snapshot_bytes += os.path.getsize(pending)
            name = snapshot_name(self.gen, seq, anchor, wall)
            await self._run_blocking(self.remote.put_file, name, local)
            size = os.path.getsize(local)
            self.snapshot_bytes += size
        self._snapped = seq
        self._snap_size, self._log_base, self._log_mark = size, 0, log_mark
        self.snapshots_written += 1
        self._cuts = [c for c in self._cuts if c[1] >= anchor]
        new = parse_piece(self.remote.path(name))
        assert new is not None
        if self._running:  # off the caller's path (the outbox waits for this): run() awaits it at its end
            self._compactions = asyncio.ensure_future(self._compact(new, self._compactions))
        else:
            await self._compact(new, None)
        return True

    async def _compact(self, new: Piece, before: asyncio.Future[None] | None) -> None:
        """Name ``new`` in the claim, then delete what it covers (one at a time, in order)."""
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        try:
            await self._check(fresh=True)
            if self._fence is not None:
                await self._run_blocking(self._fence.note_snapshot, new.path.rsplit("/", 1)[-1])
            pieces = await self._run_blocking(self.remote.list)
            await self._run_blocking(self.remote.remove, [p.path for p in pieces if covered(p, new)])
        except FencedError:
            if not self._running:
                raise
        except Exception as exc:  # noqa: BLE001 - the snapshot is written; the next one compacts
            if not self._running:
                raise
            log.warning("%s: compaction after %s failed: %r", self.remote.base, new.path, exc)

    def stats(self) -> dict[str, int]:
        return {
            "state_generation": self.gen,
            "state_segments": self.segments_written,
            "state_records": self.records_written,
            "state_bytes": self.bytes_written,
            "state_snapshot_bytes": self.snapshot_bytes,
            "state_snapshots": self.snapshots_written,
            "state_snapshots_skipped": self.snapshots_skipped,
            "state_snapshots_deferred": self.snapshots_deferred,
            "state_log_since_snapshot": self.log_since_snapshot(),
            "state_write_failures": self.write_failures,
            "state_requests": self.remote.requests,
            "state_pending": self.pending(),
        }
