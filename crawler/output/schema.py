"""The output row: :class:`OutcomeRow` is the one definition of a row of ``OUT/pages``.

Every URL ends as exactly one outcome row (docs/invariants.md #5). The Parquet schema
indexers read, :data:`PAGES_SCHEMA`, is derived from the dataclass: each field carries its
Arrow type in its metadata, so a column cannot be added, renamed, retyped or reordered in
one place and forgotten in the other. The schema is a public contract (README "Row
schema"): existing outputs must stay readable, so change it only by appending columns.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "ARROW_TYPE",
    "COLUMNS",
    "DUP_KINDS",
    "OUTCOMES",
    "OutcomeRow",
    "PAGES_SCHEMA",
    "PART_COMPRESSION",
    "encode_part",
    "simhash_to_signed",
    "simhash_to_unsigned",
]

OUTCOMES = ("fetched", "redirect", "not_modified", "http_error", "failed", "robots_blocked")
"""Every URL ends as exactly one of these (docs/invariants.md #5)."""
DUP_KINDS = ("exact", "near")
"""``dup_kind`` values: the body equals stored content, or its SimHash is within distance 3."""

ARROW_TYPE = "arrow_type"
"""Key of the Arrow type in each :class:`OutcomeRow` field's metadata."""

PART_COMPRESSION = "zstd"


def _arrow(t: pa.DataType) -> dict[str, pa.DataType]:
    return {ARROW_TYPE: t}


_STR, _I32, _I64, _BOOL = pa.string(), pa.int32(), pa.int64(), pa.bool_()
_TS = pa.timestamp("ms", tz="UTC")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeRow:
    """One URL outcome, as the engine records it and ``OUT/pages`` stores it.

    Only ``url`` and ``outcome`` are required; every other column is nullable and
    defaults to None. Values are checked (and text from the web cleaned) by
    :meth:`crawler.output.ResultWriter.add`, not here, so building a row stays cheap.
    ``fetched_at`` takes an aware datetime or Unix seconds; ``simhash`` the unsigned
    64-bit fingerprint or its signed view (stored signed, see :func:`simhash_to_signed`).
    """

    url: str = field(metadata=_arrow(_STR))
    """Normalized URL."""
    host: str | None = field(default=None, metadata=_arrow(_STR))
    """Politeness key (host[:port])."""
    depth: int | None = field(default=None, metadata=_arrow(_I32))
    """Link hops from a seed."""
    status: int | None = field(default=None, metadata=_arrow(_I32))
    """HTTP status; None without a response."""
    outcome: str = field(metadata=_arrow(_STR))
    """One of :data:`OUTCOMES`."""
    error: str | None = field(default=None, metadata=_arrow(_STR))
    """Why it failed or was refused."""
    attempts: int | None = field(default=None, metadata=_arrow(_I32))
    """Requests made for this URL."""
    fetched_at: _dt.datetime | float | None = field(default=None, metadata=_arrow(_TS))
    """When the outcome was recorded (aware datetime or Unix seconds; stored as UTC ms)."""
    content_type: str | None = field(default=None, metadata=_arrow(_STR))
    """Content-Type header of the stored body, parameters included."""
    content_length: int | None = field(default=None, metadata=_arrow(_I64))
    """Decoded bytes of the stored body."""
    content_sha256: str | None = field(default=None, metadata=_arrow(_STR))
    """Lowercase hex SHA-256 of the body: the exact-duplicate key and the blob name."""
    simhash: int | None = field(default=None, metadata=_arrow(_I64))
    """64-bit SimHash of the visible text."""
    dup_kind: str | None = field(default=None, metadata=_arrow(_STR))
    """One of :data:`DUP_KINDS`, or None for original content."""
    dup_of: str | None = field(default=None, metadata=_arrow(_STR))
    """``url_hash`` of the original a duplicate matches (join it to ``url_hash`` for its URL:
    the content index keeps no URL strings, crawler.content.index)."""
    blob_key: str | None = field(default=None, metadata=_arrow(_STR))
    """Where the body is: ``blobs/packs/<pack>:<offset>:<length>:<sha256>`` (older outputs:
    ``blobs/ab/cd/<sha>.gz``); always a key of ``content_sha256`` (crawler.output.layout)."""
    etag: str | None = field(default=None, metadata=_arrow(_STR))
    """ETag validator, for conditional recrawl."""
    last_modified: str | None = field(default=None, metadata=_arrow(_STR))
    """Last-Modified validator, for conditional recrawl."""
    redirect_to: str | None = field(default=None, metadata=_arrow(_STR))
    """Normalized target of a redirect."""
    truncated: bool | None = field(default=None, metadata=_arrow(_BOOL))
    """The body was cut at ``limits.max_body_bytes``."""
    shard: str | None = field(default=None, metadata=_arrow(_STR))
    """The shard that recorded the row."""
    referrer: str | None = field(default=None, metadata=_arrow(_STR))
    """The page the link was found on."""
    url_hash: str | None = field(default=None, metadata=_arrow(_STR))
    """First 8 bytes of SHA-1 of ``url``, hex: the URL's public id (crawler.urls.url_hash)."""
    fetch_seq: int | None = field(default=None, metadata=_arrow(_I32))
    """Which fetch of this URL in the crawl the row records: 1 for the first, then one
    more per recrawl. (url, fetch_seq) identifies a row."""
    changed: bool | None = field(default=None, metadata=_arrow(_BOOL))
    """For a refetch: did the page's main content change since the previous fetch (None
    for a first fetch or when there is nothing to compare)."""
    response_headers: str | None = field(default=None, metadata=_arrow(_STR))
    """The response's header fields as received (JSON ``[[name, value], ...]``, names
    lowercased, cut at 16 KB: crawler.output.headers); None without a response. WARC
    export rebuilds the HTTP response from them."""
    rendered: bool | None = field(default=None, metadata=_arrow(_BOOL))
    """The stored body is the DOM a headless browser rendered from the response
    (crawler.render); ``content_sha256``, links and fingerprints are of that DOM."""
    raw_sha256: str | None = field(default=None, metadata=_arrow(_STR))
    """For a rendered page: SHA-256 of the raw response body as fetched."""
    raw_blob_key: str | None = field(default=None, metadata=_arrow(_STR))
    """For a rendered page: where the raw response body is (a key of ``raw_sha256``)."""


COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(OutcomeRow))
"""Column names in schema order."""

PAGES_SCHEMA: pa.Schema = pa.schema(
    [pa.field(f.name, f.metadata[ARROW_TYPE]) for f in dataclasses.fields(OutcomeRow)]
)
"""Schema of ``OUT/pages``: one row per URL outcome, derived from :class:`OutcomeRow`.
Every column is nullable."""


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_U64 = 2**64


def simhash_to_signed(value: int) -> int:
    """Map an unsigned 64-bit fingerprint onto the int64 stored in ``simhash``."""
    if 0 <= value < _U64:
        return value - _U64 if value > _I64_MAX else value
    if _I64_MIN <= value < 0:
        return value
    raise ValueError(f"simhash {value!r} does not fit in 64 bits")


def simhash_to_unsigned(value: int) -> int:
    """Inverse of :func:`simhash_to_signed`: the unsigned fingerprint readers compare bits on."""
    return value + _U64 if value < 0 else value


def encode_part(table: pa.Table) -> bytes:
    """A page table as the bytes of one part file: Parquet, zstd-compressed."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=PART_COMPRESSION)
    data: bytes = sink.getvalue().to_pybytes()  # pyarrow has no types
    return data
