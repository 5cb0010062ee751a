"""The seen-URL set: a Bloom filter in front of an exact store of URL hashes.

docs/invariants.md #3: a URL is marked seen when it is enqueued and never fetched twice
in one crawl pass. :class:`SeenSet` answers "is this URL new?" and marks it in the same
call. The Bloom filter (:mod:`crawler.seen.bloom`) answers most "new" verdicts without
touching the exact store (:mod:`crawler.seen.store`), where a lookup can be expensive; a
Bloom "maybe seen" is settled by the exact store, so with ``exact=True`` a false
positive never drops a page. With ``exact=False`` the filter alone decides (lossy: a
false positive silently drops a new URL) and the set reports an estimate of how many it
dropped.

Disk mode (``path=...``, the crash-safe crawl; its files and the exact check against
the database are a :class:`~crawler.seen.ondisk.SeenOnDisk`): the exact store is a
SQLite database and only the Bloom bits, a bounded hot cache of recently seen hashes and SQLite's bounded
page cache stay in RAM, so memory no longer grows with the number of URLs at 82 bytes
each but at the Bloom filter chain's ~2-4 bytes (1%; crawler.seen.scalable: a filter
that grows with the set, so its false-positive rate holds at any size; a fixed filter
sized in advance took ~1.2 bytes but stopped filtering past its capacity). Every
``check_and_add`` call is one
SQLite transaction: when it returns, the URLs it reported new are on disk
(process-crash safe). The Bloom filter is snapshotted next to the database
(``<path>.bloom``, :mod:`crawler.seen.snapshot`) by :meth:`SeenSet.snapshot_bloom` /
:meth:`SeenSet.close` and reloaded on restart when it matches the database, else
rebuilt from it.

Disk mode (exact, ``path`` set), measured on the project machine (2 cores shared with
other jobs, pybloom, durable, batches of 1000 hashes with 70% repeats): 92k checks/s
at 1M stored URLs; at 10M 50-61k/s wall clock (load average 3-6; ~30k/s at load 9),
77-83k/s of CPU time: per batch ~13 ms CPU = Bloom + Python ~4.5, SQLite lookups
~2.7, insert + commit ~5.5 (checkpoint fsyncs add ~4 ms of wall). rbloom: 69k/s;
``durable=False``: 88k/s. RSS growth 3.2 bytes per URL at 10M (fixed Bloom 12 MB + 8 MB
page cache + ~7 MB hot cache; in memory 75-82 bytes per URL); 14.3 bytes per URL on
disk (+1.2 for the snapshot, + up to 16 MB of WAL). Bloom rebuild from the database:
1.3 s per million URLs with pybloom, 0.6 s with rbloom; a 10M snapshot loads in 0.1 s.

The checks of each mode are crawler.seen.ondisk (exact, on disk) and crawler.seen.inmemory
(exact in memory, Bloom-only); the counters and figures, crawler.seen.seenstats.
"""

from __future__ import annotations

import os
from typing import Self

from crawler.errors import ConfigError, StorageError
from crawler.seen.bloom import BLOOM_BACKENDS, DEFAULT_BLOOM
from crawler.seen.hashing import MASK64, url_hash64
from crawler.seen.inmemory import check_bloom_only, check_in_memory, forget_in_memory

# claim_*_identity live with the files they check; crawler.session.preflight imports
# claim_bloom_identity from here.
from crawler.seen.ondisk import SeenOnDisk, claim_bloom_identity, claim_disk_identity
from crawler.seen.seenstats import SEEN_COUNTERS, SeenStats, seen_stats
from crawler.seen.scalable import ScalableBloom
from crawler.seen.snapshot import SnapshotHeader, snapshot_header
from crawler.seen.store import DiskStore, ExactStore

__all__ = ["SeenSet", "claim_bloom_identity", "claim_disk_identity"]


class SeenSet:
    """Which URLs were seen: ``check_and_add`` returns True for a URL's first sighting only.

    Args:
        capacity: URLs the first Bloom filter is sized for. The filter grows with the
            set (a chain of filters, each twice the last: crawler.seen.scalable), so this
            only sets where memory starts and how many stages a large set has.
        error_rate: the filter chain's false-positive rate, kept at any size.
        exact: keep the exact store behind the filter (default). False = Bloom only,
            lossy but ~10x smaller.
        bloom: "rbloom" (default; 3.4x faster end to end, see :mod:`crawler.seen.bloom`)
            or "pybloom" (pybloom-live).
        path: None (default) keeps everything in memory. A file path makes the set
            crash-safe: in exact mode the exact store is the SQLite database at ``path``
            (created if missing, reopened if present) and the Bloom filter is snapshotted
            to ``<path>.bloom``; in Bloom-only mode only ``<path>.bloom`` is written.
        cache_size: hashes kept in the in-memory hot cache in front of the database
            (exact disk mode only; 0 disables it).
        durable: False trades OS-crash safety for speed (SQLite ``synchronous=OFF``, no
            fsync of the snapshot); a crash of the process itself loses nothing either way.

    Restart: every call is committed before it returns, so reopening the same path never
    reports as new a URL some earlier call marked seen, crash or not. The Bloom filter is
    loaded from ``<path>.bloom`` when that snapshot names this database and its current
    row count (i.e. nothing was added after :meth:`snapshot_bloom` / :meth:`close`),
    else rebuilt by streaming every hash from the database (``bloom_source`` says which).
    In Bloom-only mode the snapshot is all there is: URLs marked after the last snapshot
    are forgotten by a crash (they would be fetched again, not lost).

    A SeenSet is used by one caller at a time (an actor's methods run one by one); the
    database connection is not tied to the thread that opened it.
    """

    def __init__(
        self,
        capacity: int,
        error_rate: float = 0.01,
        *,
        exact: bool = True,
        bloom: str = DEFAULT_BLOOM,
        path: str | os.PathLike[str] | None = None,
        cache_size: int = 100_000,
        durable: bool = True,
        identity: str | None = None,
    ) -> None:
        _check_args(capacity, error_rate, bloom, cache_size, path)
        self.capacity = capacity
        self.error_rate = float(error_rate)
        self.exact = bool(exact)
        self.bloom_backend = bloom
        self.path: str | None = os.fspath(path) if path is not None else None
        self.cache_size = cache_size
        self.durable = bool(durable)
        self.identity = identity  # the files' stamp (crawler.recovery.stamps); None: unchecked
        self._bloom: ScalableBloom = self._make_bloom(None)
        self._store: ExactStore | DiskStore | None = ExactStore() if self.exact else None
        self._disk: DiskStore | None = None
        self._files: SeenOnDisk | None = None  # the database and Bloom snapshot (with a path)
        self.checks = 0
        self.novel = 0
        self.bloom_positives = 0
        self.exact_confirmations = 0
        self.false_positives = 0
        self.cache_hits = 0
        self.db_lookups = 0
        self.forgotten = 0  # marks undone (:meth:`forget_hashes`): a delivery that failed
        # Lossy mode: running expectation of new URLs dropped by false positives.
        self._est_dropped = 0.0
        # Where the Bloom filter came from: "new", "snapshot" or "rebuilt" (disk mode).
        self.bloom_source = "new"
        self.bloom_source_reason = ""
        self.bloom_rebuild_seconds = 0.0
        if self.path is not None:
            self._open_path(self.path)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        capacity: int,
        error_rate: float = 0.01,
        exact: bool = True,
        *,
        bloom: str = DEFAULT_BLOOM,
        cache_size: int = 100_000,
        durable: bool = True,
        identity: str | None = None,
    ) -> SeenSet:
        """The disk-backed set at ``path``: reopened with its contents if it exists, else new.

        Same as ``SeenSet(capacity, error_rate, exact=exact, path=path, ...)``.
        """
        return cls(
            capacity, error_rate, exact=exact, bloom=bloom, path=path, cache_size=cache_size, durable=durable, identity=identity
        )

    # --- disk mode: open, snapshot, close --------------------------------------------------

    @property
    def bloom_path(self) -> str | None:
        """Where the Bloom snapshot lives: ``<path>.bloom`` (None in memory mode)."""
        return None if self.path is None else self.path + ".bloom"

    def _open_path(self, path: str) -> None:
        header = snapshot_header(self.exact, self.bloom_backend, self.capacity, self.error_rate, self.identity)
        files = SeenOnDisk(path, header, exact=self.exact, cache_size=self.cache_size, durable=self.durable)
        opened = files.open(self._make_bloom, self._bloom, self.identity)
        self._files, self._disk = files, files.disk
        if files.disk is not None:
            self._store = files.disk
        if opened.loaded is None:
            return
        self._take({c: int(opened.counters.get(c, 0)) for c in SEEN_COUNTERS})
        self._est_dropped = opened.est_dropped
        self._bloom = opened.loaded.bloom
        self.bloom_source, self.bloom_source_reason = opened.loaded.source, opened.loaded.reason
        self.bloom_rebuild_seconds = opened.loaded.rebuild_seconds

    def snapshot_bloom(self) -> None:
        """Write the Bloom filter to ``<path>.bloom`` (atomically: temp file + rename).

        In exact mode the WAL is checkpointed first, so the snapshot never names rows the
        database file could lose; the snapshot records the row count and is used on
        reopen only if the database still has exactly that many rows. In Bloom-only mode
        this is the set's persistence: call it periodically (and :meth:`close` at the end).
        """
        if self._files is None:
            raise ConfigError("seen snapshot_bloom: this SeenSet has no path (in-memory mode)")
        self._require_open()
        self._files.snapshot(self._bloom, self._counters(), self._est_dropped)

    def backup(self, dest_path: str) -> None:
        """A consistent copy of this set's durable state at ``dest_path`` (to ship it to a
        remote output): the exact store (SQLite online backup; its Bloom filter is rebuilt
        from it on open), or in Bloom-only mode the Bloom file, written there."""
        if self._files is None:
            raise ConfigError("seen backup: this SeenSet has no path (in-memory mode)")
        self._require_open()
        self._files.backup(dest_path, self._bloom, self._counters(), self._est_dropped)

    def close(self) -> None:
        """Persist and release: counters, Bloom snapshot, database. Idempotent.

        In memory mode this does nothing. A set that is dropped without ``close()`` loses
        nothing committed; its next open just rebuilds the Bloom filter.
        """
        if self._files is None or self._files.closed:
            return
        try:
            self.snapshot_bloom()
        finally:
            self._files.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def _closed(self) -> bool:
        return self._files is not None and self._files.closed

    def _require_open(self) -> None:
        if self._closed:
            raise StorageError(f"seen set {self.path} is closed")

    def _counters(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in SEEN_COUNTERS}

    def _take(self, counters: dict[str, float]) -> None:
        """Keep the counters a check (or an open) returned."""
        for c, v in counters.items():
            setattr(self, c, v)

    # --- checks ---------------------------------------------------------------------------

    def _make_bloom(self, raw: bytes | None, header: SnapshotHeader | None = None) -> ScalableBloom:
        """An empty chain, or one loaded from a snapshot's ``raw`` bytes; a version-1
        snapshot (``header``) holds one filter, which becomes the chain's first stage."""
        if raw is not None and header is not None and header.get("version") == 1:
            legacy = (int(header["capacity"]), float(header["error_rate"]), raw)
            return ScalableBloom(self.bloom_backend, self.capacity, self.error_rate, legacy=legacy)
        return ScalableBloom(self.bloom_backend, self.capacity, self.error_rate, raw)

    def __len__(self) -> int:
        """URLs marked seen: exact in exact mode; in Bloom-only mode the URLs reported new
        (a lower bound on the distinct URLs offered: dropped ones are not counted)."""
        return len(self._store) if self._store is not None else self.novel

    def check_and_add(self, urls: list[str]) -> list[bool]:
        """For each URL, True if it was never seen before (it is now marked seen).

        A URL repeated within the batch is novel only at its first position.
        """
        return self.check_and_add_hashes([url_hash64(u) for u in urls])

    def check_and_add_hashes(self, hashes: list[int]) -> list[bool]:
        """:meth:`check_and_add` for URL hashes already computed with :func:`url_hash64`.

        In exact disk mode the whole call is one SQLite transaction, committed before it
        returns: the hashes reported new are then on disk.
        """
        if self._closed:
            self._require_open()
        masked = [h & MASK64 for h in hashes]
        if self._files is not None and self._disk is not None:
            out, counters = self._files.check(masked, self._bloom, self._counters())
        elif isinstance(self._store, ExactStore):
            out, counters = check_in_memory(masked, self._bloom, self._store, self._counters())
        else:  # Bloom-only: crawler.seen.inmemory.check_bloom_only
            out, counters, est = check_bloom_only(masked, self._bloom, self._counters())
            self._est_dropped += est
        self._take(counters)
        return out

    def forget_hashes(self, hashes: list[int]) -> int:
        """Undo :meth:`check_and_add_hashes` for hashes it just reported new, because
        their delivery to the owning shard failed (docs/invariants.md #3: a URL is marked
        seen when it is enqueued, so a mark without a queue entry would lose the URL for
        the whole crawl). Returns how many marks were undone; ``novel`` drops by as much, so the
        URL ledger still counts only what a shard holds.

        The Bloom bits stay set (a Bloom filter cannot delete): in exact mode the next
        sighting is a Bloom positive that the exact store clears, at the cost of one
        lookup. In Bloom-only mode nothing can be undone: the URLs stay marked (that mode
        is lossy by choice) and are counted in ``novel`` no more, as they hold no place.
        """
        self._require_open()
        hs = list(dict.fromkeys(h & MASK64 for h in hashes))
        if not hs:
            return 0
        if self._files is not None and self._disk is not None:
            removed, counters = self._files.forget(hs, self._counters())
        else:
            store = self._store if isinstance(self._store, ExactStore) else None
            removed, counters = forget_in_memory(hs, store, self._counters())
        self._take(counters)
        return removed

    def key_page(self, after: int | None, limit: int) -> list[int]:
        """The exact store's marks in key order, a page at a time (the URL ledger's audit:
        crawler.session.ledgeraudit); ConfigError without an exact store on disk."""
        self._require_open()
        if self._disk is None:
            raise ConfigError("seen key_page: only an exact set on disk can be audited")
        return self._disk.key_page(after, limit)

    def fill_ratio(self) -> float:
        """Fraction of the Bloom filters' bits that are set (all stages together)."""
        return self._bloom.bits_set() / self._bloom.m

    def estimated_false_positive_rate(self) -> float:
        """Chance that a new URL checked now is reported seen by the filter chain:
        ``1 - prod(1 - fill_i^k_i)`` over its stages (crawler.seen.scalable)."""
        return self._bloom.false_positive_rate()

    def stats(self) -> SeenStats:
        """Counters and filter health (what each figure means: crawler.seen.seenstats).

        With a path, also ``bloom_source``: whether the filter was loaded from its
        snapshot, rebuilt from the database (``bloom_rebuild_seconds``) or new.
        """
        self._bloom.recount()
        out = seen_stats(
            backend=self.bloom_backend,
            exact=self.exact,
            capacity=self.capacity,
            error_rate=self.error_rate,
            items=len(self),
            counters=self._counters(),
            bloom=self._bloom,
            est_dropped=self._est_dropped,
            memory_bytes=self.memory_bytes(),
        )
        if self.path is not None:
            out.update(
                path=self.path,
                bloom_source=self.bloom_source,
                bloom_rebuild_seconds=self.bloom_rebuild_seconds,
                disk_bytes=self.disk_bytes(),
            )
        return out

    def memory_bytes(self) -> int:
        """Estimated resident size: Bloom bits plus the exact store.

        In exact disk mode the exact store's share is the hot cache plus SQLite's page
        cache (bounded at 8 MB, less while the database is smaller).
        """
        size = self._bloom.memory_bytes()
        if self._files is not None and self._disk is not None:
            return size + self._files.memory_bytes()
        if self._store is not None:
            size += self._store.memory_bytes()
        return size

    def disk_bytes(self) -> int:
        """Bytes on disk: database, WAL and Bloom snapshot (0 in memory mode)."""
        return 0 if self._files is None else self._files.disk_bytes()


def _check_args(
    capacity: int, error_rate: float, bloom: str, cache_size: int, path: str | os.PathLike[str] | None
) -> None:
    """A SeenSet's arguments, refused with the setting to fix (crawler.errors.ConfigError)."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigError(f"seen capacity: must be a positive integer, got {capacity!r}")
    if not isinstance(error_rate, (int, float)) or not 0.0 < error_rate < 1.0:
        raise ConfigError(f"seen error_rate: must be between 0 and 1 (e.g. 0.01), got {error_rate!r}")
    if bloom not in BLOOM_BACKENDS:
        raise ConfigError(f"seen bloom: must be one of {', '.join(BLOOM_BACKENDS)}, got {bloom!r}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
        raise ConfigError(f"seen cache_size: must be an integer >= 0, got {cache_size!r}")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"seen path: must be a file path or None, got {path!r}")
