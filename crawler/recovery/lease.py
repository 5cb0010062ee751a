"""One crawl writes to an output at a time: a renewable lease with a fencing epoch.

docs/invariants.md #9. ``OUT/state/lease.json`` names the run that holds the output,
its epoch (a number that only grows), and the wall-clock time the lease expires. The
driver renews it while the crawl runs; every shard checks it before each fetch start,
each write and each ack, so a shard of an older epoch stops instead of crawling beside
the run that replaced it.

Taking the lease (:meth:`Lease.acquire`), in order:

1. no lease, or an expired one: take it with the next epoch;
2. a live lease whose holder is a process on this machine that no longer exists: its
   shards may still run until they notice (about a second, see ``actors/host_shard.py``)
   or the lease expires, so wait for the expiry, then take the next epoch;
3. a live lease whose holder is alive (or on another machine, and renewing): refuse
   with :class:`~crawler.errors.OutputLeasedError` naming the holder.

A write is one atomic replace (a local rename, or a single PUT on an object store). Two
runs racing for an expired lease on an object store without conditional writes could
both write; the loser finds out at its first renewal, and its shards at their next
check, so at worst both fetch for one check interval.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from crawler.clock import Clock
from crawler.errors import OutputLeasedError
from crawler.output import open_fs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseRecord:
    """What ``OUT/state/lease.json`` holds."""

    epoch: int
    run_id: str
    host: str
    pid: int
    expires_at: float  # wall clock (epoch seconds): other machines read it too
    ttl_s: float

    def expired(self, wall: float) -> bool:
        return wall >= self.expires_at

    def holder_gone(self) -> bool:
        """True if the holder provably no longer runs: a process of this machine that is gone."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, owned by someone else
            return False
        return _zombie(self.pid)


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


class LeaseStore:
    """Reads and writes ``OUT/state/lease.json`` through fsspec (local or s3://)."""

    def __init__(self, out: str, storage_options: dict | None = None) -> None:
        self.fs, root = open_fs(out, storage_options)
        self.path = f"{root.rstrip('/')}/state/lease.json"
        self._local = "://" not in out or out.startswith("file://")

    def read(self) -> LeaseRecord | None:
        try:
            if not self._local:
                self.fs.invalidate_cache(self.path.rsplit("/", 1)[0])
            # One GET: fs.open would check the object's ETag between requests, and fail
            # (FileExpired) when the driver renews the lease in between.
            data = json.loads(self.fs.cat_file(self.path))
            return LeaseRecord(**{k: data[k] for k in LeaseRecord.__dataclass_fields__})
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable lease %s (%r): treated as expired", self.path, exc)
            return None

    def write(self, rec: LeaseRecord) -> None:
        data = json.dumps(asdict(rec))
        if self._local:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.{rec.run_id}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        else:
            self.fs.pipe_file(self.path, data.encode())


class Lease:
    """The driver's side: acquire, renew, release.

    Args:
        store: where the lease lives.
        ttl_s: how long a lease lives without renewal (``runtime.lease_ttl_s``).
        wall: wall-clock seconds (injected for tests).
        sleep: blocking sleep used while waiting for a dead holder's lease to expire.
    """

    def __init__(
        self,
        store: LeaseStore,
        ttl_s: float,
        *,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._wall = wall
        self._sleep = sleep
        self.run_id = uuid.uuid4().hex[:12]
        self.record: LeaseRecord | None = None

    @property
    def epoch(self) -> int:
        assert self.record is not None, "lease not acquired"
        return self.record.epoch

    def acquire(self) -> int:
        """Take the lease (see the module docstring); returns our epoch."""
        while True:
            cur = self.store.read()
            now = self._wall()
            if cur is not None and not cur.expired(now):
                if not cur.holder_gone():
                    raise OutputLeasedError(
                        f"{self.store.path.rsplit('/state/', 1)[0]} is in use by crawl run {cur.run_id} "
                        f"(pid {cur.pid} on {cur.host}, lease renewed until {cur.expires_at - now:.0f}s from now); "
                        "stop it first or use another --out"
                    )
                # A dead driver: its shards stop when they notice; wait out its lease.
                self._sleep(min(cur.expires_at - now, self.ttl_s) + 0.05)
                continue
            epoch = (cur.epoch if cur is not None else 0) + 1
            self.record = LeaseRecord(epoch, self.run_id, socket.gethostname(), os.getpid(), now + self.ttl_s, self.ttl_s)
            self.store.write(self.record)
            if (mine := self.store.read()) is not None and mine.run_id == self.run_id:
                return epoch
            # Another run wrote in between: start over (it holds a live lease now).

    def renew(self) -> bool:
        """Extend our lease. False if another run took it (we are fenced: stop)."""
        assert self.record is not None
        cur = self.store.read()
        if cur is None or cur.run_id != self.run_id or cur.epoch != self.record.epoch:
            return False
        self.record = LeaseRecord(**{**asdict(self.record), "expires_at": self._wall() + self.ttl_s})
        self.store.write(self.record)
        return True

    def release(self) -> None:
        """Expire our lease now (a clean stop), so the next run starts at once."""
        if self.record is None:
            return
        cur = self.store.read()
        if cur is not None and cur.run_id == self.run_id:
            self.store.write(LeaseRecord(**{**asdict(self.record), "expires_at": self._wall()}))


class Fence:
    """A shard's side: may this epoch still fetch, write and ack?

    ``ok()`` answers from a reading at most ``check_interval_s`` old (the per-fetch
    check); ``ok(fresh=True)`` reads the lease now (before a write or an ack). Once
    fenced, always fenced.
    """

    def __init__(self, store: LeaseStore, epoch: int, clock: Clock, check_interval_s: float) -> None:
        self.store = store
        self.epoch = epoch
        self._clock = clock
        self._interval = check_interval_s
        self._checked_at = -float("inf")
        self._ok = True
        self.reason: str | None = None

    def ok(self, fresh: bool = False) -> bool:
        if not self._ok:
            return False
        now = self._clock.now()
        if fresh or now - self._checked_at >= self._interval:
            self._checked_at = now
            self._verdict(self.store.read())
        return self._ok

    def _verdict(self, cur: LeaseRecord | None) -> None:
        if cur is None:
            self._fail("the lease is gone")
        elif cur.epoch != self.epoch:
            self._fail(f"epoch {cur.epoch} (run {cur.run_id}) replaced ours ({self.epoch})")
        elif cur.expired(self._clock.wall()):
            self._fail("the driver stopped renewing the lease")

    def _fail(self, why: str) -> None:
        self._ok = False
        self.reason = why
        log.error("fenced off (epoch %d): %s; this shard stops", self.epoch, why)


def describe(rec: LeaseRecord | None) -> dict[str, Any] | None:
    """A lease for stats and ``crawl stats``."""
    return None if rec is None else asdict(rec)
