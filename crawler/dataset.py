"""Reading the crawl's output: ``OUT/pages`` as one table, summaries, and compaction.

Writers never rewrite a file, so a page fetched twice (across a crash, or a delivery
retried) can have two rows. Readers de-duplicate on the idempotence key (url, content
hash); :func:`compact_pages` rewrites the dataset without the repeats once a crawl ends,
so the files themselves hold each (url, content_sha256) once.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from crawler.errors import StorageError
from crawler.storage import (
    DUP_KINDS,
    OUTCOMES,
    PAGES_DIR,
    PAGES_SCHEMA,
    _PART_RE,
    _is_local,
    _table_bytes,
    _write_local_atomic,
    open_fs,
)



def _list_parts(fs: fsspec.AbstractFileSystem, root: str) -> list[str]:
    pages = f"{root}/{PAGES_DIR}"
    try:
        if _is_local(fs):
            names = [f"{pages}/{n}" for n in os.listdir(pages)]
        else:
            fs.invalidate_cache(pages)  # other writers add files: never trust a cached listing
            names = fs.ls(pages, detail=False)
    except FileNotFoundError:
        return []
    except Exception as exc:
        raise StorageError(f"cannot list {pages!r}: {exc}") from exc
    # Only finished parts: temp files start with "." and never match.
    return sorted(p for p in names if _PART_RE.fullmatch(posixpath.basename(p)))


def _dedupe(table: pa.Table) -> pa.Table:
    """Keep the earliest row (by fetched_at, then file order) per idempotence key."""
    n = table.num_rows
    if n == 0:
        return table
    order = pc.sort_indices(table, sort_keys=[("fetched_at", "ascending", "at_end")])
    table = table.take(order)  # sort_indices is stable: ties keep file order
    sha = table["content_sha256"]
    no_sha = pc.is_null(sha)
    keys = pa.table(
        {
            "u": table["url"],
            "s": sha,
            "o": pc.if_else(no_sha, table["outcome"], pa.scalar(None, pa.string())),
            "p": pc.if_else(no_sha, table["crawl_pass"], pa.scalar(None, pa.int32())),
            "i": pa.array(np.arange(n, dtype=np.int64)),
        }
    )
    first = keys.group_by(["u", "s", "o", "p"], use_threads=False).aggregate([("i", "min")])
    keep = np.sort(first["i_min"].to_numpy())
    if len(keep) == n:
        return table
    return table.take(pa.array(keep))


_DEDUPE_COLS = ("url", "content_sha256", "outcome", "crawl_pass", "fetched_at")


def read_pages(
    out: str,
    storage_options: dict | None = None,
    *,
    dedupe: bool = True,
    columns: list[str] | None = None,
) -> pa.Table:
    """Read ``OUT/pages`` into one table (PAGES_SCHEMA, or the requested ``columns``).

    With ``dedupe`` a URL fetched twice with the same content (e.g. across a crash, or by
    two writers) appears once, keeping its earliest row; the result is ordered by
    ``fetched_at``. An empty or missing dataset gives an empty table. Safe to call while a
    crawl is writing: only complete part files are read.
    """
    if columns is not None:
        unknown = [c for c in columns if c not in PAGES_SCHEMA.names]
        if unknown:
            raise ValueError(f"unknown columns {unknown}; valid: {PAGES_SCHEMA.names}")
    fs, root = open_fs(out, storage_options)
    paths = _list_parts(fs, root)
    wanted = list(columns) if columns is not None else list(PAGES_SCHEMA.names)
    if not paths:
        return PAGES_SCHEMA.empty_table().select(wanted)
    read = wanted + [c for c in _DEDUPE_COLS if dedupe and c not in wanted]
    try:
        # Explicit schema: parts written by an older layout read with nulls in new columns.
        dataset = pads.dataset(paths, format="parquet", filesystem=fs, schema=PAGES_SCHEMA)
        table = dataset.to_table(columns=read)
    except Exception as exc:
        raise StorageError(f"reading {root}/{PAGES_DIR} failed: {exc}") from exc
    if dedupe:
        table = _dedupe(table)
    return table.select(wanted)


def summarize(out: str, storage_options: dict | None = None) -> dict[str, Any]:
    """Numbers for ``crawl stats OUT``, computed on the deduplicated dataset.

    Keys: rows, urls, by_outcome (every outcome, zeros included), by_status (status ->
    rows, None for no response, sorted), top_hosts (up to 10 ``(host, rows)``, most rows
    first), duplicates ({"exact", "near"}), blobs (distinct blob keys), bytes_stored
    (decoded bytes of distinct stored bodies), content_bytes (decoded bytes over all rows),
    first_fetched_at / last_fetched_at (aware UTC datetimes or None) and pages_per_s (rows
    per second between them, None when the span is zero).
    """
    t = read_pages(
        out,
        storage_options,
        columns=["url", "host", "status", "outcome", "fetched_at", "content_length",
                 "dup_kind", "blob_key"],
    )

    def counts(col: str) -> dict[Any, int]:
        vc = pc.value_counts(t[col]).to_pylist() if t.num_rows else []
        return {d["values"]: d["counts"] for d in vc}

    by_outcome = {o: 0 for o in OUTCOMES}
    by_outcome.update(counts("outcome"))
    status = counts("status")
    by_status = dict(sorted(status.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    hosts = sorted(counts("host").items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or ""))
    dup = counts("dup_kind")
    has_blob = t.filter(pc.is_valid(t["blob_key"])) if t.num_rows else t
    unique_blobs = (
        has_blob.group_by("blob_key").aggregate([("content_length", "max")])
        if has_blob.num_rows
        else None
    )
    first = last = None
    if t.num_rows:
        mm = pc.min_max(t["fetched_at"]).as_py()
        first, last = mm["min"], mm["max"]
    span = (last - first).total_seconds() if first is not None and last is not None else 0.0
    return {
        "rows": t.num_rows,
        "urls": pc.count_distinct(t["url"]).as_py() if t.num_rows else 0,
        "by_outcome": by_outcome,
        "by_status": by_status,
        "top_hosts": hosts[:10],
        "duplicates": {k: dup.get(k, 0) for k in DUP_KINDS},
        "blobs": unique_blobs.num_rows if unique_blobs is not None else 0,
        "bytes_stored": (
            int(pc.sum(unique_blobs["content_length_max"]).as_py() or 0)
            if unique_blobs is not None
            else 0
        ),
        "content_bytes": int(pc.sum(t["content_length"]).as_py() or 0) if t.num_rows else 0,
        "first_fetched_at": first,
        "last_fetched_at": last,
        "pages_per_s": (t.num_rows / span) if span > 0 else None,
    }


def compact_pages(out: str, storage_options: dict | None = None, *, rows_per_file: int = 200_000) -> int:
    """Rewrite ``OUT/pages`` without repeated (url, content hash) rows; returns rows removed.

    Crash-safe: the compacted files are complete (atomic rename, or one PUT) before any
    old file is deleted, and readers de-duplicate, so a crash in between leaves a dataset
    that reads the same. Call it when no writer is running.
    """
    fs, root = open_fs(out, storage_options)
    paths = _list_parts(fs, root)
    if not paths:
        return 0
    try:
        raw = pads.dataset(paths, format="parquet", filesystem=fs, schema=PAGES_SCHEMA).to_table()
    except Exception as exc:
        raise StorageError(f"reading {root}/{PAGES_DIR} for compaction failed: {exc}") from exc
    table = _dedupe(raw)
    removed = raw.num_rows - table.num_rows
    if removed == 0:
        return 0
    tag = uuid.uuid4().hex[:8]
    local = _is_local(fs)
    for seq, start in enumerate(range(0, table.num_rows, rows_per_file)):
        data = _table_bytes(table.slice(start, rows_per_file))
        path = f"{root}/{PAGES_DIR}/part-compact{tag}-{seq:06d}.parquet"
        if local:
            _write_local_atomic(path, data, fsync=True, fsync_parent=True)
        else:
            fs.pipe_file(path, data)
    for p in paths:
        fs.rm(p)
    return removed
