"""News by the minute, judged from the server's log (crawler.testing.newsweb): articles
appear at random times on two news hosts with a front page, sections, an RSS feed and a
news sitemap; old archive pages never change. The crawl is told only to recrawl, with a
minimum interval: it finds its feeds, hubs and news sitemaps itself.

Time is scaled down 5x from the benchmark (benchmarks/news.py): a 0.2 s politeness
interval, one article per 3 s per host, ``min_interval_s`` 1 s, "published more than
60 s before the end" becomes 12 s. The goals scale with it: median publication-to-fetch
at most 7 s -> 1.4 s, p95 at most 15 s -> 3 s (asserted with slack for a shared CI box).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.output import read_pages
from crawler.testing.newsweb import NewsWeb, news_report
from crawler.testing.server import WebServer

from tests.integration import checks

SCALE = 0.2
INTERVAL = 1.0 * SCALE
DURATION = 45.0


def test_new_articles_are_fetched_within_seconds_and_archives_are_left_alone(tmp_path):
    web = NewsWeb(2, mean_interval_s=15.0 * SCALE, seed=5, archive_pages=40, archive_page_size=20, horizon_s=DURATION + 30)
    server = WebServer(web)  # type: ignore[arg-type]
    server.start()
    try:
        out = tmp_path / "out"
        cfg = config.from_dict({
            "seeds": web.seeds(),
            "politeness": {"interval_s": INTERVAL},
            "fetch": {"resolve": {"*.test": "127.0.0.1"}},
            "recrawl": {"enabled": True, "min_interval_s": 5.0 * SCALE, "duration_s": DURATION},
            # The p95 target scales with the rest (11 s -> 2.2 s).
            "news": {"target_delay_p95_s": 11.0 * SCALE},
            "output": {"path": str(out), "row_flush_interval_s": 0.5},
        })
        stats = asyncio.run(local_session(cfg).run())
        end = web.clock()
        report = news_report(server, end, settle_s=60.0 * SCALE)
        assert stats["ended"] == "duration"
        checks.check_ledger(stats)
        # 1. Every article published more than 60 s (scaled) before the end was fetched.
        assert report["articles"] >= 15 and report["missed"] == [], report
        # 2. Publication to fetch: median and p95 (goals 1.4 s and 3 s at this scale).
        assert report["delay_s"]["median"] <= 2.0 and report["delay_s"]["p95"] <= 4.5, report
        # 3. One source read per period, the others in a few of its turns (reading all
        # three sources at min_interval_s would cost about 10 per article here). With ~25
        # new articles in 45 s, the first read of each source alone is ~0.4 per article,
        # and the figure varies from run to run (2.58 seen on the CI box): 3.0 bounds it.
        assert report["source_requests_per_article"] <= 3.0, report
        # 4. Archive pages are not refetched beyond the adaptive schedule (one day at first).
        assert report["archive_fetches_per_page"] <= 1.2, report
        assert report["article_refetches"] == 0, report
        # 5. Politeness at the server: one request at a time per host, INTERVAL apart.
        checks.check_politeness(server, cfg)
        # 6. One row per fetch (robots.txt and sitemaps are not pages: no rows).
        rows = read_pages(str(out)).to_pylist()
        page_requests = [r for r in server.requests() if r.path_qs not in ("/robots.txt", "/news-sitemap.xml")]
        # A fetch in flight at the stop has no row (the next run fetches it again): at most
        # one per host; every other request is exactly one row.
        asked = defaultdict(int)
        for r in page_requests:
            asked[web.url(r.host, r.path_qs)] += 1
        written = defaultdict(int)
        for r in rows:
            written[r["url"]] += 1
        assert all(written[u] <= n for u, n in asked.items()) and set(written) <= set(asked)
        assert 0 <= len(page_requests) - len(rows) <= len(web.hosts)
        seqs = defaultdict(set)
        for r in rows:
            seqs[r["url"]].add(r["fetch_seq"])
        assert all(s == set(range(1, len(s) + 1)) for s in seqs.values())
        # The feed was found from the front page and read with conditional GETs.
        feed = [r for r in server.requests() if r.path_qs == "/feed.xml"]
        assert feed and any("If-None-Match" in r.headers for r in feed)
        news = stats["news"]
        assert news["feeds"] == 2 and news["news_sitemaps"] == 2 and news["delays"] > 0
    finally:
        server.stop()
