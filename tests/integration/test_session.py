"""One crawl session, two runtimes: host policy and per-URL status work the same in one
process and on Ray, a paused host's work is not mistaken for done, and both runtimes
write the same rows for the same web."""

from __future__ import annotations

import time

import pytest

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl

from tests.integration import checks

PAUSED = "h0003.web.test"  # reached only through links (not a seed host): paused before any of its URLs exists


def _until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.mark.parametrize("runtime", ["local", "ray"])
def test_pause_url_status_unpause_on_both_runtimes(runtime, request, web, tmp_path):
    if runtime == "ray":
        request.getfixturevalue("ray_cluster")
    out = tmp_path / "out"
    cfg = config.from_dict(crawl_config_for(web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2}))
    paused = web.url(PAUSED, "/")
    crawl = Crawl(cfg, local=runtime == "local", poll_interval_s=0.05)
    crawl.start()
    try:
        crawl.set_host_policy(web.web.netloc(PAUSED), paused=True)
        paused_at = time.monotonic()
        # Everything else finishes; the paused host's URLs wait, and the crawl does not
        # call that finished.
        _until(lambda: (s := crawl.stats())["paused_urls"] > 0 and s["in_flight"] == 0 and s["queued"] == s["paused_urls"])
        for _ in range(5):
            assert crawl.poll() is False
        status = crawl.url_status(paused)
        assert status is not None and status["status"] == "pending" and status["url"] == paused
        assert crawl.url_status(status["url_hash"])["url"] == paused  # by its public id too
        home = crawl.url_status(web.url("h0000.web.test", "/"))
        assert home["status"] == "fetched" and home["fetches"] == 1 and home["content_hash"]
        assert crawl.url_status(web.url("h0000.web.test", "/never-linked")) is None
        unpaused_at = time.monotonic()
        crawl.set_host_policy(web.web.netloc(PAUSED), paused=False)
        stats = crawl.wait(timeout_s=120)
    finally:
        if crawl.final is None:
            crawl.stop()
    assert stats["finished"] is True
    checks.check_ledger(stats)
    checks.check_exactly_once(web, cfg)
    # Measured at the server: nothing reached the paused host while it was paused.
    hits = [r for r in web.requests() if r.host == PAUSED]
    assert hits and all(paused_at < unpaused_at <= r.start for r in hits)
    rows = {r["url"]: r["outcome"] for r in read_pages(str(out)).to_pylist()}
    assert rows[paused] == "fetched"


def test_both_runtimes_write_the_same_rows(ray_cluster, web, tmp_path):
    def crawl(local: bool) -> set[tuple[str, str]]:
        web.reset()
        out = tmp_path / ("local" if local else "ray")
        cfg = config.from_dict(crawl_config_for(web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2}))
        stats = Crawl(cfg, local=local, poll_interval_s=0.05).start().wait(timeout_s=120)
        assert stats["finished"] is True
        checks.check_ledger(stats)
        traps = tuple(web.url(h, "/") for h in web.web.trap_hosts())  # budget cuts depend on timing
        return {(r["url"], r["outcome"]) for r in read_pages(str(out)).to_pylist() if not r["url"].startswith(traps)}

    assert crawl(local=True) == crawl(local=False)
