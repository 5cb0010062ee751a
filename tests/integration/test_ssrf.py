"""Security end to end (one process, no Ray): the SSRF guard, decompression bombs, and
stored bodies that look like paths.

Only loopback is ever a target: the hostile server listens on 127.0.0.1 (and on ::1 and
127.0.0.2 when this machine allows), and no name reaches real DNS (a fake base resolver
answers, :func:`crawler.testing.hostile.loopback_only` refuses everything else). The
guard tests prove a negative from the server's own log, so a control crawl with the
guard switched off shows the same targets *are* reachable: the log would show them.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import resource
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crawler.testing.fakes import FakeResolver
from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.session.crawlsession import CrawlSession
from crawler.engine.partbuilders import build_fetcher
from crawler.output import BlobStore, read_pages
from crawler.testing.hostile import TRAVERSAL_STRINGS, HostileServer, loopback_only
from crawler.urls import normalize

from tests.integration import checks


@pytest.fixture(scope="module")
def server():
    with HostileServer(max_body_bytes=200_000, extra_hosts=("::1", "127.0.0.2")) as srv:
        yield srv


def _config(srv: HostileServer, out: Path, seeds: list[str], **over: Any) -> config.CrawlConfig:
    data: dict[str, Any] = {
        "seeds": seeds,
        "scope": "any",  # links to other hosts are in scope: only the guard stands between
        "limits": {"max_body_bytes": 200_000, "max_depth": 3},
        "politeness": {"interval_s": 0.0, "max_interval_s": 0.2},
        "fetch": {"resolve": srv.resolve_setting(), "timeout_s": 2.0, "attempts": 2, "backoff_s": 0.02,
                  "max_backoff_s": 0.1},
        "output": {"path": str(out), "row_flush_interval_s": 0.2},
        # The hostile server answers every path with the behaviour under test: no sitemap reads.
        "sitemaps": {"enabled": False},
    }
    for section, values in over.items():
        data.setdefault(section, {}).update(values)
    return config.from_dict(data)


def _run(cfg: config.CrawlConfig, resolver: FakeResolver) -> tuple[CrawlSession, dict, list[str]]:
    crawl = local_session(cfg, fetcher_factory=lambda: build_fetcher(cfg, base_resolver=resolver))
    with loopback_only() as violations:
        stats = asyncio.run(crawl.run())
    checks.check_ledger(stats)
    return crawl, stats, violations


def _rows(cfg: config.CrawlConfig) -> dict[str, dict]:
    rows = read_pages(cfg.output.path, dedupe=False).to_pylist()
    assert max(Counter(r["url"] for r in rows).values()) == 1, "a URL has more than one row"
    return {r["url"]: r for r in rows}


def _localhost(srv: HostileServer) -> FakeResolver:
    return FakeResolver({"localhost": ["127.0.0.1", "::1"] if "::1" in srv.listening else ["127.0.0.1"]})


# ------------------------------------------------------------------------- SSRF guard


@pytest.mark.parametrize("respect_robots", [True, False], ids=["robots", "no-robots"])
def test_loopback_targets_are_refused_before_connecting(server, tmp_path, respect_robots):
    srv = server
    seeds = srv.loopback_targets("/seed") + [srv.url("ssrf")]
    cfg = _config(srv, tmp_path / "out", seeds, politeness={"respect_robots": respect_robots})
    before = len(srv.requests())
    crawl, stats, violations = _run(cfg, _localhost(srv))
    assert stats["finished"] and not violations
    assert srv.wait_idle()
    rows = _rows(cfg)

    # Seeds, links and redirect targets: every loopback URL is one failed row naming the guard.
    targets = [normalize(u) for u in seeds[:-1] + srv.loopback_targets("/link") + srv.loopback_targets("/redirect")]
    assert len(set(targets)) == len(targets) == 24
    for url in targets:
        row = rows[url]
        assert row["outcome"] == "failed" and row["status"] is None, row
        assert "refused by address guard" in row["error"], row["error"]
        if respect_robots:  # the origin's robots.txt was refused first: the row says so
            assert row["error"].startswith("robots.txt unreachable: refused by address guard")
    # Each redirect hop is its own row pointing at the refused target.
    for i, target in enumerate(srv.loopback_targets("/redirect")):
        hop = rows[srv.url("ssrf", f"/go/{i}")]
        assert hop["outcome"] == "redirect" and hop["redirect_to"] == normalize(target)
    # The allowed host was crawled.
    assert rows[srv.url("ssrf")]["outcome"] == "fetched"
    assert rows[srv.url("ssrf", "/fine")]["outcome"] == "fetched"

    # From the server's side: nothing but the allowed host was ever asked for anything.
    log = srv.requests()[before:]
    assert log and {r.host for r in log} == {"ssrf.hostile.test"}, Counter(r.host for r in log)
    assert not [r for r in log if r.behaviour == "secret"]
    guard = sum(s.parts.fetcher.stats()["guard_refusals"] for s in crawl.runtime.shards.values())  # type: ignore[attr-defined]  # the real Fetcher behind the protocol
    assert guard >= 1


def test_control_without_the_guard_the_same_targets_are_reached(server, tmp_path):
    """The negative above can fail: with ``fetch.ssrf_guard: false`` the log shows them."""
    srv = server
    cfg = _config(srv, tmp_path / "out", srv.loopback_targets("/seed"),
                  fetch={"ssrf_guard": False}, politeness={"respect_robots": False})
    before = len(srv.requests())
    _, stats, violations = _run(cfg, _localhost(srv))
    assert stats["finished"] and not violations
    assert srv.wait_idle()
    reached = [r for r in srv.requests()[before:] if r.behaviour == "secret"]
    hosts = {r.host for r in reached}
    assert {"127.0.0.1", "localhost", "0.0.0.0"} <= hosts, hosts
    for extra, host in (("127.0.0.2", "127.0.0.2"), ("::1", "[::1]")):
        if extra in srv.listening:
            assert host in hosts, (host, hosts)
    rows = _rows(cfg)
    assert rows[normalize(srv.loopback_targets("/seed")[0])]["outcome"] == "fetched"


# ------------------------------------------------------------------ decompression bomb

CUT = 1_000_000


def test_gzip_bomb_is_cut_at_max_body_bytes_with_bounded_memory(server, tmp_path):
    srv = server
    cfg = _config(srv, tmp_path / "out", [srv.url("bomb")], limits={"max_body_bytes": CUT})
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        _, stats, violations = _run(cfg, FakeResolver({}))
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    maxrss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before) * 1024
    assert stats["finished"] and not violations
    row = _rows(cfg)[srv.url("bomb")]
    assert row["outcome"] == "fetched" and row["truncated"] is True
    assert row["content_length"] == CUT and "truncated at limits.max_body_bytes" in row["error"]
    assert row["content_sha256"] == hashlib.sha256(bytes(CUT)).hexdigest()
    # Inflated, the body alone would be srv.bomb_bytes (1 GiB). The cut 1 MB body is
    # parsed and fingerprinted like any page (that costs ~25x its size in transient
    # allocations): the traced peak allows 4x that. Allocations tracemalloc cannot see
    # (zlib's and aiohttp's C buffers) show in the process's maximum RSS: its growth must
    # stay under a third of the inflated body, so inflating a third of the bomb fails.
    assert peak < 100 * CUT, f"traced peak {peak} bytes: the bomb was inflated, not cut"
    assert maxrss_growth < srv.bomb_bytes // 3, f"max RSS grew {maxrss_growth} bytes during the bomb crawl"
    assert elapsed < 10


# --------------------------------------------------------------- stored bodies are data


_BLOB_KEY = re.compile(r"^blobs/packs/(shard-\d+-g\d{8}-\d{6}\.pack):(\d+):(\d+):([0-9a-f]{64})$")
_PACK = re.compile(r"^blobs/packs/shard-\d+-g\d{8}-\d{6}\.pack$")


def test_bodies_and_urls_that_look_like_paths_stay_data(server, tmp_path):
    srv = server
    out = tmp_path / "a" / "b" / "out"  # "../.." from OUT would still land inside tmp_path
    seeds = [
        srv.url("traversal", "/a/../../../../etc/passwd"),
        srv.url("traversal", "/x/%2e%2e/%2e%2e/%2e%2e/tmp/pwned"),
        srv.url("traversal", "/..%2f..%2f..%2fblobs"),
    ]
    cfg = _config(srv, out, seeds)
    _, stats, violations = _run(cfg, FakeResolver({}))
    assert stats["finished"] and not violations
    rows = _rows(cfg)
    store = BlobStore(str(out))
    fetched = [r for r in rows.values() if r["outcome"] == "fetched"]
    assert len(fetched) >= 4  # the seeds (dot segments resolved) and the page's own links
    for row in fetched:
        assert "/../" not in row["url"] and "/./" not in row["url"]
        m = _BLOB_KEY.match(row["blob_key"] or "")
        assert m, row["blob_key"]
        sha = m.group(4)
        assert sha == row["content_sha256"]
        body = store.get(row["blob_key"])  # verifies the hash
        assert hashlib.sha256(body).hexdigest() == sha
        assert b"etc/passwd" in body  # the hostile text is stored verbatim, as data
    assert any(TRAVERSAL_STRINGS[0].encode() in store.get(r["blob_key"]) for r in fetched)
    # Every file the crawl wrote is inside OUT; blob packs are named by shard and flush
    # number alone, and no name anywhere comes from the page or its URL.
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(out in p.parents for p in written), [p for p in written if out not in p.parents]
    blobs = [p.relative_to(out).as_posix() for p in written if p.relative_to(out).parts[0] == "blobs"]
    assert blobs and all(_PACK.match(b) for b in blobs), blobs
    assert {b for b in blobs} == {_BLOB_KEY.match(r["blob_key"]).group(0).split(":")[0] for r in fetched}
    names = {part for p in written for part in p.relative_to(tmp_path).parts}
    suspicious = [n for n in names if n in ("etc", "tmp") or any(bad in n for bad in ("passwd", "pwned", ".."))]
    assert not suspicious, suspicious
