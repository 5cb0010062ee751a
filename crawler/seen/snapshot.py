"""The seen set's Bloom snapshot file, ``<path>.bloom``, and when a reopened set trusts it.

Format: magic ``SEENBLM\\x01``, u32 little-endian header length, a JSON header, the
filter's bytes. The header names the filter's parameters (version, exact, backend,
capacity, error_rate), a checksum of the bits and, in exact mode, the database (db_id)
and its row count at the time of the snapshot. Version 2 (now): the bytes are a chain
of filters (crawler.seen.scalable.ScalableBloom.to_bytes, self-describing; ``capacity``
is the first stage's and need not match on open: a chain keeps its own stages).
Version 1 (before the filter grew): the bytes are one filter of the header's capacity
and error rate; such a snapshot still opens, its filter becoming the chain's first
stage (in exact mode only while it is within its error rate: an overfull one is
rebuilt from the database into a chain).

Invariant: in exact mode a snapshot is used only if every one of those matches the
database being opened; otherwise the filter is rebuilt from the database, so a stale
filter can never report as new a URL the store holds. In Bloom-only mode the snapshot
is the whole set: a damaged one is refused rather than silently replaced by an empty
filter (which would re-crawl everything). To ship a set elsewhere, ``SeenSet.backup``
copies the store itself.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import xxhash

from crawler.errors import ConfigError, StorageError
from crawler.seen.scalable import ScalableBloom
from crawler.seen.store import DiskStore

__all__ = [
    "SNAPSHOT_VERSION",
    "BadSnapshot",
    "SnapshotHeader",
    "LoadedFilter",
    "MakeBloom",
    "READ_VERSIONS",
    "check_snapshot_mode",
    "load_bloom_only",
    "load_or_rebuild",
    "read_bloom_file",
    "refuse_other_mode",
    "snapshot_header",
    "write_bloom_file",
]

SNAPSHOT_VERSION = 2
"""Version of the ``.bloom`` header: 2 a filter chain, 1 a single filter (still read)."""
READ_VERSIONS = (1, SNAPSHOT_VERSION)
#: Header keys that must match the opening set's (not version: both are read; not
#: capacity: a chain keeps its own stages, and a version-1 filter its own size).
_MATCHED = ("exact", "bloom", "error_rate")

_BLOOM_MAGIC = b"SEENBLM\x01"

#: (saved bytes, their snapshot header) -> the filter; (None, None) -> an empty one.
MakeBloom = Callable[[bytes | None, "SnapshotHeader | None"], ScalableBloom]
#: A snapshot's JSON header (read from the file: JSON values, checked key by key).
SnapshotHeader = dict[str, Any]


def snapshot_header(exact: bool, backend: str, capacity: int, error_rate: float, identity: str | None) -> SnapshotHeader:
    """The parameters a set writes in every snapshot header (and compares on open)."""
    header: SnapshotHeader = {
        "version": SNAPSHOT_VERSION,
        "exact": exact,
        "bloom": backend,
        "capacity": capacity,
        "error_rate": error_rate,
    }
    if not exact and identity is not None:
        header["identity"] = identity  # a Bloom-only set's stamp (its database's, in exact mode)
    return header


class BadSnapshot(StorageError):
    """The Bloom snapshot file is unreadable or does not match (internal: caller decides)."""


def write_bloom_file(path: str, header: SnapshotHeader, bits: bytes, *, durable: bool) -> None:
    """Write ``header`` and the filter's ``bits`` to ``path`` atomically (temp file + rename).

    ``durable`` fsyncs the file and its directory, so the snapshot survives an OS crash.
    """
    header = {**header, "bits_len": len(bits), "checksum": xxhash.xxh3_64_intdigest(bits)}
    head = json.dumps(header).encode()
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(_BLOOM_MAGIC + struct.pack("<I", len(head)) + head)
            f.write(bits)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        # Atomic: a reader sees the old snapshot or the new one, never half of one.
        os.replace(tmp, path)
        if durable:
            dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except OSError as exc:
        raise StorageError(f"seen Bloom snapshot {path}: write failed: {exc}") from exc


def read_bloom_file(path: str) -> tuple[SnapshotHeader, bytes] | None:
    """(header, bits), or None if there is no snapshot; BadSnapshot if it is damaged."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadSnapshot(f"unreadable: {exc}") from exc
    n = len(_BLOOM_MAGIC)
    if len(data) < n + 4 or data[:n] != _BLOOM_MAGIC:
        raise BadSnapshot("not a seen-set Bloom snapshot")
    (hlen,) = struct.unpack_from("<I", data, n)
    try:
        header = json.loads(data[n + 4 : n + 4 + hlen])
        bits = data[n + 4 + hlen :]
        if len(bits) != header["bits_len"] or xxhash.xxh3_64_intdigest(bits) != header["checksum"]:
            raise BadSnapshot("checksum mismatch (truncated or damaged)")
    except (ValueError, KeyError, TypeError) as exc:
        raise BadSnapshot(f"bad header: {exc}") from exc
    return header, bits


def check_snapshot_mode(header: SnapshotHeader, exact: bool, bloom_path: str) -> None:
    """ConfigError if the snapshot at ``bloom_path`` belongs to a set of the other mode."""
    if bool(header.get("exact")) != exact:
        kind = "an exact" if header.get("exact") else "a Bloom-only"
        raise ConfigError(
            f"seen path: {bloom_path} belongs to {kind} seen set; open it with "
            f"exact={bool(header.get('exact'))} or choose another path"
        )


def refuse_other_mode(bloom_path: str, exact: bool) -> None:
    """Before a new database is created at a path: a Bloom-only set's file there must not
    be shadowed (ConfigError). A damaged snapshot is ignored: there is nothing to match."""
    try:
        found = read_bloom_file(bloom_path)
    except BadSnapshot:
        found = None  # no database to match it against anyway
    if found is not None:
        check_snapshot_mode(found[0], exact, bloom_path)


def load_bloom_only(bloom_path: str, mine: SnapshotHeader, make: MakeBloom) -> tuple[ScalableBloom, SnapshotHeader] | None:
    """A Bloom-only set's filter and snapshot header, or None if there is no snapshot yet.

    ``mine`` is the opening set's own header; a snapshot written with other parameters
    raises ConfigError (a Bloom filter cannot be resized), a damaged one StorageError.
    """
    try:
        found = read_bloom_file(bloom_path)
    except BadSnapshot as exc:
        # The snapshot is the only copy of a Bloom-only set: starting empty would
        # silently re-crawl everything, so refuse instead.
        raise StorageError(f"seen Bloom snapshot {bloom_path}: {exc}") from exc
    if found is None:
        return None
    header, bits = found
    check_snapshot_mode(header, bool(mine["exact"]), bloom_path)
    if header.get("version") not in READ_VERSIONS:
        raise StorageError(f"seen Bloom snapshot {bloom_path}: version {header.get('version')!r} is not supported")
    for key in ("bloom", "error_rate"):
        if header.get(key) != mine[key]:
            raise ConfigError(
                f"seen path: {bloom_path} was written with {key}={header.get(key)!r}, not "
                f"{mine[key]!r}; a Bloom-only set cannot be rebuilt, open it with the same settings"
            )
    return make(bits, header), header


@dataclass
class LoadedFilter:
    """The filter an exact disk set opens with, and where it came from."""

    bloom: ScalableBloom
    source: str  # "new" (empty database), "snapshot" or "rebuilt"
    reason: str = ""  # why a snapshot was not used (empty unless rebuilt)
    rebuild_seconds: float = 0.0


def load_or_rebuild(bloom_path: str, mine: SnapshotHeader, disk: DiskStore, make: MakeBloom, fresh: ScalableBloom) -> LoadedFilter:
    """The snapshot's filter if it matches ``disk`` exactly, else one rebuilt from ``disk``.

    ``mine`` is the opening set's own header; ``fresh`` is its empty filter, kept when
    the database is empty.
    """
    try:
        found = read_bloom_file(bloom_path)
    except BadSnapshot as exc:
        found, reason = None, f"snapshot damaged ({exc})"
    else:
        reason = "no snapshot"
    if found is not None:
        header, bits = found
        check_snapshot_mode(header, bool(mine["exact"]), bloom_path)
        wanted = {**{k: mine[k] for k in _MATCHED}, "db_id": disk.db_id, "rows": disk.rows}
        stale = [k for k, v in wanted.items() if header.get(k) != v]
        if header.get("version") not in READ_VERSIONS:
            stale.append("version")
            wanted["version"] = mine["version"]
        if not stale:
            try:
                loaded = make(bits, header)
            except StorageError as exc:
                reason = f"snapshot unloadable ({exc})"
            else:
                if header.get("version") != 1 or loaded.false_positive_rate() <= float(mine["error_rate"]):
                    return LoadedFilter(loaded, "snapshot")
                # An old single filter past its capacity would keep its high rate as the
                # chain's first stage; the database can rebuild a chain that meets it.
                reason = "version-1 snapshot filter is past its capacity"
        else:
            # rows differ: URLs were added after the snapshot (a crash, or no close).
            reason = "snapshot does not match the store: " + ", ".join(
                f"{k} {header.get(k)!r} != {wanted[k]!r}" for k in stale
            )
    if disk.rows == 0:
        return LoadedFilter(fresh, "new")
    start = time.perf_counter()
    bloom = make(None, None)
    for chunk in disk.iter_hashes():
        bloom.add_many(chunk)
    bloom.recount()
    return LoadedFilter(bloom, "rebuilt", reason, time.perf_counter() - start)
