"""A whole crawl (one process, no Ray) against hostile and broken servers on loopback.

The fetcher's unit tests (tests/unit/test_fetch.py) check what one fetch of each broken
response returns. These tests check what the *crawl* makes of them: every URL ends as
exactly one row whose ``error`` says what happened, retries are bounded, the crawl ends
in bounded time, and a stalling host does not hold up the others (from the hostile
server's own request log). Every socket goes to loopback and no real DNS query is made
(:func:`crawler.testing.hostile.loopback_only`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from crawler.testing.fakes import FakeResolver
from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.engine.partbuilders import build_fetcher
from crawler.output import read_pages
from crawler.testing.hostile import HostileServer, loopback_only

from tests.integration import checks

TIMEOUT_S = 1.0
MAX_BODY = 200_000
MAX_DEPTH = 8
ATTEMPTS = 2

#: behaviour -> (outcome, truncated, fragment of the row's error, requests for "/")
EXPECTED: dict[str, tuple[str, bool, str, int]] = {
    "slowloris": ("failed", False, "timeout after 1.0s (reading body)", ATTEMPTS),
    "silent": ("failed", False, "timeout after 1.0s (connecting or waiting for headers)", ATTEMPTS),
    "endless": ("fetched", True, "truncated at limits.max_body_bytes", 1),
    "oversized": ("fetched", True, "truncated at limits.max_body_bytes", 1),
    "bomb": ("fetched", True, "truncated at limits.max_body_bytes", 1),
    "lying_length": ("failed", False, "content-length mismatch", ATTEMPTS),
    "reset": ("failed", False, "connection reset", ATTEMPTS),
    "broken_gzip": ("fetched", False, "broken gzip stream", 1),
    "bad_chunked": ("failed", False, "invalid chunked encoding", 1),
    "huge_headers": ("failed", False, "header too large", 1),
    "bad_status": ("failed", False, "invalid status line", 1),
}




@pytest.fixture(scope="module")
def hostile():
    with HostileServer(max_body_bytes=MAX_BODY, oversize_factor=100) as srv:
        yield srv


def _config(srv: HostileServer, out: str, seeds: list[str], **over: Any) -> config.CrawlConfig:
    data: dict[str, Any] = {
        "seeds": seeds,
        "scope": "host",
        "limits": {"max_body_bytes": MAX_BODY, "max_depth": MAX_DEPTH},
        "politeness": {"interval_s": 0.02, "max_interval_s": 0.3},
        "fetch": {
            "resolve": srv.resolve_setting(),
            "timeout_s": TIMEOUT_S,
            "connect_timeout_s": TIMEOUT_S,
            "attempts": ATTEMPTS,
            "backoff_s": 0.05,
            "max_backoff_s": 0.2,
        },
        "output": {"path": out, "row_flush_interval_s": 0.2},
        # Hostile servers answer every path with the behaviour under test: no sitemap reads.
        "sitemaps": {"enabled": False},
    }
    for section, values in over.items():
        data.setdefault(section, {}).update(values)
    return config.from_dict(data)


def _crawl(cfg: config.CrawlConfig, resolver: FakeResolver, shards: int = 1) -> tuple[dict, float, list[str]]:
    with loopback_only() as violations:
        t0 = time.monotonic()
        stats = asyncio.run(
            local_session(cfg, shards=shards, fetcher_factory=lambda: build_fetcher(cfg, base_resolver=resolver)).run()
        )
        elapsed = time.monotonic() - t0
    checks.check_ledger(stats)
    return stats, elapsed, violations


def _rows(cfg: config.CrawlConfig) -> dict[str, dict]:
    rows = read_pages(cfg.output.path, dedupe=False).to_pylist()
    per_url = Counter(r["url"] for r in rows)
    assert not [u for u, n in per_url.items() if n > 1], f"URLs with more than one row: {per_url.most_common(3)}"
    return {r["url"]: r for r in rows}


def test_hostile_servers_each_cost_one_row_and_do_not_stall_the_crawl(hostile, tmp_path):
    srv = hostile
    seeds = [srv.url(b) for b in EXPECTED] + [srv.url("normal"), srv.url("redirects"), srv.url("bigrobots")]
    cfg = _config(srv, str(tmp_path / "out"), seeds)
    resolver = FakeResolver()
    before = len(srv.requests())
    stats, elapsed, violations = _crawl(cfg, resolver, shards=2)
    assert not violations and resolver.calls == []
    # Bounded: two attempts of a 1 s timeout plus backoff dominate; nothing waits for a server.
    assert stats["finished"] and elapsed < 15, elapsed
    rows = _rows(cfg)
    assert srv.wait_idle(), "a hostile handler outlived the crawl"
    log = srv.requests()[before:]

    # -- every hostile URL: one row, the right outcome, a reason that says what happened
    for name, (outcome, truncated, fragment, requests) in EXPECTED.items():
        row = rows[srv.url(name)]
        assert (row["outcome"], row["truncated"]) == (outcome, truncated), (name, row)
        assert row["error"] and fragment in row["error"], (name, row["error"])
        assert row["attempts"] == requests, (name, row["attempts"])
        hits = [r for r in log if r.behaviour == name and r.path == "/"]
        assert len(hits) == requests, (name, hits)  # retries bounded by fetch.attempts
        if truncated:
            assert row["content_length"] == MAX_BODY and row["content_sha256"], name
    # The crawler hung up instead of reading the 20 MB / endless bodies to their end.
    for name in ("oversized", "endless"):
        assert [r.outcome for r in log if r.behaviour == name] == ["client closed"], name

    # -- the normal host was crawled completely while the slow ones stalled
    normal = [r for r in log if r.behaviour == "normal"]
    pages = {f"/p/{i}" for i in range(1, srv.normal_pages + 1)} | {"/"}
    assert {r.path for r in normal} == pages
    assert all(rows[srv.url("normal", p)]["outcome"] == "fetched" for p in pages)
    slow = [r for r in log if r.behaviour in ("slowloris", "silent")]
    slow_end = max(r.end for r in slow)
    first_stall = min(r.start for r in slow)
    assert max(r.end for r in normal) < slow_end, "the normal host waited for the stalling ones"
    during = [r for r in normal if first_stall <= r.start <= slow_end]
    assert len(during) >= len(pages) // 2, (len(during), len(pages))

    # -- 50 redirects: one redirect row per hop, cut by limits.max_depth
    chain = {r["url"]: r for r in rows.values() if r["host"].startswith("redirects.")}
    assert len(chain) == MAX_DEPTH + 1, sorted(chain)
    for depth in range(MAX_DEPTH + 1):
        url = srv.url("redirects", "/" if depth == 0 else f"/hop/{depth}")
        assert chain[url]["outcome"] == "redirect" and chain[url]["depth"] == depth
        assert chain[url]["redirect_to"] == srv.url("redirects", f"/hop/{depth + 1}")
    hops = [r for r in log if r.behaviour == "redirects"]
    assert len(hops) == MAX_DEPTH + 1  # robots.txt is not in the chain: it is logged as robots404
    assert stats["dropped"].get("depth", 0) >= 1

    # -- the 10 MB robots.txt: the rules in its first 500 KiB apply, later ones do not
    # (RFC 9309 2.5), even though pages are capped at 200 KB.
    assert rows[srv.url("bigrobots", "/early/page")]["outcome"] == "robots_blocked"
    assert rows[srv.url("bigrobots", "/middle/page")]["outcome"] == "robots_blocked"
    assert rows[srv.url("bigrobots", "/late/page")]["outcome"] == "fetched"
    assert rows[srv.url("bigrobots", "/free")]["outcome"] == "fetched"
    assert [r.outcome for r in log if r.behaviour == "bigrobots" and r.path == "/robots.txt"] == ["client closed"]
    assert not [r for r in log if r.behaviour == "bigrobots" and r.path.startswith(("/early/", "/middle/"))]

    # -- nothing else: every request has its row (robots.txt aside)
    requested = {srv.url(r.behaviour, r.path) for r in log if r.path != "/robots.txt"}
    assert requested <= set(rows), sorted(requested - set(rows))[:5]


@pytest.mark.parametrize("respect_robots", [True, False])
def test_dns_failure_is_a_failed_row_negatively_cached_and_does_not_stall(hostile, tmp_path, respect_robots):
    srv = hostile
    dead = [f"http://nx.unresolvable.example:{srv.port}/{p}" for p in ("", "a", "b", "c")]
    cfg = _config(srv, str(tmp_path / "out"), dead + [srv.url("normal")],
                  politeness={"respect_robots": respect_robots})
    assert cfg.fetch.resolve == {"*.hostile.test": "127.0.0.1"}  # does not cover the dead name
    resolver = FakeResolver()
    stats, elapsed, violations = _crawl(cfg, resolver)
    assert not violations
    assert stats["finished"] and elapsed < 30  # the dead name costs nothing: no stall to a timeout
    rows = _rows(cfg)
    for url in dead:
        row = rows[url]
        assert row["outcome"] == "failed", row
        assert "dns" in row["error"] and "nx.unresolvable.example" in row["error"], row["error"]
        assert row["attempts"] <= 1  # a missing name is final, not retried
    # The negative cache: four URLs (and robots.txt) of the dead host, one resolver call.
    assert resolver.calls == ["nx.unresolvable.example"]
    # The same shard went on with the live host.
    pages = {"/"} | {f"/p/{i}" for i in range(1, srv.normal_pages + 1)}
    assert all(rows[srv.url("normal", p)]["outcome"] == "fetched" for p in pages)
