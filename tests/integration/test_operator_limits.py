"""What an operator's API call can and cannot do to a running crawl (issue: hostile and
careless operators, items 1-2), judged at the server and by the URL ledger.

* A seed ``priority`` out of range is a 400 naming the field, and the URLs of that call
  are not marked seen: re-seeding them works, they get rows, and the ledger balances.
* ``max_rps`` can only slow a host: a huge value leaves the configured interval in force,
  as the server's own request log shows.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from crawler.config import settings as config
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl
from jobs.ctl import request

from tests.integration import checks

TOKEN = "operator-token"
FAST = "h0003.web.test"  # reached only through links: its policy is set before any of its URLs


def test_priority_overflow_loses_no_url_and_max_rps_cannot_speed_a_host_up(web, tmp_path):
    out = tmp_path / "out"
    cfg = config.from_dict(crawl_config_for(
        web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2},
        api={"enabled": True, "port": 0, "token": TOKEN},
    ))
    crawl = Crawl(cfg, local=True, poll_interval_s=0.05).start()
    api = crawl.api_url
    extra = [web.url("h0000.web.test", "/never-linked"), web.url("h0001.web.test", "/never-linked")]
    try:
        # Item 2: a policy asking for a rate far above the configured one is accepted
        # (it is a floor, like Crawl-delay) but does not make the host faster.
        assert request(api, "PUT", f"/hosts/{FAST}/policy", {"max_rps": 1e308}, TOKEN) == (204, None)
        view = request(api, "GET", f"/hosts/{FAST}", token=TOKEN)[1]
        assert view["hostname_policy"]["max_rps"] == 1e308
        # 5e-324 requests a second is an interval of 1/5e-324 = inf: refused, naming max_rps.
        code, body = request(api, "PUT", f"/hosts/{FAST}/policy", {"max_rps": 5e-324}, TOKEN)
        assert code == 400 and body["field"] == "max_rps"

        # Item 1: a priority that does not fit is refused before anything is marked seen.
        for bad in (9223372036854775808, -9223372036854775809, 10**6):
            code, body = request(api, "POST", "/seeds", {"urls": extra, "priority": bad}, TOKEN)
            assert code == 400 and body["field"] == "priority", body
        code, body = request(api, "POST", "/seeds", {"urls": extra, "priority": 3}, TOKEN)
        assert code == 202 and body["accepted"] == 2, body
        for url in extra:
            deadline = time.monotonic() + 60
            while (st := request(api, "GET", "/urls?url=" + quote(url, safe=""), token=TOKEN))[0] != 200:
                assert time.monotonic() < deadline, st
                time.sleep(0.05)
        stats = crawl.wait(timeout_s=120)
    finally:
        if crawl.final is None:
            crawl.stop()
    assert stats["finished"] is True
    checks.check_ledger(stats)
    checks.check_exactly_once(web, cfg)
    fast_hits = [r for r in web.requests() if r.host == FAST]
    assert len(fast_hits) >= 3, "the host under a fast policy must have been crawled"
    # At the server, every host (the fast-policy one included) kept the configured interval.
    checks.check_politeness(web, cfg)
    asked = {r.path_qs for r in web.requests() if r.host in ("h0000.web.test", "h0001.web.test")}
    assert "/never-linked" in asked
