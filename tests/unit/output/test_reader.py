"""Reading OUT/pages: one row per idempotence key, summaries, and compaction."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from crawler.output import PAGES_SCHEMA, OutcomeRow, ResultWriter, compact_pages, read_pages, summarize

from .helpers import T0, page, part_files


def test_read_pages_dedupes_across_writers_keeping_the_earliest(tmp_path):
    r, b = page("http://a.test/", b"same")
    # A crash after the write but before the ack: the URL is fetched again by a new writer.
    with ResultWriter(str(tmp_path), "shard1-a") as w1:
        w1.add([dataclasses.replace(r, fetched_at=T0 + dt.timedelta(seconds=30), shard="late")], b)
    with ResultWriter(str(tmp_path), "shard1-b") as w2:
        w2.add([dataclasses.replace(r, shard="early")], b)
        other, ob = page("http://a.test/other", b"x")
        w2.add([other], ob)
    assert read_pages(str(tmp_path), dedupe=False).num_rows == 3
    t = read_pages(str(tmp_path))
    assert t.num_rows == 2
    assert [x["shard"] for x in t.to_pylist() if x["url"] == "http://a.test/"] == ["early"]
    assert read_pages(str(tmp_path), columns=["url"]).column_names == ["url"]
    assert read_pages(str(tmp_path), columns=["url"]).num_rows == 2
    with pytest.raises(ValueError):
        read_pages(str(tmp_path), columns=["nope"])


def test_missing_or_empty_dataset_reads_as_empty_table(tmp_path):
    t = read_pages(str(tmp_path / "nothing"))
    assert t.num_rows == 0 and t.schema == PAGES_SCHEMA
    (tmp_path / "out" / "pages").mkdir(parents=True)
    t = read_pages(str(tmp_path / "out"), columns=["url", "status"])
    assert t.num_rows == 0 and t.column_names == ["url", "status"]
    s = summarize(str(tmp_path / "nothing"))
    assert s["rows"] == 0 and s["by_outcome"]["fetched"] == 0 and s["pages_per_s"] is None
    assert compact_pages(str(tmp_path / "nothing")) == 0


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
    rows.append(OutcomeRow(url="http://down.test/", host="down.test", outcome="failed",
                           fetched_at=T0 + dt.timedelta(seconds=100)))
    rows.append(OutcomeRow(url="http://nf.test/", host="nf.test", outcome="http_error",
                           status=404, fetched_at=T0))
    rows.append(OutcomeRow(url="http://r.test/", host="r.test", outcome="robots_blocked",
                           fetched_at=T0))
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


def test_compaction_rewrites_the_dataset_without_repeats(tmp_path):
    r, b = page("http://a.test/", b"same")
    fail = OutcomeRow(url="http://b.test/", outcome="failed", fetched_at=T0)
    for k in range(3):  # three writers (three crashes) wrote the same outcomes
        with ResultWriter(str(tmp_path), f"w{k}") as w:
            w.add([dataclasses.replace(r, shard=f"s{k}",
                                       fetched_at=T0 + dt.timedelta(seconds=k))], b)
            w.add([dataclasses.replace(fail, shard=f"s{k}")])
    before = read_pages(str(tmp_path))
    assert read_pages(str(tmp_path), dedupe=False).num_rows == 6
    assert compact_pages(str(tmp_path), rows_per_file=1) == 4
    parts = part_files(tmp_path)
    assert len(parts) == 2 and all(p.startswith("part-compact") for p in parts)
    assert read_pages(str(tmp_path), dedupe=False).to_pylist() == before.to_pylist()
    assert {x["shard"] for x in before.to_pylist()} == {"s0"}  # the earliest rows were kept
    assert compact_pages(str(tmp_path)) == 0 and part_files(tmp_path) == parts
