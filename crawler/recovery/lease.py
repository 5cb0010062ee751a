"""One crawl writes to an output at a time: epochs claimed once, a lease renewed by beats.

docs/invariants.md #9 (one run per output) and #14 (no two machines' clocks are assumed
to agree). The output holds, under ``OUT/state/``:

* ``epochs/<epoch>.json``: the claim of one run. An epoch is created exactly once
  (:func:`crawler.output.fs.create_new`: ``O_EXCL`` locally, ``If-None-Match: *`` on S3),
  so two runs can never hold the same epoch, and the newest epoch is the one that owns
  the output. Its holder rewrites it on every renewal with a growing ``beat`` counter,
  and marks it ``released`` when it stops cleanly. Nobody else writes it.
* ``lease.json``: a copy of the newest claim, a hint to find it without listing (and
  what ``crawl stats`` shows). Stale hints are harmless: readers look upward from the
  hint for newer epochs with a GET each.

Order comes from epochs, time from each observer's own monotonic clock:

* **Taking the output** (:meth:`Lease.acquire`): the newest epoch released, or none: take
  the next one now. Otherwise the holder may be alive: watch its ``beat`` on *our* clock;
  a beat that moves means it lives (refused with :class:`OutputLeasedError`); no beat for
  ``ttl_s`` of our clock means it is gone, and the next epoch is claimed. Wall-clock times
  in the record are only a shortcut: compared only when they come from this same machine
  (one clock), or to refuse at once a lease that looks renewed a moment ago -- a refusal
  is safe whatever the clocks say, a takeover never rests on them.
* **Renewing** (:meth:`Lease.renew`): the holder first checks that no newer epoch exists
  (one GET), then writes its next beat. A failed read or write is not a verdict: the
  session retries at its next beat, and stops telling its shards it lives once it has
  not renewed for ``ttl_s - margin`` of its own clock (:meth:`Lease.fresh`), so they
  have stopped fetching before anyone can see its lease as lapsed.
* **Fencing a shard** (:class:`Fence`): a shard of epoch *N* is fenced for good once
  ``epochs/<N+1>.json`` exists -- a fact, not a time. Its other guard, silence from the
  driver, is measured on its own clock by crawler.recovery.watchdog.

Why a takeover is safe without agreeing clocks: the newcomer claims only after ``ttl_s``
of *its* clock without a beat; the old driver stops beating its shards ``ttl_s - margin``
after its last renewal by *its* clock, its shards stop fetching ``driver_timeout_s`` of
*theirs* after the last beat, and any shard that runs on (a driver that comes back)
rereads the epochs before its next fetch, write and ack. Clock rates differ by parts per
million; ``margin`` covers that with room to spare. A store without conditional writes
cannot guarantee one holder per epoch: the claim is read back, so two racers find out at
once, but a window remains; S3 (since 2024), GCS and local disks have them.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any, Awaitable, Callable

from crawler.clock import Clock
from crawler.errors import OutputLeasedError, StorageError
from crawler.output import open_fs
from crawler.output.fs import create_new

log = logging.getLogger(__name__)


class LeaseUnknownError(StorageError):
    """The lease could not be read now (the object store failed): no verdict either way."""


@dataclass(frozen=True)
class LeaseRecord:
    """One epoch's claim (``OUT/state/epochs/<epoch>.json``), or the hint of the newest."""

    epoch: int
    run_id: str
    host: str
    pid: int
    ttl_s: float
    beat: int = 0  # renewals so far: a beat that moves is a holder that lives
    released: bool = False
    renewed_at: float = 0.0  # the holder's wall clock at its last beat (shown, never trusted across machines)

    @property
    def expires_at(self) -> float:
        """When the holder's own clock says its lease lapses (for people: ``crawl stats``)."""
        return self.renewed_at + self.ttl_s


def _record(data: Any) -> LeaseRecord:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if "renewed_at" not in data and "expires_at" in data:  # written before epochs/ existed
        data = {**data, "renewed_at": float(data["expires_at"]) - float(data["ttl_s"]),
                "beat": int(float(data["expires_at"]) * 1000)}
    fields = LeaseRecord.__dataclass_fields__
    return LeaseRecord(**{k: data[k] for k in fields if k in data})


class LeaseStore:
    """The epochs and the hint in ``OUT/state`` through fsspec (local or s3://)."""

    def __init__(self, out: str, storage_options: dict[str, Any] | None = None) -> None:
        self.fs, root = open_fs(out, storage_options)
        self.root = f"{root.rstrip('/')}/state"
        self.path = f"{self.root}/lease.json"
        self._local = "://" not in out or out.startswith("file://")

    def epoch_path(self, epoch: int) -> str:
        return f"{self.root}/epochs/{epoch:08d}.json"

    def _read(self, path: str) -> LeaseRecord | None:
        try:
            if not self._local:
                self.fs.invalidate_cache(path.rsplit("/", 1)[0])
            # One GET (fs.open would compare ETags between requests, and fail when the
            # holder rewrites the object in between).
            return _record(json.loads(self.fs.cat_file(path)))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"{path}: not a lease record ({exc}); delete it if no crawl runs on this output") from exc
        except OSError as exc:
            raise LeaseUnknownError(f"reading {path} failed: {exc}") from exc

    def read(self) -> LeaseRecord | None:
        """The hint (``lease.json``): the newest claim as last written."""
        return self._read(self.path)

    def read_epoch(self, epoch: int) -> LeaseRecord | None:
        return self._read(self.epoch_path(epoch))

    def newest(self) -> LeaseRecord | None:
        """The newest epoch's claim: from the hint upward, one GET per epoch."""
        hint = self.read()
        epoch = hint.epoch if hint is not None else 0
        current = self.read_epoch(epoch) if epoch else None
        if current is None and hint is not None:
            current = hint  # an output written before epochs/ existed: the hint is the claim
        while (newer := self.read_epoch(epoch + 1)) is not None:
            epoch, current = epoch + 1, newer
        return current

    def newer_exists(self, epoch: int) -> bool:
        """True once a run has claimed an epoch after ``epoch`` (one GET)."""
        return self.read_epoch(epoch + 1) is not None

    def claim(self, rec: LeaseRecord) -> bool:
        """Create ``rec``'s epoch; False if some run already holds it."""
        data = json.dumps(asdict(rec)).encode()
        try:
            created = create_new(self.fs, self.epoch_path(rec.epoch), data)
        except OSError as exc:
            raise LeaseUnknownError(f"claiming epoch {rec.epoch} failed: {exc}") from exc
        if not created:
            return False
        # Read back: on a store without conditional writes, the last of two racers wins.
        mine = self.read_epoch(rec.epoch)
        return mine is not None and mine.run_id == rec.run_id

    def write(self, rec: LeaseRecord) -> None:
        """Rewrite the holder's own epoch, then the hint."""
        self._put(self.epoch_path(rec.epoch), rec)
        self._put(self.path, rec)

    def _put(self, path: str, rec: LeaseRecord) -> None:
        data = json.dumps(asdict(rec))
        try:
            if self._local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{rec.run_id}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:
                self.fs.pipe_file(path, data.encode())
        except OSError as exc:
            raise LeaseUnknownError(f"writing {path} failed: {exc}") from exc


def _pid_alive(pid: int) -> bool:
    """True unless ``pid`` provably no longer runs on this machine (gone, or a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """True if ``pid`` has exited and only waits to be reaped by its parent (Linux /proc;
    elsewhere a process that answers signal 0 counts as alive)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, so read after the last ")".
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] in ("Z", "X")


#: How often a newcomer looks at a holder's beat while it decides whether it lives.
WATCH_S = 0.5
#: How many times a start asks a store that fails to answer (the lease's reads and writes).
ACQUIRE_ATTEMPTS = 4
#: After taking over from a holder that did not release, the newcomer waits this long
#: before its own shards start: any old shard that still fetches rereads the epochs
#: within crawler.engine.assembly.FENCE_CHECK_INTERVAL_S (0.5 s) and stops.
TAKEOVER_GRACE_S = 1.5


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


@dataclass(frozen=True)
class Holder:
    """Who takes a lease: this machine's name, this process's pid, and how to tell whether
    a pid of this machine still runs (the fault simulator's processes share one real pid)."""

    host: str
    pid: int
    pid_alive: Callable[[int], bool] = _pid_alive

    @staticmethod
    def this_process() -> "Holder":
        return Holder(socket.gethostname(), os.getpid())


class Lease:
    """The driver's side: acquire, renew, release (see the module docstring).

    Args:
        store: where the lease lives.
        ttl_s: how long a lease lives without a beat, on the observer's clock
            (``runtime.lease_ttl_s``).
        clock: this process's clock (monotonic ``now``, ``sleep``; ``wall`` only for
            the record's informational times).
        run_blocking: runs the store's blocking I/O inside :meth:`acquire`.
        margin_s: how long before ``ttl_s`` the holder stops vouching for itself when it
            cannot renew (:meth:`fresh`).
        holder: who this run is (default: this process on this machine).
    """

    def __init__(
        self,
        store: LeaseStore,
        ttl_s: float,
        *,
        clock: Clock,
        run_blocking: Callable[..., Awaitable[Any]] = _inline,
        margin_s: float | None = None,
        holder: Holder | None = None,
        run_id: str | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._clock = clock
        self._io = run_blocking
        self.margin_s = margin_s if margin_s is not None else min(ttl_s / 3, 5.0)
        holder = holder or Holder.this_process()
        self.host, self.pid, self._pid_alive = holder.host, holder.pid, holder.pid_alive
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.record: LeaseRecord | None = None
        self.renewed_at: float | None = None  # our clock's now() at the last successful renewal
        self.took_over = False  # the previous holder did not release: its shards may still run

    @property
    def epoch(self) -> int:
        assert self.record is not None, "lease not acquired"
        return self.record.epoch

    def _mine(self, epoch: int) -> LeaseRecord:
        return LeaseRecord(epoch, self.run_id, self.host, self.pid, self.ttl_s, 0, False, self._clock.wall())

    def _refusal(self, cur: LeaseRecord, why: str) -> OutputLeasedError:
        where = self.store.root.rsplit("/state", 1)[0]
        return OutputLeasedError(
            f"{where} is in use by crawl run {cur.run_id} (pid {cur.pid} on {cur.host}, epoch {cur.epoch}, {why}); "
            "stop it first or use another --out"
        )

    def _gone_here(self, cur: LeaseRecord) -> bool:
        """True if the holder provably stopped: a process of this machine that is gone, or
        a lease this machine's own clock saw lapse (one machine, one clock)."""
        if cur.host != self.host:
            return False
        if not self._pid_alive(cur.pid):
            return True
        return self._clock.wall() >= cur.renewed_at + cur.ttl_s + self.margin_s

    async def acquire(self) -> int:
        """Take the output (see the module docstring); returns our epoch. A store that
        fails to answer is asked again a few times (LeaseUnknownError after that)."""
        for attempt in range(1, ACQUIRE_ATTEMPTS + 1):
            try:
                return await self._acquire()
            except LeaseUnknownError:
                if attempt == ACQUIRE_ATTEMPTS:
                    raise
                await self._clock.sleep(WATCH_S * attempt)
        raise AssertionError("unreachable")

    async def _acquire(self) -> int:
        while True:
            cur = await self._io(self.store.newest)
            if cur is not None and not cur.released:
                if not self._gone_here(cur):
                    age = self._clock.wall() - cur.renewed_at
                    if cur.host == self.host or 0.0 <= age <= cur.ttl_s / 2:
                        # Renewed a moment ago as far as its record says: refuse at once
                        # (a refusal is safe whatever the clocks say).
                        raise self._refusal(cur, f"renewed {max(0.0, age):.0f}s ago")
                    await self._watch(cur)  # raises if its beat moves
                self.took_over = True
            epoch = (cur.epoch if cur is not None else 0) + 1
            mine = self._mine(epoch)
            if await self._io(self.store.claim, mine):
                self.record = mine
                self.renewed_at = self._clock.now()
                try:
                    await self._io(self.store.write, mine)  # the hint; the claim itself is durable
                except LeaseUnknownError as exc:
                    log.warning("lease hint not written (%s): readers find the epoch anyway", exc)
                if self.took_over:
                    await self._clock.sleep(TAKEOVER_GRACE_S)
                return epoch
            # Another run claimed that epoch first: look again.

    async def _watch(self, cur: LeaseRecord) -> None:
        """Return once ``cur``'s holder went ``ttl_s`` of our clock without a beat; raise
        :class:`OutputLeasedError` as soon as it beats."""
        start = self._clock.now()
        while self._clock.now() - start < cur.ttl_s:
            await self._clock.sleep(min(WATCH_S, cur.ttl_s / 8))
            now = await self._io(self.store.read_epoch, cur.epoch)
            if now is None or now.released:
                return
            if now.beat != cur.beat:
                raise self._refusal(now, "its lease is being renewed")
            if await self._io(self.store.newer_exists, cur.epoch):
                raise self._refusal(now, "a newer run claimed the output meanwhile")

    def renew(self) -> bool:
        """Beat once. False if a newer run claimed the output (we are fenced: stop).

        Raises :class:`LeaseUnknownError` when the store could not be read or written:
        no verdict; the caller tries again at its next beat."""
        assert self.record is not None
        if self.store.newer_exists(self.record.epoch):
            return False
        rec = replace(self.record, beat=self.record.beat + 1, renewed_at=self._clock.wall())
        self.store.write(rec)
        self.record = rec
        self.renewed_at = self._clock.now()
        return True

    def fresh(self) -> bool:
        """True while our last renewal is recent enough, on our clock, that nobody can
        have seen the lease lapse: the session tells its shards it lives only then."""
        return self.renewed_at is not None and self._clock.now() - self.renewed_at < self.ttl_s - self.margin_s

    def release(self) -> None:
        """Mark our epoch released (a clean stop), so the next run starts at once."""
        if self.record is None:
            return
        try:
            if not self.store.newer_exists(self.record.epoch):
                self.store.write(replace(self.record, released=True, renewed_at=self._clock.wall()))
        except (LeaseUnknownError, StorageError) as exc:
            log.warning("releasing the lease failed (%s): the next run waits out its TTL", exc)


class Fence:
    """A shard's side: may this epoch still fetch, write and ack?

    ``ok()`` answers from a reading at most ``check_interval_s`` old (the per-fetch
    check); ``ok(fresh=True)`` reads now (before a write or an ack) and raises
    :class:`LeaseUnknownError` when it cannot (the write waits and retries). Fenced means
    a newer epoch exists: a fact that never reverts, whatever any clock says.
    """

    def __init__(self, store: LeaseStore, epoch: int, clock: Clock, check_interval_s: float) -> None:
        self.store = store
        self.epoch = epoch
        self._clock = clock
        self._interval = check_interval_s
        self._checked_at = -float("inf")
        self._ok = True
        self.reason: str | None = None
        self.unknown = False  # the last read failed: the gate stays shut until one succeeds

    @property
    def lost(self) -> bool:
        """True once a newer epoch was seen (for good)."""
        return not self._ok

    def recheck(self) -> None:
        """Read the epochs at the next :meth:`ok` (the driver spoke again after a silence)."""
        self._checked_at = -float("inf")

    def ok(self, fresh: bool = False) -> bool:
        if not self._ok:
            return False
        now = self._clock.now()
        if fresh or self.unknown or now - self._checked_at >= self._interval:
            try:
                newer = self.store.newer_exists(self.epoch)
            except LeaseUnknownError:
                self.unknown = True
                if fresh:
                    raise
                return False
            self.unknown = False
            self._checked_at = now
            if newer:
                self._fail(f"epoch {self.epoch + 1} replaced ours ({self.epoch})")
        return self._ok

    def _fail(self, why: str) -> None:
        self._ok = False
        self.reason = why
        log.error("fenced off (epoch %d): %s; this shard stops", self.epoch, why)


def describe(rec: LeaseRecord | None) -> dict[str, Any] | None:
    """A lease for stats and ``crawl stats``."""
    return None if rec is None else {**asdict(rec), "expires_at": rec.expires_at}
