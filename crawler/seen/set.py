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
each but at the Bloom filter's ~1.2 bytes (1%). Every ``check_and_add`` call is one
SQLite transaction: when it returns, the URLs it reported new are on disk
(process-crash safe). The Bloom filter is snapshotted next to the database
(``<path>.bloom``, :mod:`crawler.seen.snapshot`) by :meth:`SeenSet.snapshot_bloom` /
:meth:`SeenSet.close` and reloaded on restart when it matches the database, else
rebuilt from it. Numbers measured on the project machine are in the :class:`SeenSet`
docstring.
"""

from __future__ import annotations

import os
from typing import Self

from crawler.errors import ConfigError, StorageError
from crawler.seen.bloom import BLOOM_BACKENDS, DEFAULT_BLOOM, Bloom, make_bloom
from crawler.seen.hashing import MASK64, url_hash64
from crawler.seen.ondisk import SeenOnDisk
from crawler.seen.snapshot import SNAPSHOT_VERSION, BadSnapshot, read_bloom_file
from crawler.seen.store import SEEN_FIX, DiskStore, ExactStore
from crawler.recovery.stamps import check

__all__ = ["SeenSet"]

_COUNTERS = (
    "checks",
    "novel",
    "bloom_positives",
    "exact_confirmations",
    "false_positives",
    "cache_hits",
    "db_lookups",
    "forgotten",
)


class SeenSet:
    """Which URLs were seen: ``check_and_add`` returns True for a URL's first sighting only.

    Args:
        capacity: URLs the Bloom filter is sized for at ``error_rate``. Going past it
            keeps working: the filter answers "maybe" more often (exact mode then asks the
            exact store more often; lossy mode drops more new URLs).
        error_rate: the filter's false-positive rate at ``capacity`` items.
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

    Disk mode (exact, ``path`` set), measured on the project machine (2 cores shared with
    other jobs, pybloom, durable, batches of 1000 hashes with 70% repeats): 92k checks/s
    at 1M stored URLs; at 10M 50-61k/s wall clock (load average 3-6; ~30k/s at load 9),
    77-83k/s of CPU time: per batch ~13 ms CPU = Bloom + Python ~4.5, SQLite lookups
    ~2.7, insert + commit ~5.5 (checkpoint fsyncs add ~4 ms of wall). rbloom: 69k/s;
    ``durable=False``: 88k/s. RSS growth 3.2 bytes per URL at 10M (Bloom 12 MB + 8 MB
    page cache + ~7 MB hot cache; in memory 75-82 bytes per URL); 14.3 bytes per URL on
    disk (+1.2 for the snapshot, + up to 16 MB of WAL). Bloom rebuild from the database:
    1.3 s per million URLs with pybloom, 0.6 s with rbloom; a 10M snapshot loads in 0.1 s.

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
        self.capacity = capacity
        self.error_rate = float(error_rate)
        self.exact = bool(exact)
        self.bloom_backend = bloom
        self.path: str | None = os.fspath(path) if path is not None else None
        self.cache_size = cache_size
        self.durable = bool(durable)
        self.identity = identity  # the files' stamp (crawler.recovery.stamps); None: unchecked
        self._bloom: Bloom = self._make_bloom(None)
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
        **kwargs: object,
    ) -> SeenSet:
        """The disk-backed set at ``path``: reopened with its contents if it exists, else new.

        Same as ``SeenSet(capacity, error_rate, exact=exact, path=path, **kwargs)``.
        """
        return cls(capacity, error_rate, exact=exact, path=path, **kwargs)  # type: ignore[arg-type]

    # --- disk mode: open, snapshot, close --------------------------------------------------

    @property
    def bloom_path(self) -> str | None:
        """Where the Bloom snapshot lives: ``<path>.bloom`` (None in memory mode)."""
        return None if self.path is None else self.path + ".bloom"

    def _open_path(self, path: str) -> None:
        files = SeenOnDisk(
            path, self._snapshot_header(), exact=self.exact, cache_size=self.cache_size, durable=self.durable
        )
        if not self.exact:
            claim_bloom_identity(self.bloom_path or "", self.identity)
        opened = files.open(self._make_bloom, self._bloom)
        claim_disk_identity(files, self.identity)
        self._files, self._disk = files, files.disk
        if files.disk is not None:
            self._store = files.disk
        if opened.loaded is None:
            return
        for c in _COUNTERS:
            setattr(self, c, int(opened.counters.get(c, 0)))
        self._est_dropped = opened.est_dropped
        self._bloom = opened.loaded.bloom
        self.bloom_source, self.bloom_source_reason = opened.loaded.source, opened.loaded.reason
        self.bloom_rebuild_seconds = opened.loaded.rebuild_seconds

    def _snapshot_header(self) -> dict:
        header = {
            "version": SNAPSHOT_VERSION,
            "exact": self.exact,
            "bloom": self.bloom_backend,
            "capacity": self.capacity,
            "error_rate": self.error_rate,
        }
        if not self.exact and self.identity is not None:
            header["identity"] = self.identity  # a Bloom-only set's stamp (its database's, in exact mode)
        return header

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
        return {c: getattr(self, c) for c in _COUNTERS}

    # --- checks ---------------------------------------------------------------------------

    def _make_bloom(self, raw: bytes | None) -> Bloom:
        return make_bloom(self.bloom_backend, self.capacity, self.error_rate, raw)

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
        if self._store is None:
            return self._check_lossy(hashes)
        if self._files is not None and self._disk is not None:
            out, counters = self._files.check([h & MASK64 for h in hashes], self._bloom, self._counters())
            for c, v in counters.items():
                setattr(self, c, v)
            return out
        bloom = self._bloom
        out: list[bool] = [True] * len(hashes)
        novel_here: set[int] = set()
        pending: list[int] = []  # positions the Bloom filter could not clear
        for i, h in enumerate(hashes):
            h &= MASK64
            if bloom.check_and_add(h):
                pending.append(i)
            else:
                novel_here.add(h)  # a Bloom negative is definitely new
        self.bloom_positives += len(pending)
        if pending:
            asked = [hashes[i] & MASK64 for i in pending]
            known = self._store.contains_many(asked)  # type: ignore[union-attr]
            for i, h, was_seen in zip(pending, asked, known):
                if was_seen or h in novel_here:
                    # Really seen (before, or earlier in this batch): the maybe was right.
                    self.exact_confirmations += 1
                    out[i] = False
                else:
                    # The Bloom filter lied; the exact store saves the URL.
                    self.false_positives += 1
                    novel_here.add(h)
        self._store.add_many(novel_here)  # type: ignore[union-attr]
        self.checks += len(hashes)
        self.novel += len(novel_here)
        return out

    def _check_lossy(self, hashes: list[int]) -> list[bool]:
        bloom = self._bloom
        k, m = bloom.k, bloom.m
        out: list[bool] = []
        positives = 0
        est = 0.0
        for h in hashes:
            if bloom.check_and_add(h & MASK64):
                positives += 1
                out.append(False)
            else:
                # A new URL got through. A new URL arriving now would have been a false
                # positive with probability p = fill^k, so each one that got through
                # stands for p / (1 - p) that did not (estimator in stats()).
                p = (bloom.bits_set() / m) ** k
                if p < 1.0:
                    est += p / (1.0 - p)
                out.append(True)
        self._est_dropped += est
        self.bloom_positives += positives
        self.checks += len(hashes)
        self.novel += len(hashes) - positives
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
        if self._store is None:
            removed = min(len(hs), self.novel)
        elif self._files is not None and self._disk is not None:
            removed, counters = self._files.forget(hs, self._counters())
            self.novel, self.forgotten = int(counters["novel"]), int(counters["forgotten"])
            return removed
        else:
            removed = self._store.discard_many(hs)  # type: ignore[union-attr]
        self.novel -= removed
        self.forgotten += removed
        return removed

    def key_page(self, after: int | None, limit: int) -> list[int]:
        """The exact store's marks in key order, a page at a time (the URL ledger's audit:
        crawler.session.ledgeraudit); ConfigError without an exact store on disk."""
        self._require_open()
        if self._disk is None:
            raise ConfigError("seen key_page: only an exact set on disk can be audited")
        return self._disk.key_page(after, limit)

    def fill_ratio(self) -> float:
        """Fraction of the Bloom filter's bits that are set."""
        return self._bloom.bits_set() / self._bloom.m

    def estimated_false_positive_rate(self) -> float:
        """Chance that a new URL checked now is reported seen by the filter: fill^k."""
        return self.fill_ratio() ** self._bloom.k

    def stats(self) -> dict[str, float | int | bool | str]:
        """Counters and filter health.

        ``estimated_false_positives`` (meaningful in Bloom-only mode, where nothing else
        can tell a false positive from a repeat) is the Horvitz-Thompson style estimate
        sum over Bloom negatives of p_i / (1 - p_i), p_i = fill_i^k at the time of the
        check: new URLs arrive, each is dropped with probability p_i, so every one that
        got through represents p_i / (1 - p_i) that were dropped. In exact mode the real
        count is ``false_positives``.

        ``cache_hits`` counts Bloom positives answered by the hot cache and
        ``db_lookups`` the hashes asked from SQLite (both 0 without a path). With a
        path, ``bloom_source`` says whether the filter was loaded from its snapshot,
        rebuilt from the database (``bloom_rebuild_seconds``) or new.
        """
        self._bloom.recount()
        rate = self.estimated_false_positive_rate()
        out: dict[str, float | int | bool | str] = {
            "backend": self.bloom_backend,
            "exact": self.exact,
            "capacity": self.capacity,
            "error_rate": self.error_rate,
            "items": len(self),
            "checks": self.checks,
            "novel": self.novel,
            "already_seen": self.checks - self.novel,
            "bloom_positives": self.bloom_positives,
            "exact_confirmations": self.exact_confirmations,
            "false_positives": self.false_positives,
            "cache_hits": self.cache_hits,
            "db_lookups": self.db_lookups,
            "forgotten": self.forgotten,
            "bloom_bits": self._bloom.m,
            "bloom_hashes": self._bloom.k,
            "fill_ratio": self.fill_ratio(),
            "estimated_false_positive_rate": rate,
            "estimated_false_positives": self._est_dropped if not self.exact else float(self.false_positives),
            "memory_bytes": self.memory_bytes(),
        }
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


def claim_bloom_identity(bloom_path: str, identity: str | None) -> None:
    """A Bloom-only set's stamp is in its snapshot's header (written with every snapshot):
    refuse another crawl's (crawler.recovery.stamps). A damaged snapshot is left to the
    open, which refuses it with its own message."""
    if identity is None:
        return
    try:
        found = read_bloom_file(bloom_path)
    except BadSnapshot:
        return
    if found is not None:
        check(bloom_path, found[0].get("identity"), identity, SEEN_FIX)


def claim_disk_identity(files: SeenOnDisk, identity: str | None) -> None:
    """An exact set's stamp is in its database (crawler.seen.store.DiskStore.claim_identity);
    a refused set's files are closed again."""
    if files.disk is None:
        return
    try:
        files.disk.claim_identity(identity)
    except BaseException:
        files.close()
        raise
