"""The result writer: rows durable after flush, bodies before rows, repeats dropped."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import threading

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from crawler.clock import MockClock
from crawler.errors import ConfigError, StorageError
from crawler.output import PAGES_SCHEMA, BlobStore, OutcomeRow, ResultWriter, read_pages, summarize
from crawler.output.layout import blob_sha

from .helpers import T0, dies_before_rename, page, part_files, sha


def test_a_flush_writes_one_zstd_part_named_for_the_writer(tmp_path):
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([page("http://a.test/")[0]])
    [name] = part_files(tmp_path)
    assert name == "part-w0-000000.parquet"
    path = tmp_path / "pages" / name
    assert pq.read_schema(path).remove_metadata() == PAGES_SCHEMA
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_rows_round_trip_with_utc_timestamps_and_signed_simhash(tmp_path):
    body = b"<html>hello</html>"
    fp = 0xF000_0000_0000_0001
    plus2 = dt.timezone(dt.timedelta(hours=2))
    r1, b1 = page("http://a.test/x", body, depth=3, attempts=2, simhash=fp, etag='"v1"',
                  content_type="text/html", truncated=False, shard="s1", referrer="http://a.test/",
                  fetched_at=dt.datetime(2024, 5, 1, 14, 0, 0, 250000, tzinfo=plus2),
                  error="bad \ud800 text")
    r2 = OutcomeRow(url="http://b.test/gone", outcome="failed", error="timeout",
                    fetched_at=1714564800.5)
    with ResultWriter(str(tmp_path), "w0") as w:
        w.add([r1, r2], b1)
    t = read_pages(str(tmp_path))
    assert t.schema == PAGES_SCHEMA
    rows = {r["url"]: r for r in t.to_pylist()}
    got = rows["http://a.test/x"]
    assert got["fetched_at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=dt.timezone.utc)
    assert got["simhash"] < 0
    assert blob_sha(got["blob_key"]) == sha(body) and got["blob_key"].startswith("blobs/packs/w0-000000.pack:")
    assert BlobStore(str(tmp_path)).get(got["blob_key"]) == body
    assert (got["depth"], got["attempts"], got["etag"], got["truncated"]) == (3, 2, '"v1"', False)
    assert got["error"].startswith("bad ")  # cleaned, and the file was still written
    failed = rows["http://b.test/gone"]
    assert failed["status"] is None and failed["content_sha256"] is None
    assert failed["blob_key"] is None and failed["host"] is None  # unset fields -> null
    assert failed["fetched_at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    "bad",
    [{"status": "200"}, {"outcome": "ok"}, {"content_sha256": "ABC"},
     {"fetched_at": dt.datetime(2024, 1, 1)}, {"url": None}],
)
def test_a_bad_row_raises_and_buffers_nothing_of_the_call(tmp_path, bad):
    w = ResultWriter(str(tmp_path), "w0")
    good, body = page("http://a.test/ok", b"ok")
    row = dataclasses.replace(page("http://a.test/bad")[0], **bad)
    with pytest.raises(ValueError):
        w.add([good, row], body)
    assert w.pending_rows() == 0
    assert w.flush() == 0 and part_files(tmp_path) == [] and not (tmp_path / "blobs").exists()
    w.add([good], body)  # the good row was not remembered as a repeat either
    assert w.flush() == 1


def test_rows_must_be_outcome_rows(tmp_path):
    w = ResultWriter(str(tmp_path), "w0")
    with pytest.raises(TypeError):
        w.add([page("http://a.test/")[0], {"url": "http://a.test/d", "outcome": "fetched"}])
    assert w.pending_rows() == 0


def test_blob_keys_come_from_the_hash_never_from_page_data(tmp_path):
    body = b"<html>same body</html>" * 100
    h = sha(body)
    with ResultWriter(str(tmp_path), "w0") as w:
        r1, b1 = page("http://a.test/1", body)
        r2, b2 = page("http://a.test/../../../../tmp/evil", body)
        w.add([r1], b1)
        w.flush()
        w.add([r2], b2)
    blobs = [os.path.relpath(os.path.join(d, f), tmp_path)
             for d, _, fs in os.walk(tmp_path / "blobs") for f in fs]
    assert blobs == ["blobs/packs/w0-000000.pack"]  # named by the writer, not by the page
    assert w.stats()["blobs_written"] == 1 and w.stats()["blobs_skipped_existing"] == 1
    [key] = {r["blob_key"] for r in read_pages(str(tmp_path)).to_pylist()}
    assert key.startswith("blobs/packs/w0-000000.pack:") and blob_sha(key) == h
    assert BlobStore(str(tmp_path)).get(key) == body
    # A key naming another hash, or a range outside what was written, is refused.
    other = key.replace(h, sha(b"other"))
    with pytest.raises(StorageError):
        BlobStore(str(tmp_path)).get(other)


def test_bodies_and_keys_must_match_their_hash(tmp_path):
    w = ResultWriter(str(tmp_path), "w0")
    with pytest.raises(ValueError):
        w.add([page("http://a.test/")[0]], {sha(b"a"): b"not a"})
    row, _ = page("http://a.test/", b"abc", blob_key=BlobStore.key_for(sha(b"other")))
    with pytest.raises(ValueError):
        w.add([row])
    with pytest.raises(ValueError):  # a key without a hash to derive it from
        w.add([page("http://a.test/", blob_key=BlobStore.key_for(sha(b"abc")))[0]])
    # A body stored by an earlier flush: the row may carry its own key without the body.
    row, _ = page("http://a.test/", b"abc", blob_key=BlobStore.key_for(sha(b"abc")))
    w.add([row])
    assert w.pending_rows() == 1


def test_blobs_are_durable_before_the_rows_that_point_at_them(tmp_path, monkeypatch):
    body = b"<p>body</p>"
    w = ResultWriter(str(tmp_path), "w0")
    row, bodies = page("http://a.test/", body)
    w.add([row], bodies)
    seen = []
    real = ResultWriter._write_part

    def spy(self, data):
        seen.append(os.path.exists(tmp_path / "blobs" / "packs"))
        return real(self, data)

    def disk_error(*a, **k):
        raise OSError("disk")

    monkeypatch.setattr(ResultWriter, "_write_part", spy)
    # If the blob write fails, no row is written and nothing is lost.
    monkeypatch.setattr(BlobStore, "write_pack", disk_error)
    with pytest.raises(StorageError):
        w.flush()
    assert seen == [] and part_files(tmp_path) == [] and w.pending_rows() == 1
    monkeypatch.undo()
    monkeypatch.setattr(ResultWriter, "_write_part", spy)
    assert w.flush() == 1
    assert seen == [True]
    [got] = read_pages(str(tmp_path)).to_pylist()
    assert BlobStore(str(tmp_path)).get(got["blob_key"]) == body


def test_repeats_are_dropped_within_a_writer(tmp_path):
    with ResultWriter(str(tmp_path), "w0") as w:
        r, b = page("http://a.test/", b"v1")
        w.add([r, r], b)  # same call
        w.flush()
        w.add([dataclasses.replace(r, fetched_at=T0 + dt.timedelta(hours=1))], b)  # after a flush
        r2, b2 = page("http://a.test/", b"v2")  # new content: a new row
        w.add([r2], b2)
        fail = OutcomeRow(url="http://a.test/f", outcome="failed")
        w.add([fail, fail, dataclasses.replace(fail, error="again"),
               dataclasses.replace(fail, outcome="http_error")])
    s = w.stats()
    assert s["duplicates_dropped"] == 4
    assert s["rows_written"] == 4
    assert read_pages(str(tmp_path), dedupe=False).num_rows == 4


# --------------------------------------------------------------------------- flushing


def test_flush_by_row_count(tmp_path):
    w = ResultWriter(str(tmp_path), "w0", rows_per_file=3, clock=MockClock())
    w.add([page(f"http://a.test/{i}")[0] for i in range(2)])
    assert w.maybe_flush() is False and w.pending_rows() == 2
    w.add([page("http://a.test/2")[0]])
    assert w.maybe_flush() is True
    assert w.pending_rows() == 0 and part_files(tmp_path) == ["part-w0-000000.parquet"]
    assert w.maybe_flush() is False  # nothing buffered: no empty files


def test_flush_by_interval_since_first_buffered_row(tmp_path):
    clock = MockClock(start=1000.0)
    w = ResultWriter(str(tmp_path), "w0", flush_interval_s=5.0, clock=clock)
    clock.advance(100)  # idle time before any row does not count
    assert w.maybe_flush() is False
    w.add([page("http://a.test/1")[0]])
    clock.advance(3)
    w.add([page("http://a.test/2")[0]])
    clock.advance(1.9)
    assert w.maybe_flush() is False
    clock.advance(0.1)
    assert w.maybe_flush() is True
    assert w.stats()["rows_written"] == 2 and w.stats()["files_written"] == 1
    w.add([page("http://a.test/3")[0]])
    clock.advance(4.9)  # the interval restarts from this row, not from the last flush
    assert w.maybe_flush() is False


def test_flush_when_buffered_bodies_reach_the_byte_limit(tmp_path):
    w = ResultWriter(str(tmp_path), "w0", max_buffer_bytes=1000, clock=MockClock())
    r, b = page("http://a.test/1", b"x" * 600)
    w.add([r], b)
    assert w.maybe_flush() is False
    r, b = page("http://a.test/2", b"y" * 600)
    w.add([r], b)
    assert w.maybe_flush() is True and w.pending_rows() == 0


def test_bad_limits_are_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        ResultWriter(str(tmp_path), "w0", rows_per_file=0)
    with pytest.raises(ConfigError):
        ResultWriter(str(tmp_path), "w0", flush_interval_s=0)
    with pytest.raises(ValueError):
        ResultWriter(str(tmp_path), ".hidden")


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
    w.close()  # twice is fine


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
    r, b = page("http://a.test/1", b"b1")
    w.add([r], b)

    def boom(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", boom)
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

    with dies_before_rename(monkeypatch):
        w.flush()
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
    # The restarted writer clears its own stale temp and starts its sequence cleanly; the
    # file that is not one of its temps stays.
    w2 = ResultWriter(str(tmp_path), "w0")
    assert os.listdir(pages) == [".part-w0-000000.parquet.deadbeef.tmp"]
    w2.add([page("http://a.test/1")[0]])
    w2.close()
    assert read_pages(str(tmp_path)).num_rows == 1


def test_a_restart_leaves_the_temps_of_a_prefix_sharing_writer_alone(tmp_path, monkeypatch):
    other = ResultWriter(str(tmp_path), "w0-x")
    other.add([page("http://a.test/x")[0]])

    with dies_before_rename(monkeypatch):
        other.flush()
    [temp] = os.listdir(tmp_path / "pages")
    ResultWriter(str(tmp_path), "w0")  # "w0" is a prefix of "w0-x", but not its id
    assert os.listdir(tmp_path / "pages") == [temp]


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


def test_a_failed_part_after_its_pack_never_lets_a_retry_overwrite_that_pack(tmp_path, monkeypatch):
    first, second = b"<p>first</p>" * 20, b"<p>second</p>" * 20
    w = ResultWriter(str(tmp_path), "w0")
    r1, b1 = page("http://a.test/1", first)
    w.add([r1], b1)

    def disk_full(self, data):
        raise OSError("disk full")

    monkeypatch.setattr(ResultWriter, "_write_part", disk_full)
    with pytest.raises(StorageError):
        w.flush()  # the pack is durable, the rows are not
    monkeypatch.undo()
    r2, b2 = page("http://a.test/2", second)
    w.add([r2], b2)  # the retry has a new body to pack as well
    assert w.flush() == 2
    store = BlobStore(str(tmp_path))
    got = {r["url"]: store.get(r["blob_key"]) for r in read_pages(str(tmp_path)).to_pylist()}
    assert got == {"http://a.test/1": first, "http://a.test/2": second}


def test_a_restarted_writer_never_reuses_the_name_of_a_pack_left_without_rows(tmp_path, monkeypatch):
    def crash(self, data):
        raise OSError("killed")

    w = ResultWriter(str(tmp_path), "w0")
    r, b = page("http://a.test/1", b"one")
    w.add([r], b)
    monkeypatch.setattr(ResultWriter, "_write_part", crash)
    with pytest.raises(StorageError):
        w.flush()
    monkeypatch.undo()
    packs = sorted(os.listdir(tmp_path / "blobs" / "packs"))
    assert packs == ["w0-000000.pack"]
    with ResultWriter(str(tmp_path), "w0") as again:  # a new process: nothing remembered
        r, b = page("http://a.test/2", b"two")
        again.add([r], b)
    assert sorted(os.listdir(tmp_path / "blobs" / "packs")) == ["w0-000000.pack", "w0-000001.pack"]
    assert part_files(tmp_path) == ["part-w0-000001.parquet"]


def test_a_writer_with_a_generation_names_files_after_it_and_lists_nothing(tmp_path, monkeypatch):
    """Generations are claimed once each (crawler.recovery.incarnation): the writer starts at
    0 without reading the folder, and clears only temps of its own id's older generations."""
    import crawler.output.writer as writer_module

    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / ".part-w0-g00000001-000004.parquet.deadbeef00000000deadbeef00000000.tmp").write_bytes(b"crash")
    (pages / ".part-w0-g00000009-000000.parquet.deadbeef00000000deadbeef00000000.tmp").write_bytes(b"newer")
    (pages / "part-w0-g00000001-000004.parquet").write_bytes(b"never read")  # an older generation's part
    w = ResultWriter(str(tmp_path), "w0", generation=2)
    assert sorted(os.listdir(pages)) == [".part-w0-g00000009-000000.parquet.deadbeef00000000deadbeef00000000.tmp",
                                         "part-w0-g00000001-000004.parquet"]
    calls = []
    monkeypatch.setattr(writer_module, "list_names", lambda *a: calls.append(a) or [])
    r, b = page("http://a.test/1", b"<html>1</html>")
    w.add([r], b)
    w.flush()
    assert calls == []
    assert "part-w0-g00000002-000000.parquet" in os.listdir(pages)
    assert os.listdir(tmp_path / "blobs" / "packs") == ["w0-g00000002-000000.pack"]


def test_a_fenced_writer_writes_nothing_and_keeps_its_rows(tmp_path):
    from crawler.errors import FencedError

    fenced = []

    def fence() -> None:
        if fenced:
            raise FencedError("shard-000: generation 3 was claimed by a newer incarnation")

    w = ResultWriter(str(tmp_path), "w0", generation=2, fence=fence)
    r, b = page("http://a.test/1", b"<html>1</html>")
    w.add([r], b)
    fenced.append(True)
    with pytest.raises(FencedError):
        w.flush()
    assert w.pending_rows() == 1
    assert not (tmp_path / "pages").exists() or os.listdir(tmp_path / "pages") == []
    assert not (tmp_path / "blobs").exists()
