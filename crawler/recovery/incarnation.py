"""A shard's incarnations: each claims a generation once, and the next one fences it.

DESIGN invariant 15: a partitioned old incarnation of a shard that comes back cannot
delete, overwrite or shadow what its successor wrote. The lease (crawler.recovery.lease)
fences a whole *run*; this fences one shard's incarnations within and across runs (an
actor Ray restarted while the old one still ran, a node that drops off and comes back).

``OUT/state/<shard>/gen-<gen>.json`` is the claim of generation ``gen``. It is created
once (crawler.output.fs.create_new: ``O_EXCL`` locally, ``If-None-Match: *`` on S3), and
rewritten only by its owner: after the restore, with what it started from (``base``: the
snapshot, and how far it read each older generation: crawler.recovery.restore), and
after each snapshot, with that snapshot's name.

In order, an incarnation:

1. **claims** (:func:`claim`) the generation one above the highest it lists, and the
   next one up while the create finds the name taken. Every number below the highest
   claim is claimed (each claimer starts at most one above a taken number and takes the
   first free one), so the first free number is above every claim: a new claim is the
   newest, even when the listing lags;
2. **reads** OUT (crawler.recovery.restore), and records its base in its claim;
3. **writes**, checking before every write (:meth:`Incarnation.check`: one GET, or a
   verdict at most :data:`CHECK_INTERVAL_S` old) that ``gen-<gen+1>.json`` does not
   exist; once it does, FencedError, for good. Before a change counts as durable (a
   delivery acknowledged: crawler.recovery.statelog) the check is made again, fresh,
   *after* its PUT: that one is what the argument below rests on.

Why an old incarnation Z (generation n) cannot hurt its successor S (n+1), whatever Z
does between its last check and its next PUT:

* **Nothing acknowledged is lost.** S's claim is complete before S reads. A segment of Z
  whose PUT completed before S read is found by S (by name, not only by listing:
  crawler.recovery.restore). One whose PUT completed later fails Z's check after the PUT
  (that read comes after S's claim), so Z never acknowledges it; the sender retries the
  delivery, to S.
* **Nothing is overwritten.** Every name Z writes carries n (segments, snapshots,
  crawler.output parts and packs: ``shard-000-g<n>``) and S's carry n+1.
* **Nothing S needs is deleted.** Z deletes only in compaction, after a fresh check, and
  only what a snapshot covers that Z wrote and named in its claim before that check; so
  S finds that snapshot (or a newer one) and starts from it, never from what was deleted.
* **Nothing is shadowed.** S's base says how far S read generation n; every later restore
  reads n only that far, so a segment or snapshot Z wrote beyond it is never applied
  (S's first compaction deletes it: an older generation). S's changes replay after n's.
* Rows Z writes after the check are rows of pages it did fetch, under its own names: a
  duplicate row at worst (crawler.output.writer).

Store by store:

* **Local disk**: ``O_EXCL`` is atomic and a rename or a new file is seen at once, so all
  of the above holds (a zombie there is another process of the same machine).
* **S3 with conditional writes** (``If-None-Match: *``, AWS since 2024; s3fs raises
  FileExistsError when the create loses): the claim is atomic, and S3 reads and lists
  are strongly consistent, so a check sees a claim created before it and S's reads see
  every PUT completed before them. Sound.
* **A store that lists late** (but whose reads see what was written): a claimer whose
  listing misses claims finds their names taken and goes on up, and a restore finds
  segments and the newest snapshot by name, so the above holds; a gap it can see is
  listed again, then refused (crawler.recovery.restore).
* **An object store without conditional writes**: the claim is an existence check, a write and a read
  back (crawler.output.fs.atomic_create), and each check also reads the incarnation's own
  claim back and compares its token, so of two incarnations that claimed one generation
  at once, the one overwritten stops at its next check. Not closed: a claim PUT delayed
  longer than the rival's whole start (read back, restore, first segment and its check)
  lets both write generation n. Use a store with conditional writes (S3, GCS, Azure,
  MinIO and others have them) for a crawl whose shards can be cut off; a warning says so
  once per process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from crawler.clock import Clock
from crawler.errors import FencedError, StorageError
from crawler.output.fs import atomic_create
from crawler.recovery.statedir import RemoteDir, parse_piece

log = logging.getLogger(__name__)

_CLAIM = re.compile(r"^gen-(\d{8})\.json$")
#: Claims tried above the highest listed before giving up (each taken one is a live or
#: dead incarnation the listing did not show yet).
MAX_CLAIM_TRIES = 1000
#: How old a fence verdict may be for a check before a write (a check before an ack is
#: fresh, and refreshes it: under load the segments' checks answer the others).
CHECK_INTERVAL_S = 1.0

_warned_not_atomic = False


def claim_name(gen: int) -> str:
    return f"gen-{gen:08d}.json"


def claim_gen(path: str) -> int | None:
    """The generation a claim's file name names, or None for any other name."""
    m = _CLAIM.match(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class ClaimRecord:
    """What a claim says (empty when it cannot be read: a local create cut short by a crash
    takes the name for nobody, whose incarnation never got further)."""

    gen: int
    token: str | None = None
    base: dict[str, Any] | None = None  # crawler.recovery.statedir.Restored.base
    snapshot: str | None = None  # the newest snapshot this incarnation wrote (a file name)

    def heads(self) -> dict[int, int]:
        """How far the incarnation read each older generation when it started."""
        raw = (self.base or {}).get("heads") or {}
        return {int(g): int(n) for g, n in raw.items()}


def read_claim(remote: RemoteDir, gen: int) -> ClaimRecord | None:
    """Generation ``gen``'s claim (one GET); None if there is none."""
    data = remote.read(remote.path(claim_name(gen)))
    if data is None:
        return None
    try:
        raw = json.loads(data)
        return ClaimRecord(gen, raw.get("token"), raw.get("base"), raw.get("snapshot"))
    except (ValueError, AttributeError):
        log.warning("%s: claim of generation %d cannot be read: taken, nothing known", remote.base, gen)
        return ClaimRecord(gen)


class Incarnation:
    """One incarnation of a shard: the generation it claimed, and its fence.

    Use :func:`claim` to make one. ``check()`` is called before every durable write (it
    answers from a reading at most ``check_interval_s`` old), ``check(fresh=True)`` after
    a write and before it is acknowledged.
    """

    def __init__(self, remote: RemoteDir, gen: int, token: str, clock: Clock, *,
                 check_interval_s: float = CHECK_INTERVAL_S, atomic: bool = True,
                 record: dict[str, Any] | None = None) -> None:
        self.remote = remote
        self.gen = gen
        self.token = token
        self._clock = clock
        self._interval = check_interval_s
        self._atomic = atomic
        self._checked_at = -float("inf")
        self.reason: str | None = None  # why it is fenced, once it is
        self.checks = 0  # reads of the store made for checks
        self._record = dict(record or {"gen": gen, "token": token})  # what the claim holds

    @property
    def name(self) -> str:
        """The shard, for messages."""
        return self.remote.base.rsplit("/", 1)[-1]

    @property
    def fenced(self) -> bool:
        """Whether a check has found a newer incarnation (no read: the last verdict)."""
        return self.reason is not None

    def needs_read(self, fresh: bool = False) -> bool:
        """Whether :meth:`check` would read the store (callers on an event loop then run it
        in a thread)."""
        return self.reason is None and (fresh or self._clock.now() - self._checked_at >= self._interval)

    def ok(self, fresh: bool = False) -> bool:
        """May this incarnation still write? StorageError if the store cannot tell."""
        if self.needs_read(fresh):
            now = self._clock.now()
            self._verdict()
            self._checked_at = now  # as of before the read: never fresher than it is
        return self.reason is None

    def check(self, fresh: bool = False) -> None:
        """:meth:`ok`, raising FencedError when it is not."""
        if not self.ok(fresh):
            raise FencedError(f"{self.name}: {self.reason}; generation {self.gen} writes nothing more")

    def _verdict(self) -> None:
        self.checks += 1
        try:
            newer = self.remote.read(self.remote.path(claim_name(self.gen + 1)))
            mine = None if self._atomic or newer is not None else read_claim(self.remote, self.gen)
        except OSError as exc:
            raise StorageError(f"{self.name}: cannot check generation {self.gen}'s fence: {exc}") from exc
        if newer is not None:
            self._fail(f"generation {self.gen + 1} was claimed by a newer incarnation")
        elif mine is not None and mine.token != self.token:
            self._fail(f"generation {self.gen} was claimed by another incarnation at the same time")

    def _fail(self, why: str) -> None:
        self.reason = why
        log.error("%s: fenced off (generation %d): %s", self.name, self.gen, why)

    def _rewrite(self, **changes: Any) -> None:
        self._record.update(changes)
        self.remote.put(claim_name(self.gen), json.dumps(self._record).encode())

    def record_base(self, base: dict[str, Any]) -> None:
        """Write what this incarnation started from into its claim (before its first write:
        later restores read older generations only as far as this says)."""
        self.check(fresh=True)
        self._rewrite(base=base)

    def note_snapshot(self, name: str) -> None:
        """Name this incarnation's newest snapshot in its claim (after the snapshot's PUT,
        before compaction deletes what it covers): a restart finds it by name, however
        late the store lists it."""
        self._rewrite(snapshot=name)


def claim(remote: RemoteDir, clock: Clock, *, listed: list[str] | None = None,
          check_interval_s: float = CHECK_INTERVAL_S) -> Incarnation:
    """Claim the next generation of the shard in ``remote`` (see the module docstring).

    ``listed``: the folder's paths, if the caller listed it already (older outputs'
    state objects name generations that have no claim: the new one is above them too)."""
    paths = remote.names() if listed is None else listed
    gens = [g for g in (claim_gen(p) for p in paths) if g is not None]
    gens += [p.gen for p in (parse_piece(x) for x in paths) if p is not None]
    gen = max(gens, default=0) + 1
    atomic = atomic_create(remote.fs)
    if not atomic:
        global _warned_not_atomic
        if not _warned_not_atomic:
            _warned_not_atomic = True
            log.warning("%s: this store has no conditional writes: two incarnations of a shard that start "
                        "at the same moment are told apart only at their next check (crawler.recovery.incarnation)",
                        remote.base)
    token = uuid.uuid4().hex
    for _ in range(MAX_CLAIM_TRIES):
        record = {"gen": gen, "token": token, "host": socket.gethostname(), "pid": os.getpid(),
                  "claimed_at": clock.wall(), "base": None, "snapshot": None}
        if remote.create(claim_name(gen), json.dumps(record).encode()):
            return Incarnation(remote, gen, token, clock, check_interval_s=check_interval_s, atomic=atomic, record=record)
        gen += 1
    raise StorageError(f"{remote.base}: no free generation among {MAX_CLAIM_TRIES} above the highest listed")
