"""WARC export, read back with warcio: every fetched page is a record whose payload is
the stored body, digests are true, exact duplicates are revisits of their original, and
the response headers come from the row."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import random

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.output import BlobStore, OutcomeRow, ResultWriter, blob_key, open_fs, read_pages
from crawler.output.headers import CUT_FIELD, MAX_HEADER_BYTES, decode_headers, encode_headers
from crawler.output.warc import export_warc, payload_digest

from .helpers import T0, page, sha

HTML = b"<html><body>" + b"<p>hello warc</p>" * 50 + b"</body></html>"
OTHER = b"<html><body>another page</body></html>"
HEADERS = {"server": "nginx", "content-type": "text/html; charset=utf-8", "content-encoding": "gzip",
           "content-length": "123", "etag": '"v1"', "set-cookie": "a=1, b=2", "x-note": "caf\u00e9"}


def _out(tmp_path):
    """An output holding: a page, its exact copy, a truncated page without stored
    headers (an older row), a redirect, a robots refusal, and a page with no body stored."""
    out = str(tmp_path / "out")
    t = lambda s: T0 + dt.timedelta(seconds=s)  # noqa: E731
    rows = [
        page("http://a.test/", HTML, fetched_at=t(1), depth=0, fetch_seq=1, shard="shard-000",
             blob_key=blob_key(sha(HTML)), response_headers=encode_headers(HEADERS), content_type=HEADERS["content-type"]),
        page("http://mirror.test/copy", HTML, fetched_at=t(2), depth=1, referrer="http://a.test/", fetch_seq=1,
             dup_kind="exact", dup_of="http://a.test/", blob_key=blob_key(sha(HTML)),
             response_headers=encode_headers({"content-type": "text/html"})),
        page("http://b.test/big", OTHER, fetched_at=t(3), truncated=True, fetch_seq=1, etag='"e"',
             content_type="text/plain", blob_key=blob_key(sha(OTHER))),
        (OutcomeRow(url="http://a.test/old", outcome="redirect", status=301, fetched_at=t(4),
                    redirect_to="http://a.test/new", response_headers=encode_headers({"location": "/new"})), {}),
        (OutcomeRow(url="http://a.test/private", outcome="robots_blocked", fetched_at=t(5)), {}),
        (OutcomeRow(url="http://c.test/nobody", outcome="fetched", status=200, fetched_at=t(6), fetch_seq=1,
                    content_sha256=sha(b"body not stored")), {}),
    ]
    with ResultWriter(out, "w0") as w:
        for row, bodies in rows:
            w.add([row], bodies)
    (tmp_path / "out" / "stats.json").write_text(json.dumps({"config": {"user_agent": "raycrawl-test/1.0",
                                                                         "politeness": {"respect_robots": True}}}))
    return out


def _records(path):
    with open(path, "rb") as f:
        return [(r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(f)]


def test_export_reads_back_with_warcio_payloads_and_digests_true(tmp_path):
    out = _out(tmp_path)
    dest = tmp_path / "crawl.warc.gz"
    result = export_warc(out, str(dest))
    assert result.files == [str(dest)]
    recs = _records(dest)
    assert [r[0] for r in recs] == ["warcinfo", "response", "metadata", "revisit", "metadata", "response", "metadata"]
    assert all(h.protocol == "WARC/1.1" for _, h, _, _ in recs)
    assert result.records == {"warcinfo": 1, "response": 2, "revisit": 1, "metadata": 3}
    assert result.skipped == {"no_stored_body": 1}

    info = recs[0][3].decode()
    assert "http-header-user-agent: raycrawl-test/1.0" in info and "robots: obey" in info

    fetched = {r["url"]: r for r in read_pages(out).to_pylist() if r["outcome"] == "fetched" and r["blob_key"]}
    store = BlobStore(out)
    by_type = {}
    for kind, h, http, payload in recs[1:]:
        by_type.setdefault(kind, []).append((h, http, payload))
        uri = h.get_header("WARC-Target-URI")
        assert uri in fetched  # every record is of a fetched row
        if kind == "response":
            row = fetched[uri]
            assert payload == store.get(row["blob_key"])
            digest = h.get_header("WARC-Payload-Digest")
            assert digest == "sha256:" + base64.b32encode(hashlib.sha256(payload).digest()).decode()
            assert digest == payload_digest(row["content_sha256"])
            assert int(http.get_header("Content-Length")) == len(payload)
    [(resp_a, http_a, _), (resp_b, http_b, _)] = by_type["response"]
    # Headers as the server sent them, less what described the wire encoding.
    assert http_a.statusline == "200 OK" and http_a.protocol == "HTTP/1.1"
    assert http_a.get_header("etag") == '"v1"'
    assert http_a.get_header("x-note") == "caf%C3%A9"  # non-ASCII: percent-encoded UTF-8 (RFC 8187), warcio's rule
    assert http_a.get_header("set-cookie") == "a=1, b=2"
    assert http_a.get_header("content-encoding") is None
    # A row without stored headers: rebuilt from its columns, and the cut is marked.
    assert http_b.get_header("content-type") == "text/plain" and http_b.get_header("etag") == '"e"'
    assert resp_b.get_header("WARC-Truncated") == "length"

    [(rev, rev_http, rev_payload)] = by_type["revisit"]
    assert rev.get_header("WARC-Target-URI") == "http://mirror.test/copy"
    assert rev.get_header("WARC-Refers-To") == resp_a.get_header("WARC-Record-ID")
    assert rev.get_header("WARC-Refers-To-Target-URI") == "http://a.test/"
    assert rev.get_header("WARC-Refers-To-Date") == resp_a.get_header("WARC-Date")
    assert rev.get_header("WARC-Payload-Digest") == resp_a.get_header("WARC-Payload-Digest")
    assert rev.get_header("WARC-Profile").endswith("/warc/1.1/revisit/identical-payload-digest")
    assert rev_payload == b"" and rev_http.get_header("content-type") == "text/html"

    metas = by_type["metadata"]
    assert [m.get_header("WARC-Concurrent-To") for m, _, _ in metas] == [
        resp_a.get_header("WARC-Record-ID"), rev.get_header("WARC-Record-ID"), resp_b.get_header("WARC-Record-ID")]
    assert b"decodedContentEncoding: gzip" in metas[0][2]
    assert b"via: http://a.test/" in metas[1][2] and b"duplicateKind: exact" in metas[1][2]


def test_the_same_output_exports_to_the_same_records(tmp_path):
    out = _out(tmp_path)
    a, b = tmp_path / "a.warc", tmp_path / "b.warc"
    export_warc(out, str(a))
    export_warc(out, str(b))
    ids = lambda p: [h.get_header("WARC-Record-ID") for k, h, _, _ in _records(p) if k != "warcinfo"]  # noqa: E731
    assert ids(a) == ids(b) and len(set(ids(a))) == len(ids(a))
    assert a.read_bytes()[:8] == b"WARC/1.1"  # .warc: not gzipped


def test_a_directory_destination_rotates_files_by_size(tmp_path):
    out = str(tmp_path / "out")
    bodies = [f"<html>page {i} ".encode() + random.Random(i).randbytes(10_000) for i in range(6)]
    with ResultWriter(out, "w0") as w:
        for i, body in enumerate(bodies):
            row, b = page(f"http://a.test/{i}", body, fetched_at=T0 + dt.timedelta(seconds=i),
                          blob_key=blob_key(sha(body)), fetch_seq=1)
            w.add([row], b)
    result = export_warc(out, max_file_bytes=20_000)  # default: OUT/warc/
    assert len(result.files) > 1
    assert all(f.startswith(str(tmp_path / "out" / "warc" / "raycrawl-")) for f in result.files)
    payloads = []
    for f in result.files:
        recs = _records(f)
        assert recs[0][0] == "warcinfo"  # each file stands alone
        payloads += [p for k, _, _, p in recs if k == "response"]
    assert payloads == bodies


def test_a_missing_blob_is_counted_and_the_rest_exported(tmp_path):
    out = _out(tmp_path)
    # Zero one body's frame inside its pack (blobs/packs/<pack>:<offset>:<length>:<sha256>).
    [key] = [r["blob_key"] for r in read_pages(out).to_pylist() if r["url"] == "http://b.test/big"]
    pack, offset, length, _ = key.rsplit(":", 3)
    with open(tmp_path / "out" / pack, "r+b") as f:
        f.seek(int(offset))
        f.write(b"\0" * int(length))
    result = export_warc(out, str(tmp_path / "x.warc.gz"))
    assert result.skipped["missing_or_corrupt_blob"] == 1
    assert result.records["response"] == 1 and result.records["revisit"] == 1


def test_headers_round_trip_and_a_flood_is_cut_to_a_bounded_cell():
    assert decode_headers(encode_headers(HEADERS)) == list(HEADERS.items())
    assert encode_headers(None) is None and decode_headers(None) is None
    flood = {f"x-h{i}": "v" * 1000 for i in range(1000)}  # ~1 MB of headers
    text = encode_headers(flood)
    assert len(text) <= MAX_HEADER_BYTES
    pairs = decode_headers(text)
    assert pairs[-1] == (CUT_FIELD, f"{1000 - (len(pairs) - 1)} fields not stored")
    assert pairs[:-1] == list(flood.items())[: len(pairs) - 1]
    with pytest.raises(ValueError, match="not a list"):
        decode_headers('{"a": "b"}')


def test_export_to_object_storage(tmp_path, s3_out):
    out = _out(tmp_path)
    dest, opts = s3_out
    result = export_warc(out, dest + "/warc", storage_options=opts)
    [name] = result.files
    fs, _ = open_fs(dest, opts)
    with fs.open(name, "rb") as f:
        kinds = [r.rec_type for r in ArchiveIterator(f)]
    assert kinds.count("response") == 2 and kinds.count("revisit") == 1


def test_a_rendered_page_exports_as_its_raw_response_then_a_conversion_of_the_dom(tmp_path):
    out = str(tmp_path / "out")
    raw = b'<html><body><div id="root"></div><script src="/app.js"></script></body></html>'
    dom = b'<!DOCTYPE html><html><body><div id="root"><a href="/r/1">r1</a></div></body></html>'
    row = OutcomeRow(url="http://spa.test/", outcome="fetched", status=200, fetched_at=T0, fetch_seq=1,
                     content_sha256=sha(dom), content_type="text/html", rendered=True, raw_sha256=sha(raw),
                     response_headers=encode_headers({"content-type": "text/html"}))
    with ResultWriter(out, "w0") as w:
        w.add([row], {sha(dom): dom, sha(raw): raw})
    stored = read_pages(out).to_pylist()[0]
    assert BlobStore(out).get(stored["raw_blob_key"]) == raw and BlobStore(out).get(stored["blob_key"]) == dom
    result = export_warc(out, str(tmp_path / "x.warc.gz"))
    assert result.records["response"] == 1 and result.records["conversion"] == 1
    recs = {t: (h, body) for t, h, _, body in _records(str(tmp_path / "x.warc.gz"))}
    assert recs["response"][1] == raw  # what the server sent: the WARC response record
    conv_headers, conv_body = recs["conversion"]
    assert conv_body == dom
    assert conv_headers.get_header("WARC-Refers-To") == recs["response"][0].get_header("WARC-Record-ID")
    assert conv_headers.get_header("WARC-Payload-Digest") == payload_digest(sha(dom))
    assert b"storedBody: rendered DOM" in recs["metadata"][1]
