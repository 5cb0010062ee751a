"""Reading the crawl's output: ``OUT/pages`` as one table, summaries, and compaction.

Writers never rewrite a file, so a page fetched twice (across a crash, or a delivery
retried) can have two rows. Readers de-duplicate on the idempotence key (url, content
hash; url, outcome and pass without a body); :func:`compact_pages` rewrites the dataset
without the repeats once a crawl ends, so the files themselves hold each key once.
Only finished part files are read, so all of this is safe while a crawl is writing.
"""

from __future__ import annotations

import uuid
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from crawler.errors import StorageError
from crawler.output.fs import list_names, open_fs, publish
from crawler.output.layout import PAGES_DIR, PART_RE, part_name
from crawler.output.schema import DUP_KINDS, OUTCOMES, PAGES_SCHEMA, encode_part

__all__ = ["compact_pages", "dedupe_pages", "list_parts", "read_pages", "summarize"]

_DEDUPE_COLS = ("url", "fetch_seq", "content_sha256", "outcome", "fetched_at")


def list_parts(fs: fsspec.AbstractFileSystem, root: str) -> list[str]:
    """Paths of the finished part files under ``root``, sorted (temp files never match)."""
    pages = f"{root}/{PAGES_DIR}"
    return sorted(f"{pages}/{n}" for n in list_names(fs, pages) if PART_RE.fullmatch(n))


def dedupe_pages(table: pa.Table) -> pa.Table:
    """Keep the earliest row (by fetched_at, then file order) per idempotence key.

    The key is (url, fetch_seq, content_sha256), or (url, fetch_seq, outcome) when the
    hash is null: one row per fetch, whatever a crash repeated.
    The result is ordered by ``fetched_at``; ``table`` needs the columns of the key.
    """
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
            "q": table["fetch_seq"],
            "s": sha,
            "o": pc.if_else(no_sha, table["outcome"], pa.scalar(None, pa.string())),
            "i": pa.array(np.arange(n, dtype=np.int64)),
        }
    )
    first = keys.group_by(["u", "q", "s", "o"], use_threads=False).aggregate([("i", "min")])
    keep = np.sort(first["i_min"].to_numpy())
    if len(keep) == n:
        return table
    return table.take(pa.array(keep))


_REMOTE_BATCH = 64  # part files fetched at once from a remote output


def _read(
    fs: fsspec.AbstractFileSystem, root: str, paths: list[str], columns: list[str] | None, where: Any = None
) -> pa.Table:
    # Explicit schema: parts written by an older layout read with nulls in new columns.
    try:
        if isinstance(fs, LocalFileSystem):  # Arrow reads it natively
            dataset = pads.dataset(paths, format="parquet", filesystem=fs, schema=PAGES_SCHEMA)
            return dataset.to_table(columns=columns, filter=where)
        # Any other fsspec filesystem (s3fs): fetch the parts' bytes here (fsspec fetches a
        # batch concurrently) and let Arrow parse memory. Arrow reading through a Python
        # filesystem leaves IO threads that call back into Python; one still alive at
        # interpreter exit aborts the process ("terminate called without an active
        # exception", apache/arrow#34314), which made `crawl stats s3://...` exit -6.
        tables = []
        for i in range(0, len(paths), _REMOTE_BATCH):
            batch = paths[i : i + _REMOTE_BATCH]
            data = fs.cat(batch)
            for path in batch:
                tables.append(pq.read_table(pa.BufferReader(data[path]), columns=columns, filters=where, schema=PAGES_SCHEMA))
        return pa.concat_tables(tables)
    except Exception as exc:  # pyarrow, botocore and OS errors alike
        raise StorageError(f"reading {root}/{PAGES_DIR} failed: {exc}") from exc


def read_pages(
    out: str,
    storage_options: dict[str, Any] | None = None,
    *,
    dedupe: bool = True,
    columns: list[str] | None = None,
    where: Any = None,
) -> pa.Table:
    """Read ``OUT/pages`` into one table (PAGES_SCHEMA, or the requested ``columns``).

    ``where`` is a pyarrow dataset filter expression (``pyarrow.dataset.field("shard")
    == "shard-000"``), applied while reading.

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
    paths = list_parts(fs, root)
    wanted = list(columns) if columns is not None else list(PAGES_SCHEMA.names)
    if not paths:
        return PAGES_SCHEMA.empty_table().select(wanted)
    read = wanted + [c for c in _DEDUPE_COLS if dedupe and c not in wanted]
    table = _read(fs, root, paths, read, where)
    if dedupe:
        table = dedupe_pages(table)
    return table.select(wanted)


def summarize(out: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Numbers for ``crawl stats OUT``, computed on the deduplicated dataset.

    Keys: rows, urls, by_outcome (every outcome, zeros included), by_status (status ->
    rows, None for no response, sorted), top_hosts (up to 10 ``(host, rows)``, most rows
    first), duplicates ({"exact", "near"}), blobs (distinct blob keys), bytes_stored
    (decoded bytes of distinct stored bodies), content_bytes (decoded bytes over all rows),
    first_fetched_at / last_fetched_at (aware UTC datetimes or None), pages_per_s (rows
    per second between them, None when the span is zero) and top_errors (up to 5
    ``(error, rows)`` of failed and http_error rows, most first).
    """
    t = read_pages(
        out,
        storage_options,
        columns=["url", "host", "status", "outcome", "fetched_at", "content_length",
                 "dup_kind", "blob_key", "error"],
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
    errors: list[tuple[str, int]] = []
    if t.num_rows:
        bad = t.filter(pc.is_in(t["outcome"], pa.array(["failed", "http_error"])))
        if bad.num_rows:
            vc = pc.value_counts(bad["error"].fill_null("(no reason)")).to_pylist()
            errors = sorted(((d["values"], d["counts"]) for d in vc), key=lambda kv: (-kv[1], kv[0]))[:5]
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
        "top_errors": errors,
    }


def compact_pages(out: str, storage_options: dict[str, Any] | None = None, *, rows_per_file: int = 200_000) -> int:
    """Rewrite ``OUT/pages`` without repeated rows (see :func:`dedupe_pages`); returns rows removed.

    Crash-safe: the compacted files are complete (atomic rename, or one PUT) before any
    old file is deleted, and readers de-duplicate, so a crash in between leaves a dataset
    that reads the same. Call it when no writer is running.
    """
    fs, root = open_fs(out, storage_options)
    paths = list_parts(fs, root)
    if not paths:
        return 0
    raw = _read(fs, root, paths, None)
    table = dedupe_pages(raw)
    removed: int = raw.num_rows - table.num_rows  # pyarrow has no types
    if removed == 0:
        return 0
    writer_id = f"compact{uuid.uuid4().hex[:8]}"  # a name no live writer has
    try:
        for seq, start in enumerate(range(0, table.num_rows, rows_per_file)):
            data = encode_part(table.slice(start, rows_per_file))
            publish(fs, f"{root}/{PAGES_DIR}/{part_name(writer_id, seq)}", data)
        for p in paths:
            fs.rm(p)
    except OSError as exc:
        raise StorageError(f"compacting {root}/{PAGES_DIR} failed: {exc}") from exc
    return removed
