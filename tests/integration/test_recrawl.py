"""A continuous crawl refreshes each page as often as it changes, judged from the server's
log (crawler.testing.freshweb: pages that change on every fetch, static pages with an
ETag, with Last-Modified only, with no validators, and pages that change every 3 s)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict

import pytest

from crawler.config import settings as config
from crawler.frontier.store import FrontierStore
from crawler.session.inprocess import local_session
from crawler.output import read_pages
from crawler.testing.freshweb import FreshWeb, freshness_report
from crawler.testing.server import WebServer

from tests.integration import checks

INTERVAL = 0.05
RECRAWL = {"enabled": True, "min_interval_s": 0.5, "initial_interval_s": 1.0, "max_interval_s": 4.0,
           "grow_factor": 2.0, "shrink_factor": 0.5, "refresh_share": 0.5}


@pytest.fixture
def fresh():
    server = WebServer(FreshWeb(period_s=3.0))  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _cfg(server, out, duration):
    return config.from_dict({
        "seeds": server.web.seeds(),
        "scope": "host",
        "politeness": {"interval_s": INTERVAL},
        "fetch": {"resolve": {"*.test": "127.0.0.1"}},
        "recrawl": {**RECRAWL, "duration_s": duration},
        "output": {"path": str(out), "row_flush_interval_s": 0.2},
    })


def test_pages_are_refreshed_as_often_as_they_change(fresh, tmp_path):
    out = tmp_path / "out"
    stats = asyncio.run(local_session(_cfg(fresh, out, 16.0)).run())
    assert stats["finished"] is False and stats["ended"] == "duration"
    checks.check_ledger(stats)
    web: FreshWeb = fresh.web
    report = freshness_report(fresh)
    per = report["fetches_per_page"]
    # Every page was found (half of them only through the sitemap) and refreshed.
    log = fresh.requests()
    by_url = defaultdict(list)
    for r in sorted(log, key=lambda r: r.start):
        by_url[web.url(r.host, r.path_qs)].append(r)
    for urls in web.pages().values():
        assert all(len(by_url[u]) >= 2 for u in urls), {u: len(by_url[u]) for u in urls}
    # 1. Pages that change are fetched measurably more often than static ones.
    static = statistics.mean(per[k] for k in ("etag", "lastmod", "plain"))
    assert per["changing"] >= 1.5 * static, (per, stats["duplicates"], stats["dropped"], stats["refresh"], stats["outcomes"])
    # 2. Refetches of static pages carry their validators and get 304s with no body.
    for kind, header in (("etag", "If-None-Match"), ("lastmod", "If-Modified-Since")):
        for u in web.pages()[kind]:
            first, *again = by_url[u]
            assert header not in first.headers and first.status == 200
            assert again and all(header in r.headers and r.status == 304 and r.body_bytes == 0 for r in again), u
    # A footer that changes on every fetch is not a change: the plain pages' interval grew
    # like the other static pages' did (their refetch gaps widen).
    for u in web.pages()["plain"]:
        starts = [r.start for r in by_url[u]]
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert len(gaps) >= 2 and gaps[-1] > gaps[0] * 1.5, gaps
    # 3. A page that changes every 3 s is picked up within its longest interval (4 s,
    # max_interval_s) plus the time politeness and scheduling may add.
    assert report["pickup_delay_s"] is not None and report["pickup_delay_s"]["max"] <= RECRAWL["max_interval_s"] + 1.5, report
    # 4. Per host, request starts stay the interval apart, discovery and refresh together.
    for host in {r.host for r in log}:
        starts = sorted(r.start for r in log if r.host == host)
        assert min(b - a for a, b in zip(starts, starts[1:])) >= INTERVAL - 0.005
    # Each refetch is a row of its own: (url, fetch_seq) names it; 304s are not_modified rows.
    rows = read_pages(str(out)).to_pylist()
    seqs = defaultdict(set)
    for r in rows:
        seqs[r["url"]].add(r["fetch_seq"])
    assert all(s == set(range(1, len(s) + 1)) for s in seqs.values())
    assert any(r["outcome"] == "not_modified" for r in rows) and any(r["changed"] for r in rows)
    assert stats["refresh"]["not_modified"] > 0 and stats["refresh"]["changes_found"] > 0


def test_a_stopped_continuous_crawl_resumes_its_schedule(fresh, tmp_path):
    out = tmp_path / "out"
    first = asyncio.run(local_session(_cfg(fresh, out, 8.0)).run())
    assert first["ended"] == "duration"
    store = FrontierStore(str(out / "state" / "shard-000.sqlite"))
    web: FreshWeb = fresh.web
    etag_pages = web.pages()["etag"]
    due = {u: store.url_status(u)["next_crawl_at"] for u in etag_pages}
    store.close()
    assert all(due.values())
    offset = time.monotonic() - time.time()  # the server logs monotonic times; the store wall times
    fresh.reset()
    second = asyncio.run(local_session(_cfg(fresh, out, 6.0)).run())
    assert second["mode"] == "resume"
    checks.check_ledger(second)
    # The static pages' refreshes come when their schedule says, not all at once at start.
    for u in etag_pages:
        starts = [r.start for r in fresh.requests() if web.url(r.host, r.path_qs) == u]
        if starts:
            assert starts[0] >= due[u] + offset - 0.5, (u, starts[0] - offset, due[u])
    assert second["refresh"]["fetches"] > 0
