"""OutcomeRow is the one row definition, and the schema derived from it is the published one."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.output import OUTCOMES, PAGES_SCHEMA, OutcomeRow, read_pages
from crawler.output.rows import build_table, to_values
from crawler.output.schema import COLUMNS, encode_part

from .helpers import T0

# Today's published contract (README "Row schema"), spelled out by hand: outputs written
# with it must stay readable, so the derived schema must equal it column for column.
PUBLISHED = [
    ("url", pa.string()), ("host", pa.string()), ("depth", pa.int32()),
    ("status", pa.int32()), ("outcome", pa.string()), ("error", pa.string()),
    ("attempts", pa.int32()), ("fetched_at", pa.timestamp("ms", tz="UTC")),
    ("content_type", pa.string()), ("content_length", pa.int64()),
    ("content_sha256", pa.string()), ("simhash", pa.int64()), ("dup_kind", pa.string()),
    ("dup_of", pa.string()), ("blob_key", pa.string()), ("etag", pa.string()),
    ("last_modified", pa.string()), ("redirect_to", pa.string()), ("truncated", pa.bool_()),
    ("shard", pa.string()), ("referrer", pa.string()),
    ("url_hash", pa.string()), ("fetch_seq", pa.int32()), ("changed", pa.bool_()),
    ("response_headers", pa.string()),
    ("rendered", pa.bool_()), ("raw_sha256", pa.string()), ("raw_blob_key", pa.string()),
]


def test_derived_schema_is_exactly_the_published_contract():
    assert [(f.name, f.type) for f in PAGES_SCHEMA] == PUBLISHED
    assert all(f.nullable for f in PAGES_SCHEMA)
    assert [f.name for f in dataclasses.fields(OutcomeRow)] == [n for n, _ in PUBLISHED]
    assert COLUMNS == tuple(n for n, _ in PUBLISHED)
    assert OUTCOMES == ("fetched", "redirect", "not_modified", "http_error", "failed",
                        "robots_blocked")


def test_a_part_written_with_the_published_schema_reads_back(tmp_path):
    # A file as the previous writer produced it (schema built by hand, not derived).
    old = pa.schema([pa.field(n, t) for n, t in PUBLISHED])
    row = {n: None for n, _ in PUBLISHED}
    row.update(url="http://a.test/", outcome="fetched", status=200, fetched_at=T0,
               simhash=-5, truncated=False)
    (tmp_path / "pages").mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=old),
                   tmp_path / "pages" / "part-old-000000.parquet", compression="zstd")
    t = read_pages(str(tmp_path))
    assert t.schema == PAGES_SCHEMA
    assert t.to_pylist() == [row]


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_outcome_is_accepted(outcome):
    vals = to_values(OutcomeRow(url="http://a.test/", outcome=outcome))
    assert vals[COLUMNS.index("outcome")] == outcome


def test_the_row_is_frozen_slotted_keyword_only_and_needs_url_and_outcome():
    row = OutcomeRow(url="http://a.test/", outcome="failed")
    assert row.status is None and row.fetched_at is None  # every other column: null
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = 200  # type: ignore[misc]
    assert not hasattr(row, "__dict__")
    with pytest.raises(TypeError):
        OutcomeRow(url="http://a.test/", outcome="failed", colour="blue")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        OutcomeRow(url="http://a.test/")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        OutcomeRow("http://a.test/", "a.test")  # type: ignore[misc]


def test_parts_are_zstd_parquet_with_the_schema():
    vals = to_values(OutcomeRow(url="http://a.test/", outcome="fetched", fetched_at=T0))
    data = encode_part(build_table([[v] for v in vals]))
    f = pq.ParquetFile(pa.BufferReader(data))
    assert f.schema_arrow.remove_metadata() == PAGES_SCHEMA
    assert f.metadata.num_rows == 1
    assert all(f.metadata.row_group(0).column(i).compression == "ZSTD"
               for i in range(len(COLUMNS)))
