"""The SeenFilter group: exact mode never loses a page to a saturated Bloom filter."""

from __future__ import annotations

from crawler.config import settings as config
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl

from tests.integration import checks


def _crawl(web, tmp_path, **dedup):
    cfg = config.from_dict(
        crawl_config_for(
            web,
            output={"path": str(tmp_path / "out")},
            runtime={"shards": 2, "seen_shards": 2},
            # A filter chain that starts at 5 URLs per shard at a 50% error rate: it lies
            # often (its rate nears 50% as it grows), so the exact store must overrule it.
            dedup={"seen_capacity": 10, "seen_error_rate": 0.5, **dedup},
        )
    )
    crawl = Crawl(cfg, poll_interval_s=0.05).start()
    stats = crawl.wait(timeout_s=120)
    checks.check_ledger(stats)
    return cfg, stats


def test_exact_mode_loses_nothing_with_a_saturated_bloom_filter(ray_cluster, web, tmp_path):
    cfg, stats = _crawl(web, tmp_path, seen_exact=True)
    assert stats["finished"]
    checks.check_exactly_once(web, cfg)
    # The filter really was saturated: it said "maybe" for new URLs, and the exact store overruled it.
    assert stats["seen"]["false_positives"] > 10
    assert stats["seen"]["bloom_positives"] > stats["seen"]["false_positives"]


def test_bloom_only_mode_reports_its_false_positives(ray_cluster, web, tmp_path):
    cfg, stats = _crawl(web, tmp_path, seen_exact=False)
    assert stats["finished"]
    missed = [u for u in web.web.must_fetch() if web.request_counts().get(u, 0) == 0]
    assert missed, "a saturated Bloom-only filter must skip some new pages"
    assert stats["seen"]["estimated_false_positives"] > 0
