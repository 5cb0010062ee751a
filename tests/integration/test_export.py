"""After a real crawl of the synthetic web (in process, no Ray): `crawl export-warc` writes
WARC 1.1 that warcio reads back record for record against the output, `crawl stats` prints
its summary for people, and `crawl report` writes its page."""

from __future__ import annotations

import base64
import hashlib
import json

import yaml
from warcio.archiveiterator import ArchiveIterator

from crawler.output import BlobStore, read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs import cli

from tests.integration import checks


def test_a_crawl_exports_to_warc_and_reads_back(web, tmp_path, capsys):
    out = tmp_path / "out"
    cfgfile = tmp_path / "c.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(web)))
    assert cli.main(["run", str(cfgfile), "--local", "--out", str(out), "--no-progress"]) == 0
    checks.check_ledger(json.loads((out / "stats.json").read_text()))
    capsys.readouterr()

    warc = tmp_path / "crawl.warc.gz"
    assert cli.main(["export-warc", str(out), "--to", str(warc), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["files"] == [str(warc)] and summary["skipped"] == {}

    rows = read_pages(str(out)).to_pylist()
    fetched = {r["url"]: r for r in rows if r["outcome"] == "fetched"}
    store = BlobStore(str(out))
    kinds: dict[str, int] = {}
    targets = []
    with open(warc, "rb") as f:
        for rec in ArchiveIterator(f):
            kinds[rec.rec_type] = kinds.get(rec.rec_type, 0) + 1
            if rec.rec_type not in ("response", "revisit"):
                continue
            uri = rec.rec_headers.get_header("WARC-Target-URI")
            targets.append(uri)
            row = fetched[uri]  # every record is of a fetched row
            digest = "sha256:" + base64.b32encode(bytes.fromhex(row["content_sha256"])).decode()
            assert rec.rec_headers.get_header("WARC-Payload-Digest") == digest
            assert rec.http_headers.get_statuscode() == str(row["status"])
            # The header as the server sent it (the row keeps the media type only).
            assert rec.http_headers.get_header("content-type").split(";")[0].strip().lower() == row["content_type"]
            if rec.rec_type == "response":
                payload = rec.content_stream().read()
                assert payload == store.get(row["blob_key"])
                assert "sha256:" + base64.b32encode(hashlib.sha256(payload).digest()).decode() == digest
            else:
                assert row["dup_kind"] == "exact"
                assert fetched[rec.rec_headers.get_header("WARC-Refers-To-Target-URI")]["content_sha256"] == row["content_sha256"]
    # One response or revisit per fetched row, each URL once; exact duplicates are revisits.
    assert sorted(targets) == sorted(fetched)
    assert kinds["revisit"] == sum(1 for r in fetched.values() if r["dup_kind"] == "exact") > 0
    assert kinds["warcinfo"] == 1 and kinds["metadata"] == len(fetched)

    assert cli.main(["stats", str(out)]) == 0
    text = capsys.readouterr().out
    assert "outcomes    fetched" in text and "ledger: admitted" in text and not text.startswith("{")
    assert cli.main(["report", str(out), "--to", str(tmp_path / "report.html")]) == 0
    assert (tmp_path / "report.html").read_text().count("<figure") == 7
