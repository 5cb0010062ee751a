"""End to end in one process (no Ray): the engine crawls the synthetic web correctly.

Asserted from the server's own request log: exactly-once, robots, scope, politeness,
retries, traps, duplicates and one outcome row per URL.
"""

from __future__ import annotations

import asyncio
import json

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.testing.fixtures import crawl_config_for

from tests.integration import checks


def test_single_process_crawl_matches_ground_truth(web, tmp_path):
    cfg = config.from_dict(crawl_config_for(web, output={"path": str(tmp_path / "out")}))
    stats = asyncio.run(local_session(cfg, shards=2).run())
    checks.check_all(web, cfg)
    checks.check_ledger(stats)
    assert stats["finished"] is True
    assert stats["outcomes"]["fetched"] >= len(web.web.must_fetch()) * 0.9
    saved = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert saved["outcomes"] == stats["outcomes"]
    assert saved["dropped"].get("unsupported_scheme", 0) > 0  # mailto:, javascript: counted, not followed
