"""Rendering on Ray: render actors own the browsers, shards answer the browsers' requests.

A render actor killed mid-crawl (Ray restarts it) loses no URL: the renders it held are
tried again or fall back to the raw page, and politeness and robots still hold at the
server for every request.
"""

from __future__ import annotations

import threading
import time

import pytest

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.server import WebServer
from crawler.testing.spaweb import SpaWeb
from crawler.testing.webtypes import USER_AGENT
from jobs.crawl import Crawl

from tests.integration import checks
from tests.integration.test_render import pytestmark  # noqa: F401 - skipped where there is no Chromium


def test_render_actors_crawl_the_apps_and_survive_a_kill(ray_cluster, tmp_path):
    import ray

    web = SpaWeb(apps=2, routes=5, plain_pages=4, plain_hosts=1)
    with WebServer(web) as server:
        cfg = config.from_dict({
            "seeds": web.seeds(), "scope": "any", "user_agent": USER_AGENT,
            "politeness": {"interval_s": 0.05}, "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0},
            "output": {"path": str(tmp_path / "out")},
            "runtime": {"shards": 2, "seen_shards": 1, "max_restarts": 3},
            "render": {"mode": "auto", "actors": 1, "cores_per_actor": 1, "quiet_s": 0.2, "max_wait_s": 3.0},
        })
        crawl = Crawl(cfg, poll_interval_s=0.05)
        killed: list[str] = []

        def killer() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not killed:
                if sum(r.path_qs.startswith("/api/") for r in server.requests()) >= 3:
                    for name in ray.util.list_named_actors():
                        if ":render-" in name:
                            ray.kill(ray.get_actor(name), no_restart=False)
                            killed.append(name)
                time.sleep(0.02)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        crawl.start()
        stats = crawl.wait(timeout_s=180)
        t.join()
        assert killed, "no render actor was killed"
        assert stats["finished"] is True
        checks.check_ledger(stats)
        rows = read_pages(cfg.output.path).to_pylist()
        counts = server.request_counts()
        fetched = {u for u in web.documents() if counts.get(u, 0)}
        assert {r["url"] for r in rows} == fetched and all(counts[u] == 1 for u in fetched)
        assert any(r["rendered"] for r in rows)
        r = stats["render"]
        assert r["started"] == r["rendered"] + sum(r["fallbacks"].values())
        assert r["retried_after_crash"] + r["fallbacks"].get("crash", 0) >= 1
        checks.check_never_requested(server)
        checks.check_politeness(server, cfg)
        assert {x.user_agent for x in server.requests()} == {USER_AGENT}
