"""The output contract on S3 (s3fs against moto on loopback, see conftest.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from crawler.errors import StorageError
from crawler.output import PAGES_SCHEMA, BlobStore, ResultWriter, compact_pages, read_pages, summarize

from .helpers import T0, page, s3_keys, sha


def test_s3_write_read_and_blobs(s3_out):
    out, opts = s3_out
    bodies = [f"<html>{i}</html>".encode() * 50 for i in range(5)]
    with ResultWriter(out, "w0", storage_options=opts) as w:
        for i, body in enumerate(bodies):
            r, b = page(f"http://a.test/{i}", body)
            w.add([r], b)
        assert w.flush() == 5
        r, b = page("http://a.test/copy", bodies[0], dup_kind="exact")
        w.add([r, r], b)  # the repeat is dropped, the body is not stored again
    s = w.stats()
    assert (s["rows_written"], s["files_written"], s["blobs_written"]) == (6, 2, 5)
    assert s["duplicates_dropped"] == 1 and s["blobs_skipped_existing"] == 1
    # One pack for the flush's five bodies (one PUT), none for the second flush: its body
    # was packed already.
    keys = s3_keys(out, opts)
    assert keys == ["blobs/packs/w0-000000.pack", "pages/part-w0-000000.parquet", "pages/part-w0-000001.parquet"]
    t = read_pages(out, opts)
    assert t.schema == PAGES_SCHEMA and t.num_rows == 6
    assert t["fetched_at"][0].as_py() == T0
    store = BlobStore(out, opts)
    expected = {f"http://a.test/{i}": body for i, body in enumerate(bodies)}
    expected["http://a.test/copy"] = bodies[0]
    assert {r["url"]: store.get(r["blob_key"]) for r in t.to_pylist()} == expected
    assert summarize(out, opts)["duplicates"] == {"exact": 1, "near": 0}


def test_s3_blob_store_is_idempotent_across_instances(s3_out):
    out, opts = s3_out
    items = {sha(b): b for b in (b"one", b"two", b"three")}
    assert BlobStore(out, opts).put_many(items) == [BlobStore.key_for(h) for h in items]
    again = BlobStore(out, opts)  # no memory of the first: must ask the store
    again.put_many(items)
    assert again.stats() == {"blobs_written": 0, "blob_bytes": 0, "blobs_skipped_existing": 3}
    assert again.get(BlobStore.key_for(sha(b"two"))) == b"two"
    with pytest.raises(StorageError):
        again.get(BlobStore.key_for(sha(b"absent")))


def test_s3_dedupe_across_writers_restart_and_missing_dataset(s3_out):
    out, opts = s3_out
    assert read_pages(out, opts).num_rows == 0
    r, b = page("http://a.test/", b"same")
    with ResultWriter(out, "w0", storage_options=opts) as w:
        w.add([dataclasses.replace(r, fetched_at=T0 + dt.timedelta(seconds=5), shard="late")], b)
    with ResultWriter(out, "w0", storage_options=opts) as w:  # restart: continues at 000001
        w.add([dataclasses.replace(r, shard="early")], b)
    assert [k for k in s3_keys(out, opts) if k.startswith("pages/")] == [
        "pages/part-w0-000000.parquet", "pages/part-w0-000001.parquet"]
    assert read_pages(out, opts, dedupe=False).num_rows == 2
    assert read_pages(out, opts)["shard"].to_pylist() == ["early"]


def test_s3_compaction_replaces_parts_with_one_put_each(s3_out):
    out, opts = s3_out
    r, b = page("http://a.test/", b"same")
    for k in range(2):
        with ResultWriter(out, f"w{k}", storage_options=opts) as w:
            w.add([dataclasses.replace(r, shard=f"s{k}")], b)
    assert compact_pages(out, opts) == 1
    parts = [k for k in s3_keys(out, opts) if k.startswith("pages/")]
    assert len(parts) == 1 and parts[0].startswith("pages/part-compact")
    assert read_pages(out, opts, dedupe=False)["shard"].to_pylist() == ["s0"]


def test_s3_reads_give_arrow_bytes_never_the_python_filesystem(s3_out, monkeypatch):
    """Arrow reading through a Python (fsspec) filesystem keeps IO threads that call back
    into Python; one alive at interpreter exit aborts the process (`crawl stats s3://...`
    exited -6 in about 1 run of 5, apache/arrow#34314). Remote parts are fetched by
    fsspec and parsed from memory, with the same columns, filter and schema rules."""
    import pyarrow.dataset as pads

    out, opts = s3_out
    with ResultWriter(out, "w0", storage_options=opts) as w:
        for i in range(3):
            r, b = page(f"http://a.test/{i}", f"<html>{i}</html>".encode())
            w.add([r], b)
            w.flush()
    given = []
    real = pads.dataset
    monkeypatch.setattr(pads, "dataset", lambda *a, **kw: given.append(kw.get("filesystem")) or real(*a, **kw))
    t = read_pages(out, opts, columns=["url", "status"], where=pads.field("url") != "http://a.test/1")
    assert sorted(t["url"].to_pylist()) == ["http://a.test/0", "http://a.test/2"] and t.column_names == ["url", "status"]
    assert summarize(out, opts)["rows"] == 3
    assert given == []
