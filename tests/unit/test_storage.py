"""Tests for crawler.storage: the Parquet page dataset and the content-addressed blob store.

Local tests run on tmp_path. The S3 tests run the same contract through s3fs against a
moto S3 server started on 127.0.0.1 by this module; a socket guard fails any connection
that is not to loopback, so nothing can reach a real AWS endpoint.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import ipaddress
import os
import socket
import threading
import uuid

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from crawler import storage
from crawler.errors import ConfigError, StorageError
from crawler.storage import (
    OUTCOMES,
    PAGES_SCHEMA,
    BlobStore,
    ResultWriter,
    open_fs,
    read_pages,
    simhash_to_unsigned,
    summarize,
)

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def page(url: str, body: bytes | None = None, **extra):
    """A fetched row (and its body mapping) the way the engine would hand it over."""
    row = {"url": url, "host": url.split("/")[2], "outcome": "fetched", "status": 200,
           "fetched_at": T0, "crawl_pass": 0, "kind": "discover"}
    bodies = {}
    if body is not None:
        row["content_sha256"] = sha(body)
        row["content_length"] = len(body)
        bodies = {sha(body): body}
    row.update(extra)
    return row, bodies


def part_files(out) -> list[str]:
    pages = os.path.join(out, "pages")
    if not os.path.isdir(pages):
        return []
    return sorted(n for n in os.listdir(pages) if n.startswith("part-"))


# --------------------------------------------------------------------------- schema


def test_schema_is_exactly_the_published_contract(tmp_path):
    expected = [
        ("url", pa.string()), ("host", pa.string()), ("depth", pa.int32()),
        ("status", pa.int32()), ("outcome", pa.string()), ("error", pa.string()),
        ("attempts", pa.int32()), ("fetched_at", pa.timestamp("ms", tz="UTC")),
        ("content_type", pa.string()), ("content_length", pa.int64()),
        ("content_sha256", pa.string()), ("simhash", pa.int64()), ("dup_kind", pa.string()),
        ("dup_of", pa.string()), ("blob_key", pa.string()), ("etag", pa.string()),
        ("last_modified", pa.string()), ("redirect_to", pa.string()), ("truncated", pa.bool_()),
        ("shard", pa.string()), ("crawl_pass", pa.int32()), ("referrer", pa.string()),
        ("kind", pa.string()),
    ]
    assert [(f.name, f.type) for f in PAGES_SCHEMA] == expected
    assert OUTCOMES == ("fetched", "redirect", "not_modified", "http_error", "failed",
                        "robots_blocked")
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([page("http://a.test/")[0]])
    [name] = part_files(tmp_path)
    assert name == "part-w0-000000.parquet"
    path = tmp_path / "pages" / name
    assert pq.read_schema(path).remove_metadata() == PAGES_SCHEMA
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


# --------------------------------------------------------------------------- round trip


def test_rows_round_trip_with_utc_timestamps_and_signed_simhash(tmp_path):
    body = b"<html>hello</html>"
    fp = 0xF000_0000_0000_0001  # above 2**63: stored as its signed view
    plus2 = dt.timezone(dt.timedelta(hours=2))
    r1, b1 = page("http://a.test/x", body, depth=3, attempts=2, simhash=fp, etag='"v1"',
                  content_type="text/html", truncated=False, shard="s1", referrer="http://a.test/",
                  fetched_at=dt.datetime(2024, 5, 1, 14, 0, 0, 250000, tzinfo=plus2))
    r2 = {"url": "http://b.test/gone", "outcome": "failed", "error": "timeout",
          "fetched_at": 1714564800.5, "kind": "refresh", "crawl_pass": 1}
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([r1, r2], b1)
    t = read_pages(str(tmp_path))
    assert t.schema == PAGES_SCHEMA
    rows = {r["url"]: r for r in t.to_pylist()}
    got = rows["http://a.test/x"]
    assert got["fetched_at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=dt.timezone.utc)
    assert got["fetched_at"].utcoffset() == dt.timedelta(0)
    assert got["simhash"] < 0 and simhash_to_unsigned(got["simhash"]) == fp
    assert got["blob_key"] == BlobStore.key_for(sha(body))
    assert (got["depth"], got["attempts"], got["etag"], got["truncated"]) == (3, 2, '"v1"', False)
    failed = rows["http://b.test/gone"]
    assert failed["status"] is None and failed["content_sha256"] is None
    assert failed["blob_key"] is None and failed["host"] is None  # missing keys -> null
    assert failed["fetched_at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=dt.timezone.utc)


def test_undecodable_web_text_does_not_break_a_flush(tmp_path):
    # aiohttp decodes raw header bytes with surrogateescape; Arrow needs valid UTF-8.
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([page("http://a.test/", etag="\udcff\udcfe-tag", error="bad \ud800 text")[0]])
    [row] = read_pages(str(tmp_path)).to_pylist()
    assert row["etag"].endswith("-tag") and row["error"].startswith("bad ")


@pytest.mark.parametrize(
    "bad",
    [
        {"colour": "blue"},
        {"status": "200"},
        {"status": 2**40},
        {"outcome": "ok"},
        {"content_sha256": "ABC"},
        {"fetched_at": dt.datetime(2024, 1, 1)},  # naive: which zone?
        {"fetched_at": 1e300},
        {"fetched_at": float("nan")},
        {"dup_kind": "similar"},
        {"truncated": "no"},
        {"url": None},
    ],
)
def test_malformed_rows_raise_valueerror_and_buffer_nothing(tmp_path, bad):
    w = ResultWriter(str(tmp_path), "w0")
    good, _ = page("http://a.test/ok")
    row, _ = page("http://a.test/bad")
    row.update(bad)
    with pytest.raises(ValueError):
        w.add([good, row])
    assert w.pending_rows() == 0
    assert w.flush() == 0 and part_files(tmp_path) == []


# --------------------------------------------------------------------------- blobs


def test_blob_keys_come_from_the_hash_only_and_identical_bodies_are_stored_once(tmp_path):
    body = b"<html>same body</html>" * 100
    h = sha(body)
    assert BlobStore.key_for(h) == f"blobs/{h[:2]}/{h[2:4]}/{h}.gz"
    for bad in ("../../etc/passwd", h.upper(), h[:-1], h + "0", 123):
        with pytest.raises(ValueError):
            BlobStore.key_for(bad)
    with ResultWriter(str(tmp_path), "w0") as w:
        r1, b1 = page("http://a.test/1", body)
        r2, b2 = page("http://a.test/../../../../tmp/evil", body)  # page data never shapes paths
        w.add([r1], b1)
        w.flush()
        w.add([r2], b2)
    blobs = [os.path.relpath(os.path.join(d, f), tmp_path)
             for d, _, fs in os.walk(tmp_path / "blobs") for f in fs]
    assert blobs == [BlobStore.key_for(h)]
    assert gzip.decompress((tmp_path / blobs[0]).read_bytes()) == body
    assert w.stats()["blobs_written"] == 1 and w.stats()["blobs_skipped_existing"] == 1
    assert {r["blob_key"] for r in read_pages(str(tmp_path)).to_pylist()} == {blobs[0]}

    # A fresh store (another process) finds the blob on disk and does not rewrite it.
    store = BlobStore(str(tmp_path))
    mtime = os.stat(tmp_path / blobs[0]).st_mtime_ns
    assert store.put(h, body) == blobs[0]
    assert store.stats() == {"blobs_written": 0, "blob_bytes": 0, "blobs_skipped_existing": 1}
    assert os.stat(tmp_path / blobs[0]).st_mtime_ns == mtime
    assert store.get(blobs[0]) == body


def test_blob_store_refuses_wrong_hashes_and_bad_keys(tmp_path):
    store = BlobStore(str(tmp_path))
    with pytest.raises(ValueError):
        store.put(sha(b"a"), b"b")
    for key in ("blobs/../../x.gz", f"blobs/00/00/{sha(b'a')}.gz", "pages/part-w0-000000.parquet"):
        with pytest.raises(ValueError):
            store.get(key)
    with pytest.raises(StorageError):
        store.get(BlobStore.key_for(sha(b"never stored")))
    key = store.put(sha(b"x"), b"x")
    (tmp_path / key).write_bytes(gzip.compress(b"tampered"))
    with pytest.raises(StorageError):
        store.get(key)
    w = ResultWriter(str(tmp_path), "w0")
    with pytest.raises(ValueError):
        w.add([page("http://a.test/")[0]], {sha(b"a"): b"not a"})
    row, _ = page("http://a.test/", b"abc")
    row["blob_key"] = BlobStore.key_for(sha(b"other"))
    with pytest.raises(ValueError):
        w.add([row])


def test_a_failed_blob_batch_leaves_only_whole_blobs(tmp_path, monkeypatch):
    bodies = {sha(b): b for b in (b"first", b"second", b"third")}
    store = BlobStore(str(tmp_path))
    real_replace, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(storage.os, "replace", flaky)
    with pytest.raises(StorageError):
        store.put_many(bodies)
    monkeypatch.undo()
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "blobs") for f in fs]
    assert len(files) == 1 and not os.path.basename(files[0]).startswith(".")
    assert gzip.decompress(open(files[0], "rb").read()) in bodies.values()
    store.put_many(bodies)  # the retry completes the batch and rewrites nothing
    assert store.stats()["blobs_written"] == 3
    assert all(store.get(BlobStore.key_for(h)) == b for h, b in bodies.items())

    class Killed(BaseException):
        """The process dies between write and rename: no cleanup runs."""

    def die(*a, **k):
        raise Killed

    monkeypatch.setattr(storage.os, "replace", die)
    monkeypatch.setattr(storage.os, "unlink", die)
    with pytest.raises(Killed):
        store.put(sha(b"fourth"), b"fourth")
    monkeypatch.undo()
    leftovers = [f for _, _, fs in os.walk(tmp_path / "blobs") for f in fs if "fourth" not in f]
    assert len(leftovers) == 4 and sum(f.startswith(".") for f in leftovers) == 1
    with pytest.raises(StorageError):  # the half-done blob does not exist under its key
        store.get(BlobStore.key_for(sha(b"fourth")))


def test_blobs_are_durable_before_the_rows_that_point_at_them(tmp_path, monkeypatch):
    body = b"<p>body</p>"
    w = ResultWriter(str(tmp_path), "w0")
    row, bodies = page("http://a.test/", body)
    w.add([row], bodies)
    seen = []
    real = ResultWriter._write_part

    def spy(self, data):
        seen.append(os.path.exists(tmp_path / BlobStore.key_for(sha(body))))
        return real(self, data)

    monkeypatch.setattr(ResultWriter, "_write_part", spy)
    # If the blob write fails, no row is written and nothing is lost.
    def disk_error(*a, **k):
        raise OSError("disk")

    monkeypatch.setattr(BlobStore, "put_many", disk_error)
    with pytest.raises(StorageError):
        w.flush()
    assert seen == [] and part_files(tmp_path) == [] and w.pending_rows() == 1
    monkeypatch.undo()
    monkeypatch.setattr(ResultWriter, "_write_part", spy)
    assert w.flush() == 1
    assert seen == [True]
    [got] = read_pages(str(tmp_path)).to_pylist()
    assert BlobStore(str(tmp_path)).get(got["blob_key"]) == body


# --------------------------------------------------------------------------- idempotence


def test_repeats_are_dropped_within_a_writer(tmp_path):
    with ResultWriter(str(tmp_path), "w0") as w:
        r, b = page("http://a.test/", b"v1")
        w.add([r, dict(r)], b)  # same call
        w.flush()
        w.add([dict(r, fetched_at=T0 + dt.timedelta(hours=1))], b)  # after a flush
        w.add([page("http://a.test/", b"v2")[0]], page("http://a.test/", b"v2")[1])  # new content
        fail = {"url": "http://a.test/f", "outcome": "failed", "crawl_pass": 0}
        w.add([fail, dict(fail), dict(fail, crawl_pass=1), dict(fail, outcome="http_error")])
    s = w.stats()
    assert s["duplicates_dropped"] == 3
    assert s["rows_written"] == 5
    assert read_pages(str(tmp_path), dedupe=False).num_rows == 5


def test_read_pages_dedupes_across_writers_keeping_the_earliest(tmp_path):
    r, b = page("http://a.test/", b"same")
    # A crash after the write but before the ack: the URL is fetched again by a new writer.
    with ResultWriter(str(tmp_path), "shard1-a") as w1:
        w1.add([dict(r, fetched_at=T0 + dt.timedelta(seconds=30), shard="late")], b)
    with ResultWriter(str(tmp_path), "shard1-b") as w2:
        w2.add([dict(r, shard="early")], b)
        w2.add([page("http://a.test/other", b"x")[0]], page("http://a.test/other", b"x")[1])
    assert read_pages(str(tmp_path), dedupe=False).num_rows == 3
    t = read_pages(str(tmp_path))
    assert t.num_rows == 2
    assert [x["shard"] for x in t.to_pylist() if x["url"] == "http://a.test/"] == ["early"]
    assert read_pages(str(tmp_path), columns=["url"]).column_names == ["url"]
    assert read_pages(str(tmp_path), columns=["url"]).num_rows == 2
    with pytest.raises(ValueError):
        read_pages(str(tmp_path), columns=["nope"])


# --------------------------------------------------------------------------- flushing


def test_flush_by_row_count(tmp_path):
    w = ResultWriter(str(tmp_path), "w0", rows_per_file=3, clock=FakeClock())
    w.add([page(f"http://a.test/{i}")[0] for i in range(2)])
    assert w.maybe_flush() is False and w.pending_rows() == 2
    w.add([page("http://a.test/2")[0]])
    assert w.maybe_flush() is True
    assert w.pending_rows() == 0 and part_files(tmp_path) == ["part-w0-000000.parquet"]
    assert w.maybe_flush() is False  # nothing buffered: no empty files


def test_flush_by_interval_since_first_buffered_row(tmp_path):
    clock = FakeClock()
    w = ResultWriter(str(tmp_path), "w0", flush_interval_s=5.0, clock=clock)
    clock.t += 100  # idle time before any row does not count
    assert w.maybe_flush() is False
    w.add([page("http://a.test/1")[0]])
    clock.t += 3
    w.add([page("http://a.test/2")[0]])
    clock.t += 1.9
    assert w.maybe_flush() is False
    clock.t += 0.1
    assert w.maybe_flush() is True
    assert w.stats()["rows_written"] == 2 and w.stats()["files_written"] == 1
    w.add([page("http://a.test/3")[0]])
    clock.t += 4.9  # the interval restarts from this row, not from the last flush
    assert w.maybe_flush() is False


def test_on_durable_reports_urls_after_the_file_exists(tmp_path):
    acked = []

    def hook(urls):
        acked.append((sorted(urls), part_files(tmp_path)))

    with ResultWriter(str(tmp_path), "w0", on_durable=hook) as w:
        w.add([page("http://a.test/1")[0], page("http://a.test/2")[0]])
        w.flush()
    assert acked == [(["http://a.test/1", "http://a.test/2"], ["part-w0-000000.parquet"])]


def test_close_flushes_and_refuses_more_rows(tmp_path):
    w = ResultWriter(str(tmp_path), "w0")
    w.add([page("http://a.test/1")[0]])
    w.close()
    assert read_pages(str(tmp_path)).num_rows == 1
    with pytest.raises(RuntimeError):
        w.add([page("http://a.test/2")[0]])


def test_concurrent_adds_during_flushes_lose_nothing(tmp_path):
    w = ResultWriter(str(tmp_path), "w0", fsync=False)
    n_threads, per_thread = 4, 300

    def producer(k):
        for i in range(per_thread):
            w.add([page(f"http://h{k}.test/{i}")[0]])
            if i % 50 == 0:
                w.flush()

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    t = read_pages(str(tmp_path), dedupe=False)
    assert t.num_rows == n_threads * per_thread
    assert len(set(t["url"].to_pylist())) == n_threads * per_thread


# --------------------------------------------------------------------------- atomicity


def test_failed_rename_leaves_no_part_and_keeps_rows_for_retry(tmp_path, monkeypatch):
    w = ResultWriter(str(tmp_path), "w0")
    w.add([page("http://a.test/1", b"b1")[0]], page("http://a.test/1", b"b1")[1])

    def boom(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(storage.os, "replace", boom)
    with pytest.raises(StorageError):
        w.flush()
    monkeypatch.undo()
    assert os.listdir(tmp_path / "pages") == []  # temp cleaned up, nothing visible
    assert read_pages(str(tmp_path)).num_rows == 0
    assert w.pending_rows() == 1
    assert w.flush() == 1
    assert read_pages(str(tmp_path))["url"].to_pylist() == ["http://a.test/1"]


def test_crash_between_write_and_rename_is_invisible_to_readers(tmp_path, monkeypatch):
    w = ResultWriter(str(tmp_path), "w0")
    w.add([page("http://a.test/1")[0]])

    class Killed(BaseException):
        """Stands for the process dying: no cleanup code gets to run."""

    def die(*a, **k):
        raise Killed

    monkeypatch.setattr(storage.os, "replace", die)
    monkeypatch.setattr(storage.os, "unlink", die)
    with pytest.raises(Killed):
        w.flush()
    monkeypatch.undo()
    pages = tmp_path / "pages"
    leftovers = os.listdir(pages)
    assert len(leftovers) == 1 and leftovers[0].startswith(".part-w0-")
    assert pq.read_table(pages / leftovers[0]).num_rows == 1  # a complete, readable file...
    (pages / ".part-w0-000000.parquet.deadbeef.tmp").write_bytes(b"PAR1 half written")
    # ...that no reader picks up: not ours, not pyarrow's default discovery.
    assert read_pages(str(tmp_path)).num_rows == 0
    assert summarize(str(tmp_path))["rows"] == 0
    assert pads.dataset(str(pages), format="parquet").to_table().num_rows == 0
    assert pq.read_table(str(pages)).num_rows == 0
    # The restarted writer clears its own stale temps and starts its sequence cleanly.
    w2 = ResultWriter(str(tmp_path), "w0")
    assert os.listdir(pages) == []
    w2.add([page("http://a.test/1")[0]])
    w2.close()
    assert read_pages(str(tmp_path)).num_rows == 1


def test_restarted_writer_continues_its_sequence_without_overwriting(tmp_path):
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([page("http://a.test/1")[0]])
        w.flush()
        w.add([page("http://a.test/2")[0]])
    with ResultWriter(str(tmp_path), "w0-x") as other:  # a prefix-sharing id is someone else
        other.add([page("http://a.test/x")[0]])
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([page("http://a.test/3")[0]])
    assert part_files(tmp_path) == ["part-w0-000000.parquet", "part-w0-000001.parquet",
                                    "part-w0-000002.parquet", "part-w0-x-000000.parquet"]
    assert read_pages(str(tmp_path)).num_rows == 4


def test_bad_writer_ids_and_paths(tmp_path):
    for bad in ("", ".hidden", "_x", "a/b", "a b"):
        with pytest.raises(ValueError):
            ResultWriter(str(tmp_path), bad)
    with pytest.raises(ConfigError):
        open_fs("nosuchproto://x/y")
    with pytest.raises(ConfigError):
        open_fs("")
    fs, root = open_fs("relative/out/")
    assert root == os.path.abspath("relative/out")


# --------------------------------------------------------------------------- reading


def test_missing_or_empty_dataset_reads_as_empty_table(tmp_path):
    t = read_pages(str(tmp_path / "nothing"))
    assert t.num_rows == 0 and t.schema == PAGES_SCHEMA
    (tmp_path / "out" / "pages").mkdir(parents=True)
    t = read_pages(str(tmp_path / "out"), columns=["url", "status"])
    assert t.num_rows == 0 and t.column_names == ["url", "status"]
    s = summarize(str(tmp_path / "nothing"))
    assert s["rows"] == 0 and s["by_outcome"]["fetched"] == 0 and s["pages_per_s"] is None


def test_summarize_counts(tmp_path):
    big, small = b"x" * 1000, b"y" * 10
    rows, bodies = [], {}
    for i in range(12):  # 12 hosts with 1..12 rows
        for j in range(i + 1):
            r, b = page(f"http://host{i}.test/{j}", fetched_at=T0 + dt.timedelta(seconds=len(rows)))
            rows.append(r)
    n_plain = len(rows)  # 78 fetched rows without bodies
    r, b = page("http://host0.test/big", big, fetched_at=T0)
    rows.append(r), bodies.update(b)
    r, b = page("http://host0.test/copy", big, dup_kind="exact", dup_of="http://host0.test/big",
                fetched_at=T0)
    rows.append(r)
    r, b = page("http://host0.test/near", small, dup_kind="near", fetched_at=T0)
    rows.append(r), bodies.update(b)
    rows.append({"url": "http://down.test/", "host": "down.test", "outcome": "failed",
                 "fetched_at": T0 + dt.timedelta(seconds=100)})
    rows.append({"url": "http://nf.test/", "host": "nf.test", "outcome": "http_error",
                 "status": 404, "fetched_at": T0})
    rows.append({"url": "http://r.test/", "host": "r.test", "outcome": "robots_blocked",
                 "fetched_at": T0})
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add(rows, bodies)
        w.add([rows[0]])  # a repeat: not counted twice
    s = summarize(str(tmp_path))
    assert s["rows"] == n_plain + 6 == s["urls"]
    assert s["by_outcome"] == {"fetched": n_plain + 3, "redirect": 0, "not_modified": 0,
                               "http_error": 1, "failed": 1, "robots_blocked": 1}
    assert s["by_status"] == {200: n_plain + 3, 404: 1, None: 2}
    # Most rows first, ties by name; host0 has 1 plain + 3 body rows.
    assert s["top_hosts"] == [(f"host{i}.test", i + 1) for i in range(11, 3, -1)] + [
        ("host0.test", 4), ("host3.test", 4)]
    assert s["duplicates"] == {"exact": 1, "near": 1}
    # The exact copy points at the same blob: stored once.
    assert s["blobs"] == 2 and s["bytes_stored"] == len(big) + len(small)
    assert s["content_bytes"] == 2 * len(big) + len(small)
    assert s["first_fetched_at"] == T0
    assert s["last_fetched_at"] == T0 + dt.timedelta(seconds=100)
    assert s["pages_per_s"] == pytest.approx((n_plain + 6) / 100)


# --------------------------------------------------------------------------- S3 (moto on loopback)


@pytest.fixture(scope="module")
def s3_endpoint():
    """A real S3 API on 127.0.0.1; every socket connect outside loopback fails the test."""
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true",
                     "AWS_CONFIG_FILE": os.devnull,
                     "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

        def check(sock, address):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                if not ipaddress.ip_address(address[0]).is_loopback:
                    raise AssertionError(f"test tried to connect to {address!r}")

        def connect(sock, address):
            check(sock, address)
            return real_connect(sock, address)

        def connect_ex(sock, address):
            check(sock, address)
            return real_connect_ex(sock, address)

        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            mp.setenv("AWS_ENDPOINT_URL", endpoint)  # belt and braces for any stray client
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
                Bucket="crawl-test")
            yield endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_out(s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_endpoint}}
    return f"s3://crawl-test/{uuid.uuid4().hex}", opts


def s3_keys(out: str, opts: dict) -> list[str]:
    fs, root = open_fs(out, opts)
    fs.invalidate_cache()
    return sorted(p[len(root) + 1:] for p in fs.find(root))


def test_s3_write_read_and_blobs(s3_out):
    out, opts = s3_out
    bodies = [f"<html>{i}</html>".encode() * 50 for i in range(5)]
    with ResultWriter(out, "w0", storage_options=opts) as w:
        for i, body in enumerate(bodies):
            r, b = page(f"http://a.test/{i}", body)
            w.add([r], b)
        assert w.flush() == 5
        r, b = page("http://a.test/copy", bodies[0], dup_kind="exact")
        w.add([r, dict(r)], b)  # the repeat is dropped, the body is not stored again
    s = w.stats()
    assert (s["rows_written"], s["files_written"], s["blobs_written"]) == (6, 2, 5)
    assert s["duplicates_dropped"] == 1 and s["blobs_skipped_existing"] == 1
    keys = s3_keys(out, opts)
    expected_blobs = sorted(BlobStore.key_for(sha(b)) for b in bodies)
    assert keys == expected_blobs + ["pages/part-w0-000000.parquet", "pages/part-w0-000001.parquet"]
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
        w.add([dict(r, fetched_at=T0 + dt.timedelta(seconds=5), shard="late")], b)
    with ResultWriter(out, "w0", storage_options=opts) as w:  # restart: continues at 000001
        w.add([dict(r, shard="early")], b)
    assert [k for k in s3_keys(out, opts) if k.startswith("pages/")] == [
        "pages/part-w0-000000.parquet", "pages/part-w0-000001.parquet"]
    assert read_pages(out, opts, dedupe=False).num_rows == 2
    assert read_pages(out, opts)["shard"].to_pylist() == ["early"]
