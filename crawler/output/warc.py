"""WARC 1.1 export of a crawl's output: ``crawl export-warc OUT [--to FILE_OR_DIR]``.

Archives read WARC (ISO 28500), not Parquet. This module writes, from the rows and blobs
in ``OUT``, with warcio:

* one ``warcinfo`` record at the start of each file (software, format, robots policy and
  user agent of the crawl when ``OUT/stats.json`` names them);
* for each fetched page, a ``response`` record: the HTTP status line and the headers
  stored in ``response_headers`` (crawler.output.headers), then the body from its blob;
* for a page whose body equals one already exported (``dup_kind`` exact), a ``revisit``
  record instead (profile identical-payload-digest, WARC 1.1 section 6.7.2), with
  ``WARC-Refers-To``, ``-Target-URI`` and ``-Date`` naming the original's record;
* after each of those, a ``metadata`` record (``WARC-Concurrent-To`` it) with what the
  crawler knew: the referrer (``via``), depth, attempts, SimHash, duplicate kind, shard.

The stored body is the *decoded* one (gzip and chunking removed, crawler.fetch.fetcher), so the
response record is a faithful rebuild rather than the bytes on the wire: Content-Encoding
and Transfer-Encoding are dropped, Content-Length is the stored length, and the metadata
record says what was decoded; a non-ASCII header value is written percent-encoded as
UTF-8 (RFC 8187, warcio's rule). ``WARC-Payload-Digest`` is the body's SHA-256 (the blob's
name, checked when the blob is read), in the ``sha256:<base32>`` form. A body cut at
``limits.max_body_bytes`` is marked ``WARC-Truncated: length``. Other outcomes
(redirects, errors, robots refusals) have no stored body and stay in the Parquet rows.

Record ids are derived from (url, fetch_seq, record type), so exporting the same output
twice gives the same records. A file appears whole or not at all: written under a hidden
temporary name and renamed locally; remote files are one upload.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import json
import os
import posixpath
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http import HTTPStatus
from io import BytesIO
from typing import Any, BinaryIO, Iterator

import pyarrow.compute as pc
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

from crawler.errors import ConfigError, StorageError
from crawler.output.blobs import BlobStore
from crawler.output.fs import check_new_file, check_output_folder, ensure_dir, is_local, open_fs, require_crawl_output
from crawler.output.headers import decode_headers
from crawler.output.layout import temp_name
from crawler.output.reader import read_pages

__all__ = ["DEFAULT_MAX_FILE_BYTES", "WarcExport", "export_warc", "payload_digest"]

DEFAULT_MAX_FILE_BYTES = 1_000_000_000
"""A directory destination starts a new file past this size (the customary 1 GB WARC)."""

WARC_1_1_SPEC = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
_COLUMNS = [
    "url", "depth", "status", "attempts", "fetched_at", "content_type", "content_sha256",
    "simhash", "dup_kind", "dup_of", "blob_key", "etag", "last_modified", "truncated",
    "shard", "referrer", "fetch_seq", "response_headers", "rendered", "raw_sha256", "raw_blob_key",
]
# Headers that describe the wire form of the body, not the stored (decoded) one.
_WIRE_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})
_NS = uuid.UUID("1b671a64-40d5-491e-99b0-da01ff1f3341")  # raycrawl's record-id namespace


def payload_digest(sha256_hex: str) -> str:
    """A hex SHA-256 as a WARC digest value: ``sha256:<base32>`` (WARC 1.1 section 5.9)."""
    return "sha256:" + base64.b32encode(bytes.fromhex(sha256_hex)).decode("ascii")


class _Sha256Writer(WARCWriter):  # type: ignore[misc]  # warcio has no types, and subclassing is its only way to choose the digest
    """warcio's writer with SHA-256 block digests (its default is SHA-1)."""

    @staticmethod
    def _create_digester() -> Digester:
        return Digester("sha256")


@dataclass
class WarcExport:
    """What :func:`export_warc` wrote: files, records by type, rows skipped and why."""

    files: list[str] = field(default_factory=list)
    records: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """Plain dict for ``--json`` output."""
        return {"files": self.files, "records": dict(self.records), "skipped": dict(self.skipped)}


def _record_id(url: str, fetch_seq: int | None, kind: str) -> str:
    name = "\x00".join((url, str(fetch_seq), kind))
    return f"<urn:uuid:{uuid.uuid5(_NS, name)}>"


def _warc_date(ts: _dt.datetime | None) -> str:
    ts = ts or _dt.datetime.now(_dt.timezone.utc)
    date: str = datetime_to_iso_date(ts.astimezone(_dt.timezone.utc).replace(tzinfo=None), use_micros=True)
    return date


def _http_headers(row: dict[str, Any], body_len: int | None) -> tuple[StatusAndHeaders, str | None]:
    """The response's status line and headers for the stored body; and what was decoded."""
    status = row["status"] or 200
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    stored = decode_headers(row["response_headers"])
    if stored is None:  # rows written before the column existed: what the row knows
        stored = [(k, row[c]) for k, c in (("content-type", "content_type"), ("etag", "etag"),
                                             ("last-modified", "last_modified")) if row[c]]
    decoded = None
    fields = []
    for name, value in stored:
        if name in _WIRE_HEADERS:
            if name == "content-encoding":
                decoded = value
            continue
        fields.append((name, value))
    if body_len is not None:
        fields.append(("content-length", str(body_len)))
    return StatusAndHeaders(f"{status} {phrase}".strip(), fields, protocol="HTTP/1.1"), decoded


def _metadata(row: dict[str, Any], decoded: str | None) -> bytes:
    """``application/warc-fields`` lines of what the crawler knew about the fetch."""
    items = [
        ("via", row["referrer"]), ("hopsFromSeed", row["depth"]), ("attempts", row["attempts"]),
        ("fetchSeq", row["fetch_seq"]), ("shard", row["shard"]),
        ("simhash", None if row["simhash"] is None else f"{row['simhash'] & (2**64 - 1):016x}"),
        ("duplicateKind", row["dup_kind"]), ("duplicateOfUrlHash", row["dup_of"]),
        ("decodedContentEncoding", decoded),
        ("responseHeaders", "from the row" if row["response_headers"] is not None else "rebuilt from content_type, etag, last_modified"),
        ("storedBody", "rendered DOM (conversion record)" if row.get("rendered") else None),
    ]
    return "".join(f"{k}: {v}\r\n" for k, v in items if v is not None).encode("utf-8")


class _Files:
    """The destination: one named file, or numbered files in a directory rotated by size."""

    def __init__(self, dest: str, storage_options: dict[str, Any] | None, max_file_bytes: int, prefix: str) -> None:
        self.fs, path = open_fs(dest, storage_options)
        name = posixpath.basename(path)
        self.single = name.endswith((".warc", ".warc.gz"))
        self.gzip = not self.single or name.endswith(".gz")
        self.dir = posixpath.dirname(path) if self.single else path
        self.single_name = name
        self.max_bytes = max_file_bytes
        self.prefix = prefix
        self.seq = 0
        ensure_dir(self.fs, self.dir)

    def next_name(self) -> str:
        if self.single:
            if self.seq:
                raise AssertionError("a single-file destination is never rotated")
            name = self.single_name
        else:
            name = f"{self.prefix}-{self.seq:05d}.warc.gz"
        self.seq += 1
        return name

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[BinaryIO]:
        final = f"{self.dir}/{name}"
        if not is_local(self.fs):
            with self.fs.open(final, "wb") as f:  # an object appears when its upload completes
                yield f
            return
        tmp = f"{self.dir}/{temp_name(name)}"
        try:
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _crawl_info(fs: Any, root: str) -> dict[str, Any]:
    try:
        with fs.open(f"{root}/stats.json", "r") as f:
            return json.load(f).get("config") or {}
    except (OSError, ValueError):
        return {}


def export_warc(
    out: str,
    dest: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    prefix: str = "raycrawl",
) -> WarcExport:
    """Write the fetched pages of ``out`` as WARC 1.1 (see the module docstring).

    ``dest`` is a file (``*.warc.gz`` gzipped record by record, or ``*.warc``) or a
    directory that receives ``<prefix>-00000.warc.gz``, ``-00001``... of about
    ``max_file_bytes`` each; default ``OUT/warc/``. A missing or corrupt blob is counted
    in ``skipped`` and the rest is still written; a page stored without its body
    (``output.store_bodies: false``) is skipped too.
    """
    if max_file_bytes <= 0:
        raise ConfigError(f"max_file_bytes must be positive, got {max_file_bytes}")
    # Checked before anything is made: `export-warc /typo` must not create /typo/warc/.
    src_fs, root = require_crawl_output(out, storage_options)
    dest = dest or f"{out.rstrip('/')}/warc"
    if dest.endswith((".warc", ".warc.gz")):
        check_new_file(dest, storage_options)
    else:
        check_output_folder(dest, storage_options)
    table = read_pages(out, storage_options, columns=_COLUMNS, where=pc.field("outcome") == "fetched")
    blobs = BlobStore(out, storage_options)
    crawl = _crawl_info(src_fs, root)
    result = WarcExport()

    rows_list = table.to_pylist()
    # Pass 1: the record each body is first stored under, for revisits to refer to.
    originals: dict[str, tuple[str, str, str]] = {}
    for row in rows_list:
        sha = row["content_sha256"]
        if sha and row["blob_key"] and row["dup_kind"] != "exact" and not row["rendered"] and sha not in originals:
            originals[sha] = (_record_id(row["url"], row["fetch_seq"], "response"), row["url"], _warc_date(row["fetched_at"]))

    files = _Files(dest, storage_options, max_file_bytes, prefix)
    info = {
        "software": "raycrawl (https://github.com/raycrawl/raycrawl)",
        "format": "WARC File Format 1.1",
        "conformsTo": WARC_1_1_SPEC,
        "robots": "obey" if (crawl.get("politeness") or {}).get("respect_robots", True) else "ignore",
        "http-header-user-agent": crawl.get("user_agent"),
        "description": f"export of the crawl output {out}; bodies are stored decoded",
    }
    rows = iter(rows_list)
    pending = next(rows, None)
    while pending is not None:
        name = files.next_name()
        with files.open(name) as f:
            writer = _Sha256Writer(f, gzip=files.gzip, warc_version="1.1")
            writer.write_record(writer.create_warcinfo_record(name, info))
            result.records["warcinfo"] += 1
            while pending is not None:
                _write_row(writer, pending, blobs, originals, result)
                pending = next(rows, None)
                if not files.single and f.tell() >= files.max_bytes:
                    break
        result.files.append(f"{files.dir}/{name}")
    return result


def _write_row(
    writer: WARCWriter, row: dict[str, Any], blobs: BlobStore,
    originals: dict[str, tuple[str, str, str]], result: WarcExport,
) -> None:
    """The response (or revisit) record of one fetched row, then its metadata record."""
    url, sha = row["url"], row["content_sha256"]
    if not sha or not row["blob_key"]:
        result.skipped["no_stored_body"] += 1
        return
    rid = _record_id(url, row["fetch_seq"], "response")
    date = _warc_date(row["fetched_at"])
    headers = {"WARC-Record-ID": rid, "WARC-Date": date}
    original = originals.get(sha)
    if row["rendered"] and row["raw_blob_key"] and row["raw_sha256"]:
        # A rendered page: the response as fetched, then the DOM the browser made of it.
        if not _write_rendered(writer, row, blobs, rid, date, result):
            return
        decoded = _http_headers(row, None)[1]
        kind = ""
    elif row["dup_kind"] == "exact" and original is not None and original[0] != rid:
        http, decoded = _http_headers(row, None)
        headers["WARC-Refers-To"] = original[0]
        # warcio adds WARC-Profile, -Refers-To-Target-URI, -Refers-To-Date and the digest.
        record = writer.create_revisit_record(url, payload_digest(sha), original[1], original[2],
                                              http_headers=http, warc_headers_dict=headers)
        kind = "revisit"
    else:
        try:
            body = blobs.get(row["blob_key"])
        except StorageError:
            result.skipped["missing_or_corrupt_blob"] += 1
            return
        http, decoded = _http_headers(row, len(body))
        headers["WARC-Payload-Digest"] = payload_digest(sha)
        if row["truncated"]:
            headers["WARC-Truncated"] = "length"
        record = writer.create_warc_record(url, "response", payload=BytesIO(body), length=len(body),
                                           http_headers=http, warc_headers_dict=headers)
        kind = "response"
    if kind:
        writer.write_record(record)
        result.records[kind] += 1
    meta = _metadata(row, decoded)
    writer.write_record(writer.create_warc_record(
        url, "metadata", payload=BytesIO(meta), length=len(meta), warc_content_type="application/warc-fields",
        warc_headers_dict={"WARC-Record-ID": _record_id(url, row["fetch_seq"], "metadata"), "WARC-Date": date,
                           "WARC-Concurrent-To": rid},
    ))
    result.records["metadata"] += 1


def _write_rendered(writer: WARCWriter, row: dict[str, Any], blobs: BlobStore, rid: str, date: str,
                    result: WarcExport) -> bool:
    """A rendered row's ``response`` record (the raw body, as fetched) and ``conversion``
    record (the rendered DOM, ``WARC-Refers-To`` the response: WARC 1.1 section 6.8)."""
    url = row["url"]
    try:
        raw = blobs.get(row["raw_blob_key"])
        dom = blobs.get(row["blob_key"])
    except StorageError:
        result.skipped["missing_or_corrupt_blob"] += 1
        return False
    http, _ = _http_headers(row, len(raw))
    headers = {"WARC-Record-ID": rid, "WARC-Date": date, "WARC-Payload-Digest": payload_digest(row["raw_sha256"])}
    if row["truncated"]:
        headers["WARC-Truncated"] = "length"
    writer.write_record(writer.create_warc_record(url, "response", payload=BytesIO(raw), length=len(raw),
                                                  http_headers=http, warc_headers_dict=headers))
    result.records["response"] += 1
    writer.write_record(writer.create_warc_record(
        url, "conversion", payload=BytesIO(dom), length=len(dom), warc_content_type="text/html; charset=utf-8",
        warc_headers_dict={"WARC-Record-ID": _record_id(url, row["fetch_seq"], "conversion"), "WARC-Date": date,
                           "WARC-Refers-To": rid, "WARC-Payload-Digest": payload_digest(row["content_sha256"])},
    ))
    result.records["conversion"] += 1
    return True
