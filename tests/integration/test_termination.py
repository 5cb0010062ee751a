"""Termination is proven, not guessed (docs/invariants.md #4).

A web where every link is discovered late: each page answers slowly, and the only link
on it points to a page on another host (so, with several shards, to another shard). A
crawl that trusted an empty queue would stop after the first page; one that lost a
claim would hang. The crawl must fetch the whole chain and then stop by itself.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.engine.partbuilders import build_fetcher
from crawler.output import read_pages
from crawler.testing.server import WebServer
from crawler.testing.webtypes import Reply, SmallWeb
from jobs.crawl import Crawl

from tests.integration import checks

CHAIN = 8
FAN = 6
DELAY = 0.25


class ChainWeb(SmallWeb):
    """c0 -> c1 -> ... -> c7 (each page slow, one link, another host), c7 fans out to f0..f5."""

    def expected(self) -> set[str]:
        return {self.url(f"c{i}.chain.test") for i in range(CHAIN)} | {self.url(f"f{j}.chain.test") for j in range(FAN)}

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        if path_qs == "/robots.txt":
            return Reply(404, (("Content-Type", "text/plain"),), b"")
        html = "text/html; charset=utf-8"
        name = host.split(".")[0]
        if name.startswith("c"):
            i = int(name[1:])
            if i + 1 < CHAIN:
                links = [self.url(f"c{i + 1}.chain.test")]
            else:
                links = [self.url(f"f{j}.chain.test") for j in range(FAN)]
            body = "".join(f'<a href="{u}">next</a>' for u in links)
            return Reply(200, (("Content-Type", html),), f"<html><body><p>page {i}</p>{body}</body></html>".encode(), delay=DELAY)
        if name.startswith("f"):
            return Reply(200, (("Content-Type", html),), b"<html><body><p>leaf</p></body></html>", delay=DELAY)
        return Reply(404, (("Content-Type", html),), b"")


@pytest.fixture
def chain_server():
    server = WebServer(ChainWeb())  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _cfg(server, out, **extra):
    data = {
        "seeds": [server.web.url("c0.chain.test")],
        "scope": "any",
        "politeness": {"interval_s": 0.0},
        "fetch": {"resolve": {"*.chain.test": "127.0.0.1"}, "timeout_s": 5, "attempts": 1},
        "runtime": {"shards": 3, "seen_shards": 2, "link_flush_interval_s": 0.05},
        "output": {"path": str(out)},
    }
    data.update(extra)
    return config.from_dict(data)


def _fetched(server):
    return {server.web.url(r.host, r.path_qs) for r in server.requests() if r.path_qs not in ("/robots.txt", "/sitemap.xml")}


def test_late_links_across_shards_local(chain_server, tmp_path):
    cfg = _cfg(chain_server, tmp_path / "out")
    t0 = time.monotonic()
    stats = asyncio.run(local_session(cfg, shards=3).run())
    assert _fetched(chain_server) == chain_server.web.expected()
    # The chain is sequential: it cannot be done before every slow page answered.
    assert time.monotonic() - t0 >= CHAIN * DELAY
    assert stats["outcomes"]["fetched"] == CHAIN + FAN
    checks.check_ledger(stats)


def test_late_links_across_shards_on_ray(ray_cluster, chain_server, tmp_path):
    cfg = _cfg(chain_server, tmp_path / "out")
    crawl = Crawl(cfg, poll_interval_s=0.02).start()
    stats = crawl.wait(timeout_s=60)
    assert stats["finished"] is True
    assert _fetched(chain_server) == chain_server.web.expected()
    rows = read_pages(cfg.output.path).to_pylist()
    assert len({r["shard"] for r in rows}) >= 2  # the chain really crossed shards
    assert {r["url"] for r in rows if r["outcome"] == "fetched"} == chain_server.web.expected()
    checks.check_ledger(stats)


def test_a_fetch_that_raises_releases_its_claim(chain_server, tmp_path):
    """A bug in one fetch costs that URL (a failed row), never the crawl's termination."""
    cfg = _cfg(chain_server, tmp_path / "out")
    poisoned = chain_server.web.url("f2.chain.test")

    class Exploding:
        def __init__(self):
            self.inner = build_fetcher(cfg)

        async def fetch(self, url, headers=None, **kw):
            if url == poisoned:
                raise RuntimeError("boom")
            return await self.inner.fetch(url, headers, **kw)

        async def close(self):
            await self.inner.close()

    stats = asyncio.run(local_session(cfg, shards=2, fetcher_factory=Exploding).run())
    rows = {r["url"]: r for r in read_pages(cfg.output.path).to_pylist()}
    assert rows[poisoned]["outcome"] == "failed"
    assert "internal error" in rows[poisoned]["error"] and "boom" in rows[poisoned]["error"]
    assert stats["finished"] is True
    assert stats["outcomes"]["fetched"] == CHAIN + FAN - 1
    checks.check_ledger(stats, internal_errors=1)
