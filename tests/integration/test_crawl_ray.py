"""End to end on the session's local Ray cluster: the same crawl, run by actors."""

from __future__ import annotations

import json


from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl

from tests.integration import checks


def _ray_crawl(web, tmp_path, shards=3, content_shards=1, **overrides):
    runtime = {"shards": shards, "seen_shards": 2, "content_shards": content_shards}
    cfg = config.from_dict(crawl_config_for(web, output={"path": str(tmp_path / "out")}, runtime=runtime, **overrides))
    crawl = Crawl(cfg, poll_interval_s=0.05)
    crawl.start()
    stats = crawl.wait(timeout_s=120)
    return cfg, stats


def test_ray_crawl_matches_ground_truth_and_single_process(ray_cluster, web, tmp_path):
    # The duplicate index spread over two actors finds the same mirrors and near-copies
    # (check_all) as the in-process one with a single shard.
    cfg, stats = _ray_crawl(web, tmp_path, shards=3, content_shards=2)
    assert stats["finished"] is True and stats["shards"] == 3
    table = checks.check_all(web, cfg)
    checks.check_ledger(stats)
    # Hosts were really spread: more than one shard wrote rows.
    assert len(set(table.column("shard").to_pylist())) == 3
    saved = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert saved["finished"] is True and saved["outcomes"] == stats["outcomes"]

    # The same result set as the single-process crawl of the same web.
    import asyncio

    from crawler.session.inprocess import local_session

    web.reset()
    local_cfg = config.from_dict(crawl_config_for(web, output={"path": str(tmp_path / "local")}))
    checks.check_ledger(asyncio.run(local_session(local_cfg, shards=1).run()))
    ray_rows = {(r["url"], r["outcome"]) for r in read_pages(cfg.output.path).to_pylist()
                if not r["url"].startswith(tuple(_trap_prefixes(web)))}
    local_rows = {(r["url"], r["outcome"]) for r in read_pages(local_cfg.output.path).to_pylist()
                  if not r["url"].startswith(tuple(_trap_prefixes(web)))}
    assert ray_rows == local_rows


def _trap_prefixes(server):
    # Which trap pages get fetched within a host budget depends on timing; the rest must match.
    return [server.url(h, "/") for h in server.web.trap_hosts()]


def test_max_pages_is_global_across_shards(ray_cluster, web, tmp_path):
    cfg, stats = _ray_crawl(web, tmp_path, shards=2, limits={"max_pages": 25})
    assert stats["finished"] is True
    checks.check_ledger(stats)
    pages = [r for r in web.requests() if not r.path_qs.endswith(("robots.txt", "/sitemap.xml"))]
    # Retries of a URL are not new pages; only first attempts count against max_pages.
    assert len({(r.host, r.path_qs) for r in pages}) <= 25
    assert stats["queued_unfetched"] > 0
