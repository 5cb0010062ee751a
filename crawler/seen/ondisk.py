"""The disk side of a seen set opened with a path: its files and the exact check on SQLite.

:class:`SeenOnDisk` owns what a :class:`~crawler.seen.set.SeenSet` keeps on disk: the
SQLite exact store and the hot cache in front of it (exact mode), and the Bloom snapshot
``<path>.bloom`` (both modes). It opens them (reloading or rebuilding the Bloom filter,
:mod:`crawler.seen.snapshot`), snapshots, backs up and closes them, and runs the
exact-mode check and undo against the database. The invariant it keeps
(docs/invariants.md #3): a ``check`` is one SQLite transaction, committed before it
returns, so the hashes it reported new are on disk and a reopened set never reports them
new again. The :class:`~crawler.seen.set.SeenSet` keeps the Bloom filter and the counters
and passes them in; this class holds no counter of its own.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import dataclass, field

from crawler.errors import ConfigError, StorageError
from crawler.recovery.stamps import check
from crawler.seen.bloom import Bloom
from crawler.seen.scalable import ScalableBloom
from crawler.seen.snapshot import (
    BadSnapshot,
    LoadedFilter,
    MakeBloom,
    SnapshotHeader,
    load_bloom_only,
    load_or_rebuild,
    read_bloom_file,
    refuse_other_mode,
    write_bloom_file,
)
from crawler.seen.store import PAGE_CACHE_KIB, SEEN_FIX, DiskStore, HotSet

__all__ = ["OpenedSeen", "SeenOnDisk", "claim_bloom_identity", "claim_disk_identity"]


@dataclass
class OpenedSeen:
    """What :meth:`SeenOnDisk.open` found: the Bloom filter and where it came from, and
    the counters saved by the last run (empty for a new set)."""

    loaded: LoadedFilter | None  # None: no snapshot (Bloom-only mode), keep the new filter
    counters: dict[str, float] = field(default_factory=dict)
    est_dropped: float = 0.0


class SeenOnDisk:
    """The files of a seen set at ``path`` (see the module docstring).

    Args:
        path: the SQLite database (exact mode); the Bloom snapshot is ``<path>.bloom``.
        header: the set's parameters, written in every snapshot header (and compared
            with the snapshot's on open).
        exact: exact mode (database + snapshot) or Bloom-only (snapshot only).
        cache_size: hashes kept in the hot cache in front of the database.
        durable: False: SQLite ``synchronous=OFF`` and no fsync of the snapshot.
    """

    def __init__(self, path: str, header: SnapshotHeader, *, exact: bool, cache_size: int, durable: bool) -> None:
        self.path = path
        self.bloom_path = path + ".bloom"
        self._header = header
        self.exact = exact
        self.cache_size = cache_size
        self.durable = durable
        self.disk: DiskStore | None = None  # the exact store (exact mode)
        self.hot: HotSet | None = None  # recently seen hashes in front of it
        self.closed = False

    def open(self, make_bloom: MakeBloom, fresh: ScalableBloom, identity: str | None = None) -> OpenedSeen:
        """Open (or create) the files: the database, then the Bloom filter from its
        snapshot when that still matches, else rebuilt from the database. ``fresh`` is
        the empty filter used when there is nothing to load. With ``identity``, files of
        another crawl are refused (crawler.recovery.stamps; see the claim_* functions)."""
        if not self.exact:
            claim_bloom_identity(self.bloom_path, identity)
        opened = self._open(make_bloom, fresh)
        claim_disk_identity(self, identity)
        return opened

    def _open(self, make_bloom: MakeBloom, fresh: ScalableBloom) -> OpenedSeen:
        path, bloom_path = self.path, self.bloom_path
        if os.path.isdir(path):
            raise ConfigError(f"seen path {path}: is a directory; give a file path")
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"seen path {path}: cannot create {parent}: {exc}") from exc
        if not self.exact:
            if os.path.exists(path):
                raise ConfigError(
                    f"seen path {path} exists (an exact seen store?) but a Bloom-only set writes only "
                    f"{bloom_path}; open it with exact=True or choose another path"
                )
            found = load_bloom_only(bloom_path, self._header, make_bloom)
            if found is None:
                return OpenedSeen(None)
            bloom, header = found
            return OpenedSeen(
                LoadedFilter(bloom, "snapshot"), dict(header.get("counters", {})), float(header.get("est_dropped", 0.0))
            )
        if not os.path.exists(path):
            refuse_other_mode(bloom_path, self.exact)
        self.disk = DiskStore(path, cache_kib=PAGE_CACHE_KIB, durable=self.durable)
        self.hot = HotSet(self.cache_size)
        try:
            counters = dict(self.disk.counters)
            loaded = load_or_rebuild(bloom_path, dict(self._header), self.disk, make_bloom, fresh)
        except BaseException:
            self.disk.close()
            raise
        return OpenedSeen(loaded, counters)

    def snapshot(self, bloom: Bloom, counters: dict[str, float], est_dropped: float) -> None:
        """Write ``bloom`` to ``<path>.bloom`` atomically (temp file + rename); in exact
        mode after saving ``counters`` and checkpointing the WAL, with the row count the
        snapshot is valid for; in Bloom-only mode with the counters in its header."""
        header = dict(self._header)
        if self.disk is not None:
            self.disk.save_counters(counters)
            self.disk.checkpoint()
            header.update(db_id=self.disk.db_id, rows=self.disk.rows)
        else:
            header.update(counters=counters, est_dropped=est_dropped)
        write_bloom_file(self.bloom_path, header, bloom.to_bytes(), durable=self.durable)

    def backup(self, dest_path: str, bloom: Bloom, counters: dict[str, float], est_dropped: float) -> None:
        """A consistent copy at ``dest_path``: the database (SQLite online backup), or in
        Bloom-only mode a fresh snapshot of ``bloom``."""
        if self.disk is None:
            self.snapshot(bloom, counters, est_dropped)
            shutil.copyfile(self.bloom_path, dest_path)
            return
        self.disk.save_counters(counters)
        dst = sqlite3.connect(dest_path)
        try:
            self.disk.conn.backup(dst)
        finally:
            dst.close()

    def close(self) -> None:
        """Release the database (the caller snapshots first)."""
        self.closed = True
        if self.disk is not None:
            self.disk.close()

    def check(self, hashes: list[int], bloom: Bloom, counters: dict[str, float]) -> tuple[list[bool], dict[str, float]]:
        """Exact disk mode: Bloom, then in-batch repeats, the hot cache, then SQLite.

        ``hashes`` are already masked to 64 bits. Returns the verdicts and the counters
        updated by this batch, which are committed with the new hashes (one transaction).
        """
        disk, hot = self.disk, self.hot
        assert disk is not None and hot is not None
        out: list[bool] = [True] * len(hashes)
        novel_here: set[int] = set()
        pending: list[int] = []
        for i, h in enumerate(hashes):
            if bloom.check_and_add(h):
                pending.append(i)
            else:
                novel_here.add(h)
        # Bloom positives not settled by this batch or the hot cache go to SQLite, once
        # each, in one batched lookup.
        ask: set[int] = set()
        cache_hits = 0
        for i in pending:
            h = hashes[i]
            if h in novel_here:
                continue
            if hot.hit(h):
                cache_hits += 1
            else:
                ask.add(h)
        found = disk.lookup(ask) if ask else set()
        confirmations = 0
        for i in pending:
            h = hashes[i]
            # Confirmed: an earlier occurrence in this batch, a cache hit (never asked) or
            # a database row; else a false positive, which the exact store saves.
            if h in novel_here or h not in ask or h in found:
                confirmations += 1
                out[i] = False
            else:
                novel_here.add(h)
        counters = {
            "checks": counters["checks"] + len(hashes),
            "novel": counters["novel"] + len(novel_here),
            "bloom_positives": counters["bloom_positives"] + len(pending),
            "exact_confirmations": counters["exact_confirmations"] + confirmations,
            "false_positives": counters["false_positives"] + len(pending) - confirmations,
            "cache_hits": counters["cache_hits"] + cache_hits,
            "db_lookups": counters["db_lookups"] + len(ask),
            "forgotten": counters["forgotten"],
        }
        if novel_here:
            # One transaction; the counters ride along. If it raises, nothing is counted
            # and nothing cached (the Bloom bits already set only cost a lookup later).
            disk.insert(list(novel_here), counters)
        # Recently confirmed and recently added hashes are the likeliest repeats (a site's
        # navigation links recur on each of its pages).
        hot.add_many(found)
        hot.add_many(novel_here)
        return out, counters

    def forget(self, hashes: list[int], counters: dict[str, float]) -> tuple[int, dict[str, float]]:
        """Delete the rows of ``hashes`` (distinct, masked) in one transaction that also
        saves the updated ``counters``; returns how many were removed and the counters."""
        assert self.disk is not None and self.hot is not None
        counters = dict(counters)
        present = self.disk.lookup(hashes)
        counters["novel"] -= len(present)
        counters["forgotten"] += len(present)
        removed = self.disk.delete(sorted(present), counters)
        self.hot.discard_many(hashes)
        return removed, counters

    def memory_bytes(self) -> int:
        """The hot cache plus SQLite's page cache (bounded at 8 MB; 0 once closed)."""
        hot = self.hot.memory_bytes() if self.hot is not None else 0
        return hot + (0 if self.closed or self.disk is None else self.disk.memory_bytes())

    def disk_bytes(self) -> int:
        """Bytes on disk: database, WAL and Bloom snapshot."""
        total = self.disk.disk_bytes() if self.disk is not None else 0
        try:
            total += os.path.getsize(self.bloom_path)
        except OSError:
            pass  # no snapshot written yet
        return total


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
