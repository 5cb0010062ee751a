"""A shard's state in a remote output: snapshots plus a log of changes, by generation.

docs/invariants.md #11: with a remote output (``s3://...``) a node's disk is a cache, and
losing a node with its disk loses no admitted URL, no acked row's state and no operator
setting. A shard keeps its SQLite store (crawler.frontier.store) on its node's disk, and every
change it must not lose also goes, in order, into a log in the object store:

* ``add``: URLs admitted (queued, or dropped by a counted rule);
* ``drop``: queued URLs dropped later (a budget cut, an operator's ``max_pages``);
* ``done``: acked rows' per-URL state (when fetched, next due, validators, hashes);
* ``meta``: a checkpoint an operator's host policy forced (crawler.recovery.checkpoint).

:meth:`StateLog.append` numbers each change (``seq``) in the store's commit; the log writes
what is buffered as one object every ``interval_s`` (a *segment*), and
:meth:`StateLog.synced` returns once every change appended so far is in one. A delivery
of URLs to a shard is acknowledged only after that (crawler.engine.scheduler
``accept_durably``): the sender keeps the batch, and retries it, until the receiver made
it durable. A snapshot of the store is written every ``runtime.state_ship_interval_s``;
then the segments it covers are deleted (compaction).

Layout of ``OUT/state/<shard>/``::

    snap-<gen>-<seq>-<wall ms>.sqlite   the store as of change <seq> of generation <gen>
    events-<gen>-<seq>-<wall ms>.sqlite the events then waiting for the sink (with a sink)
    log-<gen>-<first>-<last>.json.z     changes first..last of generation <gen> (zlib JSON)

Each incarnation of a shard writes a new *generation*: one more than any in OUT when it
started. A restart (:func:`restore`) reads one listing, the newest snapshot and the
segments after it, and replays their changes in (generation, seq) order, each once. It
never starts from a file already on the node's disk: that may be older than OUT (a node
that comes back with its folder), so an older local copy never wins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import tempfile
import zlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from crawler.clock import Clock, wait_event
from crawler.output import open_fs

log = logging.getLogger(__name__)

#: A position in a shard's history: (generation, seq). Generations compare first.
Mark = tuple[int, int]
#: One change: ``[kind, payload]`` (JSON).
Record = list[Any]

_NAME = re.compile(r"^(snap|events|log)-(\d{8})-(\d{12})-(\d{12,14})\.(sqlite|json\.z)$")


@dataclass(frozen=True)
class Piece:
    """One object of a shard's remote state: a snapshot (``first == last``: the change it
    covers; ``wall_ms``: when it was taken) or a log segment (changes first..last)."""

    kind: str
    gen: int
    first: int
    last: int
    wall_ms: int
    path: str


def parse_piece(path: str) -> Piece | None:
    """The :class:`Piece` a file name describes, or None for anything else."""
    m = _NAME.match(path.rsplit("/", 1)[-1])
    if m is None:
        return None
    kind, gen, a, b = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if kind in ("snap", "events"):
        return Piece(kind, gen, a, a, b, path)
    return Piece("log", gen, a, b, 0, path)


def snapshot_name(gen: int, seq: int, wall: float, kind: str = "snap") -> str:
    return f"{kind}-{gen:08d}-{seq:012d}-{int(wall * 1000):014d}.sqlite"


def segment_name(gen: int, first: int, last: int) -> str:
    return f"log-{gen:08d}-{first:012d}-{last:012d}.json.z"


def encode(records: list[Record]) -> bytes:
    return zlib.compress(json.dumps(records, separators=(",", ":")).encode(), 6)


def decode(data: bytes) -> list[Record]:
    return json.loads(zlib.decompress(data))


#: Files SQLite and the seen set keep beside a store: a copy replaces them all.
SIDECARS = ("", "-wal", "-shm", "-journal", ".bloom")


def discard(local_path: str) -> None:
    """Remove a local state file and its sidecars (WAL, shared memory, Bloom snapshot)."""
    for suffix in SIDECARS:
        try:
            os.remove(local_path + suffix)
        except FileNotFoundError:
            pass


class RemoteDir:
    """``OUT/state/<name>/`` through fsspec: list, put, get, remove (one request each)."""

    def __init__(self, out: str, options: dict | None, name: str) -> None:
        self.fs, root = open_fs(out, options)
        self.base = f"{root.rstrip('/')}/state/{name}"
        self.requests = 0  # object-store requests made (benchmarks/statelog.py)

    def list(self) -> list[Piece]:
        self.requests += 1
        self.fs.invalidate_cache(self.base)
        try:
            names = self.fs.ls(self.base, detail=False)
        except FileNotFoundError:
            return []
        return [p for p in (parse_piece(n) for n in names) if p is not None]

    def put(self, name: str, data: bytes) -> None:
        self.requests += 1
        self.fs.pipe_file(f"{self.base}/{name}", data)

    def put_file(self, name: str, local: str) -> None:
        self.requests += 1
        self.fs.put_file(local, f"{self.base}/{name}")

    def get(self, path: str) -> bytes:
        self.requests += 1
        return self.fs.cat_file(path)

    def get_file(self, path: str, local: str) -> None:
        self.requests += 1
        self.fs.get_file(path, local)

    def remove(self, paths: list[str]) -> None:
        if paths:
            self.requests += 1  # one multi-object delete
            self.fs.rm(paths)


@dataclass
class Restored:
    """What :func:`restore` found in OUT for one shard."""

    gen: int  # the generation the new incarnation writes
    records: list[Record]  # changes after the snapshot, in order, each once
    snapshot: Piece | None
    segments: int  # segments read
    bytes_read: int
    events: Piece | None = None  # the events pending at the snapshot (crawler.events.emitter)

    @property
    def snapshot_wall(self) -> float | None:
        return None if self.snapshot is None else self.snapshot.wall_ms / 1000.0

    @property
    def anything(self) -> bool:
        return self.snapshot is not None or bool(self.records)


def restore(remote: RemoteDir, local_path: str) -> Restored:
    """Rebuild a shard's state from OUT: the newest snapshot to ``local_path`` (replacing
    any local file), and the changes logged after it. The caller replays the changes
    into the store (crawler.frontier.store.FrontierStore.replay)."""
    discard(local_path)
    pieces = remote.list()
    snaps = sorted((p for p in pieces if p.kind == "snap"), key=lambda p: (p.gen, p.last))
    snap = snaps[-1] if snaps else None
    size = 0
    if snap is not None:
        os.makedirs(os.path.dirname(os.path.abspath(local_path)) or ".", exist_ok=True)
        remote.get_file(snap.path, local_path + ".part")
        size += os.path.getsize(local_path + ".part")
        os.replace(local_path + ".part", local_path)
    applied: Mark = (snap.gen, snap.last) if snap is not None else (0, 0)
    records: list[Record] = []
    segments = 0
    for seg in sorted((p for p in pieces if p.kind == "log"), key=lambda p: (p.gen, p.first, p.last)):
        if (seg.gen, seg.last) <= applied:
            continue  # covered by the snapshot, or a retried write of changes read already
        data = remote.get(seg.path)
        size += len(data)
        segments += 1
        for i, rec in enumerate(decode(data)):
            mark = (seg.gen, seg.first + i)
            if mark > applied:
                records.append(rec)
                applied = mark
    gen = max((p.gen for p in pieces), default=0) + 1
    events = next((p for p in pieces if p.kind == "events" and snap is not None and (p.gen, p.last) == (snap.gen, snap.last)),
                  None)
    return Restored(gen, records, snap, segments, size, events)


class StateLog:
    """Buffers one shard's changes and writes them to OUT in segments; takes snapshots.

    Args:
        remote: the shard's folder in OUT.
        gen: this incarnation's generation (:attr:`Restored.gen`).
        clock: the flush timer's clock.
        interval_s: the longest a change waits in memory before its segment is written
            (the durability window of a delivery, and its added latency).
        run_blocking: runs object-store calls off the event loop.
    """

    def __init__(
        self, remote: RemoteDir, gen: int, clock: Clock, *, interval_s: float,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    ) -> None:
        self.remote = remote
        self.gen = gen
        self._clock = clock
        self._interval_s = interval_s
        self._run_blocking = run_blocking
        self._buf: list[Record] = []
        self._buf_first = 1
        self.seq = 0  # the last change appended
        self.durable = 0  # the last change in a written segment
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._running = False
        self._written = asyncio.Event()  # set (and replaced) after every write attempt
        self.segments_written = 0
        self.bytes_written = 0  # log segments
        self.snapshot_bytes = 0  # snapshots
        self.records_written = 0
        self.snapshots_written = 0
        self.write_failures = 0

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
        changes buffered, and the caller waits for the retry.
        """
        upto = self.seq if upto is None else upto
        while self.durable < upto:
            if self._running:
                await self._written.wait()
                continue
            try:
                await self.flush()
            except Exception as exc:  # noqa: BLE001 - the object store failed: keep the changes, retry
                log.warning("%s: writing a state segment failed (will retry): %r", self.remote.base, exc)
                await self._clock.sleep(min(2.0, max(0.05, self._interval_s)))

    async def flush(self) -> None:
        """Write what is buffered as one segment (nothing if the buffer is empty)."""
        async with self._lock:
            if not self._buf:
                return
            records, first = self._buf, self._buf_first
            self._buf = []
            last = first + len(records) - 1
            data = encode(records)
            try:
                await self._run_blocking(self.remote.put, segment_name(self.gen, first, last), data)
            except BaseException:
                self.write_failures += 1
                self._buf = records + self._buf  # in order, first again
                self._buf_first = first
                raise
            self.durable = last
            self.segments_written += 1
            self.records_written += len(records)
            self.bytes_written += len(data)

    async def run(self) -> None:
        """Write a segment every ``interval_s`` while changes are buffered, until :meth:`stop`."""
        self._running = True
        try:
            while not await wait_event(self._clock, self._stop, self._interval_s):
                if self._buf:
                    try:
                        await self.flush()
                    except Exception as exc:  # noqa: BLE001 - kept in the buffer; retried next round
                        log.warning("%s: writing a state segment failed (will retry): %r", self.remote.base, exc)
                    self._wake_waiters()
        finally:
            self._running = False
            self._wake_waiters()  # waiters write themselves from now on

    def _wake_waiters(self) -> None:
        done, self._written = self._written, asyncio.Event()
        done.set()

    def stop(self) -> None:
        self._stop.set()

    async def snapshot(self, backup_at: Callable[[str], int], events: Callable[[str], None] | None = None) -> None:
        """Write a snapshot and delete what it covers (compaction).

        ``backup_at(dest)`` writes a consistent copy of the store to ``dest`` and returns the
        seq of the last change in it (read under the store's lock: crawler.frontier.store).
        Changes after it stay in their segments; changes up to it that are still buffered
        are written later and skipped by :func:`restore`. ``events(dest)``, if given, copies
        the shard's pending events; they are written beside the snapshot first.
        """
        wall = self._clock.wall()
        with tempfile.TemporaryDirectory(prefix="raycrawl-snap-") as tmp:
            local = os.path.join(tmp, "store.sqlite")
            seq = await self._run_blocking(backup_at, local)
            if events is not None:
                pending = os.path.join(tmp, "events.sqlite")
                await self._run_blocking(events, pending)
                await self._run_blocking(self.remote.put_file, snapshot_name(self.gen, seq, wall, "events"), pending)
                self.snapshot_bytes += os.path.getsize(pending)
            await self._run_blocking(self.remote.put_file, snapshot_name(self.gen, seq, wall), local)
            self.snapshot_bytes += os.path.getsize(local)
        self.snapshots_written += 1
        covered: Mark = (self.gen, seq)
        pieces = await self._run_blocking(self.remote.list)
        old = [p.path for p in pieces if (p.kind == "log" and (p.gen, p.last) <= covered)
               or (p.kind in ("snap", "events") and (p.gen, p.last) < covered)]
        await self._run_blocking(self.remote.remove, old)

    def stats(self) -> dict[str, int]:
        return {
            "state_generation": self.gen,
            "state_segments": self.segments_written,
            "state_records": self.records_written,
            "state_bytes": self.bytes_written,
            "state_snapshot_bytes": self.snapshot_bytes,
            "state_snapshots": self.snapshots_written,
            "state_write_failures": self.write_failures,
            "state_requests": self.remote.requests,
            "state_pending": self.pending(),
        }
